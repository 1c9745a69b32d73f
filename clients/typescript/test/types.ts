// Compiled by `tsc --noEmit` in the test suite: the declarations in src/index.d.ts describe
// the module as a TypeScript user calls it.
import { Client, Fatal, Retry, Snooze, Worker, errors, type Json, type TaskOptions } from "../src/index.js";

const sked = new Client("http://127.0.0.1:7070", { token: "secret" });
const options: TaskOptions = {
  queue: "mail",
  max_attempts: 5,
  run_at: "2030-01-01T00:00:00Z",
  traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
};

export async function use(): Promise<number> {
  const added: Json = await sked.enqueue("email.send", { to: "a@example.com" }, options);
  const many: Json[] = await sked.enqueueMany([{ kind: "k", payload: 1, queue: "q" }]);
  const listed: Json[] = await sked.list({ state: "dead", limit: 10 });
  const flow = await sked.createWorkflow(
    [
      { name: "extract", kind: "extract" },
      { name: "load", kind: "load", after: ["extract"], queue: "etl" },
    ],
    { name: "nightly" },
  );
  const loadId: number = flow.tasks["load"];
  const done: Json = await sked.waitWorkflow(flow.id, { timeoutMs: 60_000 });
  const steps: Json[] = await sked.workflowTasks(flow.id);
  await sked.addSchedule("nightly", "0 3 * * *", { kind: "report" }, { tz: "Europe/Berlin" });
  await sked.addWorkflowSchedule("etl", "@daily", [{ name: "a", kind: "extract" }, { name: "b", kind: "load", after: ["a"] }], { workflowName: "etl", overlap: "skip" });
  await sked.limitQueue("mail", { concurrency: 3, rate: "10/s" });
  const worker = new Worker(sked, { queues: ["mail"], concurrency: 8, prefetch: 8, leaseTtl: 30 })
    .handle("email.send", async (task, { signal, traceparent }) => {
      if (signal.aborted) throw new Retry("cancelled");
      const passOn: string | null = traceparent;
      if (passOn === "") throw new Fatal("no trace");
      if (!task.payload) throw new Fatal("no payload");
      if (task.attempt > 3) throw new Snooze(60);
      return { sent: true };
    });
  worker.stopOnSignals();
  await worker.run({ exitWhenIdle: 1 });
  try {
    await sked.get(1);
  } catch (e) {
    if (e instanceof errors.NotFound) return e.status;
  }
  let paged = 0;
  for await (const t of sked.tasks({ state: "dead" }, { pageSize: 100 })) paged += t.id;
  const why = await sked.held(added.id);
  const until: string | null = why ? why.until : null;
  const retried: number = await sked.retryAll({ state: "dead" }, { dryRun: true });
  const times: string[] = (await sked.cronNext("0 3 * * *", { tz: "UTC", n: 2 })).times;
  const beat = await sked.heartbeat(added.id, 1, { leaseTtl: "30s" });
  const epoch: number = (await sked.waitForWork({ after: 0 })).epoch;
  const extra = paged + retried + times.length + (until ? 1 : 0) + (beat.cancel_requested ? 1 : 0) + epoch;
  return added.id + many.length + listed.length + worker.done.succeeded + extra + loadId + steps.length + (done.done ? 1 : 0);
}
