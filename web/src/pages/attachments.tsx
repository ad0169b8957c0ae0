// A channel's attachments: upload by drag and drop (or a file picker) with a
// progress bar, list, download, delete.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { needIn, type ChannelAccess } from "../access";
import { allPages, apiBase, ApiError, done, problemOf, uploadAttachment, type Attachment, type Channel } from "../api";
import { byOthers, channelLabel, useConsole } from "../state";
import { Btn, bytes, Confirm, ProblemBox, ReadOnly, useAction, when } from "../ui";

/** An attachment ID from a file name: the contract's pattern, at most 128 characters. */
export function attachmentIDOf(name: string): string {
  let id = name.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[^A-Za-z0-9]+/, "");
  if (!id) id = `file-${Date.now()}`;
  return id.slice(0, 128);
}

interface Upload {
  id: string;
  sent: number;
  total: number;
}

export function Attachments(props: { channel: Channel; mine: ChannelAccess; onCount: (n: number) => void }): JSX.Element {
  const c = useConsole();
  const { channel, mine } = props;
  const [items, setItems] = useState<Attachment[] | null>(null);
  const [uploads, setUploads] = useState<Upload[]>([]);
  const [over, setOver] = useState(false);
  const [confirm, setConfirm] = useState<Attachment | null>(null);
  const act = useAction();
  const load = () =>
    act.run(async () => {
      const list = await allPages((cursor) =>
        c.api.GET("/channels/{channelID}/attachments", { params: { path: { channelID: channel.id }, query: { limit: 200, ...(cursor ? { cursor } : {}) } } }),
      );
      setItems(list);
      props.onCount(list.length);
    });
  useEffect(() => {
    void load();
    return c.onEvent((e) => {
      if (e.subject.startsWith(`attachment:${channel.id}/`) && byOthers(c, e)) void load();
    });
  }, [channel.id]);

  const uploadReason = needIn(c.access, mine, "ATTACH_FILES");
  const upload = async (files: FileList | File[]) => {
    for (const f of Array.from(files)) {
      const id = attachmentIDOf(f.name);
      setUploads((u) => [...u.filter((x) => x.id !== id), { id, sent: 0, total: f.size }]);
      const err = await act.run(async () => {
        await uploadAttachment(c.token, channel.id, id, f, (sent, total) =>
          setUploads((u) => u.map((x) => (x.id === id ? { id, sent, total } : x))),
        );
      });
      setUploads((u) => u.filter((x) => x.id !== id));
      if (err !== null) break;
    }
    await load();
  };
  const onDrop = (e: DragEvent) => {
    e.preventDefault();
    setOver(false);
    if (uploadReason) return;
    const files = e.dataTransfer?.files;
    if (files && files.length) void upload(files);
  };
  const download = async (a: Attachment) => {
    await act.run(async () => {
      const url = `${apiBase}/channels/${encodeURIComponent(channel.id)}/attachment?attachmentID=${encodeURIComponent(a.id)}`;
      const r = await fetch(url, { headers: { Authorization: `Bearer ${c.token}` } });
      if (!r.ok) {
        let body: unknown = null;
        try {
          body = await r.json();
        } catch {
          body = null;
        }
        throw new ApiError(problemOf(r.status, body, r.statusText));
      }
      const blob = await r.blob();
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = a.id;
      document.body.append(link);
      link.click();
      link.remove();
      window.setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
    });
  };
  const del = async (a: Attachment) => {
    setConfirm(null);
    await act.run(async () => {
      await done(c.api.DELETE("/channels/{channelID}/attachment", { params: { path: { channelID: channel.id }, query: { attachmentID: a.id } } }));
    });
    await load();
  };
  const deleteReason = (a: Attachment): string | null => {
    if (a.created_by === c.access.me.id) return needIn(c.access, mine, "VIEW_CHANNEL");
    return needIn(c.access, mine, "MANAGE_MESSAGES");
  };

  return (
    <section class="card" aria-labelledby="att-h">
      <h2 id="att-h">Attachments of {channelLabel(channel)}</h2>
      <ReadOnly reason={uploadReason} what="upload attachments here" />
      <div
        class={`drop${over ? " over" : ""}${uploadReason ? " off" : ""}`}
        data-testid="dropzone"
        onDragOver={(e) => {
          e.preventDefault();
          if (!uploadReason) setOver(true);
        }}
        onDragLeave={() => setOver(false)}
        onDrop={onDrop}
      >
        <p>{uploadReason ? "Uploads are disabled." : "Drop files here to upload them,"}</p>
        <label class="btn plain">
          or choose files
          <input
            type="file"
            multiple
            class="visually-hidden"
            disabled={uploadReason !== null}
            onChange={(e) => {
              const f = e.currentTarget.files;
              if (f && f.length) void upload(f);
              e.currentTarget.value = "";
            }}
          />
        </label>
      </div>
      {uploads.map((u) => (
        <div class="progress" key={u.id}>
          <span>{u.id}</span>
          <progress max={u.total || 1} value={u.sent} aria-label={`Uploading ${u.id}`} />
          <span>{u.total ? Math.round((u.sent / u.total) * 100) : 100}%</span>
        </div>
      ))}
      <ProblemBox error={act.error} names={c.names} />
      {items === null ? (
        <p class="loading">Loading…</p>
      ) : items.length === 0 ? (
        <p class="muted">No attachments.</p>
      ) : (
        <div class="scroll">
          <table class="table" data-testid="attachments">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Type</th>
                <th scope="col">Size</th>
                <th scope="col">Uploaded</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {items.map((a) => (
                <tr key={a.id}>
                  <td>{a.id}</td>
                  <td>{a.content_type}</td>
                  <td>{bytes(a.size)}</td>
                  <td>
                    {when(a.updated_at)}
                    {a.created_by ? ` by ${c.names.user(a.created_by)}` : ""}
                  </td>
                  <td class="actions">
                    <Btn onClick={() => void download(a)} label={`Download ${a.id}`}>
                      Download
                    </Btn>
                    <Btn kind="danger" reason={deleteReason(a)} onClick={() => setConfirm(a)} label={`Delete ${a.id}`}>
                      Delete
                    </Btn>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {confirm && (
        <Confirm title={`Delete ${confirm.id}?`} confirm="Delete attachment" onConfirm={() => void del(confirm)} onCancel={() => setConfirm(null)}>
          <p>
            The file <strong>{confirm.id}</strong> ({bytes(confirm.size)}) is removed from #{channel.name} for everyone.
          </p>
        </Confirm>
      )}
    </section>
  );
}
