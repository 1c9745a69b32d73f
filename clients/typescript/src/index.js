// A client and a worker for sked over its HTTP API: Node 18+, `fetch`, no dependencies.

import { hostname } from "node:os";

/** An error answer of the API (or a server that could not be reached: status 0). */
export class SkedError extends Error {
  constructor(message, status = 0, code = "unknown") {
    super(message);
    this.name = "SkedError";
    this.status = status;
    this.code = code;
  }
}

const CODES = [
  "invalid_request", "invalid_json", "invalid_input", "not_found", "conflict", "stale_lease",
  "unauthorized", "forbidden", "payload_too_large", "unsupported_media_type", "unavailable",
  "internal",
];

/** One class per error code of the API: NotFound, InvalidInput, Conflict, … */
export const errors = Object.fromEntries(
  CODES.map((code) => {
    const name = code.split("_").map((w) => w[0].toUpperCase() + w.slice(1)).join("");
    const cls = {
      [name]: class extends SkedError {
        constructor(message, status) {
          super(message, status, code);
          this.name = name;
        }
      },
    }[name];
    return [name, cls];
  }),
);
const BY_CODE = Object.fromEntries(Object.values(errors).map((cls) => [new cls("").code, cls]));

const q = (s) => encodeURIComponent(String(s));

/** The most of an error (a stack) a worker sends to be kept with the attempt. */
const ERROR_LIMIT = 8192;

/** `text` when it fits, else its head and its tail with a mark between. */
function bounded(text, limit = ERROR_LIMIT) {
  if (text.length <= limit) return text;
  const head = Math.floor(limit / 8);
  const mark = `\n… ${text.length - limit} characters left out …\n`;
  return text.slice(0, head) + mark + text.slice(text.length - (limit - head - mark.length));
}
const creating = (create) => (create ? "?create=true" : "");
const dropUndefined = (o) =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null));

// OpenTelemetry's API when the application has it installed (and an SDK registered): enqueues
// then continue the active span's trace and each handler runs in a span of its task's trace.
// The package depends on nothing; without it, traceparent values are passed on as they are.
const otel = await import("@opentelemetry/api").catch(() => null);

/** The trace headers of the active span (none without OpenTelemetry). */
function traceHeaders() {
  const carrier = {};
  otel?.propagation.inject(otel.context.active(), carrier);
  return carrier.traceparent ? { traceparent: carrier.traceparent } : {};
}

/** Runs `f(traceparent)` in the span of one run of `task` (a child of its trace context) when
 * OpenTelemetry is there; `end(outcome, error)` closes the span. */
function inRunSpan(task, worker, f) {
  if (!otel) return f(task.traceparent ?? null, () => {});
  const carrier = task.traceparent ? { traceparent: task.traceparent } : {};
  const parent = otel.propagation.extract(otel.ROOT_CONTEXT, carrier);
  const attributes = {
    "sked.task.id": task.id,
    "sked.queue": task.queue,
    "sked.kind": task.kind,
    "sked.attempt": task.attempt,
    "sked.worker": worker,
  };
  const options = { kind: otel.SpanKind.CONSUMER, attributes };
  return otel.trace.getTracer("sked-client").startActiveSpan(`sked.run ${task.kind}`, options, parent, (span) => {
    const sc = span.spanContext();
    const own = otel.trace.isSpanContextValid(sc)
      ? `00-${sc.traceId}-${sc.spanId}-${sc.traceFlags.toString(16).padStart(2, "0")}`
      : (task.traceparent ?? null);
    return f(own, (outcome, error) => {
      span.setAttribute("sked.outcome", outcome);
      if (error !== undefined) span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error });
      else if (outcome === "succeeded") span.setStatus({ code: otel.SpanStatusCode.OK });
      span.end();
    });
  });
}

/** The API of one sked server. */
export class Client {
  constructor(server = "http://127.0.0.1:7070", { token, timeoutMs = 30_000 } = {}) {
    this.base = server.replace(/\/+$/, "");
    this.token = token;
    this.timeoutMs = timeoutMs;
  }

