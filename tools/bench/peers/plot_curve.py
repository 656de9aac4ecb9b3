#!/usr/bin/env python3
"""Draws `maestro-bench curve`'s CSV as one PNG (matplotlib):

    plot_curve.py CURVE.csv CURVE.png

Left: throughput and p99 against concurrency (and the backlog drain, as a marker at its job
count). Right: CPU per LLM turn against conversation length (flat = the job's cost grows
linearly with its length).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    with open(src) as f:
        rows = list(csv.DictReader(f))
    conc = [r for r in rows if r["series"] == "concurrency"]
    backlog = [r for r in rows if r["series"] == "backlog"]
    conv = [r for r in rows if r["series"] == "conversation"]

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [int(r["x"]) for r in conc]
    left.plot(xs, [float(r["jobs_per_s"]) for r in conc], "o-", color="tab:blue", label="jobs/s")
    for r in backlog:
        left.plot([int(r["x"])], [float(r["jobs_per_s"])], "s", color="tab:blue",
                  label=f"jobs/s, backlog of {r['x']}")
    left.set_xscale("log")
    left.set_xlabel("jobs in flight")
    left.set_ylabel("jobs/s", color="tab:blue")
    left.set_title("Reference job: throughput and p99")
    p99 = left.twinx()
    p99.plot(xs, [float(r["p99_ms"]) for r in conc], "^--", color="tab:red", label="p99")
    for r in backlog:
        p99.plot([int(r["x"])], [float(r["p99_ms"])], "v", color="tab:red", label="p99, backlog")
    p99.set_yscale("log")
    p99.set_ylabel("p99 latency (ms)", color="tab:red")
    handles = left.get_legend_handles_labels()[0] + p99.get_legend_handles_labels()[0]
    left.legend(handles, [h.get_label() for h in handles], loc="upper left", fontsize=8)

    # conversation rows: x = messages, p50_ms = job wall time, cpu_ms_per_job = CPU per job
    ms = [int(r["x"]) for r in conv]
    turns = [max(1, (m - 2) // 2) + 1 for m in ms]
    right.plot(ms, [float(r["cpu_ms_per_job"]) / t for r, t in zip(conv, turns)], "o-",
               label="CPU per LLM turn (ms)")
    right.plot(ms, [float(r["p50_ms"]) / t for r, t in zip(conv, turns)], "s--",
               label="wall time per LLM turn (ms)")
    right.set_xscale("log")
    right.set_xlabel("messages in the conversation")
    right.set_title("Cost per turn against conversation length")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
