#!/usr/bin/env python3
"""A sked worker in plain Python (standard library only), speaking the worker protocol
described in docs/worker-protocol.md.

    python3 examples/python/worker.py --server http://127.0.0.1:7070

It claims tasks of the kinds it has handlers for (long-polling when there is nothing to do),
runs them on a thread pool, heartbeats everything it holds in one request every third of the
lease (which is also how it learns that a task was cancelled), and reports endings in batches.
On SIGTERM or SIGINT it stops claiming, lets running tasks finish, and exits.

Handlers take (task, ctx) and return a JSON-able result, or raise:
  Retry("message")        a failure worth retrying (any other exception is one too)
  Fatal("message")        a failure retrying will not fix: the task is dead at once
  Snooze(seconds)         run again later without spending an attempt
ctx.cancelled() tells whether cancellation was asked; a handler that notices returns
by raising Cancelled().
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


class Retry(Exception):
    pass


class Fatal(Exception):
    pass


class Cancelled(Exception):
    pass


class Snooze(Exception):
    def __init__(self, seconds):
        super().__init__(f"snooze {seconds}s")
        self.seconds = seconds


class ApiError(Exception):
    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


class Client:
    def __init__(self, server, token=None):
        self.base = server.rstrip("/")
        self.token = token

    def call(self, method, path, body=None, timeout=30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("content-type", "application/json")
        if self.token:
            req.add_header("authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read())["error"]
                raise ApiError(e.code, err["code"], err["message"]) from None
            except (ValueError, KeyError):
                raise ApiError(e.code, "http", str(e)) from None


class Context:
    def __init__(self):
        self._cancel = threading.Event()

    def cancelled(self):
        return self._cancel.is_set()


class Worker:
    def __init__(self, client, handlers, name, queues=(), concurrency=4, lease_ttl=30):
        self.client = client
        self.handlers = handlers
        self.name = name
        self.queues = list(queues)
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.pool = ThreadPoolExecutor(max_workers=concurrency)
        self.lock = threading.Lock()
        self.held = {}  # (id, attempt) -> Context
        self.endings = []  # finish items waiting to be sent
        self.stopping = threading.Event()  # no more claims
        self.finished = threading.Event()  # nothing held any more: heartbeats end
        self.done = {"succeeded": 0, "failed": 0, "snoozed": 0, "cancelled": 0}

    # -- protocol calls ------------------------------------------------------------------

    def claim(self, wait):
        free = self.concurrency - len(self.held)
        if free <= 0:
            return []
        reply = self.client.call(
            "POST",
            "/v1/claim",
            {
                "worker": self.name,
                "queues": self.queues,
                "kinds": sorted(self.handlers),
                "max": free,
                "wait": f"{wait}s",
                "lease_ttl": f"{self.lease_ttl}s",
            },
            timeout=wait + 30,
        )
        return reply["tasks"]

    def heartbeat_loop(self):
        while not self.finished.wait(self.lease_ttl / 3):
            with self.lock:
                held = [{"id": i, "attempt": a} for (i, a) in self.held]
            if not held:
                continue
            try:
                reply = self.client.call(
                    "POST", "/v1/heartbeat", {"tasks": held, "lease_ttl": f"{self.lease_ttl}s"}
                )
            except (ApiError, OSError) as e:
                log(f"heartbeat failed: {e}")
                continue
            for h, r in zip(held, reply["results"]):
                ctx = self.held.get((h["id"], h["attempt"]))
                if ctx is None:
                    continue
                if "error" in r:
                    # stale_lease / not_found: the task was rescued; its result would be refused.
                    log(f"task {h['id']}: lease lost ({r['error']['code']})")
                    ctx._cancel.set()
                elif r["cancel_requested"]:
                    ctx._cancel.set()

    def flush(self):
        with self.lock:
            items, self.endings = self.endings, []
        if not items:
            return
        for attempt in range(10):
            try:
                reply = self.client.call("POST", "/v1/finish", {"results": items})
                for item, r in zip(items, reply["results"]):
                    if "error" in r:
                        log(f"task {item['id']}: ending not recorded: {r['error']['message']}")
                return
            except ApiError as e:
                if e.status != 503:
                    log(f"could not record endings: {e}")
                    return
            except OSError as e:
                log(f"cannot reach sked: {e}")
            time.sleep(min(2, 0.1 * 2**attempt))

    # -- running tasks -------------------------------------------------------------------

    def run_task(self, task, ctx):
        item = {"id": task["id"], "attempt": task["attempt"]}
        try:
            result = self.handlers[task["kind"]](task, ctx)
            item.update(outcome="succeeded")
            if result is not None:
                item["result"] = result
        except Snooze as s:
            item.update(outcome="snoozed", delay=f"{int(s.seconds)}s")
        except Cancelled:
            item.update(outcome="cancelled")
        except Fatal as e:
            item.update(outcome="failed", error=str(e), retryable=False)
        except Exception as e:  # noqa: BLE001 - any other error is a retryable failure
            item.update(outcome="failed", error=f"{type(e).__name__}: {e}", retryable=True)
        with self.lock:
            self.held.pop((task["id"], task["attempt"]), None)
            self.endings.append(item)
            self.done[item["outcome"]] += 1
        self.flush()

    def run(self, exit_when_idle=None):
        beat = threading.Thread(target=self.heartbeat_loop, daemon=True)
        beat.start()
        idle_since = time.monotonic()
        log(f"worker {self.name} started: kinds {sorted(self.handlers)}")
        while not self.stopping.is_set():
            # Long-poll only when idle, and not past an idle exit.
            wait = 1 if self.held or exit_when_idle else 10
            try:
                tasks = self.claim(wait)
            except (ApiError, OSError) as e:
                log(f"claim failed: {e}; retrying in 1s")
                time.sleep(1)
                continue
            if not tasks and len(self.held) >= self.concurrency:
                time.sleep(0.05)
            for t in tasks:
                ctx = Context()
                with self.lock:
                    self.held[(t["id"], t["attempt"])] = ctx
                self.pool.submit(self.run_task, t, ctx)
            if tasks or self.held:
                idle_since = time.monotonic()
            elif exit_when_idle and time.monotonic() - idle_since >= exit_when_idle:
                break
        self.stopping.set()
        self.pool.shutdown(wait=True)
        self.flush()
        self.finished.set()
        beat.join(timeout=5)
        log(f"worker {self.name} stopped: {self.done}")


def log(msg):
    print(f"[python-worker] {msg}", file=sys.stderr, flush=True)


# -- example handlers ------------------------------------------------------------------


def add(task, ctx):
    p = task["payload"]
    return {"sum": p["a"] + p["b"]}


def reject(task, ctx):
    raise Fatal(f"cannot handle {task['payload']!r}")


def wait_for_cancel(task, ctx):
    deadline = time.monotonic() + float(task["payload"].get("seconds", 30))
    while time.monotonic() < deadline:
        if ctx.cancelled():
            raise Cancelled()
        time.sleep(0.05)
    return {"waited": True}


HANDLERS = {"py.add": add, "py.reject": reject, "py.wait": wait_for_cancel}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=os.environ.get("SKED_URL", "http://127.0.0.1:7070"))
    ap.add_argument("--token", default=os.environ.get("SKED_TOKEN"))
    ap.add_argument("--queues", default="", help="comma-separated; all when empty")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--lease-ttl", type=int, default=30, help="seconds")
    ap.add_argument("--exit-when-idle", type=float, help="exit after this many idle seconds")
    args = ap.parse_args()
    worker = Worker(
        Client(args.server, args.token),
        HANDLERS,
        name=f"python-{os.uname().nodename}-{os.getpid()}",
        queues=[q for q in args.queues.split(",") if q],
        concurrency=args.concurrency,
        lease_ttl=args.lease_ttl,
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stopping.set())
    worker.run(exit_when_idle=args.exit_when_idle)


if __name__ == "__main__":
    main()
