"""Peer benchmark: the same agent job MAESTRO runs (LLM call → one tool call → LLM call →
finish), in LangGraph with its Postgres checkpointer (durable after every step), against the
same OpenAI-compatible server. Prints jobs/s and per-job latency percentiles: MAESTRO-PEER-START
before the timed loop, then a summary line and a JSON line (for compare.py).

    python langgraph_agent.py LLM_BASE_URL DATABASE_URL [JOBS] [CONCURRENCY]
"""
import json
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from psycopg_pool import ConnectionPool

base, db = sys.argv[1], sys.argv[2]
jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 200
conc = int(sys.argv[4]) if len(sys.argv) > 4 else 4


@tool
def read_file(path: str) -> str:
    """Read a file from the workspace."""
    return "hello"


llm = ChatOpenAI(base_url=base, api_key="x", model="instant", streaming=True).bind_tools([read_file])


def agent(state: MessagesState):
    return {"messages": [llm.invoke(state["messages"])]}


g = StateGraph(MessagesState)
g.add_node("agent", agent)
g.add_node("tools", ToolNode([read_file]))
g.add_edge(START, "agent")
g.add_conditional_edges("agent", tools_condition)
g.add_edge("tools", "agent")

with ConnectionPool(db, min_size=1, max_size=conc + 2, kwargs={"autocommit": True, "prepare_threshold": 0}) as pool:
    saver = PostgresSaver(pool)
    saver.setup()
    app = g.compile(checkpointer=saver)

    def one(_):
        t = time.perf_counter()
        cfg = {"configurable": {"thread_id": str(uuid.uuid4())}}
        out = app.invoke({"messages": [("user", "Read README.md and finish.")]}, cfg)
        assert out["messages"][-1].content == "done", out["messages"][-1]
        return time.perf_counter() - t

    one(0)  # warm up
    print("MAESTRO-PEER-START", flush=True)  # compare.py starts its CPU window here
    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        lat = sorted(ex.map(one, range(jobs)))
    dt = time.perf_counter() - t0
    p = lambda q: 1000 * lat[min(len(lat) - 1, int(q * len(lat)))]
    print(f"langgraph+postgres: {jobs} jobs, concurrency {conc}: {jobs / dt:.1f} jobs/s; "
          f"latency p50 {p(0.5):.1f} ms p99 {p(0.99):.1f} ms (mean {1000 * statistics.mean(lat):.1f})")
    print(json.dumps({"system": "langgraph", "jobs": jobs, "concurrency": conc, "jobs_per_s": round(jobs / dt, 2),
                      "p50_ms": round(p(0.5), 2), "p99_ms": round(p(0.99), 2)}), flush=True)
