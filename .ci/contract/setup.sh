#!/usr/bin/env bash
# setup.sh [--npm|--browser]
#
# Installs what the contract checks need, idempotently:
#   * the npm tools pinned in package-lock.json (npm ci), when node_modules is
#     missing or was installed from another lock;
#   * with --browser: Debian's chromium (apt-get), when /usr/bin/chromium is
#     absent (Playwright's own browser download cannot work here).
# It also exports the environment that keeps the tools offline and silent
# (no telemetry, no update checks, no browser downloads). The other scripts
# source it: `. setup.sh --npm` or `. setup.sh --browser`.
#
# Env: CONTRACT_NO_INSTALL=1 fails instead of installing.

# Offline / no-telemetry environment: no telemetry, update checks or
# browser downloads from any of the tools.
export REDOCLY_TELEMETRY=off                 # Redocly CLI: OpenTelemetry "command ran" event
export REDOCLY_SUPPRESS_UPDATE_NOTICE=true   # Redocly CLI: npm-registry "latest version" check
export REDOCLY_SUPPRESS_NOTIFICATIONS=true   # Redocly CLI: same switch, newer name
export SCARF_ANALYTICS=false                 # @scarf/scarf install-time analytics
export DO_NOT_TRACK=1                        # generic opt-out honoured by several CLIs
export NO_UPDATE_NOTIFIER=1                  # update-notifier based CLIs
export NPM_CONFIG_UPDATE_NOTIFIER=false
export NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1    # never let Playwright fetch a browser; Debian's chromium is used
export NODE_NO_WARNINGS=1                    # hide node's experimental-feature warnings

CONTRACT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$CONTRACT_DIR/../.." && pwd)"
BIN="$CONTRACT_DIR/node_modules/.bin"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
export CONTRACT_DIR ROOT BIN CHROMIUM

contract_die() { echo "ERROR: $*" >&2; return 2; }

# contract_node_tools: npm ci when node_modules is missing or stale.
contract_node_tools() {
  command -v node >/dev/null && command -v npm >/dev/null ||
    { contract_die "node and npm are needed (apt-get install -y nodejs npm)"; return; }
  local want have stamp="$CONTRACT_DIR/node_modules/.package-lock.sha256"
  want="$(sha256sum "$CONTRACT_DIR/package-lock.json" | cut -d' ' -f1)"
  have="$(cat "$stamp" 2>/dev/null || true)"
  if [ "$want" = "$have" ] && [ -x "$BIN/spectral" ] && [ -x "$BIN/redocly" ] && [ -x "$BIN/tsc" ] &&
    [ -x "$BIN/openapi-typescript" ] && [ -d "$CONTRACT_DIR/node_modules/playwright-core" ]; then
    return 0
  fi
  [ "${CONTRACT_NO_INSTALL:-0}" = 1 ] && { contract_die "npm tools missing or stale in $CONTRACT_DIR/node_modules (run $CONTRACT_DIR/setup.sh)"; return; }
  echo "setup: installing the pinned npm tools (npm ci) in $CONTRACT_DIR ..." >&2
  (cd "$CONTRACT_DIR" && npm ci --no-audit --no-fund --loglevel=error >&2) || { contract_die "npm ci failed"; return; }
  echo "$want" >"$stamp"
}

# contract_chromium: Debian's chromium, for the browser test only.
contract_chromium() {
  [ -x "$CHROMIUM" ] && return 0
  [ "${CONTRACT_NO_INSTALL:-0}" = 1 ] && { contract_die "$CHROMIUM missing (apt-get install -y chromium)"; return; }
  [ "$(id -u)" = 0 ] || { contract_die "$CHROMIUM missing and not root: apt-get install -y chromium"; return; }
  echo "setup: installing Debian's chromium (apt-get) ..." >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } >&2 ||
    { contract_die "apt-get install chromium failed"; return; }
  [ -x "$CHROMIUM" ] || contract_die "chromium installed but $CHROMIUM is missing"
}

contract_setup() {
  contract_node_tools || return
  if [ "${1:-}" = --browser ]; then contract_chromium || return; fi
  return 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  contract_setup "${1:-}" || exit 2
  echo "setup: npm tools ready ($(node -p "Object.entries(require('$CONTRACT_DIR/package.json').dependencies).map(([k, v]) => k + ' ' + v).join(', ')"))"
  [ "${1:-}" = --browser ] && echo "setup: $("$CHROMIUM" --version 2>/dev/null | grep -v 'unexpected operator')"
  exit 0
else
  contract_setup "${1:-}"
fi
