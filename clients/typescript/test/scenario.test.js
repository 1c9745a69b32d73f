// The client and the worker against a real sked server (its URL in SKED_URL; the Rust test
// `typescript_client` starts one), the same scenario as the Python client's.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, Fatal, Retry, Worker, errors } from "../src/index.js";

const sked = new Client(process.env.SKED_URL, { token: process.env.SKED_TOKEN });
const LEASE = 1.5; // seconds

test("tasks, schedules, queues and errors", async () => {
  const added = await sked.enqueue("ts.later", { n: 1 }, { queue: "ts", run_at: "2099-01-01T00:00:00Z" });
  assert.equal(added.state, "scheduled");
  const task = await sked.get(added.id);
  assert.deepEqual([task.kind, task.payload, task.queue], ["ts.later", { n: 1 }, "ts"]);
  const many = await sked.enqueueMany([1, 2, 3].map((n) => ({ kind: "ts.later", payload: n, run_at: "2099-01-01T00:00:00Z" })));
  assert.equal(many.length, 3);
  assert.equal((await sked.cancel(added.id)).state, "cancelled");
  assert.ok((await sked.list({ state: "cancelled" })).some((t) => t.id === added.id));
  await assert.rejects(sked.get(999_999_999), (e) => e instanceof errors.NotFound && e.status === 404 && e.code === "not_found");
  await assert.rejects(sked.enqueue(""), errors.InvalidInput);
  await sked.addSchedule("ts-hourly", "every 1h", { kind: "ts.later" }, { tz: "UTC" });
  assert.equal((await sked.schedule("ts-hourly")).name, "ts-hourly");
  assert.ok((await sked.schedules()).some((s) => s.name === "ts-hourly"));
  assert.equal((await sked.pauseSchedule("ts-hourly")).paused, true);
  assert.equal((await sked.resumeSchedule("ts-hourly")).paused, false);
  await sked.removeSchedule("ts-hourly");
  await assert.rejects(sked.schedule("ts-hourly"), errors.NotFound);
  // A calendar of dates to skip, bounds, and a calendar kept while a schedule skips it.
  const cal = await sked.putCalendar("ts-holidays", ["2099-12-25", "2099-01-01"], { tz: "UTC" });
  assert.deepEqual(cal.dates, ["2099-01-01", "2099-12-25"]);
  const bounded = await sked.addSchedule("ts-bounded", "every 1h", { kind: "ts.later" }, { skip_calendars: ["ts-holidays"], max_runs: 3, end_at: "2099-06-01T00:00:00Z" });
  assert.deepEqual([bounded.max_runs, bounded.runs, bounded.skip_calendars], [3, 0, ["ts-holidays"]]);
  await assert.rejects(sked.removeCalendar("ts-holidays"), errors.Conflict);
  await assert.rejects(sked.addSchedule("ts-bad", "every 1h", { kind: "ts.later" }, { skip_calendars: ["ts-none"] }), errors.InvalidInput);
  await sked.removeSchedule("ts-bounded");
  assert.ok((await sked.calendars()).some((c) => c.name === "ts-holidays"));
  await sked.removeCalendar("ts-holidays");
  await assert.rejects(sked.calendar("ts-holidays"), errors.NotFound);
  const set = [0, 1, 2].map((i) => ({ name: `ts-${i}`, spec: "every 1h", task: { kind: "ts.later" } }));
  assert.deepEqual((await sked.applySchedules(set, { group: "ts" })).created, ["ts-0", "ts-1", "ts-2"]);
  assert.deepEqual((await sked.applySchedules(set.slice(0, 1), { group: "ts", prune: true, dryRun: true })).removed, ["ts-1", "ts-2"]);
  assert.deepEqual((await sked.applySchedules(set.slice(0, 1), { group: "ts", prune: true })).removed, ["ts-1", "ts-2"]);
  await assert.rejects(sked.applySchedules([{ name: "bad", spec: "61 * * * *", task: { kind: "k" } }]), errors.InvalidInput);
  await sked.removeSchedule("ts-0");
  // Lists are read a page at a time: more schedules than one page holds, all listed.
  const bulk = Array.from({ length: 1050 }, (_, i) => ({ name: `ts-bulk-${String(i).padStart(4, "0")}`, spec: "every 1h", task: { kind: "ts.later" } }));
  await sked.applySchedules(bulk, { group: "ts-bulk" });
  const listed = (await sked.schedules()).map((s) => s.name).filter((n) => n.startsWith("ts-bulk-"));
  assert.deepEqual(listed, bulk.map((s) => s.name));
  assert.equal((await sked.applySchedules([], { group: "ts-bulk", prune: true })).removed.length, 1050);
  await assert.rejects(sked.pauseQueue("ts-new"), errors.NotFound);
  assert.equal((await sked.limitQueue("ts-new", { concurrency: 3 }, { create: true })).concurrency_limit, 3);
  const ordered = await sked.limitQueue("ts-new", { per_key: 1, key_order: "strict" });
  assert.deepEqual([ordered.per_key, ordered.key_order], [1, "strict"]);
  await assert.rejects(sked.limitQueue("ts-new", { per_key: 2 }), errors.InvalidInput);
  assert.equal((await sked.limitQueue("ts-new", { key_order: "priority" })).key_order, undefined);
  assert.equal((await sked.pauseQueue("ts-new")).paused, true);
  assert.equal((await sked.resumeQueue("ts-new")).paused, false);
  assert.deepEqual((await sked.setQueueRetention("ts-new", { succeeded: "1h", dead: "30d" })).retention, { succeeded: "1h", dead: "30d" });
  assert.equal((await sked.setQueueBackoff("ts-new", "fixed:30s")).backoff, "fixed:30s");
  assert.equal((await sked.setQueueBackoff("ts-new", null)).backoff, undefined);
  await assert.rejects(sked.setQueueBackoff("ts-new", "fixed:0s"), errors.InvalidInput);
  await sked.removeQueue("ts-new");
  assert.ok(!(await sked.queues()).some((queue) => queue.name === "ts-new"));
});