  /** One request; the answer's JSON (null when it has no body). */
  async call(method, path, body, { timeoutMs, headers: extra } = {}) {
    const headers = { ...extra };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    let res;
    try {
      res = await fetch(this.base + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs ?? this.timeoutMs),
      });
    } catch (e) {
      throw new SkedError(`cannot reach ${this.base}: ${e.message}`);
    }
    const text = await res.text();
    if (!res.ok) {
      let err;
      try {
        err = JSON.parse(text).error;
      } catch {
        throw new SkedError(`HTTP ${res.status}: ${text.slice(0, 200)}`, res.status);
      }
      const cls = BY_CODE[err.code];
      throw cls ? new cls(err.message, res.status) : new SkedError(err.message, res.status, err.code);
    }
    return text ? JSON.parse(text) : null;
  }

  // -- tasks ---------------------------------------------------------------------------------
  enqueue(kind, payload, options = {}) {
    const body = dropUndefined({ kind, payload, ...options });
    return this.call("POST", "/v1/tasks", body, { headers: traceHeaders() });
  }
  async enqueueMany(tasks) {
    return (await this.call("POST", "/v1/tasks/batch", { tasks }, { headers: traceHeaders() })).tasks;
  }
  get(id) {
    return this.call("GET", `/v1/tasks/${Number(id)}`);
  }
  /** The task once it has ended (succeeded, dead, cancelled or expired), or as it is after `timeoutMs`:
   * long-polls of at most 30 s each. */
  wait(id, { timeoutMs = 3_600_000 } = {}) {
    return this.#longPoll(`/v1/tasks/${Number(id)}`, (t) => ["succeeded", "dead", "cancelled", "expired"].includes(t.state), timeoutMs);
  }
  /** `GET path?wait=…` until `done(answer)` or `timeoutMs`: long-polls of at most 30 s each. */
  async #longPoll(path, done, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const left = Math.max(0, deadline - Date.now());
      const step = Math.min(left, 30_000);
      const answer = await this.call("GET", `${path}?wait=${step}ms`, undefined, { timeoutMs: this.timeoutMs + step });
      if (done(answer) || left <= 30_000) return answer;
    }
  }
  // -- batches -------------------------------------------------------------------------------
  /** Opens a batch ({name, on_success, on_complete}); tasks join it with `batch` in their
   * options. Its callbacks are enqueued once, when it is closed and its tasks have all
   * succeeded (`on_success`) or ended (`on_complete`), the batch's counts in their payloads. */
  openBatch(batch = {}) {
    return this.call("POST", "/v1/batches", dropUndefined(batch), { headers: traceHeaders() });
  }
  /** Closes a batch: its callbacks run once its tasks have ended (at once when they have). */
  closeBatch(id) {
    return this.call("POST", `/v1/batches/${Number(id)}/close`, {});
  }
  /** A batch: state (open, closed, done), total, counts by state, its callbacks' tasks. */
  batch(id) {
    return this.call("GET", `/v1/batches/${Number(id)}`);
  }
  /** The batch once it is done, or as it is after `timeoutMs`: long-polls of at most 30 s. */
  waitBatch(id, { timeoutMs = 3_600_000 } = {}) {
    return this.#longPoll(`/v1/batches/${Number(id)}`, (b) => b.state === "done", timeoutMs);
  }
  /** A page of batches, newest first ({limit, before}), each with its counts. */
  async batches(filters = {}) {
    const query = new URLSearchParams(dropUndefined(filters)).toString();
    return (await this.call("GET", `/v1/batches${query ? `?${query}` : ""}`)).batches;
  }

  // -- workflows -----------------------------------------------------------------------------
  /** Makes a workflow's tasks (each a task with its `name` and the names it waits for in
   * `after`) in one transaction, all or none: {id, tasks: {name: task id}}. */
  createWorkflow(tasks, { name } = {}) {
    return this.call("POST", "/v1/workflows", dropUndefined({ name, tasks }), { headers: traceHeaders() });
  }
  /** A workflow: state (active, succeeded, failed, cancelled), done, total, counts by state. */
  workflow(id) {
    return this.call("GET", `/v1/workflows/${Number(id)}`);
  }
  /** The workflow once every task has ended, or as it is after `timeoutMs`: long-polls of at
   * most 30 s each. */
  waitWorkflow(id, { timeoutMs = 3_600_000 } = {}) {
    return this.#longPoll(`/v1/workflows/${Number(id)}`, (w) => w.done, timeoutMs);
  }
  /** A page of workflows, newest first ({limit, before}), each with its counts. */
  async workflows(filters = {}) {
    const query = new URLSearchParams(dropUndefined(filters)).toString();
    return (await this.call("GET", `/v1/workflows${query ? `?${query}` : ""}`)).workflows;
  }
  /** Every task of a workflow in the order they were made: {id, name, kind, state, after}. */
  async workflowTasks(id) {
    const items = [];
    let after = null;
    for (;;) {
      const page = await this.call(
        "GET",
        `/v1/workflows/${Number(id)}/tasks?limit=1000${after === null ? "" : `&after=${Number(after)}`}`,
      );
      items.push(...page.tasks);
      after = page.next_after ?? null;
      if (after === null) return items;
    }
  }
  /** Cancels every task of the workflow that has not ended; the workflow as it is then. */
  cancelWorkflow(id) {
    return this.call("POST", `/v1/workflows/${Number(id)}/cancel`, {});
  }

  /** One page of tasks, newest first, filtered; `tasks` reads every page. */
  async list(filters = {}) {
    return (await this.#taskPage(filters)).tasks;
  }
  #taskPage(filters) {
    const query = new URLSearchParams(dropUndefined(filters)).toString();
    return this.call("GET", `/v1/tasks${query ? `?${query}` : ""}`);
  }
  /** Every task the filters match, newest first, read a page at a time as it is used (`for await`). */
  async *tasks(filters = {}, { pageSize = 1000 } = {}) {
    let before;
    for (;;) {
      const page = await this.#taskPage({ ...filters, limit: pageSize, before });
      yield* page.tasks;
      if (page.next_before === null || page.next_before === undefined) return;
      before = page.next_before;
    }
  }
  /** Why an available task waits: {by, until}, or null when nothing holds it. */
  async held(id) {
    return (await this.call("GET", `/v1/tasks/${Number(id)}/held`)).held;
  }
  async #bulk(action, { state, queue, kind, key, unique_key, since, before }, { dryRun = false, batch = 500 } = {}) {
    const body = dropUndefined({ action, state: state.split(","), queue, kind, key, unique_key, since, before, limit: batch });
    if (dryRun) return (await this.call("POST", "/v1/tasks/bulk", { ...body, dry_run: true })).matched;
    let changed = 0;
    for (;;) {
      const answer = await this.call("POST", "/v1/tasks/bulk", body);
      changed += answer.changed;
      if (answer.next_after === null || answer.next_after === undefined) return changed;
      body.after = answer.next_after;
    }
  }
  /** Retries every finished task the filter matches ({state: "dead,cancelled", queue, kind, before}), a short batch at a time: how many changed (with dryRun: how many match). */
  retryAll(filter, options) {
    return this.#bulk("retry", filter, options);
  }
  /** Cancels every unfinished task the filter matches, as `retryAll` retries. */
  cancelAll(filter, options) {
    return this.#bulk("cancel", filter, options);
  }
  /** Deletes every finished task the filter matches, with its attempts, as `retryAll` retries. */
  deleteAll(filter, options) {
    return this.#bulk("delete", filter, options);
  }
  cancel(id) {
    return this.call("POST", `/v1/tasks/${Number(id)}/cancel`, {});
  }
  /** Deletes a task that has ended, with its attempts; a Conflict while it has not. */
  async delete(id) {
    await this.call("DELETE", `/v1/tasks/${Number(id)}`);
  }
  retry(id) {
    return this.call("POST", `/v1/tasks/${Number(id)}/retry`, {});
  }
  reschedule(id, runAt) {
    return this.call("POST", `/v1/tasks/${Number(id)}/reschedule`, { run_at: runAt });
  }

  // -- schedules -----------------------------------------------------------------------------
  addSchedule(name, spec, task, options = {}) {
    return this.call("POST", "/v1/schedules", dropUndefined({ name, spec, task, ...options }));
  }
  /** A schedule that starts a workflow (`tasks` as `createWorkflow` takes them) at each
   * occurrence; the overlap policy counts whole runs. */
  addWorkflowSchedule(name, spec, tasks, { workflowName, ...options } = {}) {
    const workflow = dropUndefined({ name: workflowName, tasks });
    return this.call("POST", "/v1/schedules", dropUndefined({ name, spec, workflow, ...options }));
  }
  /** Every schedule, by name (read a page at a time). */
  schedules() {
    return this.#everyPage("/v1/schedules", "schedules");
  }
  async #everyPage(path, field) {
    const items = [];
    let after = null;
    for (;;) {
      const page = await this.call("GET", `${path}?limit=1000${after === null ? "" : `&after=${q(after)}`}`);
      items.push(...page[field]);
      after = page.next_after ?? null;
      if (after === null) return items;
    }
  }
  /** Many schedules in one transaction, all or none: {created, updated, unchanged, removed}. */
  applySchedules(schedules, { group, prune = false, dryRun = false } = {}) {
    return this.call("PUT", "/v1/schedules", dropUndefined({ schedules, group, prune, dry_run: dryRun }));
  }
  schedule(name) {
    return this.call("GET", `/v1/schedules/${q(name)}`);
  }
  pauseSchedule(name) {
    return this.call("POST", `/v1/schedules/${q(name)}/pause`, {});
  }
  resumeSchedule(name) {
    return this.call("POST", `/v1/schedules/${q(name)}/resume`, {});
  }
  triggerSchedule(name) {
    return this.call("POST", `/v1/schedules/${q(name)}/trigger`, {});
  }
  async removeSchedule(name) {
    await this.call("DELETE", `/v1/schedules/${q(name)}`);
  }
  /** Creates or replaces a calendar: dates ("2026-12-25") on which the schedules that skip it do not fire. */
  putCalendar(name, dates, { tz } = {}) {
    return this.call("PUT", `/v1/calendars/${q(name)}`, tz === undefined ? { dates } : { dates, tz });
  }
  calendar(name) {
    return this.call("GET", `/v1/calendars/${q(name)}`);
  }
  async calendars() {
    return (await this.call("GET", "/v1/calendars")).calendars;
  }
  /** Removes a calendar no schedule skips; else a Conflict naming them. */
  async removeCalendar(name) {
    await this.call("DELETE", `/v1/calendars/${q(name)}`);
  }
  /** Creates or replaces the schedule `name` (the API's schedule object: spec, task or workflow, tz, policies). */
  putSchedule(name, definition) {
    return this.call("PUT", `/v1/schedules/${q(name)}`, definition);
  }
  /** Enqueues the occurrences between `start` and `end` (RFC 3339) that did not run. */
  backfillSchedule(name, start, end) {
    return this.call("POST", `/v1/schedules/${q(name)}/backfill`, { from: start, to: end });
  }
  /** The schedule's ledger, newest first: each occurrence, what became of it and why. */
  async occurrences(name, { limit } = {}) {
    const query = limit === undefined ? "" : `?limit=${Number(limit)}`;
    return (await this.call("GET", `/v1/schedules/${q(name)}/occurrences${query}`)).occurrences;
  }
  /** The schedules a group of code declares, all at once: the group's others are removed. */
  declareSchedules(group, schedules) {
    return this.call("PUT", `/v1/declared/${q(group)}`, { schedules });
  }

  // -- queues --------------------------------------------------------------------------------
  /** Every queue with its counts, by name (read a page at a time). */
  queues() {
    return this.#everyPage("/v1/queues", "queues");
  }
  /** A queue no task or setting names is a NotFound (a likely typo) unless `create` sets it up. */
  pauseQueue(name, { create = false } = {}) {
    return this.call("POST", `/v1/queues/${q(name)}/pause${creating(create)}`, {});
  }
  resumeQueue(name, { create = false } = {}) {
    return this.call("POST", `/v1/queues/${q(name)}/resume${creating(create)}`, {});
  }
  limitQueue(name, limits, { create = false } = {}) {
    return this.call("PUT", `/v1/queues/${q(name)}/limit${creating(create)}`, limits);
  }
  /** How long a queue keeps its ended tasks, by state ({succeeded: "1h", dead: "30d"}; null: the server's --retention). */
  /** How long the retries of the queue's tasks without a backoff of their own wait ("fixed:30s"; null: the default). */
  setQueueBackoff(name, backoff, { create = false } = {}) {
    return this.call("PUT", `/v1/queues/${q(name)}/backoff${creating(create)}`, { backoff });
  }
  setQueueRetention(name, retention, { create = false } = {}) {
    return this.call("PUT", `/v1/queues/${q(name)}/retention${creating(create)}`, retention);
  }
  /** Removes a queue with no unfinished task, deleting its ended tasks; else a Conflict. */
  async removeQueue(name) {
    await this.call("DELETE", `/v1/queues/${q(name)}`);
  }
  /** One queue: its limits, counts, and why its tasks wait. */
  queue(name) {
    return this.call("GET", `/v1/queues/${q(name)}`);
  }

  // -- what operators look at ----------------------------------------------------------------
  /** Workers and nodes seen lately, most recently seen first. */
  async workers({ limit } = {}) {
    return (await this.call("GET", `/v1/workers${limit === undefined ? "" : `?limit=${Number(limit)}`}`)).workers;
  }
  /** The nodes, the leader, and the backend. */
  cluster() {
    return this.call("GET", "/v1/cluster");
  }
  /** Tasks started, succeeded and failed per minute over the last `minutes`. */
  activity({ minutes } = {}) {
    return this.call("GET", `/v1/activity${minutes === undefined ? "" : `?minutes=${Number(minutes)}`}`);
  }
  /** Figures per task kind over the last `minutes` (60 by default): {minutes, sampled, kinds}. */
  kinds({ minutes } = {}) {
    return this.call("GET", `/v1/kinds${minutes === undefined ? "" : `?minutes=${Number(minutes)}`}`);
  }
  /** The next fire times of a cron expression: {times: [...]}. */
  cronNext(expr, { tz, n, after, dst } = {}) {
    const query = new URLSearchParams(dropUndefined({ expr, tz, n, after, dst })).toString();
    return this.call("GET", `/v1/cron/next?${query}`);
  }

  // -- the worker protocol, one task at a time (`Worker` batches these) ----------------------
  /** Ends an attempt held by this worker as succeeded, with `result` to keep. */
  complete(id, attempt, result) {
    return this.call("POST", `/v1/tasks/${Number(id)}/complete`, dropUndefined({ attempt, result }));
  }
  /** Ends an attempt as failed: retried after its backoff unless not `retryable` or spent. */
  fail(id, attempt, error, { retryable = true } = {}) {
    return this.call("POST", `/v1/tasks/${Number(id)}/fail`, { attempt, error, retryable });
  }
  /** Extends an attempt's lease: {lease_expires_at, cancel_requested}. */
  heartbeat(id, attempt, { leaseTtl } = {}) {
    return this.call("POST", `/v1/tasks/${Number(id)}/heartbeat`, dropUndefined({ attempt, lease_ttl: leaseTtl }));
  }
  /** Gives the task back to run again after `delay` ("30s"), spending no attempt. */
  snooze(id, attempt, delay) {
    return this.call("POST", `/v1/tasks/${Number(id)}/snooze`, { attempt, delay });
  }
  /** Gives a claimed task back unstarted, spending no attempt. */
  release(id, attempt) {
    return this.call("POST", `/v1/tasks/${Number(id)}/release`, { attempt });
  }
  /** Ends an attempt whose cancellation was asked, as cancelled. */
  acknowledgeCancel(id, attempt) {
    return this.call("POST", `/v1/tasks/${Number(id)}/cancelled`, { attempt });
  }
  /** Waits until tasks may have become claimable since the epoch `after`, or `wait` is over: {epoch}. Claims nothing. */
  waitForWork({ after = 0, wait } = {}) {
    const query = new URLSearchParams(dropUndefined({ after, wait })).toString();
    return this.call("GET", `/v1/work?${query}`, undefined, { timeoutMs: this.timeoutMs + 60_000 });
  }
  /** A worker's sign of life, shown in `workers()` and the dashboard. */
  workerBeat(id, { queues = [], concurrency, stopping = false } = {}) {
    return this.call("PUT", `/v1/workers/${q(id)}`, dropUndefined({ queues, concurrency, stopping }));
  }
}

