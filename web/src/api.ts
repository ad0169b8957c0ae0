// The console's only way to the server: openapi-fetch typed by the contract
// (gen/ts/schema.ts), with the bearer token of the session. Every answer
// that is not a success becomes an ApiError holding the problem+json body,
// which the UI turns into words (see words.ts); nothing here is private API.
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "../../gen/ts/schema";

export type Schemas = components["schemas"];
export type Api = Client<paths>;
export type Problem = Schemas["Problem"];
export type Permission = Schemas["PermissionName"];
export type User = Schemas["User"];
export type Role = Schemas["Role"];
export type Channel = Schemas["Channel"];
export type Overwrite = Schemas["Overwrite"];
export type AuditEvent = Schemas["Event"];
export type Attachment = Schemas["Attachment"];
export type Token = Schemas["Token"];
export type PermissionInfo = Schemas["PermissionInfo"];
export type Explanation = Schemas["PermissionExplanation"];

/** The API's base path on this server (the console is served by the same binary). */
export const apiBase = "/api";

const tokenKey = "guildhall.token";

/** The session's token lives in sessionStorage only: never in a URL, gone with the tab. */
export const session = {
  get: (): string | null => sessionStorage.getItem(tokenKey),
  set: (t: string): void => sessionStorage.setItem(tokenKey, t),
  clear: (): void => sessionStorage.removeItem(tokenKey),
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * fetch that honours the rate limit: a 429 is refused before anything
 * happens, so the request is sent again after Retry-After (at most twice,
 * waiting at most 5 s each time); the third 429 is the caller's to show.
 */
async function politeFetch(req: Request): Promise<Response> {
  for (let attempt = 0; ; attempt++) {
    const res = await fetch(attempt < 2 ? req.clone() : req);
    if (res.status !== 429 || attempt >= 2) return res;
    const wait = Number(res.headers.get("Retry-After") ?? "1");
    await sleep(Math.min(Number.isFinite(wait) && wait > 0 ? wait : 1, 5) * 1000);
  }
}

/** A client that sends the token as `Authorization: Bearer`. */
export function connect(token: string): Api {
  const c = createClient<paths>({ baseUrl: apiBase, fetch: politeFetch });
  c.use({
    onRequest({ request }) {
      request.headers.set("Authorization", `Bearer ${token}`);
      return request;
    },
  });
  return c;
}

/** A refused or failed request: the server's problem, or one made up for a network failure. */
export class ApiError extends Error {
  readonly problem: Problem;
  constructor(problem: Problem) {
    super(problem.detail ?? problem.title);
    this.problem = problem;
  }
  get status(): number {
    return this.problem.status;
  }
}

function isProblem(v: unknown): v is Problem {
  return typeof v === "object" && v !== null && "status" in v && "title" in v && "code" in v;
}

/** Turns whatever came back into a Problem (a body that is not one still gets a readable title). */
export function problemOf(status: number, body: unknown, statusText = ""): Problem {
  if (isProblem(body)) return body;
  return {
    type: "about:blank",
    title: statusText || `HTTP ${status}`,
    status,
    detail: "The server answered without a problem description.",
    code: "internal",
    request_id: "",
  };
}

interface Answer<D> {
  data?: D;
  error?: unknown;
  response: Response;
}

/** The result of a successful call: the typed body and the ETag (for a later If-Match). */
export interface Got<D> {
  data: D;
  etag: string;
  response: Response;
}

async function settle<D>(p: Promise<Answer<D>>): Promise<Answer<D>> {
  try {
    return await p;
  } catch (e) {
    throw new ApiError({
      type: "about:blank",
      title: "The server cannot be reached",
      status: 0,
      detail: e instanceof Error ? e.message : String(e),
      code: "internal",
      request_id: "",
    });
  }
}

/** Awaits a call that answers with a body; throws ApiError otherwise. */
export async function ok<D>(p: Promise<Answer<D>>): Promise<Got<D>> {
  const r = await settle(p);
  if (!r.response.ok || r.data === undefined) throw new ApiError(problemOf(r.response.status, r.error, r.response.statusText));
  return { data: r.data, etag: r.response.headers.get("ETag") ?? "", response: r.response };
}

/** Awaits a call that answers 204 (or whose body is not needed); throws ApiError otherwise. */
export async function done(p: Promise<{ error?: unknown; response: Response }>): Promise<Response> {
  const r = await settle(p);
  if (!r.response.ok) throw new ApiError(problemOf(r.response.status, r.error, r.response.statusText));
  return r.response;
}

/** The If-Match header when an ETag is known. */
export function ifMatch(etag: string): { "If-Match"?: string } {
  return etag ? { "If-Match": etag } : {};
}

export const mergePatch = { "Content-Type": "application/merge-patch+json" } as const;

/** Every page of a cursor-paged list, up to `max` items (for pickers and small lists). */
export async function allPages<T>(
  page: (cursor: string | undefined) => Promise<Answer<{ items: T[]; next_cursor?: string | null }>>,
  max = 1000,
): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | undefined;
  do {
    const { data } = await ok(page(cursor));
    out.push(...data.items);
    cursor = data.next_cursor ?? undefined;
  } while (cursor && out.length < max);
  return out;
}

/**
 * PUT /channels/{channelID}/attachment with upload progress. fetch cannot
 * report upload progress, so this one operation goes through XMLHttpRequest;
 * the path and the answer are still the contract's.
 */
export function uploadAttachment(
  token: string,
  channelID: string,
  attachmentID: string,
  file: Blob,
  onProgress: (sent: number, total: number) => void,
): Promise<Attachment> {
  const path: keyof paths = "/channels/{channelID}/attachment";
  const url = `${apiBase}${path.replace("{channelID}", encodeURIComponent(channelID))}?attachmentID=${encodeURIComponent(attachmentID)}`;
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    xhr.setRequestHeader("Authorization", `Bearer ${token}`);
    xhr.setRequestHeader("Content-Type", file.type || "application/octet-stream");
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : file.size);
    xhr.onerror = () =>
      reject(new ApiError({ type: "about:blank", title: "The upload failed", status: 0, detail: "The connection was lost.", code: "internal", request_id: "" }));
    xhr.onload = () => {
      let body: unknown = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        body = null;
      }
      if (xhr.status === 200 || xhr.status === 201) {
        onProgress(file.size, file.size);
        resolve(body as Attachment);
      } else reject(new ApiError(problemOf(xhr.status, body, xhr.statusText)));
    };
    xhr.send(file);
  });
}