test("a task not started by its deadline expires", async () => {
  await sked.pauseQueue("ts-late", { create: true });
  const added = await sked.enqueue("ts.late", null, { queue: "ts-late", ttl: "1s" });
  assert.ok((await sked.get(added.id)).expires_at);
  assert.equal((await sked.wait(added.id, { timeoutMs: 15000 })).state, "expired");
  await assert.rejects(sked.enqueue("ts.late", null, { expires_at: "2000-01-01T00:00:00Z" }), errors.InvalidInput);
});

test("the rest of the API", async () => {
  // Every page of a list; why a task waits; bulk changes with a dry run first.
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push((await sked.enqueue("ts.rest", { i }, { queue: "ts-rest" })).id);
  const all = [];
  for await (const t of sked.tasks({ queue: "ts-rest" }, { pageSize: 2 })) all.push(t.id);
  assert.deepEqual(all, [...ids].reverse());
  assert.equal(await sked.held(ids[0]), null);
  assert.equal(await sked.cancelAll({ state: "available", queue: "ts-rest" }, { dryRun: true }), 5);
  assert.equal(await sked.cancelAll({ state: "available", queue: "ts-rest" }, { batch: 2 }), 5);
  assert.equal(await sked.retryAll({ state: "cancelled", queue: "ts-rest" }, { batch: 2 }), 5);
  const keyed = (await sked.enqueue("ts.rest", null, { queue: "ts-rest", key: "tenant-9" })).id;
  assert.deepEqual((await sked.list({ queue: "ts-rest", key: "tenant-9" })).map((t) => t.id), [keyed]);
  assert.deepEqual(await sked.list({ queue: "ts-rest", until: "2000-01-01T00:00:00Z" }), []);
  assert.equal(await sked.cancelAll({ state: "available", queue: "ts-rest", key: "tenant-9" }), 1);
  assert.equal(await sked.deleteAll({ state: "cancelled", queue: "ts-rest" }, { dryRun: true }), 1);
  assert.equal(await sked.deleteAll({ state: "cancelled", queue: "ts-rest" }), 1);
  await assert.rejects(sked.get(keyed), errors.NotFound);
  const gone = (await sked.cancel((await sked.enqueue("ts.rest", null, { queue: "ts-rest" })).id)).id;
  await sked.delete(gone);
  await assert.rejects(sked.get(gone), errors.NotFound);
  // Schedules: replaced whole, backfilled, their ledger; declared by a group of code.
  const put = await sked.putSchedule("ts-put", { spec: "0 3 * * *", tz: "UTC", task: { kind: "ts.later" } });
  assert.deepEqual([put.name, put.spec], ["ts-put", "0 3 * * *"]);
  const filled = await sked.backfillSchedule("ts-put", "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z");
  assert.equal(filled.enqueued.length, 2);
  assert.ok((await sked.occurrences("ts-put", { limit: 10 })).length >= 2);
  const declared = await sked.declareSchedules("ts-code", [{ name: "ts-declared", spec: "every 1h", task: { kind: "k" } }]);
  assert.deepEqual(declared.created, ["ts-declared"]);
  assert.deepEqual((await sked.declareSchedules("ts-code", [])).removed, ["ts-declared"]);
  await sked.removeSchedule("ts-put");
  // Queues, workers, the cluster, activity, cron.
  assert.equal((await sked.queue("ts-rest")).name, "ts-rest");
  assert.deepEqual(await sked.workerBeat("ts-beat", { queues: ["ts-proto"], concurrency: 2 }), { ok: true });
  assert.ok((await sked.workers()).some((w) => w.id === "ts-beat"));
  assert.ok("backend" in (await sked.cluster()));
  assert.ok("buckets" in (await sked.activity({ minutes: 5 })));
  assert.equal((await sked.kinds({ minutes: 5 })).minutes, 5);
  assert.equal((await sked.cronNext("0 3 * * *", { tz: "Europe/Berlin", n: 2 })).times.length, 2);
  // The worker protocol one task at a time.
  const claim = async () => (await sked.call("POST", "/v1/claim", { worker: "ts-beat", queues: ["ts-proto"], max: 1 })).tasks[0];
  const first = (await sked.enqueue("ts.proto", null, { queue: "ts-proto" })).id;
  let held = await claim();
  assert.equal((await sked.heartbeat(first, held.attempt)).cancel_requested, false);
  assert.equal((await sked.release(first, held.attempt)).state, "available");
  held = await claim();
  assert.equal((await sked.snooze(first, held.attempt, "1h")).state, "scheduled");
  const second = (await sked.enqueue("ts.proto", null, { queue: "ts-proto" })).id;
  assert.deepEqual((await sked.complete(second, (await claim()).attempt, { ok: 1 })).result, { ok: 1 });
  const third = (await sked.enqueue("ts.proto", null, { queue: "ts-proto", max_attempts: 1 })).id;
  assert.equal((await sked.fail(third, (await claim()).attempt, "boom")).state, "dead");
  const fourth = (await sked.enqueue("ts.proto", null, { queue: "ts-proto" })).id;
  held = await claim();
  await sked.cancel(fourth);
  assert.equal((await sked.acknowledgeCancel(fourth, held.attempt)).state, "cancelled");
  assert.ok("epoch" in (await sked.waitForWork({ after: 0, wait: "10ms" })));
  // A task that waits for another; waiting for a task to end.
  const parent = (await sked.enqueue("ts.proto", null, { queue: "ts-proto" })).id;
  const child = await sked.enqueue("ts.proto", null, { queue: "ts-proto", depends_on: [parent] });
  assert.equal(child.state, "waiting");
  assert.deepEqual((await sked.get(child.id)).waiting_for, [parent]);
  assert.equal((await sked.wait(child.id, { timeoutMs: 50 })).state, "waiting");
  assert.equal((await sked.complete(parent, (await claim()).attempt)).state, "succeeded");
  assert.equal((await sked.complete(child.id, (await claim()).attempt)).state, "succeeded");
  assert.equal((await sked.wait(child.id, { timeoutMs: 5000 })).state, "succeeded");
  // A workflow: made whole, run in its order, waited for; a bad one makes nothing.
  const made = await sked.createWorkflow(
    [
      { name: "b", kind: "ts.proto", queue: "ts-proto", after: ["a"] },
      { name: "a", kind: "ts.proto", queue: "ts-proto" },
    ],
    { name: "ts-flow" },
  );
  assert.ok(made.tasks.a < made.tasks.b);
  const flow = await sked.workflow(made.id);
  assert.deepEqual([flow.name, flow.state, flow.counts], ["ts-flow", "active", { available: 1, waiting: 1 }]);
  assert.deepEqual(
    (await sked.workflowTasks(made.id)).map((t) => [t.name, t.after]),
    [["a", []], ["b", ["a"]]],
  );
  assert.equal((await sked.workflows({ limit: 1 }))[0].id, made.id);
  assert.equal((await sked.list({ workflow: made.id })).length, 2);
  assert.equal((await sked.waitWorkflow(made.id, { timeoutMs: 50 })).done, false);
  for (let i = 0; i < 2; i++) {
    const held = await claim();
    await sked.complete(held.id, held.attempt);
  }
  assert.equal((await sked.waitWorkflow(made.id, { timeoutMs: 5000 })).state, "succeeded");
  await assert.rejects(sked.createWorkflow([{ name: "x", kind: "k", after: ["x"] }]), /cycle/);
  const later = await sked.createWorkflow([{ name: "x", kind: "k", run_at: "2099-01-01T00:00:00Z" }]);
  assert.equal((await sked.cancelWorkflow(later.id)).state, "cancelled");
  // A schedule that starts a workflow at each occurrence.
  const etl = [{ name: "extract", kind: "ts.etl" }, { name: "load", kind: "ts.etl", after: ["extract"] }];
  const scheduled = await sked.addWorkflowSchedule("ts-etl", "@daily", etl, { workflowName: "etl", overlap: "skip" });
  assert.deepEqual([scheduled.workflow.name, scheduled.workflow.tasks.length, scheduled.task], ["etl", 2, undefined]);
  await assert.rejects(sked.addWorkflowSchedule("ts-bad", "@daily", [{ name: "x", kind: "k", depends_on: [1] }]), /task ids/);
  await sked.removeSchedule("ts-etl");
  // A batch: its tasks join it; its callback is enqueued once, after it is closed and they ended.
  const opened = await sked.openBatch({ name: "ts-batch", on_complete: { kind: "ts.done", payload: { to: "ops" }, queue: "ts-proto" } });
  for (let i = 0; i < 2; i++) await sked.enqueue("ts.proto", null, { queue: "ts-proto", batch: opened.id });
  for (let i = 0; i < 2; i++) {
    const held = await claim();
    await sked.complete(held.id, held.attempt);
  }
  assert.equal((await sked.batch(opened.id)).state, "open");
  assert.equal((await sked.closeBatch(opened.id)).state, "done");
  const done = await sked.waitBatch(opened.id, { timeoutMs: 5000 });
  assert.deepEqual((await sked.get(done.on_complete_task)).payload, { to: "ops", batch: { id: opened.id, counts: { succeeded: 2 } } });
  assert.equal((await sked.batches({ limit: 1 }))[0].id, opened.id);
  await assert.rejects(sked.enqueue("ts.proto", null, { batch: 987654 }), errors.InvalidInput);
});

