# shellcheck shell=bash
# Sourced by tsclient.sh and browser.sh: starts bin/guildhall on a free
# loopback port with a fresh data directory and a random owner token, and
# stops it again. Not meant to be run on its own.
#
# server_start sets SERVER_URL (http://127.0.0.1:PORT), SERVER_TOKEN,
# SERVER_PID, SERVER_DIR and SERVER_LOG; server_stop ends that process only.

server_start() {
  local guildhall="${GUILDHALL_BIN:-$ROOT/bin/guildhall}" port i
  [ -x "$guildhall" ] || { echo "server: $guildhall is missing (run: make build)" >&2; return 2; }
  SERVER_DIR="$(mktemp -d -t guildhall-contract-XXXXXX)"
  SERVER_LOG="$SERVER_DIR/server.log"
  SERVER_TOKEN="gh_contract_$(openssl rand -hex 24)"
  port="$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
  SERVER_URL="http://127.0.0.1:$port"
  GUILDHALL_ADDR="127.0.0.1:$port" GUILDHALL_DATA_DIR="$SERVER_DIR/data" GUILDHALL_BOOTSTRAP_TOKEN="$SERVER_TOKEN" \
    GUILDHALL_DATABASE_URL="" GUILDHALL_CORS_ORIGINS="" GUILDHALL_LOG_LEVEL=warn \
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
