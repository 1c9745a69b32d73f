"""Errors: one exception per error code of the sked API, all `SkedError`s."""

from typing import Dict, Optional, Type


class SkedError(Exception):
    """An error answer of the API (or a server that could not be reached: `status` 0)."""

    code = "unknown"

    def __init__(self, message: str, status: int = 0, code: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.status = status
        if code is not None:
            self.code = code


class InvalidRequest(SkedError):
    code = "invalid_request"


class InvalidJson(SkedError):
    code = "invalid_json"


class InvalidInput(SkedError):
    code = "invalid_input"


class NotFound(SkedError):
    code = "not_found"


class Conflict(SkedError):
    code = "conflict"


class StaleLease(SkedError):
    code = "stale_lease"


class Unauthorized(SkedError):
    code = "unauthorized"


class Forbidden(SkedError):
    code = "forbidden"


class PayloadTooLarge(SkedError):
    code = "payload_too_large"


class UnsupportedMediaType(SkedError):
    code = "unsupported_media_type"


class Unavailable(SkedError):
    code = "unavailable"


class Internal(SkedError):
    code = "internal"


BY_CODE: Dict[str, Type[SkedError]] = {
    cls.code: cls
    for cls in (
        InvalidRequest,
        InvalidJson,
        InvalidInput,
        NotFound,
        Conflict,
        StaleLease,
        Unauthorized,
        Forbidden,
        PayloadTooLarge,
        UnsupportedMediaType,
        Unavailable,
        Internal,
    )
}


def from_answer(status: int, code: str, message: str) -> SkedError:
    """The exception for an error answer: its code's class, or `SkedError` for a code this
    version does not know."""
    return BY_CODE.get(code, SkedError)(message, status, code)
