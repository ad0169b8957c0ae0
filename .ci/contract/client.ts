// A typed TypeScript program over every operation of openapi/openapi.yaml,
// written the way a frontend team would use the API: openapi-fetch with the
// types openapi-typescript generates into gen/ts/schema.ts.
//
// tsclient.sh type-checks it with tsc --strict, noUncheckedIndexedAccess and
// exactOptionalPropertyTypes, checks that `steps` names every operationId of
// the contract and that each step calls its own operation (check-client.mjs),
// then runs it against a live server as the owner: each step asserts the
// status and typed fields of the answer, and the run fails unless every
// operation was called.
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { components, operations, paths } from "../../gen/ts/schema";

type Schemas = components["schemas"];
type Api = Client<paths>;
type Permission = Schemas["PermissionName"];
type OperationId = keyof operations;

/** What the steps share: clients, and IDs and ETags learned on the way. */
interface Ctx {
  owner: Api; // the owner's token
  anon: Api; // no token
  connect: (token: string) => Api; // a client with another token
  alice: string; // a user created by the program
  aliceApi: Api | null; // a client with alice's token
  tokenID: string;
  etag: string; // the last ETag seen
  ticket: string;
  template: Schemas["Template"] | null; // the last export
  webhookID: string;
}

class Failure extends Error {}

function fail(msg: string): never {
  throw new Failure(msg);
}

function check(cond: boolean, msg: string): asserts cond {
  if (!cond) fail(msg);
}

/** The typed body of a successful answer with the expected status. */
function body<D>(r: { data?: D; error?: unknown; response: Response }, status: number): D {
  const got = r.response.status;
  if (got !== status) fail(`HTTP ${got}, want ${status}: ${JSON.stringify(r.error)}`);
  if (r.data === undefined) fail(`HTTP ${got} without a body`);
  return r.data;
}

/** A successful answer without a body (204, HEAD). */
function empty(r: { error?: unknown; response: Response }, status: number): Response {
  const got = r.response.status;
  if (got !== status) fail(`HTTP ${got}, want ${status}: ${JSON.stringify(r.error)}`);
  return r.response;
}

/** A HEAD answer: 200 with the headers its GET sends, and no body. */
async function headOf(r: { error?: unknown; response: Response }): Promise<Response> {
  const res = empty(r, 200);
  check((await res.clone().text()) === "", "HEAD sent a body");
  check(res.headers.get("X-Request-Id") !== null, "no X-Request-Id");
  return res;
}

/** The answer's ETag, remembered for the next If-Match. */
function etagOf(ctx: Ctx, res: Response): string {
  const tag = res.headers.get("ETag");
  check(tag !== null && /^"[^"]+"$/.test(tag), `no strong ETag (got ${tag})`);
  ctx.etag = tag;
  return tag;
}

const mergePatch = { "Content-Type": "application/merge-patch+json" };

type Step = (ctx: Ctx) => Promise<void>;

/**
 * One step per operation, keyed by operationId and run in this order; the
 * `satisfies` clause makes tsc reject a missing or unknown operationId. Each
 * step's first call is its own operation.
 */
