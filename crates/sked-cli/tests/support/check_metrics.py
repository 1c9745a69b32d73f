"""Parses a Prometheus text exposition (format 0.0.4) from stdin with the reference Python
client's parser, checks what the parser leaves to the producer (histogram buckets cumulative and
ending in +Inf equal to _count, every family typed and documented, no sample twice), and prints
the samples as JSON lines: {"name": ..., "labels": {...}, "value": ...}.

Exits 1 with a message naming the problem when the text does not pass."""

import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def fail(msg):
    print(f"metrics check failed: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    text = sys.stdin.read()
    if not text.endswith("\n"):
        fail("the exposition must end with a newline")
    helped, typed = set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split(" ")[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if name in typed:
                fail(f"{name} is typed twice")
            typed[name] = kind
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and others on bad lines
        fail(f"the parser refused the text: {e!r}")
    seen = set()
    out = []
    for fam in families:
        # The parser names a counter family without its `_total` suffix.
        name = fam.name + "_total" if fam.type == "counter" and fam.name not in typed else fam.name
        if name not in typed:
            fail(f"{name} has no # TYPE line")
        if name not in helped:
            fail(f"{name} has no # HELP line")
        if fam.type != typed[name]:
            fail(f"{name}: parsed as {fam.type}, typed {typed[name]}")
        if fam.type == "counter" and not name.endswith("_total"):
            fail(f"counter {name} should end in _total")
        buckets = {}
        counts = {}
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in seen:
                fail(f"sample {key} appears twice")
            seen.add(key)
            if math.isnan(s.value):
                fail(f"{s.name} is NaN")
            if fam.type == "counter" and s.value < 0:
                fail(f"counter {s.name} is negative")
            if fam.type == "histogram":
                rest = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                if s.name.endswith("_bucket"):
                    buckets.setdefault(rest, []).append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    counts[rest] = s.value
            out.append({"name": s.name, "labels": s.labels, "value": s.value})
        for rest, bs in buckets.items():
            bs.sort()
            if bs[-1][0] != math.inf:
                fail(f"{fam.name}{dict(rest)}: no +Inf bucket")
            if any(b[1] > c[1] for b, c in zip(bs, bs[1:])):
                fail(f"{fam.name}{dict(rest)}: buckets are not cumulative")
            if bs[-1][1] != counts.get(rest):
                fail(f"{fam.name}{dict(rest)}: +Inf bucket differs from _count")
    if not families:
        fail("no metrics")
    for line in out:
        print(json.dumps(line))


main()