test("a worker completes, fails and heartbeats", async () => {
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const ok = (await sked.enqueue("ts.ok", { a: 2, b: 3 }, { queue: "tsw", traceparent })).id;
  const flaky = (await sked.enqueue("ts.flaky", null, { queue: "tsw", max_attempts: 3 })).id;
  const fatal = (await sked.enqueue("ts.fatal", null, { queue: "tsw", max_attempts: 3 })).id;
  const slow = (await sked.enqueue("ts.slow", null, { queue: "tsw" })).id;
  const broken = (await sked.enqueue("ts.broken", null, { queue: "tsw", max_attempts: 2 })).id;
  let seen;
  let seenTrace;
  const logged = [];
  const worker = new Worker(sked, { queues: ["tsw"], concurrency: 4, leaseTtl: LEASE, log: (m) => logged.push(m) })
    .handle("ts.broken", function brokenHandler(t) {
      return t.payload.missing.field;
    })
    .handle("ts.ok", (t, ctx) => {
      seenTrace = ctx.traceparent;
      return { sum: t.payload.a + t.payload.b };
    })
    .handle("ts.flaky", () => {
      throw new Retry("not yet");
    })
    .handle("ts.fatal", () => {
      throw new Fatal("never");
    })
    .handle("ts.slow", async (t, { progress }) => {
      progress({ percent: 30, step: "sleeping" });
      await new Promise((r) => setTimeout(r, LEASE * 2500));
      seen = await sked.get(t.id); // still held, its lease extended by heartbeats
      return "slow done";
    });
  await worker.run({ exitWhenIdle: 1 });
  const okTask = await sked.get(ok);
  assert.deepEqual([okTask.state, okTask.result], ["succeeded", { sum: 5 }]);
  // Without OpenTelemetry installed the handler gets the task's own trace context.
  assert.deepEqual([seenTrace, okTask.traceparent], [traceparent, traceparent]);
  const flakyTask = await sked.get(flaky);
  assert.equal(flakyTask.state, "retrying");
  assert.match(JSON.stringify(flakyTask), /not yet/);
  // A handler that throws: its stack is kept with the attempt and logged.
  const brokenTask = await sked.get(broken);
  assert.match(brokenTask.last_error, /^TypeError: Cannot read properties of null/);
  assert.match(brokenTask.last_error, /at brokenHandler/);
  assert.ok(logged.some((m) => m.includes(`task ${broken} (ts.broken) attempt 1 failed: TypeError`) && m.includes("brokenHandler")), logged.join("\n"));
  const fatalTask = await sked.get(fatal);
  assert.deepEqual([fatalTask.state, fatalTask.attempt], ["dead", 1]);
  const slowTask = await sked.get(slow);
  assert.deepEqual([slowTask.state, slowTask.attempt], ["succeeded", 1]);
  assert.equal(seen.state, "running");
  assert.deepEqual(seen.progress, { percent: 30, step: "sleeping" }, "a heartbeat carried it");
  const extended = (Date.parse(seen.lease_expires_at) - Date.parse(seen.started_at)) / 1000;
  assert.ok(extended > LEASE * 2, `lease extended by ${extended}s`);
});

test("a stop gives back what was claimed ahead and not started", async () => {
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await sked.enqueue("ts.ahead", i, { queue: "tsahead" })).id);
  let started = 0;
  const worker = new Worker(sked, { queues: ["tsahead"], concurrency: 1, prefetch: 2, log: () => {} });
  worker.handle("ts.ahead", async () => {
    started += 1;
    worker.stop();
    await new Promise((r) => setTimeout(r, 300));
    return null;
  });
  await worker.run();
  assert.equal(started, 1);
  const tasks = await Promise.all(ids.map((id) => sked.get(id)));
  const states = tasks.map((t) => t.state).sort();
  assert.deepEqual(states, ["available", "available", "succeeded"]);
});
