// The runtime half of index.d.ts: an openapi-fetch client with the bearer
// token set on every request.
import createClient from "openapi-fetch";

export function createGuildhallClient(baseUrl, token, options = {}) {
  const client = createClient({ ...options, baseUrl });
  if (token) {
    client.use({
      onRequest({ request }) {
        request.headers.set("Authorization", `Bearer ${token}`);
        return request;
      },
    });
  }
  return client;
}