/** A failure worth retrying (any other thrown error is one too). */
export class Retry extends Error {}
/** A failure retrying will not fix: the task is dead at once. */
export class Fatal extends Error {}
/** The handler saw that cancellation was asked and stopped. */
export class Cancelled extends Error {}
/** Run the task again after `seconds`, without spending an attempt. */
export class Snooze extends Error {
  constructor(seconds) {
    super(`snooze ${seconds}s`);
    this.seconds = seconds;
  }
}

const ms = (seconds) => `${Math.round(seconds * 1000)}ms`;

/** Claims and runs tasks of the kinds it has handlers for, `concurrency` at a time, with up
 * to `prefetch` more claimed ahead (leased and heartbeated, started in priority order as
 * slots free; given back unstarted at a stop). */
export class Worker {
  constructor(client, { queues = [], concurrency = 8, prefetch, leaseTtl = 30, name, log } = {}) {
    this.client = client;
    this.handlers = new Map();
    this.queues = queues;
    this.concurrency = concurrency;
    this.prefetch = prefetch ?? concurrency;
    this.buffered = []; // claimed, waiting for a slot
    this.active = 0; // handlers running
    this.running = new Set();
    this.leaseTtl = leaseTtl;
    this.name = name ?? `node-${hostname()}-${process.pid}`;
    this.log = log ?? ((m) => console.error(`[sked-worker] ${m}`));
    this.held = new Map(); // "id/attempt" -> AbortController
    this.progress = new Map(); // "id/attempt" -> what its handler last reported
    this.endings = [];
    this.sending = null;
    this.stopping = false;
    this.done = { succeeded: 0, failed: 0, snoozed: 0, cancelled: 0 };
    this.freed = null;
    this.beating = false; // a heartbeat request is on its way
  }

