// Types of sked-client (src/index.js).

export type Json = Record<string, any>;

export class SkedError extends Error {
  constructor(message: string, status?: number, code?: string);
  /** The HTTP status (0: the server could not be reached). */
  status: number;
  /** The API's error code: `not_found`, `invalid_input`, … */
  code: string;
}

/** One class per error code of the API. */
export const errors: {
  InvalidRequest: typeof SkedError;
  InvalidJson: typeof SkedError;
  InvalidInput: typeof SkedError;
  NotFound: typeof SkedError;
  Conflict: typeof SkedError;
  StaleLease: typeof SkedError;
  Unauthorized: typeof SkedError;
  Forbidden: typeof SkedError;
  PayloadTooLarge: typeof SkedError;
  UnsupportedMediaType: typeof SkedError;
  Unavailable: typeof SkedError;
  Internal: typeof SkedError;
};

/** Task options, as the API names them (times RFC 3339, durations like "30s"). */
export interface TaskOptions {
  queue?: string;
  priority?: number;
  run_at?: string;
  max_attempts?: number;
  timeout?: string;
  unique_key?: string;
  unique_for?: string;
  debounce?: string;
  backoff?: Json;
  /** Its deadline to start, counted from its run time ("30m"): not started by then, it ends `expired`. */
  ttl?: string;
  /** Its deadline to start, RFC 3339: not started by then, it ends `expired` and never runs. */
  expires_at?: string;
  key?: string;
  /** The W3C trace context the task continues; by default the active OpenTelemetry span's. */
  traceparent?: string;
  /** Task ids that must succeed before this task starts; until then it is `waiting`. */
  depends_on?: number[];
  /** What a parent that ends dead or cancelled does to it: `cancel` (the default) or `run`. */
  on_parent_failure?: "cancel" | "run";
  /** The batch it joins (`openBatch`): the batch's callbacks wait for it. */
  batch?: number;
}

export interface NewTask extends TaskOptions {
  kind: string;
  payload?: unknown;
}

/** A task of a workflow: its name there and the names of the workflow's tasks it waits for. */
export interface WorkflowTask extends NewTask {
  name: string;
  after?: string[];
}

export interface TaskFilters {
  state?: string;
  queue?: string;
  kind?: string;
  schedule?: string;
  key?: string;
  unique_key?: string;
  /** Of this workflow. */
  workflow?: number;
  /** Enqueued at or after (RFC 3339). */
  since?: string;
  /** Enqueued before (RFC 3339). */
  until?: string;
  limit?: number;
  before?: number;
}

/** The tasks a bulk retry, cancel or delete applies to; `state` lists states: "dead,cancelled". */
export interface BulkFilter {
  state: string;
  queue?: string;
  kind?: string;
  key?: string;
  unique_key?: string;
  /** Enqueued at or after (RFC 3339). */
  since?: string;
  /** Enqueued before (RFC 3339). */
  before?: string;
}

