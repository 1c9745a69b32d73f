// How fast the worker drains no-op tasks from a running server:
//   SKED_URL=http://127.0.0.1:7070 node bench.js 10000 64
// Enqueues n tasks of a kind of its own, then times a Worker with c slots from its start to
// the last ending; prints one JSON line.
import { Client, Worker } from "./src/index.js";

const [n = 10_000, c = 64] = process.argv.slice(2).map(Number);
const sked = new Client(process.env.SKED_URL, { token: process.env.SKED_TOKEN });
const kind = `bench.noop.${Math.random().toString(16).slice(2, 10)}`;
for (let start = 0; start < n; start += 1000) {
  const batch = [];
  for (let i = start; i < Math.min(n, start + 1000); i++) batch.push({ kind, payload: i });
  await sked.enqueueMany(batch);
}
const worker = new Worker(sked, { concurrency: c, log: () => {} }).handle(kind, () => null);
const began = performance.now();
const running = worker.run();
while (worker.done.succeeded < n) await new Promise((r) => setTimeout(r, 2));
const secs = (performance.now() - began) / 1000;
worker.stop();
await running;
console.log(JSON.stringify({ workload: "typescript-worker", n, slots: c, per_s: Math.round(n / secs), secs: +secs.toFixed(3) }));
