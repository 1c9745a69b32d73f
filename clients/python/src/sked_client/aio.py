"""`AsyncClient`: the same calls as `Client`, as coroutines.

Each runs the blocking call in a worker thread (`asyncio.to_thread`), so the event loop is never
blocked and the package needs nothing beyond the standard library. Errors are the same
exceptions.
"""

import asyncio
from typing import Any, AsyncIterator, Iterable, List, Optional

from .client import DEFAULT_SERVER, Client, Json


class AsyncClient:
    """The API of one sked server, for `asyncio` code (see `Client`)."""

    def __init__(self, server: str = DEFAULT_SERVER, token: Optional[str] = None, timeout: float = 30):
        self.sync = Client(server, token, timeout)

    async def enqueue(self, kind: str, payload: Any = None, **options: Any) -> Json:
        return await asyncio.to_thread(self.sync.enqueue, kind, payload, **options)

    async def enqueue_many(self, tasks: Iterable[Json]) -> List[Json]:
        return await asyncio.to_thread(self.sync.enqueue_many, tasks)

    async def get(self, task_id: int) -> Json:
        return await asyncio.to_thread(self.sync.get, task_id)

    async def wait(self, task_id: int, timeout: float = 3600) -> Json:
        return await asyncio.to_thread(self.sync.wait, task_id, timeout)

    async def open_batch(self, **options: Any) -> Json:
        return await asyncio.to_thread(lambda: self.sync.open_batch(**options))

    async def close_batch(self, batch_id: int) -> Json:
        return await asyncio.to_thread(self.sync.close_batch, batch_id)

    async def batch(self, batch_id: int) -> Json:
        return await asyncio.to_thread(self.sync.batch, batch_id)

    async def wait_batch(self, batch_id: int, timeout: float = 3600) -> Json:
        return await asyncio.to_thread(self.sync.wait_batch, batch_id, timeout)

    async def batches(self, limit: Optional[int] = None, before: Optional[int] = None) -> List[Json]:
        return await asyncio.to_thread(self.sync.batches, limit, before)

    async def create_workflow(self, tasks: Iterable[Json], name: Optional[str] = None) -> Json:
        return await asyncio.to_thread(self.sync.create_workflow, list(tasks), name)

    async def workflow(self, workflow_id: int) -> Json:
        return await asyncio.to_thread(self.sync.workflow, workflow_id)

    async def wait_workflow(self, workflow_id: int, timeout: float = 3600) -> Json:
        return await asyncio.to_thread(self.sync.wait_workflow, workflow_id, timeout)

    async def workflows(self, limit: Optional[int] = None, before: Optional[int] = None) -> List[Json]:
        return await asyncio.to_thread(self.sync.workflows, limit, before)

    async def workflow_tasks(self, workflow_id: int) -> List[Json]:
        return await asyncio.to_thread(self.sync.workflow_tasks, workflow_id)

    async def cancel_workflow(self, workflow_id: int) -> Json:
        return await asyncio.to_thread(self.sync.cancel_workflow, workflow_id)

    async def list(
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
        filters = dict(state=state, queue=queue, kind=kind, schedule=schedule, key=key, unique_key=unique_key,
                       since=since, until=until, limit=limit, before=before)
        return await asyncio.to_thread(lambda: self.sync.list(**filters))

    async def cancel(self, task_id: int) -> Json:
        return await asyncio.to_thread(self.sync.cancel, task_id)

    async def delete(self, task_id: int) -> None:
        await asyncio.to_thread(self.sync.delete, task_id)

    async def retry(self, task_id: int) -> Json:
        return await asyncio.to_thread(self.sync.retry, task_id)

    async def reschedule(self, task_id: int, run_at: str) -> Json:
        return await asyncio.to_thread(self.sync.reschedule, task_id, run_at)

    async def add_schedule(
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
        return await asyncio.to_thread(
            lambda: self.sync.add_schedule(name, spec, kind, payload, tz=tz, queue=queue, **policies)
        )

    async def schedules(self) -> List[Json]:
        return await asyncio.to_thread(self.sync.schedules)

    async def apply_schedules(
        self,
        schedules: List[Json],
        group: Optional[str] = None,
        prune: bool = False,
        dry_run: bool = False,
    ) -> Json:
        return await asyncio.to_thread(self.sync.apply_schedules, schedules, group, prune, dry_run)

    async def schedule(self, name: str) -> Json:
        return await asyncio.to_thread(self.sync.schedule, name)

    async def pause_schedule(self, name: str) -> Json:
        return await asyncio.to_thread(self.sync.pause_schedule, name)

    async def resume_schedule(self, name: str) -> Json:
        return await asyncio.to_thread(self.sync.resume_schedule, name)

    async def trigger_schedule(self, name: str) -> Json:
        return await asyncio.to_thread(self.sync.trigger_schedule, name)

    async def remove_schedule(self, name: str) -> None:
        return await asyncio.to_thread(self.sync.remove_schedule, name)

    async def put_calendar(self, name: str, dates: Iterable[str], tz: Optional[str] = None) -> Json:
        return await asyncio.to_thread(self.sync.put_calendar, name, list(dates), tz)

    async def calendar(self, name: str) -> Json:
        return await asyncio.to_thread(self.sync.calendar, name)

    async def calendars(self) -> List[Json]:
        return await asyncio.to_thread(self.sync.calendars)

    async def remove_calendar(self, name: str) -> None:
        return await asyncio.to_thread(self.sync.remove_calendar, name)

    async def queues(self) -> List[Json]:
        return await asyncio.to_thread(self.sync.queues)

    async def pause_queue(self, name: str, create: bool = False) -> Json:
        return await asyncio.to_thread(self.sync.pause_queue, name, create)

    async def resume_queue(self, name: str, create: bool = False) -> Json:
        return await asyncio.to_thread(self.sync.resume_queue, name, create)

    async def limit_queue(self, name: str, create: bool = False, **limits: Any) -> Json:
        return await asyncio.to_thread(self.sync.limit_queue, name, create, **limits)

    async def set_queue_backoff(self, name: str, backoff: Optional[str], create: bool = False) -> Json:
        return await asyncio.to_thread(self.sync.set_queue_backoff, name, backoff, create)

    async def set_queue_retention(self, name: str, create: bool = False, **retention: Any) -> Json:
        return await asyncio.to_thread(self.sync.set_queue_retention, name, create, **retention)

    async def remove_queue(self, name: str) -> None:
        await asyncio.to_thread(self.sync.remove_queue, name)

    async def tasks(
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
    ) -> AsyncIterator[Json]:
        """Every task the filters match, newest first, a page at a time (`async for`)."""
        filters = {"state": state, "queue": queue, "kind": kind, "schedule": schedule,
                   "key": key, "unique_key": unique_key, "since": since, "until": until}
        pages = self.sync._task_pages(filters, page_size)
        # Each page is read in a worker thread, when the one before has been used.
        while (page := await asyncio.to_thread(next, pages, None)) is not None:
            for task in page:
                yield task

    async def held(self, task_id: int) -> Optional[Json]:
        return await asyncio.to_thread(self.sync.held, task_id)

    async def retry_all(self, **filters: Any) -> int:
        return await asyncio.to_thread(lambda: self.sync.retry_all(**filters))

    async def cancel_all(self, **filters: Any) -> int:
        return await asyncio.to_thread(lambda: self.sync.cancel_all(**filters))

    async def delete_all(self, **filters: Any) -> int:
        return await asyncio.to_thread(lambda: self.sync.delete_all(**filters))

    async def add_workflow_schedule(self, name: str, spec: str, tasks: Iterable[Json], **options: Any) -> Json:
        return await asyncio.to_thread(self.sync.add_workflow_schedule, name, spec, list(tasks), **options)

    async def put_schedule(self, name: str, definition: Json) -> Json:
        return await asyncio.to_thread(self.sync.put_schedule, name, definition)

    async def backfill_schedule(self, name: str, start: str, end: str) -> Json:
        return await asyncio.to_thread(self.sync.backfill_schedule, name, start, end)

    async def occurrences(self, name: str, limit: Optional[int] = None) -> List[Json]:
        return await asyncio.to_thread(self.sync.occurrences, name, limit)

    async def declare_schedules(self, group: str, schedules: List[Json]) -> Json:
        return await asyncio.to_thread(self.sync.declare_schedules, group, schedules)

    async def queue(self, name: str) -> Json:
        return await asyncio.to_thread(self.sync.queue, name)

    async def workers(self, limit: Optional[int] = None) -> List[Json]:
        return await asyncio.to_thread(self.sync.workers, limit)

    async def cluster(self) -> Json:
        return await asyncio.to_thread(self.sync.cluster)

    async def activity(self, minutes: Optional[int] = None) -> Json:
        return await asyncio.to_thread(self.sync.activity, minutes)

    async def kinds(self, minutes: Optional[int] = None) -> Json:
        return await asyncio.to_thread(self.sync.kinds, minutes)

    async def cron_next(self, expr: str, **options: Any) -> Json:
        return await asyncio.to_thread(lambda: self.sync.cron_next(expr, **options))

    async def complete(self, task_id: int, attempt: int, result: Any = None) -> Json:
        return await asyncio.to_thread(self.sync.complete, task_id, attempt, result)

    async def fail(self, task_id: int, attempt: int, error: str, retryable: bool = True) -> Json:
        return await asyncio.to_thread(self.sync.fail, task_id, attempt, error, retryable)

    async def heartbeat(self, task_id: int, attempt: int, lease_ttl: Optional[str] = None) -> Json:
        return await asyncio.to_thread(self.sync.heartbeat, task_id, attempt, lease_ttl)

    async def snooze(self, task_id: int, attempt: int, delay: str) -> Json:
        return await asyncio.to_thread(self.sync.snooze, task_id, attempt, delay)

    async def release(self, task_id: int, attempt: int) -> Json:
        return await asyncio.to_thread(self.sync.release, task_id, attempt)

    async def acknowledge_cancel(self, task_id: int, attempt: int) -> Json:
        return await asyncio.to_thread(self.sync.acknowledge_cancel, task_id, attempt)

    async def wait_for_work(self, after: int = 0, wait: Optional[str] = None) -> Json:
        return await asyncio.to_thread(self.sync.wait_for_work, after, wait)

    async def worker_beat(self, worker_id: str, **beat: Any) -> Json:
        return await asyncio.to_thread(lambda: self.sync.worker_beat(worker_id, **beat))
