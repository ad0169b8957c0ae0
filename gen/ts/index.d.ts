// The package's entry point: the contract's types and a client over them.
// schema.ts is generated (make generate); this file is written by hand.
import type { Client, ClientOptions } from "openapi-fetch";
import type { paths } from "./schema.js";

export type { components, operations, paths } from "./schema.js";

/** A client of every operation of the contract, typed by its paths. */
export type GuildhallClient = Client<paths>;

/**
 * A client of the API at baseUrl (ending in /api), sending
 * `Authorization: Bearer <token>` when a token is given.
 */
export declare function createGuildhallClient(
  baseUrl: string,
  token?: string,
  options?: Omit<ClientOptions, "baseUrl">,
): GuildhallClient;