export const steps = {
  getOpenAPIYAML: async (ctx) => {
    const r = await ctx.anon.GET("/openapi.yaml", { parseAs: "text" });
    const text = body(r, 200);
    check(text.startsWith("openapi: 3.0.3"), `unexpected YAML start: ${text.slice(0, 20)}`);
  },
  headOpenAPIYAML: async (ctx) => {
    const res = await headOf(await ctx.anon.HEAD("/openapi.yaml"));
    check((res.headers.get("Content-Type") ?? "").startsWith("application/yaml"), `Content-Type ${String(res.headers.get("Content-Type"))}`);
  },
  getOpenAPIJSON: async (ctx) => {
    const doc = body(await ctx.anon.GET("/openapi.json"), 200);
    check(doc["openapi"] === "3.0.3", `openapi is ${String(doc["openapi"])}`);
  },
  headOpenAPIJSON: async (ctx) => {
    const res = await headOf(await ctx.anon.HEAD("/openapi.json"));
    check((res.headers.get("Content-Type") ?? "").startsWith("application/json"), `Content-Type ${String(res.headers.get("Content-Type"))}`);
  },

  listPermissions: async (ctx) => {
    const catalog = body(await ctx.owner.GET("/permissions"), 200);
    const admin = catalog.items.find((p) => p.name === "ADMINISTRATOR");
    check(admin !== undefined && admin.scopes.includes("global"), "ADMINISTRATOR missing from the catalog");
    check(catalog.next_cursor === null, "the catalog comes whole");
  },
  headPermissions: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/permissions"));
  },
  getGlobalPermissions: async (ctx) => {
    const r = await ctx.owner.GET("/permissions/global");
    const { permissions } = body(r, 200);
    check(permissions.includes("VIEW_CHANNEL"), `fresh global permissions lack VIEW_CHANNEL: ${permissions.join(",")}`);
    etagOf(ctx, r.response);
  },
  headGlobalPermissions: async (ctx) => {
    const res = await headOf(await ctx.owner.HEAD("/permissions/global"));
    etagOf(ctx, res);
  },
  replaceGlobalPermissions: async (ctx) => {
    const wanted: Permission[] = ["VIEW_CHANNEL", "SEND_MESSAGES", "READ_MESSAGE_HISTORY", "ADD_REACTIONS"];
    const r = await ctx.owner.PUT("/permissions/global", {
      params: { header: { "If-Match": ctx.etag, "X-Audit-Reason": "Tighten defaults" } },
      body: { permissions: wanted },
    });
    const { permissions } = body(r, 200);
    check(permissions.join() === wanted.join(), `global permissions are ${permissions.join(",")}`);
  },

  getMe: async (ctx) => {
    const r = await ctx.owner.GET("/me");
    const me = body(r, 200);
    check(me.is_owner && me.username === "owner", `GET /me as the owner is ${me.username} (is_owner ${String(me.is_owner)})`);
    etagOf(ctx, r.response);
  },
  headMe: async (ctx) => {
    etagOf(ctx, await headOf(await ctx.owner.HEAD("/me")));
  },
  listUsers: async (ctx) => {
    const page = body(await ctx.owner.GET("/users", { params: { query: { limit: 10 } } }), 200);
    const owner = page.items.find((u) => u.is_owner);
    check(owner !== undefined && owner.status === "active", "the owner is not listed");
  },
  headUsers: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/users", { params: { query: { limit: 10 } } }));
  },
  createUser: async (ctx) => {
    const r = await ctx.owner.POST("/users", {
      body: { username: "alice", display_name: "Alice Liddell", email: "alice@example.com" },
    });
    const user = body(r, 201);
    check(user.username === "alice" && user.roles.length === 0 && !user.is_owner, "unexpected new user");
    check(r.response.headers.get("Location") === `/api/users/${user.id}`, "no Location");
    ctx.alice = user.id;
  },
  getUser: async (ctx) => {
    const r = await ctx.owner.GET("/users/{userID}", { params: { path: { userID: ctx.alice } } });
    const user = body(r, 200);
    check(user.email === "alice@example.com", `the owner sees email ${String(user.email)}`);
    etagOf(ctx, r.response);
  },
  headUser: async (ctx) => {
    const res = await headOf(await ctx.owner.HEAD("/users/{userID}", { params: { path: { userID: ctx.alice } } }));
    etagOf(ctx, res);
  },
  updateUser: async (ctx) => {
    const r = await ctx.owner.PUT("/users/{userID}", {
      params: { path: { userID: ctx.alice }, header: { "If-Match": ctx.etag } },
      body: { username: "alice", display_name: "Alice L.", email: "alice@example.com", status: "active" },
    });
    const user = body(r, 200);
    check(user.display_name === "Alice L.", `display_name is ${user.display_name}`);
  },
  patchUser: async (ctx) => {
    const until = new Date(Date.now() + 3600_000).toISOString();
    const r = await ctx.owner.PATCH("/users/{userID}", {
      params: { path: { userID: ctx.alice }, header: { "X-Audit-Reason": "Cooling off" } },
      headers: mergePatch,
      body: { display_name: "Alice", timeout_until: until },
    });
    const user = body(r, 200);
    check(user.display_name === "Alice" && user.timeout_until !== undefined, `patched: ${JSON.stringify(user)}`);
    const ended = body(
      await ctx.owner.PATCH("/users/{userID}", { params: { path: { userID: ctx.alice } }, headers: mergePatch, body: { timeout_until: null } }),
      200,
    );
    check(ended.timeout_until === undefined, "the timeout did not end");
  },

  createToken: async (ctx) => {
    const r = await ctx.owner.POST("/users/{userID}/tokens", {
      params: { path: { userID: ctx.alice } },
      body: { name: "Alice's laptop", expires_at: null },
    });
    const tok = body(r, 201);
    check(tok.user_id === ctx.alice && tok.token.length >= 32 && tok.expires_at === null, "unexpected token");
    ctx.tokenID = tok.id;
    ctx.aliceApi = ctx.connect(tok.token);
  },
  listTokens: async (ctx) => {
    const list = body(await ctx.owner.GET("/users/{userID}/tokens", { params: { path: { userID: ctx.alice } } }), 200);
    check(list.items.length === 1 && list.items[0]?.id === ctx.tokenID, "the new token is not listed");
    check(!("token" in (list.items[0] ?? {})), "a listed token shows its secret");
  },
  headTokens: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/users/{userID}/tokens", { params: { path: { userID: ctx.alice } } }));
  },
  getToken: async (ctx) => {
    const tok = body(
      await ctx.owner.GET("/users/{userID}/tokens/{tokenID}", { params: { path: { userID: ctx.alice, tokenID: ctx.tokenID } } }),
      200,
    );
    check(tok.name === "Alice's laptop", `token name is ${tok.name}`);
  },
  headToken: async (ctx) => {
    const res = await headOf(await ctx.owner.HEAD("/users/{userID}/tokens/{tokenID}", { params: { path: { userID: ctx.alice, tokenID: ctx.tokenID } } }));
    etagOf(ctx, res);
  },

  getProfileLinks: async (ctx) => {
    const alice = ctx.aliceApi ?? fail("no client for alice");
    const r = await alice.GET("/profile/link");
    const { links } = body(r, 200);
    check(Object.keys(links).length === 0, "a new user has links");
    etagOf(ctx, r.response);
  },
  headProfileLinks: async (ctx) => {
    const res = await headOf(await (ctx.aliceApi ?? fail("no client for alice")).HEAD("/profile/link"));
    etagOf(ctx, res);
  },
  replaceProfileLinks: async (ctx) => {
    const alice = ctx.aliceApi ?? fail("no client for alice");
    const r = await alice.PUT("/profile/link", {
      params: { header: { "If-Match": ctx.etag } },
      body: { links: { github: "https://github.com/alice", blog: "https://alice.example.com" } },
    });
    const { links } = body(r, 200);
    check(links["github"] === "https://github.com/alice", "github link not set");
  },
  updateProfileLinks: async (ctx) => {
    const alice = ctx.aliceApi ?? fail("no client for alice");
    const r = await alice.PATCH("/profile/link", {
      headers: mergePatch,
      body: { links: { blog: null, mastodon: "https://social.example/@alice" } },
    });
    const { links } = body(r, 200);
    check(links["blog"] === undefined && links["mastodon"] === "https://social.example/@alice", "merge patch not applied");
  },
  deleteProfileLinks: async (ctx) => {
    const alice = ctx.aliceApi ?? fail("no client for alice");
    empty(await alice.DELETE("/profile/link"), 204);
  },

  createRole: async (ctx) => {
    for (const [roleID, name] of [["helpers", "Helpers"], ["mods", "Mods"]] as const) {
      const r = await ctx.owner.POST("/roles/{roleID}/create", {
        params: { path: { roleID }, header: { "X-Audit-Reason": "Moderation team" } },
        body: { name, permissions: ["MANAGE_MESSAGES"], color: "#3498db" },
      });
      const role = body(r, 201);
      check(role.id === roleID && role.position === 1, `new role ${role.id} at position ${role.position}`);
    }
  },
  listRoles: async (ctx) => {
    const { items } = body(await ctx.owner.GET("/roles"), 200);
    check(items.map((r) => r.id).join() === "helpers,mods", `roles by position: ${items.map((r) => r.id).join()}`);
    // A history answer as of now is the answer of now.
    const past = body(await ctx.owner.GET("/roles", { params: { query: { at: new Date().toISOString() } } }), 200);
    check(past.items.map((r) => r.id).join() === "helpers,mods", `roles as of now: ${past.items.map((r) => r.id).join()}`);
  },
  headRoles: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/roles"));
    await headOf(await ctx.owner.HEAD("/roles", { params: { query: { at: new Date().toISOString() } } }));
  },
  getRole: async (ctx) => {
    const r = await ctx.owner.GET("/roles/{roleID}", { params: { path: { roleID: "mods" } } });
    const role = body(r, 200);
    check(role.color === "#3498db" && role.permissions.includes("MANAGE_MESSAGES"), "unexpected role");
    etagOf(ctx, r.response);
  },
  headRole: async (ctx) => {
    const res = await headOf(await ctx.owner.HEAD("/roles/{roleID}", { params: { path: { roleID: "mods" } } }));
    etagOf(ctx, res);
  },
  updateRole: async (ctx) => {
    const r = await ctx.owner.PATCH("/roles/{roleID}", {
      params: { path: { roleID: "mods" }, header: { "If-Match": ctx.etag } },
      headers: mergePatch,
      body: { color: null },
    });
    const role = body(r, 200);
    check(role.color === null && role.name === "Mods", "color not cleared");
    etagOf(ctx, r.response);
  },
  renameRole: async (ctx) => {
    const r = await ctx.owner.POST("/roles/{roleID}/rename", {
      params: { path: { roleID: "mods" }, header: { "If-Match": ctx.etag } },
      body: { name: "Moderators" },
    });
    check(body(r, 200).name === "Moderators", "not renamed");
  },
  moveRole: async (ctx) => {
    const r = await ctx.owner.POST("/roles/{roleID}/move", {
      params: { path: { roleID: "mods" } },
      body: { position: 2 },
    });
    check(body(r, 200).position === 2, "not moved");
  },
  getRolePermissions: async (ctx) => {
    const r = await ctx.owner.GET("/roles/{roleID}/permissions", { params: { path: { roleID: "mods" } } });
    check(body(r, 200).permissions.join() === "MANAGE_MESSAGES", "unexpected role permissions");
    etagOf(ctx, r.response);
  },
  headRolePermissions: async (ctx) => {
    const res = await headOf(await ctx.owner.HEAD("/roles/{roleID}/permissions", { params: { path: { roleID: "mods" } } }));
    etagOf(ctx, res);
  },
  replaceRolePermissions: async (ctx) => {
    const r = await ctx.owner.PUT("/roles/{roleID}/permissions", {
      params: { path: { roleID: "mods" }, header: { "If-Match": ctx.etag } },
      body: { permissions: ["MANAGE_MESSAGES", "VIEW_AUDIT_LOG"] },
    });
    // Answers list permissions in catalog order.
    check(body(r, 200).permissions.join() === "VIEW_AUDIT_LOG,MANAGE_MESSAGES", "not replaced");
  },
  legacyAddRolePermissions: async (ctx) => {
    const r = await ctx.owner.POST("/roles/{roleID}/add_perm", {
      params: { path: { roleID: "mods" } },
      body: { permissions: ["MENTION_EVERYONE"] },
    });
    check(body(r, 200).permissions.includes("MENTION_EVERYONE"), "not added");
    check(/^@\d+$/.test(r.response.headers.get("Deprecation") ?? ""), "no Deprecation header");
    check((r.response.headers.get("Link") ?? "").includes('rel="successor-version"'), "no successor Link");
  },
  legacyRemoveRolePermissions: async (ctx) => {
    const r = await ctx.owner.POST("/roles/{roleID}/remove_perm", {
      params: { path: { roleID: "mods" } },
      body: { permissions: ["MENTION_EVERYONE"] },
    });
    check(!body(r, 200).permissions.includes("MENTION_EVERYONE"), "not removed");
  },

  assignUserRole: async (ctx) => {
    empty(await ctx.owner.POST("/users/{userID}/roles/{roleID}", { params: { path: { userID: ctx.alice, roleID: "mods" } } }), 204);
  },
  listUserRoles: async (ctx) => {
    const { items } = body(await ctx.owner.GET("/users/{userID}/roles", { params: { path: { userID: ctx.alice } } }), 200);
    check(items.length === 1 && items[0]?.id === "mods", "alice does not have mods");
  },
  headUserRoles: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/users/{userID}/roles", { params: { path: { userID: ctx.alice } } }));
  },
  removeUserRole: async (ctx) => {
    empty(await ctx.owner.DELETE("/users/{userID}/roles/{roleID}", { params: { path: { userID: ctx.alice, roleID: "mods" } } }), 204);
  },
  legacyAddRoleUser: async (ctx) => {
    const r = await ctx.owner.POST("/roles/{roleID}/add_user", { params: { path: { roleID: "helpers" } }, body: { user_id: ctx.alice } });
    check(empty(r, 204).headers.get("Deprecation") !== null, "no Deprecation header");
  },
  legacyRemoveRoleUser: async (ctx) => {
    const r = await ctx.owner.POST("/roles/{roleID}/remove_user", { params: { path: { roleID: "helpers" } }, body: { user_id: ctx.alice } });
    empty(r, 204);
    const user = body(await ctx.owner.GET("/users/{userID}", { params: { path: { userID: ctx.alice } } }), 200);
    check(user.roles.length === 0, `alice still has ${user.roles.join()}`);
  },
  changeRoleMembers: async (ctx) => {
    const r = await ctx.owner.POST("/roles/{roleID}/members", { params: { path: { roleID: "helpers" } }, body: { add: [ctx.alice] } });
    const { added, removed } = body(r, 200);
    check(added === 1 && removed === 0, `added ${added}, removed ${removed}`);
  },
  listRoleMembers: async (ctx) => {
    const page = body(await ctx.owner.GET("/roles/{roleID}/members", { params: { path: { roleID: "helpers" }, query: { limit: 10 } } }), 200);
    check(page.items.length === 1 && page.items[0]?.id === ctx.alice && page.next_cursor === null, "alice is not listed");
  },
  headRoleMembers: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/roles/{roleID}/members", { params: { path: { roleID: "helpers" } } }));
    const { removed } = body(
      await ctx.owner.POST("/roles/{roleID}/members", { params: { path: { roleID: "helpers" } }, body: { remove: [ctx.alice] } }),
      200,
    );
    check(removed === 1, "alice kept helpers");
  },

  createChannel: async (ctx) => {
    const r = await ctx.owner.POST("/channels/{channelID}/create", {
      params: { path: { channelID: "ops" } },
      body: { name: "Operations", topic: "Where the moderators meet." },
    });
    const ch = body(r, 201);
    check(ch.id === "ops" && ch.topic === "Where the moderators meet.", "unexpected channel");
    check(r.response.headers.get("Location") === "/api/channels/ops", "no Location");
    const cat = body(
      await ctx.owner.POST("/channels/{channelID}/create", { params: { path: { channelID: "staff" } }, body: { name: "Staff", kind: "category" } }),
      201,
    );
    check(cat.kind === "category" && cat.parent_id === null, "not a category");
  },
  listChannels: async (ctx) => {
    const page = body(await ctx.owner.GET("/channels", { params: { query: { limit: 50 } } }), 200);
    check(page.items.some((c) => c.id === "ops"), "ops not listed");
  },
  headChannels: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/channels", { params: { query: { limit: 50 } } }));
  },
  getChannel: async (ctx) => {
    const r = await ctx.owner.GET("/channels/{channelID}", { params: { path: { channelID: "ops" } } });
    check(body(r, 200).name === "Operations", "unexpected channel");
    etagOf(ctx, r.response);
  },
  headChannel: async (ctx) => {
    const res = await headOf(await ctx.owner.HEAD("/channels/{channelID}", { params: { path: { channelID: "ops" } } }));
    etagOf(ctx, res);
  },
  updateChannel: async (ctx) => {
    const r = await ctx.owner.PATCH("/channels/{channelID}", {
      params: { path: { channelID: "ops" }, header: { "If-Match": ctx.etag } },
      headers: mergePatch,
      body: { topic: null },
    });
    const ch = body(r, 200);
    check(ch.topic === null && ch.name === "Operations", "topic not cleared");
    etagOf(ctx, r.response);
  },
  renameChannel: async (ctx) => {
    const r = await ctx.owner.POST("/channels/{channelID}/rename", {
      params: { path: { channelID: "ops" }, header: { "If-Match": ctx.etag } },
      body: { name: "Ops" },
    });
    check(body(r, 200).name === "Ops", "not renamed");
  },
  reorderChannels: async (ctx) => {
    const r = await ctx.owner.POST("/channels/reorder", { body: { positions: [{ id: "ops", position: 0, parent_id: "staff" }] } });
    const { items } = body(r, 200);
    check(items[0]?.id === "ops" && items[0].parent_id === "staff", `moved: ${JSON.stringify(items)}`);
    body(await ctx.owner.POST("/channels/reorder", { body: { positions: [{ id: "ops", position: 0, parent_id: null }] } }), 200);
  },
  setChannelOverwrite: async (ctx) => {
    const r = await ctx.owner.POST("/channels/{channelID}/permissions", {
      params: { path: { channelID: "ops" } },
      body: { target_type: "everyone", allow: [], deny: ["VIEW_CHANNEL"] },
    });
    const { items } = body(r, 200);
    check(items.length === 1 && items[0]?.target_type === "everyone", "overwrite not set");
  },
  listChannelOverwrites: async (ctx) => {
    const { items } = body(await ctx.owner.GET("/channels/{channelID}/permissions", { params: { path: { channelID: "ops" } } }), 200);
    check(items[0]?.deny.includes("VIEW_CHANNEL") === true, "everyone is not denied VIEW_CHANNEL");
    const at = new Date().toISOString();
    const past = body(await ctx.owner.GET("/channels/{channelID}/permissions", { params: { path: { channelID: "ops" }, query: { at } } }), 200);
    check(past.items[0]?.deny.includes("VIEW_CHANNEL") === true, "as of now, everyone is not denied VIEW_CHANNEL");
  },
  headChannelOverwrites: async (ctx) => {
    const res = await headOf(await ctx.owner.HEAD("/channels/{channelID}/permissions", { params: { path: { channelID: "ops" } } }));
    etagOf(ctx, res);
    await headOf(await ctx.owner.HEAD("/channels/{channelID}/permissions", { params: { path: { channelID: "ops" }, query: { at: new Date().toISOString() } } }));
  },
  listChannelAccess: async (ctx) => {
    const r = await ctx.owner.GET("/channels/{channelID}/access", {
      params: { path: { channelID: "ops" }, query: { permission: "VIEW_CHANNEL", limit: 50 } },
    });
    const { items } = body(r, 200);
    // The everyone overwrite denies VIEW_CHANNEL in ops: the owner holds it still.
    check(items.some((u) => u.is_owner), `the owner is not listed: ${JSON.stringify(items.map((u) => u.username))}`);
    check(!items.some((u) => u.id === ctx.alice), "alice is listed, but everyone is denied VIEW_CHANNEL");
    const past = body(await ctx.owner.GET("/channels/{channelID}/access", {
      params: { path: { channelID: "ops" }, query: { permission: "VIEW_CHANNEL", limit: 50, at: new Date().toISOString() } },
    }), 200);
    check(past.items.map((u) => u.id).join() === items.map((u) => u.id).join(), "access as of now differs from access now");
  },
  headChannelAccess: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/channels/{channelID}/access", { params: { path: { channelID: "ops" } } }));
    await headOf(await ctx.owner.HEAD("/channels/{channelID}/access", { params: { path: { channelID: "ops" }, query: { at: new Date().toISOString() } } }));
  },
  getUserPermissions: async (ctx) => {
    const r = await ctx.owner.GET("/users/{userID}/permissions", {
      params: { path: { userID: ctx.alice }, query: { channelID: "ops", explain: true } },
    });
    const perms = body(r, 200);
    // The everyone overwrite denies VIEW_CHANNEL, so alice sees nothing in ops.
    check(perms.channel_id === "ops" && perms.permissions.length === 0, `alice has ${perms.permissions.join()} in ops`);
    const view = perms.explain?.find((e) => e.permission === "VIEW_CHANNEL");
    check(view !== undefined && !view.granted && view.steps.some((s) => s.kind === "overwrite_everyone"), "no explanation");
    const past = body(await ctx.owner.GET("/users/{userID}/permissions", {
      params: { path: { userID: ctx.alice }, query: { channelID: "ops", explain: true, at: new Date().toISOString() } },
    }), 200);
    check(past.permissions.length === 0 && past.explain !== undefined, `as of now, alice has ${past.permissions.join()} in ops`);
  },
  previewPermissions: async (ctx) => {
    const p = body(await ctx.owner.POST("/permissions/preview", { body: { roles: ["mods"], channel_ids: ["ops"], explain: true } }), 200);
    check(p.base.includes("MANAGE_MESSAGES") && p.channels.length === 1 && p.channels[0]?.channel_id === "ops", `preview ${JSON.stringify(p.base)}`);
    check(p.base_explain !== undefined && p.channels[0]?.explain !== undefined, "no explanation");
  },
  exportTemplate: async (ctx) => {
    const r = await ctx.owner.GET("/export");
    const tpl = body(r, 200);
    check(tpl.format === "guildhall-template/1" && tpl.roles.some((x) => x.id === "mods") && tpl.channels.some((c) => c.id === "ops"), "unexpected template");
    etagOf(ctx, r.response);
    ctx.template = tpl;
  },
  headExportTemplate: async (ctx) => {
    const tag = ctx.etag;
    check(etagOf(ctx, await headOf(await ctx.owner.HEAD("/export"))) === tag, "HEAD /export has another ETag");
  },
  importTemplate: async (ctx) => {
    const tpl = ctx.template ?? fail("no template exported");
    const same = body(await ctx.owner.POST("/import", { params: { query: { dry_run: true } }, body: tpl }), 200);
    check(same.changes.length === 0, `re-importing the export would change ${JSON.stringify(same.changes)}`);
    const renamed = { ...tpl, channels: tpl.channels.map((c) => (c.id === "ops" ? { ...c, topic: "From a template" } : c)) };
    const { changes } = body(await ctx.owner.POST("/import", { body: renamed }), 200);
    check(changes.length === 1 && changes[0]?.kind === "channel" && changes[0].op === "update", `changes ${JSON.stringify(changes)}`);
  },
  headUserPermissions: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/users/{userID}/permissions", { params: { path: { userID: ctx.alice }, query: { channelID: "ops", explain: true } } }));
    await headOf(await ctx.owner.HEAD("/users/{userID}/permissions", { params: { path: { userID: ctx.alice }, query: { at: new Date().toISOString() } } }));
  },

  putAttachment: async (ctx) => {
    const r = await ctx.owner.PUT("/channels/{channelID}/attachment", {
      params: { path: { channelID: "ops" }, query: { attachmentID: "notes.txt" } },
      body: "hello, guildhall\n",
      bodySerializer: (b) => b,
      headers: { "Content-Type": "text/plain" },
    });
    const att = body(r, 201);
    check(att.size === 17 && att.content_type.startsWith("text/plain") && /^[0-9a-f]{64}$/.test(att.sha256), "unexpected attachment");
  },
  listAttachments: async (ctx) => {
    const page = body(await ctx.owner.GET("/channels/{channelID}/attachments", { params: { path: { channelID: "ops" } } }), 200);
    check(page.items.length === 1 && page.items[0]?.id === "notes.txt", "notes.txt not listed");
  },
  headAttachments: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/channels/{channelID}/attachments", { params: { path: { channelID: "ops" } } }));
  },
  getAttachment: async (ctx) => {
    const r = await ctx.owner.GET("/channels/{channelID}/attachment", {
      params: { path: { channelID: "ops" }, query: { attachmentID: "notes.txt" } },
      parseAs: "text",
    });
    check(body(r, 200) === "hello, guildhall\n", "bytes differ");
    check(r.response.headers.get("X-Content-Type-Options") === "nosniff", "no nosniff");
  },
  headAttachment: async (ctx) => {
    const res = await headOf(
      await ctx.owner.HEAD("/channels/{channelID}/attachment", {
        params: { path: { channelID: "ops" }, query: { attachmentID: "notes.txt" } },
      }),
    );
    check(res.headers.get("Content-Length") === "17", "wrong Content-Length");
    check(/^"[0-9a-f]{64}\.[0-9a-f]{8}"$/.test(res.headers.get("ETag") ?? ""), `ETag ${String(res.headers.get("ETag"))}`);
  },
  deleteAttachment: async (ctx) => {
    const r = await ctx.owner.DELETE("/channels/{channelID}/attachment", {
      params: { path: { channelID: "ops" }, query: { attachmentID: "notes.txt" } },
    });
    empty(r, 204);
  },

  listAuditLog: async (ctx) => {
    const page = body(await ctx.owner.GET("/audit-log", { params: { query: { type: "role.*", limit: 100 } } }), 200);
    const created = page.items.find((e) => e.type === "role.created" && e.subject === "role:mods");
    check(created !== undefined && created.reason === "Moderation team", "role.created event of mods missing");
    check(page.items.every((e) => e.type.startsWith("role.")), "the type filter let other events through");
  },
  headAuditLog: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/audit-log", { params: { query: { type: "role.*", limit: 100 } } }));
  },
  revertAuditLogEntry: async (ctx) => {
    // The first event (the owner's creation) is no change a revert sets back.
    const first = await ctx.owner.POST("/audit-log/{seq}/revert", { params: { path: { seq: 1 }, query: { dry_run: true } } });
    check(first.response.status === 400 && first.error?.code === "not_revertible", `seq 1: HTTP ${first.response.status}`);
    // The import's new topic of ops, set back: listed by the dry run, then made.
    const log = body(await ctx.owner.GET("/audit-log", { params: { query: { type: "channel.updated", subject: "channel:ops", limit: 1 } } }), 200);
    const seq = log.items[0]?.seq ?? fail("no channel.updated event of ops");
    const path = { params: { path: { seq } } };
    const dry = body(await ctx.owner.POST("/audit-log/{seq}/revert", { params: { path: { seq }, query: { dry_run: true } } }), 200);
    const { changes } = body(await ctx.owner.POST("/audit-log/{seq}/revert", path), 200);
    check(JSON.stringify(dry) === JSON.stringify({ changes }), "the dry run listed other changes");
    const c = changes[0];
    check(changes.length === 1 && c?.kind === "channel" && c.id === "ops" && c.after?.["topic"] !== "From a template", `changes ${JSON.stringify(changes)}`);
    // Reverting it again would undo the revert, a later change of the topic.
    const again = await ctx.owner.POST("/audit-log/{seq}/revert", path);
    check(again.response.status === 409 && (again.error?.conflicting_seq ?? 0) > seq, `a second revert: HTTP ${again.response.status}`);
  },
  createEventTicket: async (ctx) => {
    const t = body(await ctx.owner.POST("/events/ticket"), 201);
    check(t.ticket.length > 0 && Date.parse(t.expires_at) > Date.now(), "unusable ticket");
    ctx.ticket = t.ticket;
  },
  streamEvents: async (ctx) => {
    // As a browser's EventSource would: no Authorization, the ticket in the query.
    const abort = new AbortController();
    const r = await ctx.anon.GET("/events", {
      params: { query: { ticket: ctx.ticket, after: 0 } },
      parseAs: "stream",
      signal: abort.signal,
    });
    const stream = body(r, 200);
    check(stream !== null, "no stream");
    check((r.response.headers.get("Content-Type") ?? "").startsWith("text/event-stream"), "not an event stream");
    const reader = stream.getReader();
    const dec = new TextDecoder();
    let text = "";
    const deadline = Date.now() + 10_000;
    while (!/event: user\.created\n/.test(text) && Date.now() < deadline) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
    abort.abort();
    check(/id: \d+\nevent: user\.created\ndata: \{/.test(text), `no replayed user.created event in ${JSON.stringify(text.slice(0, 200))}`);
  },
  headEvents: async (ctx) => {
    const res = await headOf(await ctx.owner.HEAD("/events"));
    check((res.headers.get("Content-Type") ?? "").startsWith("text/event-stream"), `Content-Type ${String(res.headers.get("Content-Type"))}`);
  },

  createWebhook: async (ctx) => {
    // 192.0.2.0/24 is for documentation, not private: no setting needed, no DNS either.
    const r = await ctx.owner.POST("/webhooks", {
      body: { url: "https://192.0.2.10/hook", events: ["role.*", "user.timeout"], description: "Moderation bot" },
    });
    const w = body(r, 201);
    check(/^whsec_[A-Za-z0-9+/]{43}=$/.test(w.secret), "the secret is not whsec_ and base64 of 32 bytes");
    check(w.enabled && w.disabled_reason === null && w.events.length === 2, "unexpected webhook");
    ctx.webhookID = w.id;
    etagOf(ctx, r.response);
    const refused = await ctx.owner.POST("/webhooks", { body: { url: "http://127.0.0.1/hook", events: ["role.*"] } });
    check(refused.response.status === 400 && refused.error?.errors?.[0]?.location === "body.url", "a loopback destination was not refused");
  },
  listWebhooks: async (ctx) => {
    const list = body(await ctx.owner.GET("/webhooks", { params: { query: { limit: 10 } } }), 200);
    check(list.items.length === 1 && list.items[0]?.id === ctx.webhookID, "the webhook is not listed");
    check(!("secret" in (list.items[0] ?? {})), "a listed webhook shows its secret");
  },
  headWebhooks: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/webhooks"));
  },
  getWebhook: async (ctx) => {
    const r = await ctx.owner.GET("/webhooks/{webhookID}", { params: { path: { webhookID: ctx.webhookID } } });
    const w = body(r, 200);
    check(w.description === "Moderation bot" && !("secret" in w), "unexpected webhook");
    etagOf(ctx, r.response);
  },
  headWebhook: async (ctx) => {
    etagOf(ctx, await headOf(await ctx.owner.HEAD("/webhooks/{webhookID}", { params: { path: { webhookID: ctx.webhookID } } })));
  },
  updateWebhook: async (ctx) => {
    const r = await ctx.owner.PATCH("/webhooks/{webhookID}", {
      params: { path: { webhookID: ctx.webhookID }, header: { "If-Match": ctx.etag } },
      body: { enabled: false },
      headers: mergePatch,
    });
    const w = body(r, 200);
    check(!w.enabled && w.disabled_reason === "disabled", "the webhook is not disabled");
  },
  rotateWebhookSecret: async (ctx) => {
    const w = body(await ctx.owner.POST("/webhooks/{webhookID}/rotate", { params: { path: { webhookID: ctx.webhookID } } }), 200);
    check(w.secret.startsWith("whsec_") && w.previous_secret_until !== null, "no rotation");
  },
  listWebhookDeliveries: async (ctx) => {
    const list = body(
      await ctx.owner.GET("/webhooks/{webhookID}/deliveries", { params: { path: { webhookID: ctx.webhookID }, query: { limit: 5 } } }),
      200,
    );
    check(list.items.every((d) => ["pending", "delivered", "failed"].includes(d.state)), "a delivery in an unknown state");
  },
  headWebhookDeliveries: async (ctx) => {
    await headOf(await ctx.owner.HEAD("/webhooks/{webhookID}/deliveries", { params: { path: { webhookID: ctx.webhookID } } }));
  },
  redeliverWebhookDelivery: async (ctx) => {
    // Deliveries are the delivery engine's: redeliver one if there is one,
    // else an unknown delivery is a 404.
    const r = await ctx.owner.POST("/webhooks/{webhookID}/deliveries/{deliveryID}/redeliver", {
      params: { path: { webhookID: ctx.webhookID, deliveryID: "msg_none" } },
    });
    check(r.response.status === 404 && r.error?.code === "not_found", `an unknown delivery: HTTP ${r.response.status}`);
    const list = body(await ctx.owner.GET("/webhooks/{webhookID}/deliveries", { params: { path: { webhookID: ctx.webhookID } } }), 200);
    const first = list.items[0];
    if (first !== undefined) {
      const d = body(
        await ctx.owner.POST("/webhooks/{webhookID}/deliveries/{deliveryID}/redeliver", {
          params: { path: { webhookID: ctx.webhookID, deliveryID: first.id } },
        }),
        202,
      );
      check(d.state === "pending" && d.next_attempt_at !== null, "the delivery is not pending again");
    }
  },
  deleteWebhook: async (ctx) => {
    empty(await ctx.owner.DELETE("/webhooks/{webhookID}", { params: { path: { webhookID: ctx.webhookID } } }), 204);
    const r = await ctx.owner.GET("/webhooks/{webhookID}", { params: { path: { webhookID: ctx.webhookID } } });
    check(r.response.status === 404, "the webhook still exists");
  },

  deleteChannel: async (ctx) => {
    const r = await ctx.owner.POST("/channels/{channelID}/delete", {
      params: { path: { channelID: "ops" }, header: { "X-Audit-Reason": "Cleanup" } },
    });
    empty(r, 204);
    check((await ctx.owner.GET("/channels/{channelID}", { params: { path: { channelID: "ops" } } })).response.status === 404, "ops still exists");
  },
  deleteRole: async (ctx) => {
    for (const roleID of ["mods", "helpers"]) {
      empty(await ctx.owner.POST("/roles/{roleID}/delete", { params: { path: { roleID } } }), 204);
    }
    check(body(await ctx.owner.GET("/roles"), 200).items.length === 0, "roles left");
  },
  deleteToken: async (ctx) => {
    empty(await ctx.owner.DELETE("/users/{userID}/tokens/{tokenID}", { params: { path: { userID: ctx.alice, tokenID: ctx.tokenID } } }), 204);
    const alice = ctx.aliceApi ?? fail("no client for alice");
    const r = await alice.GET("/profile/link");
    check(r.response.status === 401 && r.error?.code === "unauthenticated", "a revoked token still works");
  },
  deleteUser: async (ctx) => {
    empty(await ctx.owner.DELETE("/users/{userID}", { params: { path: { userID: ctx.alice } } }), 204);
    const r = await ctx.owner.GET("/users/{userID}", { params: { path: { userID: ctx.alice } } });
    check(r.response.status === 404 && r.error?.type === "/problems/not_found", "alice still exists");
  },
} satisfies { [K in OperationId]: Step };

