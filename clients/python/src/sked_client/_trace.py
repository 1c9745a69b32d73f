"""W3C trace context for the client and the worker, through OpenTelemetry's API when it is
installed (`pip install opentelemetry-api`, with an SDK configured by the application), and as
plain `traceparent` values when it is not. The package itself needs nothing beyond the
standard library."""

from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional

try:  # pragma: no cover - which branch runs depends on what is installed
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover
    _propagate = None
    _trace = None

Json = Dict[str, Any]


def current_headers() -> Dict[str, str]:
    """The trace headers of the caller's current span (`traceparent`, `tracestate`), so that
    what it enqueues continues its trace; empty without OpenTelemetry or a current span."""
    if _propagate is None:
        return {}
    carrier: Dict[str, str] = {}
    _propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}


def _traceparent_of(span: Any) -> Optional[str]:
    sc = span.get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def _no_outcome(outcome: str, error: Optional[str] = None) -> None:
    pass


class _Untraced:
    """A run without OpenTelemetry: the task's own context, nothing recorded (a plain object,
    cheaper per task than a generator's context manager)."""

    __slots__ = ("given",)

    def __init__(self, given: Optional[str]) -> None:
        self.given = given

    def __enter__(self) -> Any:
        return self.given, _no_outcome

    def __exit__(self, *exc: Any) -> bool:
        return False


def run_span(task: Json, worker: str) -> Any:
    """The span of one run of `task` (`sked.run KIND`), a child of the task's trace context and
    current while the handler runs, as a context manager that gives the run's `traceparent`
    (the task's own without OpenTelemetry) and a function that sets the span's outcome."""
    if _trace is None or _propagate is None:
        return _Untraced(task.get("traceparent"))
    return _traced_run(task, worker)


@contextmanager
def _traced_run(task: Json, worker: str) -> Iterator[Any]:
    given = task.get("traceparent")
    parent = _propagate.extract({"traceparent": given}) if given else None
    tracer = _trace.get_tracer("sked_client")
    attributes = {
        "sked.task.id": task["id"],
        "sked.queue": task.get("queue", ""),
        "sked.kind": task["kind"],
        "sked.attempt": task["attempt"],
        "sked.worker": worker,
    }
    with tracer.start_as_current_span(
        f"sked.run {task['kind']}",
        context=parent,
        kind=_trace.SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:

        def outcome(what: str, error: Optional[str] = None) -> None:
            span.set_attribute("sked.outcome", what)
            if error is not None:
                span.set_status(_trace.Status(_trace.StatusCode.ERROR, error))
            elif what == "succeeded":
                span.set_status(_trace.Status(_trace.StatusCode.OK))

        yield _traceparent_of(span) or given, outcome
