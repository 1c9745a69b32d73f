"""`AsyncClient`: the same calls as `Client`, as coroutines.

Each runs the blocking call in a worker thread (`asyncio.to_thread`), so the event loop is never
blocked and the package needs nothing beyond the standard library. Errors are the same
exceptions.
"""

import asyncio
from typing import Any, Iterable, List, Optional

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

    async def list(
        self,
        *,
        state: Optional[str] = None,
        queue: Optional[str] = None,
        kind: Optional[str] = None,
        schedule: Optional[str] = None,
        limit: Optional[int] = None,
        before: Optional[int] = None,
    ) -> List[Json]:
        filters = dict(state=state, queue=queue, kind=kind, schedule=schedule, limit=limit, before=before)
        return await asyncio.to_thread(lambda: self.sync.list(**filters))

    async def cancel(self, task_id: int) -> Json:
        return await asyncio.to_thread(self.sync.cancel, task_id)

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

    async def queues(self) -> List[Json]:
        return await asyncio.to_thread(self.sync.queues)

    async def pause_queue(self, name: str, create: bool = False) -> Json:
        return await asyncio.to_thread(self.sync.pause_queue, name, create)

    async def resume_queue(self, name: str, create: bool = False) -> Json:
        return await asyncio.to_thread(self.sync.resume_queue, name, create)

    async def limit_queue(self, name: str, create: bool = False, **limits: Any) -> Json:
        return await asyncio.to_thread(self.sync.limit_queue, name, create, **limits)

    async def remove_queue(self, name: str) -> None:
        await asyncio.to_thread(self.sync.remove_queue, name)
