"""`Worker`: runs handlers for task kinds over the worker protocol (docs/worker-protocol.md):
batched claims with long-poll, one heartbeat request for everything held every third of the
lease (which is also how a cancellation arrives), endings sent in batches, a graceful stop.

A handler takes `(task, ctx)` and returns a JSON-able result, or raises:

- `Retry("why")`: a failure worth retrying (any other exception is one too);
- `Fatal("why")`: retrying will not help, the task is dead at once;
- `Snooze(seconds)`: run again later without spending an attempt;
- `Cancelled()`: it noticed `ctx.cancelled()` and stopped.
"""

import os
import signal
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from ._trace import run_span
from .client import Client, Json
from .errors import SkedError


#: The most of an error (a traceback) a worker sends to be kept with the attempt.
ERROR_LIMIT = 8192


def bounded(text: str, limit: int = ERROR_LIMIT) -> str:
    """`text` when it fits in `limit` characters, else its head and its tail (where a
    traceback names the exception and the innermost frames) with a mark between."""
    if len(text) <= limit:
        return text
    head = limit // 8
    mark = f"\n… {len(text) - limit} characters left out …\n"
    return text[:head] + mark + text[-(limit - head - len(mark)):]


class Retry(Exception):
    """A failure worth retrying."""


class Fatal(Exception):
    """A failure retrying will not fix: the task is dead at once."""


class Cancelled(Exception):
    """The handler saw that cancellation was asked and stopped."""


class Snooze(Exception):
    """Run the task again after `seconds`, without spending an attempt."""

    def __init__(self, seconds: float):
        super().__init__(f"snooze {seconds}s")
        self.seconds = seconds


class Context:
    """What a running handler may ask: whether its task's cancellation was asked (or its
    lease was lost: its result would be refused), and `traceparent`, the W3C trace context it
    runs in (its run's span with OpenTelemetry installed, else the task's; None when the task
    has none), to pass on to what it calls."""

    def __init__(self) -> None:
        self._cancel = threading.Event()
        self.traceparent: Optional[str] = None
        self._progress: Any = None

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def progress(self, progress: Any) -> None:
        """Reports how far the task has come: a number from 0 to 100, or a small dict (at most
        4 KiB as JSON; its "percent", if any, from 0 to 100). The next heartbeat carries the
        latest to sked, where the task shows it; one that is not a progress is refused there
        (the heartbeat fails and is logged)."""
        self._progress = progress


def held_item(key: Tuple[int, int], ctx: "Context") -> Json:
    """A held task as a heartbeat names it, with the progress its handler last reported."""
    item: Json = {"id": key[0], "attempt": key[1]}
    if ctx._progress is not None:
        item["progress"] = ctx._progress
    return item


Handler = Callable[[Json, Context], Any]


def claim_body(name: str, queues: List[str], kinds: Iterable[str], free: int, wait: float, lease_ttl: float) -> Json:
    """The request that claims up to `free` tasks, long-polling `wait` seconds."""
    return {
        "worker": name,
        "queues": queues,
        "kinds": sorted(kinds),
        "max": free,
        "wait": f"{int(wait * 1000)}ms",
        "lease_ttl": f"{int(lease_ttl * 1000)}ms",
    }


def succeeded(result: Any) -> Json:
    """The ending of a run that returned `result`."""
    return {"outcome": "succeeded"} if result is None else {"outcome": "succeeded", "result": result}


def failed(e: BaseException, task: Json, log: Callable[[str], None]) -> Json:
    """The ending of a run that raised `e` (call it in the `except` block: it reads the
    traceback being handled). A failure is logged; any exception but `Fatal` is retried, its
    traceback kept with the attempt (bounded), as a worker's operator would look for it."""
    if isinstance(e, Snooze):
        return {"outcome": "snoozed", "delay": f"{int(e.seconds * 1000)}ms"}
    if isinstance(e, Cancelled):
        return {"outcome": "cancelled"}
    run = f"task {task['id']} ({task['kind']}) attempt {task['attempt']}"
    if isinstance(e, Fatal):
        log(f"{run} failed for good: {e}")
        return {"outcome": "failed", "error": str(e), "retryable": False}
    error = bounded(traceback.format_exc())
    log(f"{run} failed: {type(e).__name__}: {e}\n{error}")
    return {"outcome": "failed", "error": error, "retryable": True}


def log_unrecorded(items: List[Json], reply: Json, log: Callable[[str], None]) -> None:
    """Logs the endings the server did not record."""
    for item, r in zip(items, reply["results"]):
        if "error" in r:
            log(f"task {item['id']}: ending not recorded: {r['error']['message']}")


