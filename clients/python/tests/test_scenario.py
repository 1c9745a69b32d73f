"""The client and the worker against a real sked server (its URL in SKED_URL; the Rust test
`python_client` starts one): enqueue, a schedule, and a worker that completes a task, fails
one retryably and one fatally, and heartbeats a slow one past its lease."""

import os
import threading
import time
import unittest

import asyncio

from sked_client import (
    AsyncClient,
    AsyncWorker,
    Cancelled,
    Client,
    Conflict,
    Fatal,
    InvalidInput,
    NotFound,
    Retry,
    Snooze,
    Worker,
    new_task,
    workflow_task,
)

LEASE = 1.5  # seconds


class Scenario(unittest.TestCase):
    def setUp(self):
        self.sked = Client(os.environ["SKED_URL"], os.environ.get("SKED_TOKEN"))

    def test_tasks_schedules_queues_and_errors(self):
        added = self.sked.enqueue("py.later", {"n": 1}, queue="py", run_at="2099-01-01T00:00:00Z")
        self.assertEqual(added["state"], "scheduled")
        task = self.sked.get(added["id"])
        self.assertEqual((task["kind"], task["payload"], task["queue"]), ("py.later", {"n": 1}, "py"))
        many = self.sked.enqueue_many([new_task("py.later", i, run_at="2099-01-01T00:00:00Z") for i in range(3)])
        self.assertEqual(len(many), 3)
        self.assertEqual(self.sked.cancel(added["id"])["state"], "cancelled")
        self.assertIn(added["id"], [t["id"] for t in self.sked.list(state="cancelled")])
        with self.assertRaises(NotFound) as nf:
            self.sked.get(999_999_999)
        self.assertEqual((nf.exception.status, nf.exception.code), (404, "not_found"))
        with self.assertRaises(InvalidInput):
            self.sked.enqueue("")
        self.sked.add_schedule("py-hourly", "every 1h", "py.later", {"from": "schedule"})
        self.assertEqual(self.sked.schedule("py-hourly")["name"], "py-hourly")
        self.assertIn("py-hourly", [s["name"] for s in self.sked.schedules()])
        self.assertTrue(self.sked.pause_schedule("py-hourly")["paused"])
        self.assertFalse(self.sked.resume_schedule("py-hourly")["paused"])
        self.sked.remove_schedule("py-hourly")
        with self.assertRaises(NotFound):
            self.sked.schedule("py-hourly")
        # A calendar of dates to skip, bounds, and a calendar kept while a schedule skips it.
        cal = self.sked.put_calendar("py-holidays", ["2099-12-25", "2099-01-01"], tz="UTC")
        self.assertEqual(cal["dates"], ["2099-01-01", "2099-12-25"])
        bounded = self.sked.add_schedule(
            "py-bounded", "every 1h", "py.later", skip_calendars=["py-holidays"], max_runs=3,
            end_at="2099-06-01T00:00:00Z",
        )
        self.assertEqual((bounded["max_runs"], bounded["runs"], bounded["skip_calendars"]), (3, 0, ["py-holidays"]))
        with self.assertRaises(Conflict):
            self.sked.remove_calendar("py-holidays")
        with self.assertRaises(InvalidInput):
            self.sked.add_schedule("py-bad", "every 1h", "py.later", skip_calendars=["py-none"])
        self.sked.remove_schedule("py-bounded")
        self.assertIn("py-holidays", [c["name"] for c in self.sked.calendars()])
        self.sked.remove_calendar("py-holidays")
        with self.assertRaises(NotFound):
            self.sked.calendar("py-holidays")
        many = [{"name": f"py-{i}", "spec": "every 1h", "task": {"kind": "py.later"}} for i in range(3)]
        self.assertEqual(self.sked.apply_schedules(many, group="py")["created"], ["py-0", "py-1", "py-2"])
        dry = self.sked.apply_schedules(many[:1], group="py", prune=True, dry_run=True)
        self.assertEqual(dry["removed"], ["py-1", "py-2"])
        self.assertEqual(self.sked.apply_schedules(many[:1], group="py", prune=True)["removed"], ["py-1", "py-2"])
        with self.assertRaises(InvalidInput):
            self.sked.apply_schedules([{"name": "bad", "spec": "61 * * * *", "task": {"kind": "k"}}])
        self.sked.remove_schedule("py-0")
        # Lists are read a page at a time: more schedules than one page holds, all listed.
        bulk = [{"name": f"py-bulk-{i:04}", "spec": "every 1h", "task": {"kind": "py.later"}} for i in range(1050)]
        self.sked.apply_schedules(bulk, group="py-bulk")
        listed = [s["name"] for s in self.sked.schedules() if s["name"].startswith("py-bulk-")]
        self.assertEqual(listed, [s["name"] for s in bulk])
        self.assertEqual(len(self.sked.apply_schedules([], group="py-bulk", prune=True)["removed"]), 1050)
        with self.assertRaises(NotFound):
            self.sked.pause_queue("py-new")
        limited = self.sked.limit_queue("py-new", create=True, concurrency=3)
        self.assertEqual(limited["concurrency_limit"], 3)
        ordered = self.sked.limit_queue("py-new", per_key=1, key_order="strict")
        self.assertEqual((ordered["per_key"], ordered["key_order"]), (1, "strict"))
        with self.assertRaises(InvalidInput):
            self.sked.limit_queue("py-new", per_key=2)
        self.assertNotIn("key_order", self.sked.limit_queue("py-new", key_order="priority"))
        self.assertTrue(self.sked.pause_queue("py-new")["paused"])
        self.assertFalse(self.sked.resume_queue("py-new")["paused"])
        kept = self.sked.set_queue_retention("py-new", succeeded="1h", dead="30d")
        self.assertEqual(kept["retention"], {"succeeded": "1h", "dead": "30d"})
        self.assertEqual(self.sked.set_queue_backoff("py-new", "fixed:30s")["backoff"], "fixed:30s")
        self.assertNotIn("backoff", self.sked.set_queue_backoff("py-new", None))
        with self.assertRaises(InvalidInput):
            self.sked.set_queue_backoff("py-new", "fixed:0s")
        self.sked.remove_queue("py-new")
        self.assertNotIn("py-new", [q["name"] for q in self.sked.queues()])

    def test_a_task_not_started_by_its_deadline_expires(self):
        self.sked.pause_queue("py-late", create=True)
        added = self.sked.enqueue("py.late", None, queue="py-late", ttl="1s")
        self.assertIn("expires_at", self.sked.get(added["id"]))
        self.assertEqual(self.sked.wait(added["id"], timeout=15)["state"], "expired")
        with self.assertRaises(InvalidInput):
            self.sked.enqueue("py.late", None, expires_at="2000-01-01T00:00:00Z")

    def test_the_asyncio_client_makes_the_same_calls(self):
        async def scenario():
            sked = AsyncClient(os.environ["SKED_URL"], os.environ.get("SKED_TOKEN"))
            added = await asyncio.gather(
                *(sked.enqueue("py.async", i, run_at="2099-01-01T00:00:00Z") for i in range(5))
            )
            ids = sorted(a["id"] for a in added)
            listed = await sked.list(kind="py.async")
            self.assertEqual(sorted(t["id"] for t in listed), ids)
            self.assertEqual((await sked.get(ids[0]))["payload"] in range(5), True)
            with self.assertRaises(NotFound):
                await sked.get(999_999_999)
            await sked.add_schedule("py-async", "every 1h", "py.async", tz="UTC")
            self.assertEqual((await sked.schedule("py-async"))["name"], "py-async")
            await sked.remove_schedule("py-async")
            made = await sked.create_workflow([workflow_task("a", "py.async", run_at="2099-01-01T00:00:00Z")])
            self.assertEqual((await sked.workflow_tasks(made["id"]))[0]["name"], "a")
            self.assertEqual((await sked.cancel_workflow(made["id"]))["state"], "cancelled")
            self.assertTrue((await sked.wait_workflow(made["id"], timeout=1))["done"])
            self.assertIn(made["id"], [w["id"] for w in await sked.workflows()])
            self.assertEqual((await sked.workflow(made["id"]))["counts"], {"cancelled": 1})

        asyncio.run(scenario())

    def test_the_rest_of_the_api(self):
        # Every page of a list; why a task waits; bulk changes with a dry run first.
        ids = [self.sked.enqueue("py.rest", {"i": i}, queue="py-rest")["id"] for i in range(5)]
        self.assertEqual([t["id"] for t in self.sked.tasks(queue="py-rest", page_size=2)], ids[::-1])
        self.assertIsNone(self.sked.held(ids[0]))
        self.assertEqual(self.sked.cancel_all(state="available", queue="py-rest", dry_run=True), 5)
        self.assertEqual(self.sked.cancel_all(state="available", queue="py-rest", batch=2), 5)
        self.assertEqual(self.sked.retry_all(state="cancelled", queue="py-rest", batch=2), 5)
        keyed = self.sked.enqueue("py.rest", None, queue="py-rest", key="tenant-9")["id"]
        self.assertEqual([t["id"] for t in self.sked.tasks(queue="py-rest", key="tenant-9")], [keyed])
        self.assertEqual(self.sked.list(queue="py-rest", until="2000-01-01T00:00:00Z"), [])
        self.assertEqual(self.sked.cancel_all(state="available", queue="py-rest", key="tenant-9"), 1)
        self.assertEqual(self.sked.delete_all(state="cancelled", queue="py-rest", dry_run=True), 1)
        self.assertEqual(self.sked.delete_all(state="cancelled", queue="py-rest"), 1)
        with self.assertRaises(NotFound):
            self.sked.get(keyed)
        gone = self.sked.cancel(self.sked.enqueue("py.rest", None, queue="py-rest")["id"])["id"]
        self.sked.delete(gone)
        with self.assertRaises(NotFound):
            self.sked.get(gone)
        # Schedules: replaced whole, backfilled, their ledger; declared by a group of code.
        put = self.sked.put_schedule("py-put", {"spec": "0 3 * * *", "tz": "UTC", "task": {"kind": "py.later"}})
        self.assertEqual((put["name"], put["spec"]), ("py-put", "0 3 * * *"))
        filled = self.sked.backfill_schedule("py-put", "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z")
        self.assertEqual(len(filled["enqueued"]), 2)
        self.assertGreaterEqual(len(self.sked.occurrences("py-put", limit=10)), 2)
        declared = self.sked.declare_schedules("py-code", [{"name": "py-declared", "spec": "every 1h", "task": {"kind": "k"}}])
        self.assertEqual(declared["created"], ["py-declared"])
        self.assertEqual(self.sked.declare_schedules("py-code", [])["removed"], ["py-declared"])
        self.sked.remove_schedule("py-put")
        # Queues, workers, the cluster, activity, cron.
        self.assertEqual(self.sked.queue("py-rest")["name"], "py-rest")
        self.assertEqual(self.sked.worker_beat("py-beat", queues=["py-proto"], concurrency=2), {"ok": True})
        self.assertIn("py-beat", [w["id"] for w in self.sked.workers()])
        self.assertIn("backend", self.sked.cluster())
        self.assertIn("buckets", self.sked.activity(minutes=5))
        self.assertEqual(self.sked.kinds(minutes=5)["minutes"], 5)
        self.assertEqual(len(self.sked.cron_next("0 3 * * *", tz="Europe/Berlin", n=2)["times"]), 2)
        # The worker protocol one task at a time.
        claim = lambda: self.sked.call("POST", "/v1/claim", {"worker": "py-beat", "queues": ["py-proto"], "max": 1})["tasks"][0]
        first = self.sked.enqueue("py.proto", None, queue="py-proto")["id"]
        held = claim()
        self.assertFalse(self.sked.heartbeat(first, held["attempt"])["cancel_requested"])
        self.assertEqual(self.sked.release(first, held["attempt"])["state"], "available")
        held = claim()
        self.assertEqual(self.sked.snooze(first, held["attempt"], "1h")["state"], "scheduled")
        second = self.sked.enqueue("py.proto", None, queue="py-proto")["id"]
        self.assertEqual(self.sked.complete(second, claim()["attempt"], {"ok": 1})["result"], {"ok": 1})
        third = self.sked.enqueue("py.proto", None, queue="py-proto", max_attempts=1)["id"]
        self.assertEqual(self.sked.fail(third, claim()["attempt"], "boom")["state"], "dead")
        fourth = self.sked.enqueue("py.proto", None, queue="py-proto")["id"]
        held = claim()
        self.sked.cancel(fourth)
        self.assertEqual(self.sked.acknowledge_cancel(fourth, held["attempt"])["state"], "cancelled")
        self.assertIn("epoch", self.sked.wait_for_work(0, "10ms"))
        # A task that waits for another; waiting for a task to end.
        parent = self.sked.enqueue("py.proto", None, queue="py-proto")["id"]
        child = self.sked.enqueue("py.proto", None, queue="py-proto", depends_on=[parent])
        self.assertEqual(child["state"], "waiting")
        self.assertEqual(self.sked.get(child["id"])["waiting_for"], [parent])
        self.assertEqual(self.sked.wait(child["id"], timeout=0.05)["state"], "waiting")
        self.assertEqual(self.sked.complete(parent, claim()["attempt"])["state"], "succeeded")
        self.assertEqual(self.sked.complete(child["id"], claim()["attempt"])["state"], "succeeded")
        self.assertEqual(self.sked.wait(child["id"], timeout=5)["state"], "succeeded")
        # A workflow: made whole, run in its order, waited for; a bad one makes nothing.
        made = self.sked.create_workflow(
            [workflow_task("b", "py.proto", queue="py-proto", after=["a"]), workflow_task("a", "py.proto", queue="py-proto")],
            name="py-flow",
        )
        self.assertLess(made["tasks"]["a"], made["tasks"]["b"])
        flow = self.sked.workflow(made["id"])
        self.assertEqual((flow["name"], flow["state"], flow["counts"]), ("py-flow", "active", {"available": 1, "waiting": 1}))
        self.assertEqual([(t["name"], t["after"]) for t in self.sked.workflow_tasks(made["id"])], [("a", []), ("b", ["a"])])
        self.assertEqual(self.sked.workflows(limit=1)[0]["id"], made["id"])
        self.assertFalse(self.sked.wait_workflow(made["id"], timeout=0.05)["done"])
        for _ in range(2):
            held = claim()
            self.sked.complete(held["id"], held["attempt"])
        self.assertEqual(self.sked.wait_workflow(made["id"], timeout=5)["state"], "succeeded")
        with self.assertRaises(InvalidInput) as bad:
            self.sked.create_workflow([workflow_task("x", "k", after=["x"])])
        self.assertIn("cycle", str(bad.exception))
        later = self.sked.create_workflow([workflow_task("x", "k", run_at="2099-01-01T00:00:00Z")])
        self.assertEqual(self.sked.cancel_workflow(later["id"])["state"], "cancelled")
        # A schedule that starts a workflow at each occurrence.
        etl = [workflow_task("extract", "py.etl"), workflow_task("load", "py.etl", after=["extract"])]
        made = self.sked.add_workflow_schedule("py-etl", "@daily", etl, workflow_name="etl", overlap="skip")
        self.assertEqual((made["workflow"]["name"], len(made["workflow"]["tasks"])), ("etl", 2))
        self.assertNotIn("task", made)
        with self.assertRaises(InvalidInput) as bad:
            self.sked.add_workflow_schedule("py-bad", "@daily", [workflow_task("x", "k", depends_on=[1])])
        self.assertIn("task ids", str(bad.exception))
        self.sked.remove_schedule("py-etl")
        # A batch: its tasks join it; its callback is enqueued once, after it is closed and they ended.
        opened = self.sked.open_batch(name="py-batch", on_complete=new_task("py.done", {"to": "ops"}, queue="py-proto"))
        for _ in range(2):
            self.sked.enqueue("py.proto", None, queue="py-proto", batch=opened["id"])
        for _ in range(2):
            held = claim()
            self.sked.complete(held["id"], held["attempt"])
        self.assertEqual(self.sked.batch(opened["id"])["state"], "open")
        self.assertEqual(self.sked.close_batch(opened["id"])["state"], "done")
        done = self.sked.wait_batch(opened["id"], timeout=5)
        callback = self.sked.get(done["on_complete_task"])
        self.assertEqual(callback["payload"], {"to": "ops", "batch": {"id": opened["id"], "counts": {"succeeded": 2}}})
        self.assertEqual(self.sked.batches(limit=1)[0]["id"], opened["id"])
        with self.assertRaises(InvalidInput):
            self.sked.enqueue("py.proto", None, batch=987654)

    def test_a_worker_completes_fails_and_heartbeats(self):
        traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ok = self.sked.enqueue("py.ok", {"a": 2, "b": 3}, queue="pyw", traceparent=traceparent)["id"]
        flaky = self.sked.enqueue("py.flaky", None, queue="pyw", max_attempts=3)["id"]
        fatal = self.sked.enqueue("py.fatal", None, queue="pyw", max_attempts=3)["id"]
        slow = self.sked.enqueue("py.slow", None, queue="pyw")["id"]
        broken = self.sked.enqueue("py.broken", {"n": 0}, queue="pyw", max_attempts=2)["id"]
        logged = []
        worker = Worker(self.sked, queues=["pyw"], concurrency=4, lease_ttl=LEASE, log=logged.append)
        seen = {}

        @worker.handle("py.broken")
        def broken_handler(task, ctx):
            return 1 / task["payload"]["n"]

        @worker.handle("py.ok")
        def add(task, ctx):
            seen["traceparent"] = ctx.traceparent
            return {"sum": task["payload"]["a"] + task["payload"]["b"]}

        @worker.handle("py.flaky")
        def flaky_handler(task, ctx):
            raise Retry("not yet")

        @worker.handle("py.fatal")
        def fatal_handler(task, ctx):
            raise Fatal("never")

        @worker.handle("py.slow")
        def slow_handler(task, ctx):
            ctx.progress({"percent": 30, "step": "sleeping"})
            time.sleep(LEASE * 2.5)
            # Still held, its lease extended past the first one by the heartbeats.
            now = self.sked.get(task["id"])
            seen["lease"] = (now["started_at"], now["lease_expires_at"], now["state"])
            seen["progress"] = now.get("progress")
            return "slow done"

        runner = threading.Thread(target=worker.run, kwargs={"exit_when_idle": 1.0})
        runner.start()
        runner.join(timeout=60)
        self.assertFalse(runner.is_alive(), "the worker did not stop when idle")
        self.assertEqual(seen["progress"], {"percent": 30, "step": "sleeping"}, "a heartbeat carried it")

        self.assertEqual(self.sked.get(ok)["state"], "succeeded")
        self.assertEqual(self.sked.get(ok)["result"], {"sum": 5})
        # Without OpenTelemetry installed the handler gets the task's own trace context.
        self.assertEqual(seen["traceparent"], traceparent)
        self.assertEqual(self.sked.get(ok)["traceparent"], traceparent)
        flaky_task = self.sked.get(flaky)
        self.assertEqual(flaky_task["state"], "retrying")
        self.assertIn("not yet", str(flaky_task))
        # A handler that raises: its traceback is kept with the attempt and logged.
        broken_task = self.sked.get(broken)
        error = broken_task["last_error"]
        self.assertIn("Traceback (most recent call last)", error)
        self.assertIn("broken_handler", error)
        self.assertIn("ZeroDivisionError: division by zero", error)
        said = "\n".join(logged)
        self.assertIn(f"task {broken} (py.broken) attempt 1 failed: ZeroDivisionError", said)
        self.assertIn("broken_handler", said)
        fatal_task = self.sked.get(fatal)
        self.assertEqual((fatal_task["state"], fatal_task["attempt"]), ("dead", 1))
        slow_task = self.sked.get(slow)
        self.assertEqual((slow_task["state"], slow_task["attempt"]), ("succeeded", 1))
        started, lease, state = seen["lease"]
        self.assertEqual(state, "running")
        self.assertGreater(_secs(lease) - _secs(started), LEASE * 2, "heartbeats extended the lease")

    def test_an_asyncio_worker_does_what_the_threaded_one_does(self):
        ok = self.sked.enqueue("pya.ok", {"a": 2, "b": 3}, queue="pya")["id"]
        flaky = self.sked.enqueue("pya.flaky", None, queue="pya", max_attempts=3)["id"]
        fatal = self.sked.enqueue("pya.fatal", None, queue="pya", max_attempts=3)["id"]
        broken = self.sked.enqueue("pya.broken", {"n": 0}, queue="pya", max_attempts=2)["id"]
        snoozing = self.sked.enqueue("pya.snooze", None, queue="pya")["id"]
        slow = self.sked.enqueue("pya.slow", None, queue="pya")["id"]
        stopped = self.sked.enqueue("pya.stoppable", None, queue="pya")["id"]
        logged = []
        seen = {}
        sked = AsyncClient(os.environ["SKED_URL"], os.environ.get("SKED_TOKEN"))
        worker = AsyncWorker(sked, queues=["pya"], concurrency=8, lease_ttl=LEASE, log=logged.append)

        @worker.handle("pya.ok")
        async def add(task, ctx):
            await asyncio.sleep(0.01)
            return {"sum": task["payload"]["a"] + task["payload"]["b"]}

        @worker.handle("pya.flaky")
        async def flaky_handler(task, ctx):
            raise Retry("not yet")

        @worker.handle("pya.fatal")
        async def fatal_handler(task, ctx):
            raise Fatal("never")

        @worker.handle("pya.broken")
        async def async_broken_handler(task, ctx):
            return 1 / task["payload"]["n"]

        @worker.handle("pya.snooze")
        async def snooze_handler(task, ctx):
            raise Snooze(3600)

        @worker.handle("pya.slow")
        async def slow_handler(task, ctx):
            # Many handlers wait at once on one loop; heartbeats keep this one's lease.
            await asyncio.sleep(LEASE * 2.5)
            now = await sked.get(task["id"])
            seen["lease"] = (now["started_at"], now["lease_expires_at"], now["state"])
            return "slow done"

        @worker.handle("pya.stoppable")
        async def stoppable(task, ctx):
            await sked.cancel(task["id"])
            while not ctx.cancelled():
                await asyncio.sleep(0.05)
            raise Cancelled()

        asyncio.run(asyncio.wait_for(worker.run(exit_when_idle=1.0), 60))

        self.assertEqual(self.sked.get(ok)["result"], {"sum": 5})
        self.assertEqual(self.sked.get(flaky)["state"], "retrying")
        self.assertEqual((self.sked.get(fatal)["state"], self.sked.get(fatal)["attempt"]), ("dead", 1))
        error = self.sked.get(broken)["last_error"]
        self.assertIn("async_broken_handler", error)
        self.assertIn("ZeroDivisionError", error)
        self.assertTrue(any(f"task {broken} (pya.broken) attempt 1 failed" in m for m in logged), logged)
        self.assertEqual(self.sked.get(snoozing)["state"], "scheduled")
        self.assertEqual(self.sked.get(slow)["state"], "succeeded")
        started, lease, state = seen["lease"]
        self.assertEqual(state, "running")
        self.assertGreater(_secs(lease) - _secs(started), LEASE * 2, "heartbeats extended the lease")
        self.assertEqual(self.sked.get(stopped)["state"], "cancelled")
        self.assertEqual(worker.done, {"succeeded": 2, "failed": 3, "snoozed": 1, "cancelled": 1})


def _secs(rfc3339):
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    unittest.main()
