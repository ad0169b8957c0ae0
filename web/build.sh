#!/usr/bin/env bash
# build.sh [--check]   (called by make generate and .ci/console/check.sh)
#
# Type-checks the console's TypeScript strictly against gen/ts/schema.ts
# (tsc -p web/tsconfig.json), then bundles it with esbuild into web/dist/
# (build.mjs), which is committed and embedded in the binary.
# Without the npm packages (never installed here) it says so and succeeds,
# so `make generate` and `make test` need no Node.
# --check: installs the packages if needed (setup.sh), and fails when the
# rebuilt dist/ differs from the committed one (it is rewritten: commit it).
set -uo pipefail
WEB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$WEB_DIR/.." && pwd)"
CHECK=0; [ "${1:-}" = --check ] && CHECK=1
if [ $CHECK = 1 ]; then
  . "$WEB_DIR/setup.sh"
  web_setup || exit 2
elif ! command -v node >/dev/null || [ ! -x "$WEB_DIR/node_modules/.bin/esbuild" ]; then
  echo "web: web/dist not rebuilt: the console's npm packages are not installed (run web/setup.sh)"
  exit 0
fi
"$WEB_DIR/node_modules/.bin/tsc" -p "$WEB_DIR/tsconfig.json" --pretty false ||
  { echo "web: FAILED - the console does not type-check against gen/ts/schema.ts" >&2; exit 1; }
echo "web: tsc --strict: 0 type errors against gen/ts/schema.ts"
node "$WEB_DIR/build.mjs" || { echo "web: FAILED - esbuild" >&2; exit 1; }
if [ $CHECK = 1 ]; then
  cd "$ROOT" || exit 2
  if ! git diff --quiet -- web/dist || [ -n "$(git ls-files --others --exclude-standard -- web/dist)" ] ||
    [ -n "$(git ls-files --deleted -- web/dist)" ]; then
    git status --short -- web/dist >&2
    echo "web: FAILED - web/dist was stale and has been rebuilt: commit it" >&2
    exit 1
  fi
  echo "web: web/dist is up to date"
fi
