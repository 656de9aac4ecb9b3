// Load client for the Restate peer benchmark: calls the ingress (request/response, so the reply
// comes when the invocation has completed) with C jobs in flight, and prints the same one-line
// summary as langgraph_agent.py / dbos_agent.py: MAESTRO-PEER-START before the timed loop, then a
// summary line and a JSON line (for compare.py). On Linux, console.log to a pipe is synchronous.
//
//   node load.mjs INGRESS_URL [JOBS] [CONCURRENCY]
const ingress = (process.argv[2] ?? "http://127.0.0.1:18080").replace(/\/$/, "");
const jobs = Number(process.argv[3] ?? 200);
const conc = Number(process.argv[4] ?? 4);

async function one() {
  const t = performance.now();
  const r = await fetch(`${ingress}/agent/run`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify("Read README.md and finish."),
    signal: AbortSignal.timeout(30000),
  });
  const out = await r.json().catch(() => null);
  if (!r.ok || out !== "done") {
    throw Object.assign(new Error(`job failed: HTTP ${r.status} ${JSON.stringify(out)}`), { status: r.status });
  }
  return (performance.now() - t) / 1000;
}

// warm up; the first call may race the deployment's registration reaching the ingress (404)
for (let i = 0; ; i++) {
  try { await one(); break; } catch (e) {
    if (e.status !== 404 || i >= 50) throw e;
    await new Promise((res) => setTimeout(res, 200));
  }
}

const lat = [];
let next = 0;
console.log("MAESTRO-PEER-START"); // compare.py starts its CPU window here
const t0 = performance.now();
await Promise.all(Array.from({ length: conc }, async () => {
  while (next < jobs) { next++; lat.push(await one()); }
}));
const dt = (performance.now() - t0) / 1000;
lat.sort((a, b) => a - b);
const p = (q) => 1000 * lat[Math.min(lat.length - 1, Math.floor(q * lat.length))];
const mean = 1000 * lat.reduce((a, b) => a + b, 0) / lat.length;
console.log(`restate: ${jobs} jobs, concurrency ${conc}: ${(jobs / dt).toFixed(1)} jobs/s; ` +
  `latency p50 ${p(0.5).toFixed(1)} ms p99 ${p(0.99).toFixed(1)} ms (mean ${mean.toFixed(1)})`);
const r2 = (x) => Math.round(x * 100) / 100;
console.log(JSON.stringify({ system: "restate", jobs, concurrency: conc, jobs_per_s: r2(jobs / dt),
  p50_ms: r2(p(0.5)), p99_ms: r2(p(0.99)) }));
