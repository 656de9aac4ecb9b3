#!/usr/bin/env bash
# Peer benchmark: the MAESTRO agent job (llm -> tool -> llm, each a durable ctx.run) on a local
# single-node Restate server (npm @restatedev/restate-server, linux-x64 binary) with a Node
# service deployment (TypeScript SDK @restatedev/restate-sdk), driven through the HTTP ingress.
#
#   bash run.sh LLM_BASE_URL [JOBS] [CONCURRENCY]
#
# Installs into $PEER_NPM (default /var/tmp/peer-npm), runs the server with a fresh data dir
# under $PEER_RESTATE (default /var/tmp/peer-restate), binds everything on 127.0.0.1
# (ingress $INGRESS_PORT, admin $ADMIN_PORT, node fabric $FABRIC_PORT, service $SERVICE_PORT),
# registers the deployment (POST /deployments), runs the load (load.mjs: the only output on
# stdout), and stops the service and the server it started.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LLM=${1:?usage: run.sh LLM_BASE_URL [JOBS] [CONCURRENCY]}
JOBS=${2:-200}
CONC=${3:-4}
NPM_DIR=${PEER_NPM:-/var/tmp/peer-npm}
DATA=${PEER_RESTATE:-/var/tmp/peer-restate}
INGRESS_PORT=${INGRESS_PORT:-18080}
ADMIN_PORT=${ADMIN_PORT:-19070}
FABRIC_PORT=${FABRIC_PORT:-15122}
SERVICE_PORT=${SERVICE_PORT:-19080}

for port in "$INGRESS_PORT" "$ADMIN_PORT" "$FABRIC_PORT" "$SERVICE_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port on 127.0.0.1 is already in use; set INGRESS_PORT/ADMIN_PORT/FABRIC_PORT/SERVICE_PORT" >&2
    exit 1
  fi
done

# 1. install (idempotent; quiet once node_modules is there)
mkdir -p "$NPM_DIR"
cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/service.mjs" "$HERE/load.mjs" "$NPM_DIR/"
(cd "$NPM_DIR" && SCARF_ANALYTICS=false npm install --no-audit --no-fund --loglevel=error >/dev/null)
BIN="$NPM_DIR/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
[ -x "$BIN" ] || { echo "restate-server binary missing at $BIN" >&2; exit 1; }

SERVER_PID=""
SERVICE_PID=""
LOAD_PID=""
stop() {
  for pid in $LOAD_PID $SERVICE_PID $SERVER_PID; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $LOAD_PID $SERVICE_PID $SERVER_PID; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}
trap stop EXIT
trap "exit 143" TERM
trap "exit 130" INT

# 2. server: fresh state every run, TCP only, loopback only
rm -rf "$DATA/data"
mkdir -p "$DATA"
RESTATE_LISTEN_MODE=tcp \
RESTATE_BIND_ADDRESS="127.0.0.1:$FABRIC_PORT" \
RESTATE_ADVERTISED_ADDRESS="http://127.0.0.1:$FABRIC_PORT/" \
RESTATE_ADMIN__BIND_ADDRESS="127.0.0.1:$ADMIN_PORT" \
RESTATE_INGRESS__BIND_ADDRESS="127.0.0.1:$INGRESS_PORT" \
RESTATE_INGRESS__ADVERTISED_INGRESS_ENDPOINT="http://127.0.0.1:$INGRESS_PORT/" \
RESTATE_DISABLE_TELEMETRY=true \
RESTATE_LOG_FORMAT=compact \
  "$BIN" --no-logo --base-dir "$DATA/data" --node-name bench >"$DATA/server.log" 2>&1 &
SERVER_PID=$!
for i in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$ADMIN_PORT/health" >/dev/null 2>&1 \
    && curl -sf "http://127.0.0.1:$INGRESS_PORT/restate/health" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "restate-server exited; see $DATA/server.log" >&2; tail -20 "$DATA/server.log" >&2; exit 1; }
  [ "$i" = 300 ] && { echo "restate-server not healthy after 60 s; see $DATA/server.log" >&2; exit 1; }
  sleep 0.2
done

# 3. service deployment (HTTP/2 cleartext, the SDK's bidirectional mode)
RESTATE_LOGGING=${RESTATE_LOGGING:-WARN} LLM_BASE_URL="$LLM" SERVICE_PORT="$SERVICE_PORT" node "$NPM_DIR/service.mjs" >"$DATA/service.log" 2>&1 &
SERVICE_PID=$!
for i in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$SERVICE_PORT") 2>/dev/null && break
  kill -0 "$SERVICE_PID" 2>/dev/null || { echo "service exited; see $DATA/service.log" >&2; cat "$DATA/service.log" >&2; exit 1; }
  sleep 0.1
done

# 4. register the deployment with the admin API
curl -sf -X POST "http://127.0.0.1:$ADMIN_PORT/deployments" -H 'content-type: application/json' \
  -d "{\"uri\": \"http://127.0.0.1:$SERVICE_PORT\"}" >"$DATA/register.json" \
  || { echo "registration failed; see $DATA/server.log" >&2; exit 1; }

# 5. load (warm-up job first, then JOBS at CONCURRENCY); prints the summary line
node "$NPM_DIR/load.mjs" "http://127.0.0.1:$INGRESS_PORT" "$JOBS" "$CONC" &
LOAD_PID=$!
wait "$LOAD_PID"