  /** Registers `handler(task, { signal, traceparent, progress })` for `kind`; `signal` aborts on
   * cancellation; `progress(value)` reports how far it has come (a number from 0 to 100, or a
   * small object), which the next heartbeat carries to sked. */
  handle(kind, handler) {
    this.handlers.set(kind, handler);
    return this;
  }

  /** Stops claiming; `run` resolves once the running tasks have ended. */
  stop() {
    this.stopping = true;
  }

  /** SIGTERM and SIGINT stop the worker gracefully. */
  stopOnSignals() {
    for (const sig of ["SIGTERM", "SIGINT"]) process.once(sig, () => this.stop());
    return this;
  }

  async #claim(waitSeconds) {
    const free = this.concurrency + this.prefetch - this.held.size;
    if (free <= 0) return [];
    const reply = await this.client.call(
      "POST",
      "/v1/claim",
      {
        worker: this.name,
        queues: this.queues,
        kinds: [...this.handlers.keys()].sort(),
        max: free,
        wait: ms(waitSeconds),
        lease_ttl: ms(this.leaseTtl),
      },
      { timeoutMs: (waitSeconds + 30) * 1000 },
    );
    return reply.tasks;
  }

  async #heartbeat() {
    if (this.beating) return; // the last one is still on its way
    this.beating = true;
    try {
      await this.#beat();
    } finally {
      this.beating = false;
    }
  }

  async #beat() {
    const held = [...this.held.keys()].map((k) => {
      const [id, attempt] = k.split("/").map(Number);
      return this.progress.has(k) ? { id, attempt, progress: this.progress.get(k) } : { id, attempt };
    });
    if (held.length === 0) return;
    try {
      const reply = await this.client.call("POST", "/v1/heartbeat", {
        tasks: held,
        lease_ttl: ms(this.leaseTtl),
      });
      reply.results.forEach((r, i) => {
        const ctl = this.held.get(`${held[i].id}/${held[i].attempt}`);
        if (ctl && (r.error || r.cancel_requested)) ctl.abort();
      });
    } catch (e) {
      this.log(`heartbeat failed: ${e.message}`);
    }
  }

  // One request for every ending that came while the last one was on its way.
  async #send() {
    while (this.endings.length > 0) {
      const items = this.endings;
      this.endings = [];
      for (let attempt = 0; attempt < 10; attempt++) {
        try {
          const reply = await this.client.call("POST", "/v1/finish", { results: items });
          reply.results.forEach((r, i) => {
            if (r.error) this.log(`task ${items[i].id}: ending not recorded: ${r.error.message}`);
          });
          break;
        } catch (e) {
          if (!(e.status === 0 || e.status === 503)) {
            this.log(`could not record endings: ${e.message}`);
            break;
          }
          await new Promise((r) => setTimeout(r, Math.min(2000, 100 * 2 ** attempt)));
        }
      }
    }
    this.sending = null;
  }

  async #runTask(task) {
    const key = `${task.id}/${task.attempt}`;
    const ctl = this.held.get(key);
    const item = { id: task.id, attempt: task.attempt };
    await inRunSpan(task, this.name, async (traceparent, end) => {
      try {
        const progress = (value) => this.progress.set(key, value);
        const result = await this.handlers.get(task.kind)(task, { signal: ctl.signal, traceparent, progress });
        item.outcome = "succeeded";
        if (result !== undefined) item.result = result;
      } catch (e) {
        if (e instanceof Snooze) Object.assign(item, { outcome: "snoozed", delay: ms(e.seconds) });
        else if (e instanceof Cancelled) item.outcome = "cancelled";
        else if (e instanceof Fatal) {
          Object.assign(item, { outcome: "failed", error: e.message, retryable: false });
          this.log(`task ${task.id} (${task.kind}) attempt ${task.attempt} failed for good: ${e.message}`);
        } else {
          // The stack is kept with the attempt (bounded) and logged, as an operator would look for it.
          const error = bounded(e?.stack ?? `${e?.name}: ${e?.message ?? e}`);
          Object.assign(item, { outcome: "failed", error, retryable: true });
          this.log(`task ${task.id} (${task.kind}) attempt ${task.attempt} failed: ${error}`);
        }
      }
      end(item.outcome, item.error);
    });
    this.held.delete(key);
    this.progress.delete(key);
    this.done[item.outcome] += 1;
    this.endings.push(item);
    this.sending ??= this.#send();
    this.freed?.();
  }

  /** Starts buffered tasks, most urgent first, while slots are free. */
  #startWhatFits() {
    while (this.active < this.concurrency && this.buffered.length > 0) {
      const task = this.buffered.shift();
      this.active += 1;
      const p = this.#runTask(task).finally(() => {
        this.running.delete(p);
        this.active -= 1;
        this.#startWhatFits();
      });
      this.running.add(p);
    }
  }

  /** Claims and runs tasks until `stop`, or, with `exitWhenIdle` (seconds), until nothing was
   * held or claimed for that long. */
  async run({ exitWhenIdle } = {}) {
    const beat = setInterval(() => this.#heartbeat(), (this.leaseTtl * 1000) / 3);
    const urgency = (a, b) => b.priority - a.priority || Date.parse(a.run_at) - Date.parse(b.run_at) || a.id - b.id;
    // Claim once at least half the claimed-ahead buffer (or, without one, a slot) has room, so
    // that a claim is not spent on the first slot to free up.
    const enough = Math.max(1, Math.ceil(this.prefetch / 2));
    let idleSince = Date.now();
    while (!this.stopping) {
      if (this.concurrency + this.prefetch - this.held.size < enough) {
        await new Promise((r) => {
          this.freed = r;
          setTimeout(r, 100);
        });
        this.freed = null;
        // Let the endings already on their way land first.
        await new Promise((r) => setImmediate(r));
        continue;
      }
      const wait = this.held.size > 0 || exitWhenIdle !== undefined ? 1 : 10;
      let tasks;
      try {
        tasks = await this.#claim(wait);
      } catch (e) {
        this.log(`claim failed: ${e.message}; retrying in 1s`);
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      for (const t of tasks) this.held.set(`${t.id}/${t.attempt}`, new AbortController());
      this.buffered.push(...tasks);
      if (tasks.length > 0) this.buffered.sort(urgency);
      this.#startWhatFits();
      if (tasks.length > 0 || this.held.size > 0) idleSince = Date.now();
      else if (exitWhenIdle !== undefined && Date.now() - idleSince >= exitWhenIdle * 1000) break;
    }
    this.stopping = true;
    // What was claimed but not started goes back at once.
    for (const t of this.buffered.splice(0)) {
      this.held.delete(`${t.id}/${t.attempt}`);
      this.endings.push({ id: t.id, attempt: t.attempt, outcome: "released" });
    }
    // (Only with something to send: `#send` of nothing ends before it is assigned.)
    if (this.endings.length > 0) this.sending ??= this.#send();
    while (this.running.size > 0) await Promise.all([...this.running]);
    while (this.sending) await this.sending;
    clearInterval(beat);
  }
}
