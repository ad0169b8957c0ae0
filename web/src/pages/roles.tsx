// Roles: the hierarchy as an ordered list (top = most power), reordered by
// drag and drop or by keyboard (Alt+↑/↓ on a focused role); create, rename,
// colour, delete; permissions as checkboxes with the catalog's descriptions.
// Only the current operations are used (move, PATCH, PUT permissions), never
// the deprecated add_perm/remove_perm/add_user/remove_user.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { grantReason, holderReason, moveReason, need, roleReason } from "../access";
import { done, ifMatch, mergePatch, ok, type Permission, type Role, type User } from "../api";
import { byOthers, useConsole } from "../state";
import { Btn, Confirm, isStale, ProblemBox, ReadOnly, useAction, Why } from "../ui";

const idPattern = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export function RolesPage(): JSX.Element {
  const c = useConsole();
  const [selected, setSelected] = useState<string | null>(null);
  const [dragging, setDragging] = useState<string | null>(null);
  const [dropAt, setDropAt] = useState<number | null>(null);
  const act = useAction();
  useEffect(
    () =>
      c.onEvent((e) => {
        if ((e.type.startsWith("role.") || e.type.startsWith("user.role.")) && byOthers(c, e)) void c.refresh();
      }),
    [],
  );
  const roles = c.roles; // by position descending
  const move = async (role: Role, position: number) => {
    if (position < 1 || position > roles.length || position === role.position) return;
    await act.run(async () => {
      await ok(c.api.POST("/roles/{roleID}/move", { params: { path: { roleID: role.id } }, body: { position } }));
    });
    await c.refresh();
    window.setTimeout(() => document.querySelector<HTMLElement>(`[data-role="${role.id}"]`)?.focus(), 0);
  };
  const manage = need(c.access, "MANAGE_ROLES");
  return (
    <div class="split">
      <section class="list" aria-labelledby="roles-h">
        <h2 id="roles-h">Roles</h2>
        <p class="hint">Highest first. Drag a role to reorder, or focus it and press Alt+↑ / Alt+↓.</p>
        <ReadOnly reason={manage} what="change roles" />
        <ProblemBox error={act.error} names={c.names} />
        <ol class="items roles" data-testid="role-list" aria-label="Role hierarchy, highest first">
          {roles.map((r, i) => {
            const reason = roleReason(c.access, r);
            return (
              <li
                key={r.id}
                data-role={r.id}
                tabIndex={0}
                draggable={reason === null}
                aria-current={selected === r.id ? "true" : undefined}
                aria-describedby={reason ? `why-${r.id}` : undefined}
                class={`${dragging === r.id ? "dragging" : ""}${dropAt === i ? " dropat" : ""}`}
                onClick={() => setSelected(r.id)}
                onKeyDown={(e) => {
                  if (e.key === "Enter" || e.key === " ") {
                    e.preventDefault();
                    setSelected(r.id);
                  } else if (e.altKey && (e.key === "ArrowUp" || e.key === "ArrowDown")) {
                    e.preventDefault();
                    const to = r.position + (e.key === "ArrowUp" ? 1 : -1);
                    if (moveReason(c.access, r, to) === null) void move(r, to);
                  }
                }}
                onDragStart={(e) => {
                  setDragging(r.id);
                  e.dataTransfer?.setData("text/plain", r.id);
                }}
                onDragEnd={() => {
                  setDragging(null);
                  setDropAt(null);
                }}
                onDragOver={(e) => {
                  const from = roles.find((x) => x.id === dragging);
                  if (from && moveReason(c.access, from, r.position) === null) {
                    e.preventDefault();
                    setDropAt(i);
                  }
                }}
                onDrop={(e) => {
                  e.preventDefault();
                  const from = roles.find((x) => x.id === (e.dataTransfer?.getData("text/plain") || dragging));
                  setDragging(null);
                  setDropAt(null);
                  if (from) void move(from, r.position);
                }}
              >
                <span class="swatch" style={{ background: r.color ?? "transparent" }} aria-hidden="true" />
                <strong>{r.name}</strong> <span class="muted">{r.id}</span>
                <span class="pos" aria-label={`position ${r.position}`}>
                  {r.position}
                </span>
                {reason && (
                  <span class={reason === manage ? "visually-hidden" : "why"} id={`why-${r.id}`}>
                    {reason}
                  </span>
                )}
              </li>
            );
          })}
        </ol>
        <CreateRole onCreated={(id) => setSelected(id)} />
      </section>
      <section class="detail">
        {selected && roles.some((r) => r.id === selected) ? (
          <RoleDetail key={selected} id={selected} onDeleted={() => setSelected(null)} />
        ) : (
          <p class="muted">Pick a role to edit its name, colour and permissions.</p>
        )}
      </section>
    </div>
  );
}

