// What the signed-in user may do, computed the way the server decides it
// (docs/design.md §5-§6), so that a control the server would refuse is disabled
// beforehand with the reason in words. The server stays the judge: a refusal
// that slips through is shown from its 403 body (problemWords).
import type { Permission, Problem, Role, User } from "./api";

export interface Access {
  me: User;
  /** Base permissions: global ∪ the permissions of one's roles. */
  base: ReadonlySet<Permission>;
  owner: boolean;
  admin: boolean;
  /** The highest position among one's roles (0 with none; Infinity for the owner). */
  top: number;
}

export function makeAccess(me: User, base: readonly Permission[], roles: readonly Role[]): Access {
  const set = new Set(base);
  return {
    me,
    base: set,
    owner: me.is_owner,
    admin: set.has("ADMINISTRATOR"),
    top: me.is_owner ? Infinity : topOf(me.roles, roles),
  };
}

/** The highest position among the roles given by ID (0 with none). */
export function topOf(roleIDs: readonly string[], roles: readonly Role[]): number {
  let top = 0;
  for (const r of roles) if (roleIDs.includes(r.id) && r.position > top) top = r.position;
  return top;
}

export function holds(a: Access, p: Permission): boolean {
  return a.owner || a.admin || a.base.has(p);
}

/** Why a base (global) permission check fails, or null when it passes. */
export function need(a: Access, p: Permission): string | null {
  return holds(a, p) ? null : `you need ${p}`;
}

/** Channel-scoped permissions of the caller in one channel (from GET /users/{me}/permissions?channelID=). */
export interface ChannelAccess {
  channelID: string;
  perms: ReadonlySet<Permission>;
}

export function needIn(a: Access, c: ChannelAccess | null, p: Permission): string | null {
  if (a.owner || a.admin) return null;
  if (c === null) return `you need ${p}`;
  return c.perms.has(p) ? null : `you need ${p} in #${c.channelID}`;
}

/** Why the caller may not manage a role (create, rename, move, delete, permissions, assign), or null. */
export function roleReason(a: Access, role: Pick<Role, "name" | "position">): string | null {
  const n = need(a, "MANAGE_ROLES");
  if (n) return n;
  if (!a.owner && role.position >= a.top) return `${role.name} is not below your highest role`;
  return null;
}

/** Why the caller may not move a role to `position`, or null. */
export function moveReason(a: Access, role: Role, position: number): string | null {
  const r = roleReason(a, role);
  if (r) return r;
  if (!a.owner && position >= a.top) return `position ${position} is not below your highest role`;
  return null;
}

/** Why the caller may not grant (add or remove) these permissions, or null. */
export function grantReason(a: Access, perms: Iterable<Permission>, inChannel?: ChannelAccess | null): string | null {
  if (a.owner) return null;
  const missing: Permission[] = [];
  for (const p of perms) {
    const held = inChannel ? a.admin || inChannel.perms.has(p) : holds(a, p);
    if (!held) missing.push(p);
  }
  if (missing.length === 0) return null;
  return `you do not hold ${missing.join(", ")}, so you cannot grant or revoke ${missing.length === 1 ? "it" : "them"}`;
}

/** Why the caller may not change a user (edit, suspend, delete, roles), or null. */
export function userReason(a: Access, u: User, roles: readonly Role[]): string | null {
  if (u.is_owner && !a.owner) return "only the owner may change the owner";
  if (u.id === a.me.id && !a.owner) return "you cannot change your own status or roles";
  const n = need(a, "MANAGE_USERS");
  if (n) return n;
  if (!a.owner && topOf(u.roles, roles) >= a.top) return `${u.display_name || u.username}'s highest role is not below yours`;
  return null;
}

/** Why the caller may not time a user out (or end their timeout), or null. */
export function timeoutReason(a: Access, u: User, roles: readonly Role[]): string | null {
  if (u.id === a.me.id) return "you cannot time yourself out";
  if (u.is_owner) return "the owner cannot be timed out";
  const n = need(a, "MODERATE_MEMBERS");
  if (n) return n;
  const who = u.display_name || u.username;
  if (!a.owner && topOf(u.roles, roles) >= a.top) return `${who}'s highest role is not below yours`;
  if (roles.some((r) => u.roles.includes(r.id) && r.permissions.includes("ADMINISTRATOR"))) return `${who} has ADMINISTRATOR, which cannot be timed out`;
  return null;
}

