// The console's shell: sign in with a token, who I am, navigation, and the
// live event stream every page can listen to.
import type { JSX } from "preact";
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { makeAccess, type Access, type Names } from "./access";
import { ApiError, connect, ok, session, type Api, type AuditEvent, type PermissionInfo, type Role, type User } from "./api";
import { ConsoleContext, eventTypes, type Console, type LiveState } from "./state";
import { ProblemBox } from "./ui";
import { ChannelsPage } from "./pages/channels";
import { RolesPage } from "./pages/roles";
import { UsersPage } from "./pages/users";
import { PermissionsPage } from "./pages/permissions";
import { AuditPage } from "./pages/audit";
import { PreviewPage } from "./pages/preview";
import { SettingsPage } from "./pages/settings";
import { webhookReason, WebhooksPage } from "./pages/webhooks";

const pages = [
  { id: "channels", label: "Channels" },
  { id: "roles", label: "Roles" },
  { id: "users", label: "Users" },
  { id: "permissions", label: "Permissions" },
  { id: "preview", label: "View as roles" },
  { id: "audit", label: "Audit log" },
  { id: "webhooks", label: "Webhooks" },
  { id: "settings", label: "Settings" },
] as const;
type PageID = (typeof pages)[number]["id"];

function route(): { page: PageID; arg: string } {
  const [p = "", ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const page = pages.find((x) => x.id === p)?.id ?? "channels";
  return { page, arg: decodeURIComponent(rest.join("/")) };
}

export function App(): JSX.Element {
  const [token, setToken] = useState<string | null>(session.get());
  if (!token) return <SignIn onSignedIn={setToken} />;
  return (
    <Signed
      token={token}
      onSignOut={() => {
        session.clear();
        setToken(null);
      }}
    />
  );
}

function SignIn(props: { onSignedIn: (t: string) => void }): JSX.Element {
  const [value, setValue] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const t = value.trim();
    if (!t) return;
    setBusy(true);
    setError(null);
    try {
      await ok(connect(t).GET("/me"));
      session.set(t);
      props.onSignedIn(t);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <h1>Guildhall console</h1>
      <form onSubmit={submit} class="card">
        <label for="token">API token</label>
        <input
          id="token"
          type="password"
          autocomplete="off"
          spellcheck={false}
          placeholder="gh_..."
          value={value}
          onInput={(e) => setValue(e.currentTarget.value)}
        />
        <p class="hint">Paste a token from the owner bootstrap, `guildhall token create` or a user's Tokens. It is kept in this tab only (sessionStorage).</p>
        <button type="submit" class="btn primary" disabled={busy}>
          Sign in
        </button>
        <ProblemBox error={error} />
      </form>
    </main>
  );
}

interface Loaded {
  me: User;
  access: Access;
  roles: Role[];
  catalog: PermissionInfo[];
}

/** Who I am, what I may do and the roles; the catalog only the first time (it never changes). */
async function load(api: Api, catalog: PermissionInfo[] | null): Promise<Loaded> {
  const me = (await ok(api.GET("/me"))).data;
  const [perms, roles, cat] = await Promise.all([
    ok(api.GET("/users/{userID}/permissions", { params: { path: { userID: me.id } } })),
    ok(api.GET("/roles")),
    catalog ? Promise.resolve(catalog) : ok(api.GET("/permissions")).then((r) => r.data.items),
  ]);
  return { me, access: makeAccess(me, perms.data.permissions, roles.data.items), roles: roles.data.items, catalog: cat };
}

function Signed(props: { token: string; onSignOut: () => void }): JSX.Element {
  const api = useMemo(() => connect(props.token), [props.token]);
  const [state, setState] = useState<Loaded | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [where, setWhere] = useState(route());
  const [live, setLive] = useState<LiveState>("connecting");
  const listeners = useRef(new Set<(e: AuditEvent) => void>());
  const userNames = useRef(new Map<string, string>());

  // One reload at a time: calls made meanwhile share a single follow-up.
  const loading = useRef<{ running: Promise<void> | null; again: Promise<void> | null; catalog: PermissionInfo[] | null }>({
    running: null,
    again: null,
    catalog: null,
  });
  const refresh = useCallback((): Promise<void> => {
    const l = loading.current;
    if (l.running) {
      l.again ??= l.running.then(() => {
        l.again = null;
        return refresh();
      });
      return l.again;
    }
    l.running = (async () => {
      try {
        const got = await load(api, l.catalog);
        l.catalog = got.catalog;
        userNames.current.set(got.me.id, got.me.display_name || got.me.username);
        setState(got);
        setError(null);
      } catch (e) {
        setError(e);
      } finally {
        l.running = null;
      }
    })();
    return l.running;
  }, [api]);

  useEffect(() => {
    void refresh();
    const onHash = () => setWhere(route());
    addEventListener("hashchange", onHash);
    return () => removeEventListener("hashchange", onHash);
  }, [refresh]);

  // The live stream: a single-use ticket per connection (EventSource cannot
  // send Authorization), resumed with ?after= from the last seq seen.
  const canAudit = state ? state.access.owner || state.access.admin || state.access.base.has("VIEW_AUDIT_LOG") : null;
  useEffect(() => {
    if (canAudit === null) return undefined;
    if (!canAudit) {
      setLive("off");
      return undefined;
    }
    let es: EventSource | null = null;
    let last: number | null = null;
    let stopped = false;
    let timer: number | undefined;
    const open = async () => {
      try {
        const { data } = await ok(api.POST("/events/ticket"));
        if (stopped) return;
        const q = new URLSearchParams({ ticket: data.ticket });
        if (last !== null) q.set("after", String(last));
        es = new EventSource(`/api/events?${q}`);
        es.onopen = () => setLive("live");
        // Each message's SSE `event:` is the event's type, and named events
        // do not reach onmessage: listen to every type of the contract.
        for (const t of eventTypes) es.addEventListener(t, handle);
        es.onerror = () => {
          es?.close();
          es = null;
          if (!stopped) {
            setLive("retrying");
            timer = window.setTimeout(() => void open(), 2000);
          }
        };
      } catch (e) {
        if (stopped) return;
        // Refused: VIEW_AUDIT_LOG was taken away; recomputing access turns the stream off.
        if (e instanceof ApiError && e.status === 403) {
          void refresh();
          return;
        }
        setLive("retrying");
        timer = window.setTimeout(() => void open(), 5000);
      }
    };
    const handle = (m: MessageEvent<string>) => {
      let ev: AuditEvent;
      try {
        ev = JSON.parse(m.data) as AuditEvent;
      } catch {
        return;
      }
      last = ev.seq;
      for (const f of listeners.current) f(ev);
    };
    setLive("connecting");
    void open();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
      es?.close();
    };
  }, [api, canAudit, refresh]);

  if (!state) {
    return (
      <div class="shell">
        <Header />
        <main class="page">{error ? <ProblemBox error={error} /> : <p class="loading">Loading…</p>}</main>
        {error ? (
          <p class="page">
            <button type="button" class="btn plain" onClick={props.onSignOut}>
              Sign out
            </button>
          </p>
        ) : null}
      </div>
    );
  }

  const roleName = (id: string) => state.roles.find((r) => r.id === id)?.name ?? id;
  const names: Names = {
    role: roleName,
    user: (id) => userNames.current.get(id) ?? id,
  };
  const ctx: Console = {
    api,
    token: props.token,
    access: state.access,
    roles: state.roles,
    catalog: state.catalog,
    names,
    refresh,
    live,
    onEvent: (f) => {
      listeners.current.add(f);
      return () => listeners.current.delete(f);
    },
  };
  const me = state.me;
  const myRoles = me.roles.map(roleName);
  return (
    <ConsoleContext.Provider value={ctx}>
      <div class="shell">
        <Header>
          <div class="whoami" data-testid="whoami">
            <span>
              Signed in as <strong>{me.display_name || me.username}</strong> (@{me.username})
            </span>
            <span class="muted">{me.is_owner ? "owner" : myRoles.length ? myRoles.join(", ") : "no roles"}</span>
            <button type="button" class="btn plain small" onClick={props.onSignOut}>
              Sign out
            </button>
          </div>
        </Header>
        <nav class="tabs" aria-label="Sections">
          {/* Webhooks only for those who may manage them (a link to a page of refusals helps nobody). */}
          {pages
            .filter((p) => p.id !== "webhooks" || webhookReason(state.access) === null)
            .map((p) => (
              <a key={p.id} href={`#/${p.id}`} aria-current={where.page === p.id ? "page" : undefined}>
                {p.label}
              </a>
            ))}
          <span class={`live is-${live}`} title="The live event stream" data-testid="live">
            {live === "live" ? "● live" : live === "off" ? "○ live off (needs VIEW_AUDIT_LOG)" : live === "retrying" ? "reconnecting…" : "connecting…"}
          </span>
        </nav>
        <main class="page" id="main">
          {where.page === "channels" && <ChannelsPage selected={where.arg} />}
          {where.page === "roles" && <RolesPage />}
          {where.page === "users" && <UsersPage />}
          {where.page === "permissions" && <PermissionsPage />}
          {where.page === "preview" && <PreviewPage />}
          {where.page === "audit" && <AuditPage />}
          {where.page === "webhooks" && <WebhooksPage />}
          {where.page === "settings" && <SettingsPage />}
        </main>
      </div>
    </ConsoleContext.Provider>
  );
}

function Header(props: { children?: JSX.Element }): JSX.Element {
  return (
    <header class="top">
      <a class="brand" href="#/channels">
        Guildhall
      </a>
      {props.children}
    </header>
  );
}
