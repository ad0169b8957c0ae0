#!/usr/bin/env bash
# setup.sh: installs the console's npm packages, pinned in package-lock.json,
# with `npm ci` when node_modules is missing or was installed from another
# lock (idempotent; a stamp file records the lock it came from). Sourced or
# run by build.sh --install and .ci/console/check.sh.
# Env: CONSOLE_NO_INSTALL=1 fails instead of installing.
set -uo pipefail
WEB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false NO_UPDATE_NOTIFIER=1 DO_NOT_TRACK=1

web_setup() {
  command -v node >/dev/null && command -v npm >/dev/null ||
    { echo "web: node and npm are needed (apt-get install -y nodejs npm)" >&2; return 2; }
  local want have stamp="$WEB_DIR/node_modules/.package-lock.sha256"
  want="$(sha256sum "$WEB_DIR/package-lock.json" | cut -d' ' -f1)"
  have="$(cat "$stamp" 2>/dev/null || true)"
  if [ "$want" = "$have" ] && [ -x "$WEB_DIR/node_modules/.bin/esbuild" ] && [ -x "$WEB_DIR/node_modules/.bin/tsc" ]; then
    return 0
  fi
  [ "${CONSOLE_NO_INSTALL:-0}" = 1 ] && { echo "web: npm packages missing or stale in $WEB_DIR/node_modules (run web/setup.sh)" >&2; return 2; }
  echo "web: installing the console's pinned npm packages (npm ci) ..." >&2
  (cd "$WEB_DIR" && npm ci --no-audit --no-fund --loglevel=error >&2) || { echo "web: npm ci failed" >&2; return 2; }
  echo "$want" >"$stamp"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  web_setup || exit $?
  echo "web: npm packages ready ($(node -p "const p=require('$WEB_DIR/package.json'); Object.entries({...p.dependencies, ...p.devDependencies}).map(([k, v]) => k + ' ' + v).join(', ')"))"
fi