/**
 * Why the caller may not change this user's roles (whatever the role), or
 * null: as the server decides an assignment, the owner's roles are the
 * owner's alone, and anyone else's top role must be below the caller's
 * (one's own roles need no such thing). The role itself is judged by
 * roleReason and grantReason.
 */
export function holderReason(a: Access, u: User, roles: readonly Role[]): string | null {
  if (a.owner) return null;
  if (u.is_owner) return "only the owner may change the owner's roles";
  if (u.id !== a.me.id && topOf(u.roles, roles) >= a.top) return `${u.display_name || u.username}'s highest role is not below yours`;
  return null;
}

/** Why the caller may not give a role to (or take it from) each of these users, or null. */
export function bulkRoleReason(a: Access, role: Role, users: readonly User[], roles: readonly Role[]): string | null {
  const r = roleReason(a, role) ?? grantReason(a, role.permissions);
  if (r) return r;
  const refused = users.filter((u) => holderReason(a, u, roles) !== null);
  if (refused.length === 0) return null;
  const first = refused[0];
  const names = refused.slice(0, 3).map((u) => u.display_name || u.username);
  const more = refused.length > 3 ? ` and ${refused.length - 3} more` : "";
  return `you may not change the roles of ${names.join(", ")}${more}${first && refused.length === 1 ? ` (${holderReason(a, first, roles)})` : ""}; unselect ${refused.length === 1 ? "them" : "those"}`;
}

/** Why the caller may not export or import templates, or null. */
export function templateReason(a: Access): string | null {
  return a.owner ? null : "only the owner may export or import templates";
}

/** Why the caller may not see or mint a user's tokens, or null. */
export function tokenReason(a: Access, u: User): string | null {
  return a.owner || u.id === a.me.id ? null : "a user's tokens are theirs and the owner's alone";
}

/** Names for IDs, to put a 403 in words. */
export interface Names {
  role: (id: string) => string;
  user: (id: string) => string;
}

/**
 * A problem in words: the 403's structured body ("you need MANAGE_ROLES",
 * "Moderators is above your highest role"), else its title and detail.
 */
export function problemWords(p: Problem, names?: Names): { title: string; detail: string; items: string[] } {
  const items = (p.errors ?? []).map((e) => `${e.location}: ${e.message}`);
  if (p.status === 403 && p.reason) {
    const where = p.channel_id ? ` in #${p.channel_id}` : "";
    const perms = p.missing_permissions ?? [];
    switch (p.reason) {
      case "missing_permissions":
        return { title: `Refused: you need ${perms.join(" and ")}${where}`, detail: p.detail ?? "", items };
      case "role_hierarchy": {
        let who = "That";
        if (p.role_id) who = names ? names.role(p.role_id) : `Role ${p.role_id}`;
        else if (p.user_id) who = `${names ? names.user(p.user_id) : p.user_id}'s highest role`;
        return { title: `Refused: ${who} is not below your highest role`, detail: p.detail ?? "", items };
      }
      case "cannot_grant_unheld":
        return { title: `Refused: you cannot grant or revoke ${perms.join(", ")}${where}, which you do not hold`, detail: p.detail ?? "", items };
      case "self_or_owner_only":
        return { title: "Refused: a user's tokens are theirs and the owner's alone", detail: p.detail ?? "", items };
      case "owner_only":
        return { title: "Refused: only the owner may do this", detail: p.detail ?? "", items };
    }
  }
  if (p.status === 412) {
    return {
      title: "Changed meanwhile",
      detail: "Someone else changed this after you loaded it, so nothing was saved. The current state is shown; make your change again if you still want it.",
      items,
    };
  }
  return { title: p.title, detail: p.detail ?? "", items };
}
