"""Peer benchmark: the same agent job MAESTRO runs (LLM call → one tool call → LLM call →
finish) as a DBOS workflow whose three steps (llm, tool, llm) are @DBOS.step()s, so each step's
output is checkpointed in Postgres before the next step runs (the workflow's input and final
status are recorded too). DBOS runs in-process (a library, no orchestrator server); jobs are
submitted with DBOS.start_workflow from C client threads and awaited with handle.get_result().
The LLM is called with httpx, non-streaming, against the same OpenAI-compatible server.

    python dbos_agent.py LLM_BASE_URL DATABASE_URL [JOBS] [CONCURRENCY]

DATABASE_URL is the DBOS system database, e.g. postgresql://postgres@127.0.0.1:5432/dbosbench
(DBOS creates it and its `dbos` schema if missing). Venv: pip install dbos httpx psycopg[binary].
Prints MAESTRO-PEER-START before the timed loop, then a summary line and a JSON line (for compare.py).
"""
import json
import logging
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from dbos import DBOS, DBOSConfig

base, db = sys.argv[1].rstrip("/"), sys.argv[2]
jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 200
conc = int(sys.argv[4]) if len(sys.argv) > 4 else 4
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "complete", "description": "Finish",
          "parameters": {"type": "object", "properties": {"result": {"type": "string"}}}}}]
http = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=conc + 4,
                                                    max_keepalive_connections=conc + 4))


@DBOS.step()
def call_llm(messages: list) -> dict:
    r = http.post(f"{base}/chat/completions",
                  json={"model": "instant", "messages": messages, "tools": TOOLS})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]


@DBOS.step()
def run_tool(name: str, args: str) -> str:
    return "hello"


@DBOS.workflow()
def agent(instruction: str) -> str:
    messages = [{"role": "user", "content": instruction}]
    for _ in range(8):
        msg = call_llm(messages)
        messages.append(msg)
        calls = msg.get("tool_calls") or []
        if not calls or calls[0]["function"]["name"] == "complete":
            return "done"
        for c in calls:
            out = run_tool(c["function"]["name"], c["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
    return "too many steps"


def main():
    config: DBOSConfig = {"name": "dbos-agent-bench", "system_database_url": db,
                          "sys_db_pool_size": max(20, 2 * conc + 4), "log_level": "WARNING"}
    DBOS(config=config)
    DBOS.launch()
    logging.getLogger("dbos").setLevel(logging.WARNING)
    try:
        def one(_):
            t = time.perf_counter()
            handle = DBOS.start_workflow(agent, "Read README.md and finish.")  # fresh workflow id
            out = handle.get_result()
            assert out == "done", out
            return time.perf_counter() - t

        one(0)  # warm up
        print("MAESTRO-PEER-START", flush=True)  # compare.py starts its CPU window here
        t0 = time.perf_counter()
        with ThreadPoolExecutor(conc) as ex:
            lat = sorted(ex.map(one, range(jobs)))
        dt = time.perf_counter() - t0
        p = lambda q: 1000 * lat[min(len(lat) - 1, int(q * len(lat)))]
        print(f"dbos+postgres: {jobs} jobs, concurrency {conc}: {jobs / dt:.1f} jobs/s; "
              f"latency p50 {p(0.5):.1f} ms p99 {p(0.99):.1f} ms (mean {1000 * statistics.mean(lat):.1f})")
        print(json.dumps({"system": "dbos", "jobs": jobs, "concurrency": conc, "jobs_per_s": round(jobs / dt, 2),
                          "p50_ms": round(p(0.5), 2), "p99_ms": round(p(0.99), 2)}), flush=True)
    finally:
        DBOS.destroy()
        http.close()


if __name__ == "__main__":
    main()
