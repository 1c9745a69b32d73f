"""`AsyncWorker`: the worker of `worker.py` for `asyncio` code, with `async def` handlers.

The same protocol and the same meaning: batched claims with long-poll, one heartbeat request
for everything held every third of the lease (which is how a cancellation arrives), endings
sent in batches, a graceful stop. A handler takes `(task, ctx)` and returns a JSON-able result
or raises `Retry`, `Fatal`, `Snooze(seconds)` or `Cancelled()`; any other exception is a
failure to retry, its traceback kept with the attempt and logged. Handlers run as tasks on the
caller's event loop, `concurrency` at a time; the HTTP calls run in worker threads, so the loop
is never blocked by the network.
"""

import asyncio
import inspect
import os
import signal
import socket
import sys
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

from ._trace import run_span
from .aio import AsyncClient
from .client import Client, Json
from .errors import SkedError
from .worker import Context, claim_body, failed, held_item, log_unrecorded, succeeded

AsyncHandler = Callable[[Json, Context], Awaitable[Any]]


class AsyncWorker:
    """Claims and runs tasks of the kinds it has `async def` handlers for, `concurrency` at a
    time, on the running event loop."""

    def __init__(
        self,
        client: Union[AsyncClient, Client],
        handlers: Optional[Dict[str, AsyncHandler]] = None,
        *,
        name: Optional[str] = None,
        queues: Iterable[str] = (),
        concurrency: int = 16,
        lease_ttl: float = 30,
        log: Callable[[str], None] = lambda m: print(f"[sked-worker] {m}", file=sys.stderr, flush=True),
    ):
        self.sync = client.sync if isinstance(client, AsyncClient) else client
        self.handlers: Dict[str, AsyncHandler] = dict(handlers or {})
        self.name = name or f"python-asyncio-{socket.gethostname()}-{os.getpid()}"
        self.queues = list(queues)
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.log = log
        self._held: Dict[Tuple[int, int], Context] = {}
        self._endings: List[Json] = []
        self._stopping = False
        self._on_signals = False
        self._wake: Optional[asyncio.Event] = None
        self.done = {"succeeded": 0, "failed": 0, "snoozed": 0, "cancelled": 0}

    def handle(self, kind: str) -> Callable[[AsyncHandler], AsyncHandler]:
        """Registers the decorated coroutine function as the handler of `kind`."""

        def register(f: AsyncHandler) -> AsyncHandler:
            self.handlers[kind] = f
            return f

        return register

    def stop(self) -> None:
        """Stops claiming; `run` returns once the running tasks have ended."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()

    def stop_on_signals(self) -> None:
        """SIGTERM and SIGINT stop the worker gracefully once `run` has started."""
        self._on_signals = True

    async def _call(self, method: str, path: str, body: Any, timeout: Optional[float] = None) -> Any:
        return await asyncio.to_thread(self.sync.call, method, path, body, timeout)

    async def _claim(self, wait: float) -> List[Json]:
        free = self.concurrency - len(self._held)
        if free <= 0:
            return []
        body = claim_body(self.name, self.queues, self.handlers, free, wait, self.lease_ttl)
        return (await self._call("POST", "/v1/claim", body, wait + 30))["tasks"]

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            held = list(self._held.items())
            if not held:
                continue
            body = {
                "tasks": [held_item(k, ctx) for k, ctx in held],
                "lease_ttl": f"{int(self.lease_ttl * 1000)}ms",
            }
            try:
                reply = await self._call("POST", "/v1/heartbeat", body)
            except (SkedError, OSError) as e:
                self.log(f"heartbeat failed: {e}")
                continue
            for (_, ctx), r in zip(held, reply["results"]):
                if "error" in r or r.get("cancel_requested"):
                    ctx._cancel.set()

    async def _flush(self) -> None:
        items, self._endings = self._endings, []
        if not items:
            return
        for attempt in range(10):
            try:
                reply = await self._call("POST", "/v1/finish", {"results": items})
                log_unrecorded(items, reply, self.log)
                return
            except SkedError as e:
                if e.status not in (0, 503):
                    self.log(f"could not record endings: {e}")
                    return
            except OSError as e:
                self.log(f"cannot reach sked: {e}")
            await asyncio.sleep(min(2.0, 0.1 * 2**attempt))

    async def _run_task(self, task: Json, ctx: Context, ended: asyncio.Event) -> None:
        item: Json = {"id": task["id"], "attempt": task["attempt"]}
        with run_span(task, self.name) as (traceparent, outcome):
            ctx.traceparent = traceparent
            try:
                result = self.handlers[task["kind"]](task, ctx)
                if inspect.isawaitable(result):
                    result = await result
                item.update(succeeded(result))
            except Exception as e:  # noqa: BLE001 - what it raised is the ending
                item.update(failed(e, task, self.log))
            outcome(item["outcome"], item.get("error"))
        self._held.pop((task["id"], task["attempt"]), None)
        self._endings.append(item)
        self.done[item["outcome"]] += 1
        ended.set()
        if self._wake is not None:
            self._wake.set()

    async def _sender(self, ended: asyncio.Event) -> None:
        # One request for every ending that came while the last one was on its way.
        while True:
            await ended.wait()
            ended.clear()
            await self._flush()

    async def run(self, exit_when_idle: Optional[float] = None) -> None:
        """Claims and runs tasks until `stop` (or a signal, after `stop_on_signals`), or, with
        `exit_when_idle`, until nothing was held or claimed for that many seconds."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        if self._on_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        ended = asyncio.Event()
        beat = asyncio.create_task(self._heartbeats())
        sender = asyncio.create_task(self._sender(ended))
        running: Set["asyncio.Task[None]"] = set()
        idle_since = loop.time()
        try:
            while not self._stopping:
                # Long-poll only when idle and not about to exit for being idle.
                wait = 1.0 if self._held or exit_when_idle else 10.0
                try:
                    tasks = await self._claim(wait)
                except (SkedError, OSError) as e:
                    self.log(f"claim failed: {e}; retrying in 1s")
                    await asyncio.sleep(1)
                    continue
                if not tasks and len(self._held) >= self.concurrency:
                    # Every slot busy: claim again as soon as one frees.
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), 0.1)
                    except asyncio.TimeoutError:
                        pass
                for t in tasks:
                    ctx = Context()
                    self._held[(t["id"], t["attempt"])] = ctx
                    job = asyncio.create_task(self._run_task(t, ctx, ended))
                    running.add(job)
                    job.add_done_callback(running.discard)
                if tasks or self._held:
                    idle_since = loop.time()
                elif exit_when_idle is not None and loop.time() - idle_since >= exit_when_idle:
                    break
            self._stopping = True
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        finally:
            sender.cancel()
            beat.cancel()
            await asyncio.gather(sender, beat, return_exceptions=True)
            await self._flush()
            if self._on_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
