"""HTTP status of a failed API call, whichever exception the client raised for it.

lightkube raises ``ApiError`` only when the error body is labelled exactly ``application/json``; a proxy that
adds a charset turns it into a plain HTTP status error. Decisions such as "gone, stop retrying" must not
depend on that, or a deleted object would be retried forever.
"""

from __future__ import annotations

from lightkube import ApiError


def status_code(exc: BaseException) -> int | None:
    """HTTP status code carried by ``exc``, or None for errors without one (network, timeouts)."""
    if isinstance(exc, ApiError) and exc.status is not None and exc.status.code:
        return int(exc.status.code)
    code = getattr(getattr(exc, "response", None), "status_code", None)
    return int(code) if isinstance(code, int) else None


def is_status(exc: BaseException, *codes: int) -> bool:
    return status_code(exc) in codes
