"""The exceptions the client raises: one per kind of answer larchd refuses
with (docs/api.md, Conventions), all of them LarchError."""
from typing import Any, Dict, Optional


class LarchError(Exception):
    """An error answer of larchd, or a failure of the client's own checks.

    ``status`` is the HTTP status (None for a check of the client's own, such
    as a checkpoint whose sha256 is not the recorded one); ``code``,
    ``message`` and ``detail`` come from the API's error body
    ``{"error": {"code", "message", "detail"}}`` (``detail`` is {} when the
    answer had none).
    """

    def __init__(self, status: Optional[int], code: str, message: str,
                 detail: Optional[Dict[str, Any]] = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.detail: Dict[str, Any] = detail or {}
        where = f"{status} " if status is not None else ""
        super().__init__(f"{where}{code}: {message}")


class BadRequest(LarchError):
    """400: malformed JSON, an invalid spec, a bad query parameter
    (``detail`` names the field or parameter)."""


class Unauthorized(LarchError):
    """401: no token, or one larchd does not know."""


class Forbidden(LarchError):
    """403: the token's role may not do this."""


class NotFound(LarchError):
    """404: no such job, sweep, webhook or checkpoint (or another user's)."""


class Conflict(LarchError):
    """409: the object's state forbids it (cancel of a finished job, a
    checkpoint file that is not the recorded one)."""


class Infeasible(LarchError):
    """422: a valid spec that cannot run here (its memory plan)."""


class Overloaded(LarchError):
    """429 or 503: larchd's queue is full or it is stopping."""


class ChecksumMismatch(LarchError):
    """A downloaded checkpoint whose sha256 is not the recorded one."""


BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound,
             409: Conflict, 422: Infeasible, 429: Overloaded, 503: Overloaded}


def error_from(status: int, body: Any, text: str) -> LarchError:
    """The exception for an answer of status whose parsed JSON is body (None
    when it was not JSON; text is then what larchd sent)."""
    err = body.get("error") if isinstance(body, dict) else None
    cls = BY_STATUS.get(status, LarchError)
    if isinstance(err, dict):
        detail = err.get("detail")
        return cls(status, str(err.get("code", "")), str(err.get("message", "")),
                   detail if isinstance(detail, dict) else None)
    return cls(status, "http_error", text.strip()[:500] or f"HTTP {status}")
