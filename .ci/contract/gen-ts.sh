#!/usr/bin/env bash
# gen-ts.sh [--check]   (called by make generate and by tsclient.sh)
#
# Generates gen/ts/schema.ts, the TypeScript types of openapi/openapi.yaml,
# with openapi-typescript at the version pinned in package-lock.json.
# Without the npm tools (never installed here by this script) it says so and
# succeeds, so `make generate` and `make test` do not need npm.
# --check: the tools must be there, and a schema.ts that had to change is a
# failure (it is rewritten, as with `make generate`; commit it).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="$ROOT/gen/ts/schema.ts"
GEN="$HERE/node_modules/.bin/openapi-typescript"
if ! command -v node >/dev/null || [ ! -x "$GEN" ]; then
  if [ "${1:-}" = --check ]; then echo "gen-ts: openapi-typescript is not installed (run .ci/contract/setup.sh)" >&2; exit 2; fi
  echo "gen-ts: gen/ts/schema.ts not regenerated: the npm tools are not installed (run .ci/contract/setup.sh)"
  exit 0
fi
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true DO_NOT_TRACK=1 NODE_NO_WARNINGS=1
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
# openapi-typescript validates the document with Redocly first; give it the
# project's config so the result does not depend on the working directory.
(cd "$ROOT" && "$GEN" openapi/openapi.yaml -o "$TMP/schema.ts" -c "$HERE/redocly.yaml") >"$TMP/gen.log" 2>&1 ||
  { cat "$TMP/gen.log" >&2; echo "gen-ts: openapi-typescript failed" >&2; exit 1; }
if grep -q -e '⚠' -e '✘' "$TMP/gen.log"; then cat "$TMP/gen.log" >&2; echo "gen-ts: openapi-typescript reported problems" >&2; exit 1; fi
mkdir -p "$(dirname "$OUT")"
if cmp -s "$TMP/schema.ts" "$OUT"; then
  echo "gen-ts: gen/ts/schema.ts is up to date ($(wc -l <"$OUT") lines)"
  exit 0
fi
cp "$TMP/schema.ts" "$OUT"
if [ "${1:-}" = --check ]; then
  echo "gen-ts: gen/ts/schema.ts was stale and has been regenerated: commit it" >&2
  exit 1
fi
echo "gen-ts: wrote gen/ts/schema.ts ($(wc -l <"$OUT") lines)"