function CreateRole(props: { onCreated: (id: string) => void }): JSX.Element {
  const c = useConsole();
  const [id, setID] = useState("");
  const [name, setName] = useState("");
  const [color, setColor] = useState("#5865f2");
  const act = useAction();
  // A new role lands at position 1, which must be below one's top.
  const reason = need(c.access, "MANAGE_ROLES") ?? (c.access.owner || c.access.top > 1 ? null : "a new role lands at position 1, which is not below your highest role");
  const submit = async (e: Event) => {
    e.preventDefault();
    const err = await act.run(async () => {
      await ok(c.api.POST("/roles/{roleID}/create", { params: { path: { roleID: id } }, body: { name, color, permissions: [] } }));
    });
    if (err === null) {
      await c.refresh();
      props.onCreated(id);
      setID("");
      setName("");
    }
  };
  return (
    <form class="card create" onSubmit={submit} aria-labelledby="new-role-h">
      <h3 id="new-role-h">New role</h3>
      <fieldset disabled={reason !== null}>
        <label>
          ID <input name="role-id" value={id} required pattern="[a-z0-9][a-z0-9_\-]{0,63}" placeholder="mods" onInput={(e) => setID(e.currentTarget.value)} />
        </label>
        {id !== "" && !idPattern.test(id) && <span class="why">lowercase letters, digits, _ and -</span>}
        <label>
          Name <input name="role-name" value={name} required maxLength={100} placeholder="Moderators" onInput={(e) => setName(e.currentTarget.value)} />
        </label>
        <label>
          Colour <input name="role-color" type="color" value={color} onInput={(e) => setColor(e.currentTarget.value)} />
        </label>
        <Btn type="submit" kind="primary" reason={reason} busy={act.busy}>
          Create role
        </Btn>
      </fieldset>
      <Why reason={reason} />
      <ProblemBox error={act.error} names={c.names} />
    </form>
  );
}

function RoleDetail(props: { id: string; onDeleted: () => void }): JSX.Element {
  const c = useConsole();
  const [role, setRole] = useState<{ role: Role; etag: string } | null>(null);
  const [stale, setStale] = useState<unknown>(null);
  const loader = useAction();
  const load = () =>
    loader.run(async () => {
      const r = await ok(c.api.GET("/roles/{roleID}", { params: { path: { roleID: props.id } } }));
      setRole({ role: r.data, etag: r.etag });
    });
  useEffect(() => {
    void load();
    return c.onEvent((e) => {
      if (e.subject === `role:${props.id}` && e.type !== "role.deleted" && byOthers(c, e)) void load();
    });
  }, [props.id]);
  if (!role) return loader.error ? <ProblemBox error={loader.error} names={c.names} /> : <p class="loading">Loading…</p>;
  const onStale = async (e: unknown) => {
    setStale(e);
    await load();
  };
  return (
    <div>
      <RoleEditor key={role.etag} role={role.role} etag={role.etag} stale={stale} onStale={onStale} onSaved={load} onDeleted={props.onDeleted} />
      <RoleMembers role={role.role} />
    </div>
  );
}

/** Members listed per page on a role's page. */
const membersPage = 10;

