# shellcheck shell=bash
# Sourced by tsclient.sh and browser.sh: starts bin/guildhall on a free
# loopback port with a fresh data directory and a random owner token, and
# stops it again. Not meant to be run on its own.
#
# server_start sets SERVER_URL (http://127.0.0.1:PORT), SERVER_TOKEN,
# SERVER_PID, SERVER_DIR and SERVER_LOG; server_stop ends that process only.
# The server checks its every answer against the contract
# (GUILDHALL_CONTRACT_CHECK); server_contract_check fails the caller when it
# logged one the contract does not declare.

server_start() {
  local guildhall="${GUILDHALL_BIN:-$ROOT/bin/guildhall}" port i
  [ -x "$guildhall" ] || { echo "server: $guildhall is missing (run: make build)" >&2; return 2; }
  SERVER_DIR="$(mktemp -d -t guildhall-contract-XXXXXX)"
  SERVER_LOG="$SERVER_DIR/server.log"
  SERVER_TOKEN="gh_contract_$(openssl rand -hex 24)"
  port="$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
  SERVER_URL="http://127.0.0.1:$port"
  GUILDHALL_ADDR="127.0.0.1:$port" GUILDHALL_DATA_DIR="$SERVER_DIR/data" GUILDHALL_BOOTSTRAP_TOKEN="$SERVER_TOKEN" \
    GUILDHALL_DATABASE_URL="" GUILDHALL_CORS_ORIGINS="" GUILDHALL_LOG_LEVEL=warn GUILDHALL_CONTRACT_CHECK=true \
    "$guildhall" serve >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  for i in $(seq 1 100); do
    if curl -fsS --max-time 1 "$SERVER_URL/healthz" >/dev/null 2>&1; then
      echo "server: bin/guildhall serve on $SERVER_URL (pid $SERVER_PID, data $SERVER_DIR/data)"
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "server: did not become healthy on $SERVER_URL; its log:" >&2
  cat "$SERVER_LOG" >&2
  server_stop
  return 2
}

# server_contract_check prints the answers the server gave that the contract
# does not declare, and fails when there are any.
server_contract_check() {
  local n
  n="$(grep -c '"msg":"contract violation"' "$SERVER_LOG" 2>/dev/null || true)"
  if [ "${n:-0}" -gt 0 ]; then
    echo "server: $n answers the contract does not declare:" >&2
    grep '"msg":"contract violation"' "$SERVER_LOG" | node -e '
      let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
        for (const l of s.trim().split("\n")) console.error(JSON.parse(l).detail);
      });' >&2
    return 1
  fi
  echo "server: every answer matched the contract"
}

server_stop() {
  if [ -n "${SERVER_PID:-}" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
  [ -n "${SERVER_DIR:-}" ] && rm -rf "$SERVER_DIR"
  SERVER_DIR=""
}
