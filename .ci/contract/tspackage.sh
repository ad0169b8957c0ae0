#!/usr/bin/env bash
# tspackage.sh   (make tspackage)
#
# gen/ts is the npm package @guildhall/client (schema.ts from
# openapi-typescript, a hand-written openapi-fetch entry point). This packs
# it with `npm pack`, installs the tarball into a scratch consumer project
# (consumer/), type-checks consumer.ts with tsc --strict against the
# installed package, and imports its entry point with node.
# Last line:  tspackage: OK|FAILED - ...
# Exit 0 OK, 1 failure, 2 a tool could not run.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --npm || exit 2
T="$(mktemp -d -t tspackage-XXXXXX)"
trap 'rm -rf "$T"' EXIT
cd "$ROOT" || exit 2
"$CONTRACT_DIR/gen-ts.sh" --check || { echo "tspackage: FAILED - gen/ts/schema.ts is stale"; exit 1; }

echo "=== npm pack gen/ts ==="
TGZ="$(cd gen/ts && npm pack --pack-destination "$T" --silent 2>/dev/null | tail -n 1)"
[ -f "$T/$TGZ" ] || { echo "tspackage: FAILED - npm pack made no tarball"; exit 1; }
tar -tzf "$T/$TGZ" | sed 's/^/  /'

echo
echo "=== a consumer project installs it ==="
mkdir -p "$T/app"
cp "$CONTRACT_DIR/consumer/consumer.ts" "$CONTRACT_DIR/consumer/tsconfig.json" "$T/app/"
echo '{"name": "consumer", "private": true, "type": "module"}' >"$T/app/package.json"
(cd "$T/app" && npm install --no-audit --no-fund --prefer-offline --loglevel=error --no-save "$T/$TGZ") ||
  { echo "tspackage: FAILED - npm install of the tarball"; exit 1; }

echo
echo "=== tsc --strict --noEmit (consumer) ==="
if ! "$BIN/tsc" -p "$T/app/tsconfig.json" --pretty false; then
  echo "tspackage: FAILED - the consumer does not type-check against the package"; exit 1
fi
echo "tsc: 0 type errors"

echo
echo "=== node imports the entry point ==="
(cd "$T/app" && node --input-type=module -e '
  const m = await import("@guildhall/client");
  if (typeof m.createGuildhallClient !== "function") throw new Error("no createGuildhallClient");
  const api = m.createGuildhallClient("http://127.0.0.1:9/api", "t");
  if (typeof api.GET !== "function") throw new Error("not a client");
  console.log("import: createGuildhallClient ok");') || { echo "tspackage: FAILED - node cannot use the package"; exit 1; }

VERSION="$(node -p "require('$ROOT/gen/ts/package.json').version")"
echo
echo "tspackage: OK - @guildhall/client@$VERSION packed ($(tar -tzf "$T/$TGZ" | wc -l) files), installed and type-checked by a consumer"