export class Client {
  constructor(server?: string, options?: { token?: string; timeoutMs?: number });
  call(
    method: string,
    path: string,
    body?: unknown,
    options?: { timeoutMs?: number; headers?: Record<string, string> },
  ): Promise<any>;
  enqueue(kind: string, payload?: unknown, options?: TaskOptions): Promise<Json>;
  enqueueMany(tasks: NewTask[]): Promise<Json[]>;
  get(id: number): Promise<Json>;
  /** The task once it has ended, or as it is after `timeoutMs` (default an hour). */
  wait(id: number, options?: { timeoutMs?: number }): Promise<Json>;
  list(filters?: TaskFilters): Promise<Json[]>;
  /** Opens a batch; tasks join it with `batch`. Its callbacks run once, when it is closed and its tasks have ended. */
  openBatch(batch?: { name?: string; on_success?: NewTask; on_complete?: NewTask }): Promise<Json>;
  closeBatch(id: number): Promise<Json>;
  batch(id: number): Promise<Json>;
  /** The batch once it is done (its callbacks enqueued), or as it is after `timeoutMs` (default an hour). */
  waitBatch(id: number, options?: { timeoutMs?: number }): Promise<Json>;
  batches(filters?: { limit?: number; before?: number }): Promise<Json[]>;
  /** Makes a workflow's tasks in one transaction, all or none: its id and each task's id by name. */
  createWorkflow(tasks: WorkflowTask[], options?: { name?: string }): Promise<{ id: number; tasks: Record<string, number> }>;
  workflow(id: number): Promise<Json>;
  /** The workflow once every task has ended, or as it is after `timeoutMs` (default an hour). */
  waitWorkflow(id: number, options?: { timeoutMs?: number }): Promise<Json>;
  workflows(filters?: { limit?: number; before?: number }): Promise<Json[]>;
  workflowTasks(id: number): Promise<Json[]>;
  cancelWorkflow(id: number): Promise<Json>;
  tasks(filters?: TaskFilters, options?: { pageSize?: number }): AsyncGenerator<Json, void, void>;
  held(id: number): Promise<{ by: string; until: string | null } | null>;
  retryAll(filter: BulkFilter, options?: { dryRun?: boolean; batch?: number }): Promise<number>;
  cancelAll(filter: BulkFilter, options?: { dryRun?: boolean; batch?: number }): Promise<number>;
  deleteAll(filter: BulkFilter, options?: { dryRun?: boolean; batch?: number }): Promise<number>;
  cancel(id: number): Promise<Json>;
  delete(id: number): Promise<void>;
  retry(id: number): Promise<Json>;
  reschedule(id: number, runAt: string): Promise<Json>;
  addSchedule(
    name: string,
    spec: string,
    task: { kind: string; payload?: unknown; queue?: string },
    options?: Json,
  ): Promise<Json>;
  /** A schedule that starts a workflow at each occurrence; the overlap policy counts whole runs. */
  addWorkflowSchedule(
    name: string,
    spec: string,
    tasks: WorkflowTask[],
    options?: Json & { workflowName?: string },
  ): Promise<Json>;
  schedules(): Promise<Json[]>;
  /** Many schedules in one transaction, all or none: {created, updated, unchanged, removed}. */
  applySchedules(
    schedules: Json[],
    options?: { group?: string; prune?: boolean; dryRun?: boolean },
  ): Promise<{ created: string[]; updated: string[]; unchanged: string[]; removed: string[] }>;
  schedule(name: string): Promise<Json>;
  pauseSchedule(name: string): Promise<Json>;
  resumeSchedule(name: string): Promise<Json>;
  triggerSchedule(name: string): Promise<Json>;
  removeSchedule(name: string): Promise<void>;
  /** A calendar: dates on which the schedules that skip it (`skip_calendars`) do not fire. */
  putCalendar(name: string, dates: string[], options?: { tz?: string }): Promise<Json>;
  calendar(name: string): Promise<Json>;
  calendars(): Promise<Json[]>;
  removeCalendar(name: string): Promise<void>;
  putSchedule(name: string, definition: Json): Promise<Json>;
  backfillSchedule(name: string, start: string, end: string): Promise<Json>;
  occurrences(name: string, options?: { limit?: number }): Promise<Json[]>;
  declareSchedules(group: string, schedules: Json[]): Promise<Json>;
  queues(): Promise<Json[]>;
  pauseQueue(name: string, options?: { create?: boolean }): Promise<Json>;
  resumeQueue(name: string, options?: { create?: boolean }): Promise<Json>;
  limitQueue(name: string, limits: Json, options?: { create?: boolean }): Promise<Json>;
  setQueueBackoff(name: string, backoff: string | null, options?: { create?: boolean }): Promise<Json>;
  setQueueRetention(name: string, retention: Json, options?: { create?: boolean }): Promise<Json>;
  removeQueue(name: string): Promise<void>;
  queue(name: string): Promise<Json>;
  workers(options?: { limit?: number }): Promise<Json[]>;
  cluster(): Promise<Json>;
  activity(options?: { minutes?: number }): Promise<Json>;
  kinds(options?: { minutes?: number }): Promise<{ minutes: number; sampled: boolean; kinds: Json[] }>;
  cronNext(expr: string, options?: { tz?: string; n?: number; after?: string; dst?: string }): Promise<{ expr: string; tz: string; times: string[] }>;
  complete(id: number, attempt: number, result?: unknown): Promise<Json>;
  fail(id: number, attempt: number, error: string, options?: { retryable?: boolean }): Promise<Json>;
  heartbeat(id: number, attempt: number, options?: { leaseTtl?: string }): Promise<{ lease_expires_at: string; cancel_requested: boolean }>;
  snooze(id: number, attempt: number, delay: string): Promise<Json>;
  release(id: number, attempt: number): Promise<Json>;
  acknowledgeCancel(id: number, attempt: number): Promise<Json>;
  waitForWork(options?: { after?: number; wait?: string }): Promise<{ epoch: number }>;
  workerBeat(id: string, beat?: { queues?: string[]; concurrency?: number; stopping?: boolean }): Promise<Json>;
}

export class Retry extends Error {}
export class Fatal extends Error {}
export class Cancelled extends Error {}
export class Snooze extends Error {
  constructor(seconds: number);
  seconds: number;
}

/** What a handler gets beside its task: `signal` aborts on cancellation; `traceparent` is
 * the W3C trace context it runs in (its run's span with OpenTelemetry, else the task's). */
export interface TaskContext {
  signal: AbortSignal;
  traceparent: string | null;
  /** Reports how far the task has come: a number from 0 to 100, or a small object (at most
   * 4 KiB as JSON; its `percent`, if any, from 0 to 100). The next heartbeat carries it. */
  progress(value: number | Json): void;
}

export type Handler = (task: Json, ctx: TaskContext) => unknown | Promise<unknown>;

export class Worker {
  constructor(
    client: Client,
    options?: {
      queues?: string[];
      concurrency?: number;
      /** Tasks claimed ahead of free slots (default: `concurrency`); given back at a stop. */
      prefetch?: number;
      leaseTtl?: number;
      name?: string;
      log?: (message: string) => void;
    },
  );
  done: { succeeded: number; failed: number; snoozed: number; cancelled: number };
  handle(kind: string, handler: Handler): this;
  stop(): void;
  stopOnSignals(): this;
  run(options?: { exitWhenIdle?: number }): Promise<void>;
}
