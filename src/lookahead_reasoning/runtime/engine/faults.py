"""What a failed request to an engine means: whether sending it again is safe, and after how long.

Safe: no connection could be made (in time) or it dropped, the engine answered 5xx, or 429 (busy:
tried again after the Retry-After it sent, at most the request timeout). Not: a request that outlived
its timeout (the server may still be computing it, and a long generation would be computed once per
try), or any other 4xx.
"""

from __future__ import annotations

import httpx


def retryable(exc: Exception) -> bool:
    """Whether a request that failed with ``exc`` may be sent again (module docstring)."""
    if isinstance(exc, HTTPStatus):
        return exc.status >= 500 or exc.status == 429
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout
                                                                      | httpx.PoolTimeout)


class HTTPStatus(Exception):
    """An HTTP error status, kept apart from transport failures to decide on a retry."""

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


def retry_after(response: httpx.Response) -> float | None:
    """The seconds a Retry-After header asks for (a number; a date is not read), or None."""
    try:
        return max(0.0, float(response.headers["Retry-After"]))
    except (KeyError, ValueError):
        return None


def pause(exc: Exception, backoff_s: float, attempt: int, timeout_s: float) -> float:
    """Seconds to wait before try ``attempt + 1``: what the server asked for (at most the timeout),
    else the back-off."""
    asked = getattr(exc, "retry_after", None)
    return min(asked, timeout_s) if asked is not None else backoff_s * (attempt + 1)


__all__ = ["HTTPStatus", "pause", "retry_after", "retryable"]
