#!/usr/bin/env bash
# browser.sh   (make browser)
#
# The real-browser test of the API docs: starts bin/guildhall serve on a free
# loopback port (fresh data directory, random GUILDHALL_BOOTSTRAP_TOKEN),
# waits for /healthz, runs browser-test.mjs (Debian's chromium through
# playwright-core: every operation rendered, Authorize, "Try it out" on
# GET /permissions, nothing leaves loopback), and stops the server.
# Screenshots are kept in a temp dir (printed).
# Last line:  browser: OK|FAILED - ...
# Exit 0 OK, 1 failure, 2 setup or server failure.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --browser || exit 2
. "$CONTRACT_DIR/server.sh"
trap 'server_stop' EXIT
SHOTS="$(mktemp -d -t guildhall-browser-XXXXXX)"
server_start || exit 2
# Debian's chromium launcher may complain about findmnt output ("unexpected operator"); harmless.
node "$CONTRACT_DIR/browser-test.mjs" "$SERVER_URL" "$SERVER_TOKEN" "$SHOTS" 2> >(grep -v 'unexpected operator' >&2)
rc=$?
if [ $rc -ne 0 ]; then echo "--- server log (tail) ---"; tail -n 20 "$SERVER_LOG"; fi
server_contract_check || rc=1
exit $rc