class Worker:
    """Claims and runs tasks of the kinds it has handlers for, `concurrency` at a time."""

    def __init__(
        self,
        client: Client,
        handlers: Optional[Dict[str, Handler]] = None,
        *,
        name: Optional[str] = None,
        queues: Iterable[str] = (),
        concurrency: int = 4,
        lease_ttl: float = 30,
        log: Callable[[str], None] = lambda m: print(f"[sked-worker] {m}", file=sys.stderr, flush=True),
    ):
        self.client = client
        self.handlers: Dict[str, Handler] = dict(handlers or {})
        self.name = name or f"python-{socket.gethostname()}-{os.getpid()}"
        self.queues = list(queues)
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.log = log
        self._lock = threading.Lock()
        self._held: Dict[Tuple[int, int], Context] = {}
        self._endings: List[Json] = []
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self._ended = threading.Event()  # endings wait to be sent
        self._freed = threading.Event()  # a slot freed up
        self.done = {"succeeded": 0, "failed": 0, "snoozed": 0, "cancelled": 0}

    def handle(self, kind: str) -> Callable[[Handler], Handler]:
        """Registers the decorated function as the handler of `kind`."""

        def register(f: Handler) -> Handler:
            self.handlers[kind] = f
            return f

        return register

    def stop(self) -> None:
        """Stops claiming; `run` returns once the running tasks have ended."""
        self._stopping.set()

    def stop_on_signals(self) -> None:
        """SIGTERM and SIGINT stop the worker gracefully (call from the main thread)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    # -- the protocol ----------------------------------------------------------------------

    def _claim(self, wait: float) -> List[Json]:
        free = self.concurrency - len(self._held)
        if free <= 0:
            return []
        body = claim_body(self.name, self.queues, self.handlers, free, wait, self.lease_ttl)
        return self.client.call("POST", "/v1/claim", body, timeout=wait + 30)["tasks"]

    def _heartbeats(self) -> None:
        while not self._finished.wait(self.lease_ttl / 3):
            with self._lock:
                held = [held_item(k, ctx) for k, ctx in self._held.items()]
            if not held:
                continue
            body = {"tasks": held, "lease_ttl": f"{int(self.lease_ttl * 1000)}ms"}
            try:
                reply = self.client.call("POST", "/v1/heartbeat", body)
            except (SkedError, OSError) as e:
                self.log(f"heartbeat failed: {e}")
                continue
            for h, r in zip(held, reply["results"]):
                ctx = self._held.get((h["id"], h["attempt"]))
                if ctx is not None and ("error" in r or r.get("cancel_requested")):
                    ctx._cancel.set()

    def _flush(self) -> None:
        with self._lock:
            items, self._endings = self._endings, []
        if not items:
            return
        for attempt in range(10):
            try:
                reply = self.client.call("POST", "/v1/finish", {"results": items})
                log_unrecorded(items, reply, self.log)
                return
            except SkedError as e:
                if e.status not in (0, 503):
                    self.log(f"could not record endings: {e}")
                    return
            except OSError as e:
                self.log(f"cannot reach sked: {e}")
            time.sleep(min(2.0, 0.1 * 2**attempt))

    def _run_task(self, task: Json, ctx: Context) -> None:
        item: Json = {"id": task["id"], "attempt": task["attempt"]}
        with run_span(task, self.name) as (traceparent, outcome):
            ctx.traceparent = traceparent
            try:
                item.update(succeeded(self.handlers[task["kind"]](task, ctx)))
            except Exception as e:  # noqa: BLE001 - what it raised is the ending
                item.update(failed(e, task, self.log))
            outcome(item["outcome"], item.get("error"))
        with self._lock:
            self._held.pop((task["id"], task["attempt"]), None)
            self._endings.append(item)
            self.done[item["outcome"]] += 1
        self._ended.set()
        self._freed.set()

    def _sender(self) -> None:
        # One request for every ending that came while the last one was on its way.
        while not self._finished.is_set():
            if self._ended.wait(0.1):
                self._ended.clear()
                self._flush()

    def run(self, exit_when_idle: Optional[float] = None) -> None:
        """Claims and runs tasks until `stop` (or a signal, after `stop_on_signals`), or, with
        `exit_when_idle`, until nothing was held or claimed for that many seconds."""
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
        beat = threading.Thread(target=self._heartbeats, daemon=True)
        beat.start()
        sender = threading.Thread(target=self._sender, daemon=True)
        sender.start()
        idle_since = time.monotonic()
        while not self._stopping.is_set():
            # Long-poll only when idle and not about to exit for being idle.
            wait = 1.0 if self._held or exit_when_idle else 10.0
            try:
                tasks = self._claim(wait)
            except (SkedError, OSError) as e:
                self.log(f"claim failed: {e}; retrying in 1s")
                self._stopping.wait(1)
                continue
            if not tasks and len(self._held) >= self.concurrency:
                # Every slot busy: claim again as soon as one frees.
                self._freed.wait(0.1)
                self._freed.clear()
            for t in tasks:
                ctx = Context()
                with self._lock:
                    self._held[(t["id"], t["attempt"])] = ctx
                pool.submit(self._run_task, t, ctx)
            if tasks or self._held:
                idle_since = time.monotonic()
            elif exit_when_idle is not None and time.monotonic() - idle_since >= exit_when_idle:
                break
        self._stopping.set()
        pool.shutdown(wait=True)
        self._finished.set()
        sender.join(timeout=30)
        self._flush()
        beat.join(timeout=5)
