"""A client and a worker for sked, the durable distributed task scheduler, over its HTTP API.
Standard library only.

    from sked_client import Client, Worker
    sked = Client("http://127.0.0.1:7070")
    sked.enqueue("email.send", {"to": "a@example.com"}, queue="mail")
"""

from .aio import AsyncClient
from .aio_worker import AsyncWorker
from .client import DEFAULT_SERVER, Client, new_task, workflow_task
from .errors import (
    Conflict,
    Forbidden,
    Internal,
    InvalidInput,
    InvalidJson,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    SkedError,
    StaleLease,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
)
from .worker import Cancelled, Context, Fatal, Retry, Snooze, Worker

__all__ = [
    "DEFAULT_SERVER",
    "AsyncClient",
    "AsyncWorker",
    "Cancelled",
    "Client",
    "Conflict",
    "Context",
    "Fatal",
    "Forbidden",
    "Internal",
    "InvalidInput",
    "InvalidJson",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "Retry",
    "SkedError",
    "Snooze",
    "StaleLease",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "Worker",
    "new_task",
    "workflow_task",
]
