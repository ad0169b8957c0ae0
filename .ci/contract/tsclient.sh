#!/usr/bin/env bash
# tsclient.sh [--no-run]   (make tsclient)
#
# Proves that the contract yields a usable typed TypeScript SDK:
#   1. gen-ts.sh: openapi-typescript generates gen/ts/schema.ts (committed);
#      a stale schema.ts is regenerated and fails the run (commit it);
#   2. check-client.mjs: client.ts has one step per operationId of the
#      contract, each calling its own operation;
#   3. tsc --strict (noUncheckedIndexedAccess, exactOptionalPropertyTypes, ...)
#      type-checks client.ts, a typed openapi-fetch program, against schema.ts;
#   4. unless --no-run: runs client.ts against bin/guildhall serve on a free
#      loopback port (fresh data directory), asserting every answer, while
#      the server checks each answer against the contract.
# Last line:  tsclient: OK|FAILED - N operations, E type errors, R run
# Exit 0 OK, 1 failure, 2 a tool or the server could not run.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --npm || exit 2
. "$CONTRACT_DIR/server.sh"
RUN=1; [ "${1:-}" = --no-run ] && RUN=0
T="$(mktemp -d -t tsclient-XXXXXX)"
trap 'server_stop; rm -rf "$T"' EXIT
cd "$ROOT" || exit 2
echo "tools: openapi-typescript $("$BIN/openapi-typescript" --version 2>/dev/null | tr -d v), openapi-fetch $(node -p "require('$CONTRACT_DIR/node_modules/openapi-fetch/package.json').version"), typescript $("$BIN/tsc" --version | awk '{print $2}')"

echo
echo "=== openapi-typescript -> gen/ts/schema.ts ==="
"$CONTRACT_DIR/gen-ts.sh" --check; gen_rc=$?
if [ $gen_rc -ne 0 ]; then echo; echo "tsclient: FAILED - gen/ts/schema.ts (gen-ts.sh exit $gen_rc)"; exit 1; fi

echo
echo "=== client.ts covers the contract ==="
node "$CONTRACT_DIR/check-client.mjs" openapi/openapi.yaml "$CONTRACT_DIR/client.ts"; cov_rc=$?
OPS="$(node -e '
  const y = require(process.argv[1]).load(require("fs").readFileSync("openapi/openapi.yaml", "utf8"));
  let n = 0; for (const item of Object.values(y.paths)) for (const m of ["get","put","post","delete","options","head","patch","trace"]) if (item[m]) n++;
  console.log(n);' "$CONTRACT_DIR/node_modules/js-yaml")"

echo
echo "=== tsc --strict --noEmit (.ci/contract/tsconfig.json) ==="
"$BIN/tsc" -p "$CONTRACT_DIR/tsconfig.json" --pretty false >"$T/tsc.out" 2>&1; tsc_rc=$?
cat "$T/tsc.out"
E=$(grep -c 'error TS' "$T/tsc.out" || true)
[ $tsc_rc -eq 0 ] && echo "tsc: 0 type errors"

RAN="not run"
run_rc=0
if [ $RUN = 1 ] && [ $tsc_rc -eq 0 ] && [ $cov_rc -eq 0 ]; then
  echo
  echo "=== client.ts against a live server ==="
  # Emit JavaScript next to a node_modules link so that node resolves openapi-fetch.
  "$BIN/tsc" -p "$CONTRACT_DIR/tsconfig.json" --noEmit false --outDir "$T/out" >"$T/emit.out" 2>&1 ||
    { cat "$T/emit.out"; echo "tsclient: FAILED - could not emit client.js"; exit 1; }
  ln -s "$CONTRACT_DIR/node_modules" "$T/out/node_modules"
  echo '{"type": "module"}' >"$T/out/package.json"
  server_start || { echo "tsclient: FAILED - the server did not start"; exit 2; }
  node --input-type=module -e '
    const { run } = await import(process.argv[1]);
    try {
      for (const line of await run(process.argv[2], process.argv[3])) console.log(line);
    } catch (e) {
      console.log(`FAILED ${e.message}`);
      process.exitCode = 1;
    }' "$T/out/.ci/contract/client.js" "$SERVER_URL/api" "$SERVER_TOKEN" | tee "$T/run.out"
  run_rc=${PIPESTATUS[0]}
  server_contract_check || run_rc=1
  if [ $run_rc -ne 0 ]; then
    echo "--- server log (tail) ---"; tail -n 20 "$SERVER_LOG"
    RAN="run FAILED"
  else
    RAN="$(tail -n 1 "$T/run.out") against a live server"
  fi
  server_stop
elif [ $RUN = 0 ]; then
  RAN="not run (--no-run)"
fi

echo
if [ $tsc_rc -eq 0 ] && [ $cov_rc -eq 0 ] && [ $run_rc -eq 0 ]; then
  echo "tsclient: OK - $OPS operations, 0 type errors, $RAN"; exit 0
fi
echo "tsclient: FAILED - $OPS operations, $E type errors, coverage $([ $cov_rc -eq 0 ] && echo ok || echo FAILED), $RAN"
exit 1