/** The users holding a role, a page at a time; each can be taken off it. */
function RoleMembers(props: { role: Role }): JSX.Element {
  const c = useConsole();
  const { role } = props;
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const [page, setPage] = useState<{ items: User[]; next: string | null } | null>(null);
  const loader = useAction();
  const act = useAction();
  const cursor = cursors[cursors.length - 1];
  const load = () =>
    loader.run(async () => {
      const r = await ok(c.api.GET("/roles/{roleID}/members", { params: { path: { roleID: role.id }, query: { limit: membersPage, ...(cursor ? { cursor } : {}) } } }));
      setPage({ items: r.data.items, next: r.data.next_cursor ?? null });
    });
  useEffect(() => {
    void load();
  }, [role.id, cursor]);
  useEffect(
    () =>
      c.onEvent((e) => {
        if (e.type.startsWith("user.role.") || e.type === "user.deleted") void load();
      }),
    [role.id, cursor],
  );
  const base = roleReason(c.access, role) ?? grantReason(c.access, role.permissions);
  const remove = async (u: User) => {
    const err = await act.run(async () => {
      await ok(c.api.POST("/roles/{roleID}/members", { params: { path: { roleID: role.id } }, body: { remove: [u.id] } }));
    });
    if (err === null) {
      if (u.id === c.access.me.id) await c.refresh();
      await load();
    }
  };
  const first = (cursors.length - 1) * membersPage;
  return (
    <section class="card" aria-labelledby="members-h" data-testid="role-members">
      <h2 id="members-h">Members of {role.name}</h2>
      <ProblemBox error={loader.error} names={c.names} />
      {page === null ? (
        <p class="loading">Loading…</p>
      ) : page.items.length === 0 ? (
        <p class="muted">{cursors.length > 1 ? "No more members." : "Nobody has this role."}</p>
      ) : (
        <>
          <p class="hint" data-testid="members-range">
            {first + 1}–{first + page.items.length}
            {page.next ? ", more on the next page" : ""}
          </p>
          <ul class="items">
            {page.items.map((u) => {
              const reason = base ?? holderReason(c.access, u, c.roles);
              return (
                <li key={u.id} class="row between" data-member={u.username}>
                  <span>
                    <strong>{u.display_name || u.username}</strong> <span class="muted">@{u.username}</span>
                  </span>
                  <Btn reason={reason} busy={act.busy} label={`Take ${role.name} from ${u.username}`} onClick={() => void remove(u)}>
                    Remove
                  </Btn>
                </li>
              );
            })}
          </ul>
        </>
      )}
      <div class="row">
        <Btn reason={cursors.length > 1 ? null : "this is the first page"} onClick={() => setCursors(cursors.slice(0, -1))} testid="members-prev">
          ← Previous
        </Btn>
        <Btn reason={page?.next ? null : "this is the last page"} onClick={() => page?.next && setCursors([...cursors, page.next])} testid="members-next">
          Next →
        </Btn>
      </div>
      <ProblemBox error={act.error} names={c.names} />
    </section>
  );
}

