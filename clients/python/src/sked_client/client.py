"""`Client`: the sked HTTP API, blocking, standard library only."""

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, Iterator, List, Optional

from ._trace import current_headers
from .errors import SkedError, from_answer

Json = Dict[str, Any]

#: The server used when none is named.
DEFAULT_SERVER = "http://127.0.0.1:7070"


def _drop_none(d: Json) -> Json:
    return {k: v for k, v in d.items() if v is not None}


# The states a task ends in.
ENDED = ("succeeded", "dead", "cancelled", "expired")


def new_task(
    kind: str,
    payload: Any = None,
    *,
    queue: Optional[str] = None,
    priority: Optional[int] = None,
    run_at: Optional[str] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[str] = None,
    unique_key: Optional[str] = None,
    unique_for: Optional[str] = None,
    debounce: Optional[str] = None,
    backoff: Optional[Json] = None,
    ttl: Optional[str] = None,
    expires_at: Optional[str] = None,
    key: Optional[str] = None,
    traceparent: Optional[str] = None,
    depends_on: Optional[List[int]] = None,
    on_parent_failure: Optional[str] = None,
    batch: Optional[int] = None,
) -> Json:
    """A task to enqueue, as the API takes it (`NewTask`). Times are RFC 3339, durations
    like `30s` or `5m`. Without `traceparent`, the task continues the caller's current
    OpenTelemetry span, if there is one. With `depends_on` (task ids), it waits until those
    tasks have succeeded; `on_parent_failure` is `cancel` (the default) or `run`. With
    `batch`, it joins that batch (`open_batch`). With `ttl` (counted from its run time) or
    `expires_at`, a task not started by then ends `expired` and never runs."""
    return _drop_none(
        {
            "kind": kind,
            "payload": payload,
            "queue": queue,
            "priority": priority,
            "run_at": run_at,
            "max_attempts": max_attempts,
            "timeout": timeout,
            "unique_key": unique_key,
            "unique_for": unique_for,
            "debounce": debounce,
            "backoff": backoff,
            "ttl": ttl,
            "expires_at": expires_at,
            "key": key,
            "traceparent": traceparent,
            "depends_on": depends_on,
            "on_parent_failure": on_parent_failure,
            "batch": batch,
        }
    )


def workflow_task(name: str, kind: str, payload: Any = None, *, after: Iterable[str] = (), **options: Any) -> Json:
    """A task of a workflow: its `name` there, the names of the workflow's tasks it waits for
    (`after`), and the fields of a task as `new_task` takes them."""
    task = {"name": name, **new_task(kind, payload, **options)}
    after = [str(a) for a in after]
    if after:
        task["after"] = after
    return task


