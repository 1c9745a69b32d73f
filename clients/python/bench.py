"""How fast the Python worker drains no-op tasks from a running server:

    SKED_URL=http://127.0.0.1:7070 PYTHONPATH=src python3 bench.py -n 10000 -c 32

Enqueues n tasks of a kind of its own, then times a Worker with c threads from its start to
the last ending; prints one JSON line.
"""

import argparse
import json
import os
import threading
import time
import uuid

from sked_client import Client, Worker, new_task


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10_000)
    ap.add_argument("-c", type=int, default=32, help="worker threads")
    args = ap.parse_args()
    sked = Client(os.environ.get("SKED_URL", "http://127.0.0.1:7070"), os.environ.get("SKED_TOKEN"))
    kind = f"bench.noop.{uuid.uuid4().hex[:8]}"
    for start in range(0, args.n, 1000):
        sked.enqueue_many([new_task(kind, i) for i in range(start, min(args.n, start + 1000))])
    worker = Worker(sked, {kind: lambda task, ctx: None}, concurrency=args.c, log=lambda m: None)
    began = time.monotonic()
    runner = threading.Thread(target=worker.run)
    runner.start()
    while worker.done["succeeded"] < args.n:
        time.sleep(0.005)
    secs = time.monotonic() - began
    worker.stop()
    runner.join()
    print(json.dumps({"workload": "python-worker", "n": args.n, "threads": args.c,
                      "per_s": round(args.n / secs), "secs": round(secs, 3)}))


if __name__ == "__main__":
    main()