function RoleEditor(props: {
  role: Role;
  etag: string;
  stale: unknown;
  onStale: (e: unknown) => Promise<void>;
  onSaved: () => Promise<unknown>;
  onDeleted: () => void;
}): JSX.Element {
  const c = useConsole();
  const { role, etag } = props;
  const [name, setName] = useState(role.name);
  const [color, setColor] = useState(role.color ?? "");
  const [perms, setPerms] = useState<Set<Permission>>(new Set(role.permissions));
  const [confirm, setConfirm] = useState(false);
  const act = useAction();
  const reason = roleReason(c.access, role);
  const changedPerms = c.catalog.filter((p) => perms.has(p.name) !== role.permissions.includes(p.name)).map((p) => p.name);
  const dirty = name !== role.name || color !== (role.color ?? "") || changedPerms.length > 0;
  const after = async (err: unknown) => {
    if (isStale(err)) await props.onStale(err);
    else if (err === null) {
      await props.onStale(null);
      await c.refresh();
    }
  };
  const save = async (e: Event) => {
    e.preventDefault();
    let tag = etag;
    const err = await act.run(async () => {
      const patch: { name?: string; color?: string | null } = {};
      if (name !== role.name) patch.name = name;
      if (color !== (role.color ?? "")) patch.color = color === "" ? null : color;
      if (Object.keys(patch).length) {
        const r = await ok(c.api.PATCH("/roles/{roleID}", { params: { path: { roleID: role.id }, header: ifMatch(tag) }, body: patch, headers: mergePatch }));
        tag = r.etag;
      }
      if (changedPerms.length) {
        const list = c.catalog.filter((p) => perms.has(p.name)).map((p) => p.name);
        await ok(c.api.PUT("/roles/{roleID}/permissions", { params: { path: { roleID: role.id }, header: ifMatch(tag) }, body: { permissions: list } }));
      }
    });
    await after(err);
  };
  const del = async () => {
    setConfirm(false);
    const err = await act.run(async () => {
      await done(c.api.POST("/roles/{roleID}/delete", { params: { path: { roleID: role.id }, header: ifMatch(etag) } }));
    });
    if (err === null) {
      await c.refresh();
      props.onDeleted();
    } else await after(err);
  };
  return (
    <section class="card" aria-labelledby="role-h">
      <h2 id="role-h">
        <span class="swatch" style={{ background: role.color ?? "transparent" }} aria-hidden="true" /> {role.name} <span class="muted">{role.id}</span>
      </h2>
      <ReadOnly reason={reason} what="change this role" />
      {isStale(props.stale) && <ProblemBox error={props.stale} names={c.names} onClose={() => void props.onStale(null)} />}
      <form onSubmit={save}>
        <fieldset disabled={reason !== null}>
          <label>
            Name <input name="name" value={name} required maxLength={100} onInput={(e) => setName(e.currentTarget.value)} />
          </label>
          <div class="row">
            <label>
              Colour <input name="color" type="color" value={color || "#000000"} onInput={(e) => setColor(e.currentTarget.value)} />
            </label>
            <Btn onClick={() => setColor("")} reason={color === "" ? "no colour set" : null}>
              No colour
            </Btn>
          </div>
          <fieldset class="perms">
            <legend>Permissions</legend>
            {c.catalog.map((p) => {
              const g = reason ?? grantReason(c.access, [p.name]);
              return (
                <label key={p.name} class={`perm${g ? " off" : ""}`} title={g ? `Disabled: ${g}` : undefined}>
                  <input
                    type="checkbox"
                    name={p.name}
                    checked={perms.has(p.name)}
                    disabled={g !== null}
                    onChange={(e) => {
                      const next = new Set(perms);
                      if (e.currentTarget.checked) next.add(p.name);
                      else next.delete(p.name);
                      setPerms(next);
                    }}
                  />
                  <span>
                    <code>{p.name}</code> <span class="muted">({p.scopes.join(", ")})</span>
                    <span class="sub">{p.description}</span>
                    {g && !reason && <span class="why">{g}</span>}
                  </span>
                </label>
              );
            })}
          </fieldset>
          <div class="row">
            <Btn type="submit" kind="primary" reason={reason ?? (dirty ? null : "nothing changed")} busy={act.busy}>
              Save
            </Btn>
            <Btn kind="danger" reason={reason} onClick={() => setConfirm(true)}>
              Delete role…
            </Btn>
          </div>
        </fieldset>
      </form>
      {!isStale(act.error) && <ProblemBox error={act.error} names={c.names} />}
      {confirm && (
        <Confirm title={`Delete the role ${role.name}?`} confirm="Delete role" onConfirm={() => void del()} onCancel={() => setConfirm(false)}>
          <p>
            The role <strong>{role.name}</strong> is removed from every user who has it and from every channel's overwrites. Roles above it move down one
            position. It cannot be undone.
          </p>
        </Confirm>
      )}
    </section>
  );
}

