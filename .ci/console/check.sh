#!/usr/bin/env bash
# check.sh   (make console-check, after web/build.sh --check and make build)
#
# The admin console in a real browser: starts bin/guildhall serve on a free
# loopback port (fresh data directory, random bootstrap token; see
# ../contract/server.sh) and runs walk.mjs in Debian's chromium through
# playwright-core (both installed idempotently by ../contract/setup.sh):
# the owner's walk, the moderator's walk, the live audit log, 360 px, and
# the walks walk.mjs imports (walk-webhooks.mjs, walk-revert.mjs,
# walk-history.mjs).
# Screenshots of every page go to .ci/artifacts/console/ (kept by CI).
# Last line:  console: OK|FAILED - ...
# Exit 0 OK, 1 failure, 2 setup or server failure.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../contract/setup.sh" --browser || exit 2
. "$CONTRACT_DIR/server.sh"
trap 'server_stop' EXIT
SHOTS="$ROOT/.ci/artifacts/console"
rm -rf "$SHOTS" && mkdir -p "$SHOTS"
# The webhooks walk delivers to a receiver of its own on loopback, a
# destination the server refuses unless told otherwise.
export GUILDHALL_WEBHOOK_ALLOW_PRIVATE=true
server_start || exit 2
# Debian's chromium launcher may complain about findmnt output ("unexpected operator"); harmless.
NODE_PATH="$CONTRACT_DIR/node_modules" node "$ROOT/.ci/console/walk.mjs" "$SERVER_URL" "$SERVER_TOKEN" "$SHOTS" 2> >(grep -v 'unexpected operator' >&2)
rc=$?
if [ $rc -ne 0 ]; then echo "--- server log (tail) ---"; tail -n 20 "$SERVER_LOG"; fi
server_contract_check || rc=1
exit $rc
