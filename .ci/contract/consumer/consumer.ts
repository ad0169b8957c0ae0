// A tiny project that uses the packed @guildhall/client as a frontend team
// would (tspackage.sh installs the tarball and type-checks this file).
// The @ts-expect-error lines fail the build if the package's types ever
// degrade to `any`: each must be an error.
import { createGuildhallClient, type components, type GuildhallClient } from "@guildhall/client";

type Role = components["schemas"]["Role"];
type Problem = components["schemas"]["Problem"];

export async function roleNames(baseUrl: string, token: string): Promise<string[]> {
  const api: GuildhallClient = createGuildhallClient(baseUrl, token);
  const { data, error } = await api.GET("/roles");
  if (error) {
    const p: Problem = error;
    throw new Error(`${p.code}: ${p.detail ?? p.title}`);
  }
  return data.items.map((r: Role) => r.name);
}

export async function rename(api: GuildhallClient, roleID: string, name: string, etag: string): Promise<Role> {
  const { data, error, response } = await api.POST("/roles/{roleID}/rename", {
    params: { path: { roleID }, header: { "If-Match": etag } },
    body: { name },
  });
  if (error) throw new Error(`HTTP ${response.status}: ${error.code}`);
  return data;
}

export async function misuse(api: GuildhallClient): Promise<void> {
  // @ts-expect-error: the contract has no such path
  await api.GET("/no/such/path");
  // @ts-expect-error: rename needs a body with a name
  await api.POST("/roles/{roleID}/rename", { params: { path: { roleID: "mods" } }, body: {} });
  const { data } = await api.GET("/roles/{roleID}", { params: { path: { roleID: "mods" } } });
  // @ts-expect-error: a role has no such field
  console.log(data?.nickname);
}
