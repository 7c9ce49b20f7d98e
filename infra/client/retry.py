"""When a request is sent again, and after how long: shared by both clients.

- A connection that could not be made (refused, or no connect in time): the
  request never left, so any call is sent again.
- A connection that broke after the request was sent, or a 503: the work may
  or may not have been done ("not acknowledged", docs/sync.md), so only an
  idempotent call is sent again (a turn id, a client key, a read).
- A 503 or 429 carries `Retry-After`: the next attempt waits at least that
  long. Otherwise the waits grow exponentially from `initial_delay`.
- At most `attempts` sends and `max_elapsed` seconds of waiting in all; then
  the last answer is raised as its exception (`DatabaseUnavailableError` for
  a 503), or `ServiceUnreachableError` for a connection error.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from turnledger.domain.errors import TurnLedgerError

# Answers that mean "not now": the same request may succeed later.
_RETRY_CODES = frozenset({"database_unavailable", "purge_incomplete"})
_RETRY_STATUSES = frozenset({429, 503})


class ServiceUnreachableError(TurnLedgerError):
    """The service could not be reached (or broke the connection) on every
    attempt the retry policy allowed."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        self.attempts = attempts
        super().__init__(
            f"the service could not be reached after {attempts} attempt(s): "
            f"{type(last).__name__}: {last}"
        )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 6
    initial_delay: float = 0.2
    max_delay: float = 10.0
    max_elapsed: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("attempts must be >= 1 and delays >= 0")


NO_RETRIES = RetryPolicy(attempts=1)


class Attempts:
    """The retry state of one call: say what happened, get the wait (or the end)."""

    def __init__(self, policy: RetryPolicy, *, idempotent: bool) -> None:
        self._policy = policy
        self._idempotent = idempotent
        self._sent = 0
        self._waited = 0.0

    def after_response(self, response: httpx.Response) -> float | None:
        """Seconds to wait before sending again, or None: this is the answer."""
        self._sent += 1
        if not self._idempotent or response.status_code not in _RETRY_STATUSES:
            return None
        if response.status_code == 503 and _code(response) not in _RETRY_CODES:
            return None
        return self._next_wait(_retry_after(response))

    def after_error(self, error: httpx.TransportError) -> float:
        """Seconds to wait before sending again; raises when it must not be."""
        self._sent += 1
        never_sent = isinstance(error, httpx.ConnectError | httpx.ConnectTimeout)
        if not (never_sent or self._idempotent):
            raise error
        wait = self._next_wait(None)
        if wait is None:
            raise ServiceUnreachableError(self._sent, error) from error
        return wait

    def _next_wait(self, at_least: float | None) -> float | None:
        policy = self._policy
        if self._sent >= policy.attempts:
            return None
        backoff = min(policy.max_delay, policy.initial_delay * 2.0 ** (self._sent - 1))
        wait = max(backoff, at_least or 0.0)
        if self._waited + wait > policy.max_elapsed:
            return None
        self._waited += wait
        return wait


def _code(response: httpx.Response) -> str | None:
    try:
        code: object = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (the service sends seconds, never a date)."""
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
