// What every page shares once signed in: the client, who I am and what I may
// do, the roles and the permission catalog, and the live event stream.
import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { Access, Names } from "./access";
import { allPages, type Api, type AuditEvent, type Channel, type PermissionInfo, type Role, type Schemas } from "./api";

export interface Console {
  api: Api;
  token: string;
  access: Access;
  roles: Role[];
  catalog: PermissionInfo[];
  names: Names;
  /** Reloads me, my permissions and the roles (after a change that may move them). */
  refresh: () => Promise<void>;
  /** Subscribes to live events; returns the unsubscribe function. */
  onEvent: (f: (e: AuditEvent) => void) => () => void;
  /** "connecting", "live", "off" (no VIEW_AUDIT_LOG) or "retrying". */
  live: LiveState;
}

export type LiveState = "connecting" | "live" | "off" | "retrying";

export const ConsoleContext = createContext<Console | null>(null);

export function useConsole(): Console {
  const c = useContext(ConsoleContext);
  if (!c) throw new Error("useConsole outside a signed-in console");
  return c;
}

/** Whether an event was caused by someone else (one's own changes are reloaded where they are made). */
export function byOthers(c: Console, e: AuditEvent): boolean {
  return e.actor_id !== c.access.me.id;
}

/** Channel-scoped permission names of the catalog, in catalog order. */
export function channelScoped(catalog: readonly PermissionInfo[]): PermissionInfo[] {
  return catalog.filter((p) => p.scopes.includes("channel"));
}

/** Every channel the caller can see, in tree order (the server's order). */
export function listChannels(c: Pick<Console, "api">): Promise<Channel[]> {
  return allPages((cursor) => c.api.GET("/channels", { params: { query: { limit: 200, ...(cursor ? { cursor } : {}) } } }));
}

/** A channel's name as the console shows it: "#ops" for a channel, "Staff" for a category. */
export function channelLabel(ch: Pick<Channel, "name" | "kind">): string {
  return ch.kind === "category" ? ch.name : `#${ch.name}`;
}

type EventType = Schemas["EventType"];

/** Every event type of the contract; tsc fails when the contract adds or drops one. */
export const eventTypes = [
  "channel.created",
  "channel.updated",
  "channel.renamed",
  "channel.deleted",
  "channel.overwrite.set",
  "channel.overwrite.removed",
  "channel.attachment.created",
  "channel.attachment.updated",
  "channel.attachment.deleted",
  "role.created",
  "role.updated",
  "role.renamed",
  "role.moved",
  "role.deleted",
  "role.permissions.set",
  "global.permissions.set",
  "user.created",
  "user.updated",
  "user.deleted",
  "user.role.assigned",
  "user.role.removed",
  "user.token.created",
  "user.token.deleted",
  "user.token.renamed",
  "profile.links.set",
  "profile.links.deleted",
  "channel.moved",
  "user.timeout",
  "webhook.created",
  "webhook.updated",
  "webhook.deleted",
] as const satisfies readonly EventType[];

type Missing = Exclude<EventType, (typeof eventTypes)[number]>;
/** A compile-time check: this line fails to type-check when an event type is missing above. */
export const everyEventType: [Missing] extends [never] ? true : Missing = true;