class Client:
    """The API of one sked server (`server`, e.g. `http://127.0.0.1:7070`), with `token` as
    its bearer when given. Every call raises a `SkedError` subclass named after the API's
    error code (`NotFound`, `InvalidInput`, …) when the server refuses it."""

    def __init__(self, server: str = DEFAULT_SERVER, token: Optional[str] = None, timeout: float = 30):
        self.base = server.rstrip("/")
        self.token = token
        self.timeout = timeout

    # -- the wire --------------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: Optional[float] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> Any:
        """One request; the answer's JSON (None when it has no body)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("content-type", "application/json")
        if self.token:
            req.add_header("authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                raise SkedError(f"HTTP {e.code}: {raw[:200]!r}", e.code) from None
            raise from_answer(e.code, err.get("code", "unknown"), err.get("message", "")) from None
        except urllib.error.URLError as e:
            raise SkedError(f"cannot reach {self.base}: {e.reason}") from None

    @staticmethod
    def _q(value: str) -> str:
        return urllib.parse.quote(str(value), safe="")

    # -- tasks -----------------------------------------------------------------------------

    def enqueue(self, kind: str, payload: Any = None, **options: Any) -> Json:
        """Enqueues one task (options as `new_task` takes them); the answer: `id`, `state`,
        `duplicate` (a unique key's holder was returned), `debounced`."""
        return self.call("POST", "/v1/tasks", new_task(kind, payload, **options), headers=current_headers())

    def enqueue_many(self, tasks: Iterable[Json]) -> List[Json]:
        """Enqueues tasks (each from `new_task`) in one transaction; an answer per task."""
        body = {"tasks": list(tasks)}
        return self.call("POST", "/v1/tasks/batch", body, headers=current_headers())["tasks"]

    def get(self, task_id: int) -> Json:
        return self.call("GET", f"/v1/tasks/{int(task_id)}")

    def wait(self, task_id: int, timeout: float = 3600) -> Json:
        """The task once it has ended (succeeded, dead, cancelled or expired), or as it is
        after `timeout` seconds: long-polls of at most 30 s each."""
        return self._long_poll(f"/v1/tasks/{int(task_id)}", lambda t: t["state"] in ENDED, timeout)

    def _long_poll(self, path: str, done: Any, timeout: float) -> Json:
        """`GET path?wait=…` until `done(answer)` or `timeout` seconds: long-polls of at most
        30 s each."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            step = min(left, 30.0)
            answer = self.call("GET", f"{path}?wait={int(step * 1000)}ms", timeout=self.timeout + step)
            if done(answer) or left <= 30.0:
                return answer

    # -- batches ---------------------------------------------------------------------------

    def open_batch(
        self,
        *,
        name: Optional[str] = None,
        on_success: Optional[Json] = None,
        on_complete: Optional[Json] = None,
    ) -> Json:
        """Opens a batch; tasks join it with `batch=` (`new_task`, `enqueue`). Its callbacks
        (each from `new_task`) are enqueued once, when it is closed and its tasks have all
        succeeded (`on_success`) or ended (`on_complete`), the batch's counts in their payloads."""
        body = _drop_none({"name": name, "on_success": on_success, "on_complete": on_complete})
        return self.call("POST", "/v1/batches", body, headers=current_headers())

    def close_batch(self, batch_id: int) -> Json:
        """Closes a batch: its callbacks run once its tasks have ended (at once if they have)."""
        return self.call("POST", f"/v1/batches/{int(batch_id)}/close", headers=current_headers())

    def batch(self, batch_id: int) -> Json:
        """A batch: `state` (open, closed, done), `total`, `counts` by state, its callbacks and
        the tasks they became (`on_success_task`, `on_complete_task`)."""
        return self.call("GET", f"/v1/batches/{int(batch_id)}")

    def wait_batch(self, batch_id: int, timeout: float = 3600) -> Json:
        """The batch once it is done (its callbacks enqueued), or as it is after `timeout`
        seconds: long-polls of at most 30 s each."""
        return self._long_poll(f"/v1/batches/{int(batch_id)}", lambda b: b["state"] == "done", timeout)

    def batches(self, limit: Optional[int] = None, before: Optional[int] = None) -> List[Json]:
        """A page of batches, newest first (ids below `before`), each with its counts."""
        query = urllib.parse.urlencode(_drop_none({"limit": limit, "before": before}))
        return self.call("GET", "/v1/batches" + (f"?{query}" if query else ""))["batches"]

    # -- workflows -------------------------------------------------------------------------

    def create_workflow(self, tasks: Iterable[Json], name: Optional[str] = None) -> Json:
        """Makes a workflow's tasks (each from `workflow_task`) in one transaction, all or
        none: `{"id": N, "tasks": {name: task id}}`. A cycle, an unknown name or a missing
        task raises `InvalidInput` naming it."""
        body = _drop_none({"name": name, "tasks": list(tasks)})
        return self.call("POST", "/v1/workflows", body, headers=current_headers())

    def workflow(self, workflow_id: int) -> Json:
        """A workflow: `state` (active, succeeded, failed, cancelled), `done`, `total`, and
        `counts` of its tasks by state."""
        return self.call("GET", f"/v1/workflows/{int(workflow_id)}")

    def wait_workflow(self, workflow_id: int, timeout: float = 3600) -> Json:
        """The workflow once every task has ended, or as it is after `timeout` seconds:
        long-polls of at most 30 s each."""
        return self._long_poll(f"/v1/workflows/{int(workflow_id)}", lambda w: w["done"], timeout)

    def workflows(self, limit: Optional[int] = None, before: Optional[int] = None) -> List[Json]:
        """A page of workflows, newest first (ids below `before`), each with its counts."""
        query = urllib.parse.urlencode(_drop_none({"limit": limit, "before": before}))
        return self.call("GET", "/v1/workflows" + (f"?{query}" if query else ""))["workflows"]

    def workflow_tasks(self, workflow_id: int) -> List[Json]:
        """Every task of a workflow in the order they were made (read a page at a time), each
        with `id`, `name`, `kind`, `state` and `after` (the names it waits for)."""
        items: List[Json] = []
        after: Optional[int] = None
        while True:
            query = "?limit=1000" + (f"&after={int(after)}" if after is not None else "")
            page = self.call("GET", f"/v1/workflows/{int(workflow_id)}/tasks{query}")
            items.extend(page["tasks"])
            after = page.get("next_after")
            if after is None:
                return items

    def cancel_workflow(self, workflow_id: int) -> Json:
        """Cancels every task of the workflow that has not ended (running ones are asked to
        stop); the workflow as it is then."""
        return self.call("POST", f"/v1/workflows/{int(workflow_id)}/cancel")

    def _task_page(self, filters: Json, limit: Optional[int], before: Optional[int]) -> Json:
        query = urllib.parse.urlencode(_drop_none({**filters, "limit": limit, "before": before}))
        return self.call("GET", "/v1/tasks" + (f"?{query}" if query else ""))

    def list(
        self,
        *,
        state: Optional[str] = None,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        schedule: Optional[str] = None,
        key: Optional[str] = None,
        unique_key: Optional[str] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        limit: Optional[int] = None,
        before: Optional[int] = None,
    ) -> List[Json]:
        """One page of tasks, newest first, filtered (`state` may list several:
        `dead,cancelled`; `since` and `until` bound when they were enqueued, RFC 3339);
        `tasks` reads every page."""
        filters = {"state": state, "queue": queue, "kind": kind, "schedule": schedule,
                   "key": key, "unique_key": unique_key, "since": since, "until": until}
        return self._task_page(filters, limit, before)["tasks"]

    def tasks(
        self,
        *,
        state: Optional[str] = None,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        schedule: Optional[str] = None,
        key: Optional[str] = None,
        unique_key: Optional[str] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
        page_size: int = 1000,
    ) -> Iterator[Json]:
        """Every task the filters match (as `list` takes them), newest first, read a page at a
        time as it is used."""
        filters = {"state": state, "queue": queue, "kind": kind, "schedule": schedule,
                   "key": key, "unique_key": unique_key, "since": since, "until": until}
        for page in self._task_pages(filters, page_size):
            yield from page

    def _task_pages(self, filters: Json, page_size: int) -> Iterator[List[Json]]:
        """The pages of tasks the filters match, newest first, each read when asked for."""
        before: Optional[int] = None
        while True:
            page = self._task_page(filters, page_size, before)
            yield page["tasks"]
            before = page.get("next_before")
            if before is None:
                return

    def held(self, task_id: int) -> Optional[Json]:
        """Why an available task waits (its queue's limits, or its key's): `{"by", "until"}`,
        or None when nothing holds it."""
        return self.call("GET", f"/v1/tasks/{int(task_id)}/held")["held"]

    def _bulk(self, action: str, state: str, dry_run: bool, batch: int, filters: Json) -> int:
        body = _drop_none({"action": action, "state": state.split(","), "limit": batch, **filters})
        if dry_run:
            return self.call("POST", "/v1/tasks/bulk", {**body, "dry_run": True})["matched"]
        changed = 0
        while True:
            answer = self.call("POST", "/v1/tasks/bulk", body)
            changed += answer["changed"]
            if answer.get("next_after") is None:
                return changed
            body["after"] = answer["next_after"]

    def retry_all(
        self,
        *,
        state: str,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        key: Optional[str] = None,
        unique_key: Optional[str] = None,
        since: Optional[str] = None,
        before: Optional[str] = None,
        dry_run: bool = False,
        batch: int = 500,
    ) -> int:
        """Retries every finished task the filter matches (`state`: `dead,cancelled`, say;
        `since` and `before` bound when they were enqueued), a short batch at a time; how many
        changed (with `dry_run`: how many match)."""
        filters = {"queue": queue, "kind": kind, "key": key, "unique_key": unique_key, "since": since, "before": before}
        return self._bulk("retry", state, dry_run, batch, filters)

    def cancel_all(
        self,
        *,
        state: str,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        key: Optional[str] = None,
        unique_key: Optional[str] = None,
        since: Optional[str] = None,
        before: Optional[str] = None,
        dry_run: bool = False,
        batch: int = 500,
    ) -> int:
        """Cancels every unfinished task the filter matches, as `retry_all` retries."""
        filters = {"queue": queue, "kind": kind, "key": key, "unique_key": unique_key, "since": since, "before": before}
        return self._bulk("cancel", state, dry_run, batch, filters)

    def delete_all(
        self,
        *,
        state: str,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        key: Optional[str] = None,
        unique_key: Optional[str] = None,
        since: Optional[str] = None,
        before: Optional[str] = None,
        dry_run: bool = False,
        batch: int = 500,
    ) -> int:
        """Deletes every finished task the filter matches, with its attempts, as `retry_all`
        retries."""
        filters = {"queue": queue, "kind": kind, "key": key, "unique_key": unique_key, "since": since, "before": before}
        return self._bulk("delete", state, dry_run, batch, filters)

    def cancel(self, task_id: int) -> Json:
        return self.call("POST", f"/v1/tasks/{int(task_id)}/cancel", {})

    def delete(self, task_id: int) -> None:
        """Deletes a task that has ended, with its attempts; a Conflict while it has not."""
        self.call("DELETE", f"/v1/tasks/{int(task_id)}")

    def retry(self, task_id: int) -> Json:
        return self.call("POST", f"/v1/tasks/{int(task_id)}/retry", {})

    def reschedule(self, task_id: int, run_at: str) -> Json:
        return self.call("POST", f"/v1/tasks/{int(task_id)}/reschedule", {"run_at": run_at})

    # -- schedules -------------------------------------------------------------------------

    def add_schedule(
        self,
        name: str,
        spec: str,
        kind: str,
        payload: Any = None,
        *,
        tz: Optional[str] = None,
        queue: Optional[str] = None,
        **policies: Any,
    ) -> Json:
        """A recurring schedule: `spec` is a cron expression, `every 5m` or `at TIME`;
        `policies` as the API names them (`overlap`, `catchup`, `jitter`, `dst`, …)."""
        task = _drop_none({"kind": kind, "payload": payload, "queue": queue})
        body = _drop_none({"name": name, "spec": spec, "tz": tz, "task": task, **policies})
        return self.call("POST", "/v1/schedules", body)

    def add_workflow_schedule(
        self,
        name: str,
        spec: str,
        tasks: Iterable[Json],
        *,
        workflow_name: Optional[str] = None,
        tz: Optional[str] = None,
        **policies: Any,
    ) -> Json:
        """A schedule that starts a workflow (its tasks from `workflow_task`) at each
        occurrence; the overlap policy counts whole runs. The tasks may not have `run_at`,
        `depends_on` or `batch`: they start with the occurrence and wait for one another."""
        workflow = _drop_none({"name": workflow_name, "tasks": list(tasks)})
        body = _drop_none({"name": name, "spec": spec, "tz": tz, "workflow": workflow, **policies})
        return self.call("POST", "/v1/schedules", body)

    def _every_page(self, path: str, field: str) -> List[Json]:
        """Every item of a list by name, a page of 1,000 at a time."""
        items: List[Json] = []
        after: Optional[str] = None
        while True:
            query = "?limit=1000" + (f"&after={self._q(after)}" if after is not None else "")
            page = self.call("GET", path + query)
            items.extend(page[field])
            after = page.get("next_after")
            if after is None:
                return items

    def schedules(self) -> List[Json]:
        """Every schedule, by name (read a page at a time)."""
        return self._every_page("/v1/schedules", "schedules")

    def apply_schedules(
        self,
        schedules: List[Json],
        group: Optional[str] = None,
        prune: bool = False,
        dry_run: bool = False,
    ) -> Json:
        """Writes many schedule definitions in one transaction, all or none (one invalid
        definition raises InvalidInput naming each bad one). With `group`, `prune` removes the
        group's schedules missing from the list; `dry_run` changes nothing. Answers
        {created, updated, unchanged, removed}."""
        body: Json = {"schedules": schedules, "prune": prune, "dry_run": dry_run}
        if group is not None:
            body["group"] = group
        return self.call("PUT", "/v1/schedules", body)

    def schedule(self, name: str) -> Json:
        return self.call("GET", f"/v1/schedules/{self._q(name)}")

    def pause_schedule(self, name: str) -> Json:
        return self.call("POST", f"/v1/schedules/{self._q(name)}/pause", {})

    def resume_schedule(self, name: str) -> Json:
        return self.call("POST", f"/v1/schedules/{self._q(name)}/resume", {})

    def trigger_schedule(self, name: str) -> Json:
        return self.call("POST", f"/v1/schedules/{self._q(name)}/trigger", {})

    def remove_schedule(self, name: str) -> None:
        self.call("DELETE", f"/v1/schedules/{self._q(name)}")

    # -- calendars -------------------------------------------------------------------------

    def put_calendar(self, name: str, dates: Iterable[str], tz: Optional[str] = None) -> Json:
        """Creates or replaces a calendar: dates ("2026-12-25") on which the schedules that skip
        it (`skip_calendars`) do not fire, in `tz` or each schedule's own zone."""
        body: Json = {"dates": list(dates)}
        if tz is not None:
            body["tz"] = tz
        return self.call("PUT", f"/v1/calendars/{self._q(name)}", body)

    def calendar(self, name: str) -> Json:
        return self.call("GET", f"/v1/calendars/{self._q(name)}")

    def calendars(self) -> List[Json]:
        return self.call("GET", "/v1/calendars")["calendars"]

    def remove_calendar(self, name: str) -> None:
        """Removes a calendar no schedule skips; else a Conflict naming them."""
        self.call("DELETE", f"/v1/calendars/{self._q(name)}")

    # -- queues ----------------------------------------------------------------------------

    def queues(self) -> List[Json]:
        """Every queue with its counts, by name (read a page at a time)."""
        return self._every_page("/v1/queues", "queues")

    def put_schedule(self, name: str, definition: Json) -> Json:
        """Creates or replaces the schedule `name` with `definition` (the API's schedule
        object: `spec`, `task` or `workflow`, `tz`, policies)."""
        return self.call("PUT", f"/v1/schedules/{self._q(name)}", definition)

    def backfill_schedule(self, name: str, start: str, end: str) -> Json:
        """Enqueues the occurrences between `start` and `end` (RFC 3339) that did not run."""
        return self.call("POST", f"/v1/schedules/{self._q(name)}/backfill", {"from": start, "to": end})

    def occurrences(self, name: str, limit: Optional[int] = None) -> List[Json]:
        """The schedule's ledger, newest first: each occurrence, what became of it and why."""
        query = f"?limit={int(limit)}" if limit is not None else ""
        return self.call("GET", f"/v1/schedules/{self._q(name)}/occurrences{query}")["occurrences"]

    def declare_schedules(self, group: str, schedules: List[Json]) -> Json:
        """The schedules a group of code declares, all at once: new ones are created, changed
        ones updated, the group's others removed."""
        return self.call("PUT", f"/v1/declared/{self._q(group)}", {"schedules": schedules})

    # -- queues ----------------------------------------------------------------------------

    def queue(self, name: str) -> Json:
        """One queue: its limits, counts, and why its tasks wait."""
        return self.call("GET", f"/v1/queues/{self._q(name)}")

    @staticmethod
    def _create(create: bool) -> str:
        return "?create=true" if create else ""

    def pause_queue(self, name: str, create: bool = False) -> Json:
        """Pauses a queue. A queue no task or setting names raises NotFound (a likely typo)
        unless `create` sets it up, to pause it before its first task."""
        return self.call("POST", f"/v1/queues/{self._q(name)}/pause{self._create(create)}", {})

    def resume_queue(self, name: str, create: bool = False) -> Json:
        return self.call("POST", f"/v1/queues/{self._q(name)}/resume{self._create(create)}", {})

    def limit_queue(self, name: str, create: bool = False, **limits: Any) -> Json:
        """Sets a queue's limits as the API names them: `concurrency`, `rate` (`10/s`),
        `burst`, `per_key`, `per_key_rate`, `key_order` (`"strict"`: a task that started keeps
        its key until it ends well, with `per_key=1`; or `"priority"`); None
        removes one. `create` as in pause_queue."""
        return self.call("PUT", f"/v1/queues/{self._q(name)}/limit{self._create(create)}", limits)

    def set_queue_backoff(self, name: str, backoff: Optional[str], create: bool = False) -> Json:
        """Sets how long the retries of a queue's tasks without a backoff of their own wait:
        `exp:10s..6h`, `fixed:30s`, `linear:10s..5m` or `10s,1m,10m` (None: the default)."""
        return self.call("PUT", f"/v1/queues/{self._q(name)}/backoff{self._create(create)}", {"backoff": backoff})

    def set_queue_retention(self, name: str, create: bool = False, **retention: Any) -> Json:
        """Sets how long a queue keeps its ended tasks, by state: `succeeded`, `dead`,
        `cancelled`, `expired` (like `"1d"`; None: the server's `--retention`)."""
        return self.call("PUT", f"/v1/queues/{self._q(name)}/retention{self._create(create)}", retention)

    def remove_queue(self, name: str) -> None:
        """Removes a queue that has no unfinished task: its ended tasks are deleted, its pause
        and limits go, and it leaves the list. Conflict while an unfinished task is in it."""
        self.call("DELETE", f"/v1/queues/{self._q(name)}")

    # -- what operators look at --------------------------------------------------------------

    def workers(self, limit: Optional[int] = None) -> List[Json]:
        """Workers and nodes seen lately, most recently seen first."""
        query = f"?limit={int(limit)}" if limit is not None else ""
        return self.call("GET", f"/v1/workers{query}")["workers"]

    def cluster(self) -> Json:
        """The nodes, the leader, and the backend."""
        return self.call("GET", "/v1/cluster")

    def activity(self, minutes: Optional[int] = None) -> Json:
        """Tasks started, succeeded and failed per minute over the last `minutes`."""
        query = f"?minutes={int(minutes)}" if minutes is not None else ""
        return self.call("GET", f"/v1/activity{query}")

    def kinds(self, minutes: Optional[int] = None) -> Json:
        """Figures per task kind over the last `minutes` (60 by default): runs per minute,
        failure rate, run time at p50 and p95 (`{"minutes", "sampled", "kinds": [...]}`)."""
        query = f"?minutes={int(minutes)}" if minutes is not None else ""
        return self.call("GET", f"/v1/kinds{query}")

    def cron_next(
        self,
        expr: str,
        *,
        tz: Optional[str] = None,
        n: Optional[int] = None,
        after: Optional[str] = None,
        dst: Optional[str] = None,
    ) -> Json:
        """The next fire times of a cron expression (`{"times": [...]}`)."""
        query = urllib.parse.urlencode(_drop_none({"expr": expr, "tz": tz, "n": n, "after": after, "dst": dst}))
        return self.call("GET", f"/v1/cron/next?{query}")

    # -- the worker protocol, one task at a time (`Worker` batches these) --------------------

    def complete(self, task_id: int, attempt: int, result: Any = None) -> Json:
        """Ends an attempt held by this worker as succeeded, with `result` to keep."""
        return self.call("POST", f"/v1/tasks/{int(task_id)}/complete", _drop_none({"attempt": attempt, "result": result}))

    def fail(self, task_id: int, attempt: int, error: str, retryable: bool = True) -> Json:
        """Ends an attempt as failed; it is retried (after its backoff) unless not `retryable`
        or its attempts are spent."""
        body = {"attempt": attempt, "error": error, "retryable": retryable}
        return self.call("POST", f"/v1/tasks/{int(task_id)}/fail", body)

    def heartbeat(self, task_id: int, attempt: int, lease_ttl: Optional[str] = None) -> Json:
        """Extends an attempt's lease; the answer says whether cancellation was asked."""
        body = _drop_none({"attempt": attempt, "lease_ttl": lease_ttl})
        return self.call("POST", f"/v1/tasks/{int(task_id)}/heartbeat", body)

    def snooze(self, task_id: int, attempt: int, delay: str) -> Json:
        """Gives the task back to run again after `delay` (`"30s"`), spending no attempt."""
        return self.call("POST", f"/v1/tasks/{int(task_id)}/snooze", {"attempt": attempt, "delay": delay})

    def release(self, task_id: int, attempt: int) -> Json:
        """Gives a claimed task back unstarted, spending no attempt."""
        return self.call("POST", f"/v1/tasks/{int(task_id)}/release", {"attempt": attempt})

    def acknowledge_cancel(self, task_id: int, attempt: int) -> Json:
        """Ends an attempt whose cancellation was asked, as cancelled."""
        return self.call("POST", f"/v1/tasks/{int(task_id)}/cancelled", {"attempt": attempt})

    def wait_for_work(self, after: int = 0, wait: Optional[str] = None) -> Json:
        """Waits until tasks may have become claimable since the epoch `after`, or `wait` is
        over: `{"epoch": N}`. Claims nothing."""
        query = urllib.parse.urlencode(_drop_none({"after": after, "wait": wait}))
        return self.call("GET", f"/v1/work?{query}", timeout=self.timeout + 60)

    def worker_beat(
        self,
        worker_id: str,
        *,
        queues: Iterable[str] = (),
        concurrency: Optional[int] = None,
        stopping: bool = False,
    ) -> Json:
        """A worker's sign of life, shown in `workers()` and the dashboard."""
        body = _drop_none({"queues": list(queues), "concurrency": concurrency, "stopping": stopping})
        return self.call("PUT", f"/v1/workers/{self._q(worker_id)}", body)