/** Retries a 429 after its Retry-After, as a well-behaved client does. */
async function politeFetch(req: Request): Promise<Response> {
  for (let attempt = 0; ; attempt++) {
    const res = await fetch(req.clone());
    if (res.status !== 429 || attempt >= 5) return res;
    const wait = Number(res.headers.get("Retry-After") ?? "1");
    await new Promise((r) => setTimeout(r, Math.max(1, wait) * 1000));
  }
}

/**
 * Runs every step against baseUrl (…/api) with the owner's token and returns
 * one line per step; throws on the first failure or when a step did not call
 * its own operation.
 */
export async function run(baseUrl: string, ownerToken: string): Promise<string[]> {
  // The operations of the served contract: operationId -> "METHOD /path".
  const doc = (await (await fetch(`${baseUrl}/openapi.json`)).json()) as {
    paths: Record<string, Record<string, { operationId?: string }>>;
  };
  const ops = new Map<string, string>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (op.operationId !== undefined) ops.set(op.operationId, `${method.toUpperCase()} ${path}`);
    }
  }
  const called: string[] = [];
  const record: Middleware = {
    onRequest({ request, schemaPath }) {
      called.push(`${request.method} ${schemaPath}`);
    },
  };
  const connect = (token?: string): Api => {
    const api = createClient<paths>({ baseUrl, fetch: politeFetch, headers: token ? { Authorization: `Bearer ${token}` } : {} });
    api.use(record);
    return api;
  };
  const ctx: Ctx = {
    owner: connect(ownerToken), anon: connect(), connect, alice: "", aliceApi: null, tokenID: "", etag: "", ticket: "", template: null,
    webhookID: "",
  };

  const out: string[] = [];
  const done = new Set<string>();
  for (const [id, step] of Object.entries(steps) as [OperationId, Step][]) {
    const want = ops.get(id) ?? fail(`${id}: not an operation of the served contract`);
    called.length = 0;
    try {
      await step(ctx);
    } catch (e) {
      throw new Failure(`${id} (${want}): ${e instanceof Error ? e.message : String(e)}`);
    }
    if (called[0] !== want) fail(`${id}: the step's first call was ${String(called[0])}, want ${want}`);
    done.add(id);
    out.push(`ok  ${id.padEnd(28)} ${want}`);
  }
  const missed = [...ops.keys()].filter((id) => !done.has(id));
  if (missed.length > 0) fail(`operations never called: ${missed.join(", ")}`);
  out.push(`${done.size} of ${ops.size} operations called`);
  return out;
}
