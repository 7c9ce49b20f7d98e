"""Database outages at the edge: a fast 503 with Retry-After, never a hang or a 500.

One probe per process checks the database every few hundred milliseconds with
a short deadline. While it fails, every route that needs the database is
answered 503 at once (liveness, readiness and the API document are not), and
requests already in flight are answered 503 as soon as the probe fails: the
libraries below retry for many seconds before they give up, and a client is
better served by a prompt "retry later" than by a stalled socket. The work of
such a request may still complete afterwards, so a 503 means "not
acknowledged", not "not written": retried with the same turn id or client key,
the request is answered from what was recorded (docs/sync.md).

The probe recovers by itself. While the database is down it looks every 0.2 s,
and it says "available" again only once the service's own pools each lend a
connection that answers (`recover`, `PoolsServe`): a separate connection that
answers proves nothing about pools still backing off, and a request let through
too early would wait for them (5-11 s, before the pools gave up their back-off
quickly: infra/pool_check.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import eventsourcing.persistence as es_persistence
import psycopg
from fastapi import FastAPI, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from turnledger.domain.errors import DatabaseUnavailableError
from turnledger.infra.http.database_checks import (
    PoolNotServingError,
    PoolsServe,
    PostgresCheck,
    one_line,
    service_pools,
)
from turnledger.infra.http.errors import ErrorJSONResponse, error_response

logger = logging.getLogger(__name__)

# The checks, imported from here by the application that installs the guard.
__all__ = [
    "DatabaseGuard",
    "DatabaseMonitor",
    "PoolNotServingError",
    "PoolsServe",
    "PostgresCheck",
    "install_outage_handlers",
    "service_pools",
    "unavailable_response",
]

OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    DatabaseUnavailableError,
    # psycopg_pool's PoolTimeout, PoolClosed and TooManyRequests are
    # OperationalErrors too.
    psycopg.OperationalError,
    psycopg.InterfaceError,
    # What the event store's recorders raise once their own retries are spent.
    es_persistence.OperationalError,
    es_persistence.InterfaceError,
    # SQLite: "database is locked" after the busy timeout, disk I/O errors.
    sqlite3.OperationalError,
)
"""Exceptions that mean "the database is not answering", from every layer."""


def is_outage(error: BaseException) -> bool:
    return isinstance(error, OUTAGE_ERRORS)


@dataclass(frozen=True, slots=True)
class Availability:
    available: bool
    since: float
    """time.time() of the last change of state."""
    reason: str | None = None


class DatabaseMonitor:
    """Checks the database on a schedule and says whether it is reachable.

    `check` is awaited with a deadline; raising or running past it means
    unavailable. While unavailable, `recover` must pass too (same deadline)
    before the database is said to be available again; `on_outage` is called
    each time the database is found unavailable. Use from the event loop only
    (except `poke_threadsafe`).
    """

    def __init__(
        self,
        check: Callable[[], Awaitable[None]],
        *,
        interval: float,
        timeout: float,
        recover: Callable[[], Awaitable[None]] | None = None,
        on_outage: Callable[[], None] | None = None,
    ) -> None:
        self._check = check
        self._recover = recover
        self._on_outage = on_outage
        self._interval = interval
        self._timeout = timeout
        self._state = Availability(available=True, since=time.time())
        # Called when the database is next found unavailable. A set, not a
        # future's callbacks: every request in flight registers (long-polls
        # included), and removing a future's callback scans all of them, which
        # made each write cost more with every long-poll waiting.
        self._outage_watchers: set[Callable[[], None]] = set()
        self._poked = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def state(self) -> Availability:
        return self._state

    @property
    def available(self) -> bool:
        return self._state.available

    def watch_outage(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, on the event loop, when the database is next
        found unavailable (unless `unwatch_outage` comes first)."""
        self._outage_watchers.add(callback)

    def unwatch_outage(self, callback: Callable[[], None]) -> None:
        self._outage_watchers.discard(callback)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name="database-monitor")

    async def stop(self) -> None:
        # Asked to stop rather than cancelled: on Python 3.11, cancelling a task
        # inside asyncio.wait_for can be swallowed when the inner wait ends at
        # the same moment, and the task would then never end.
        self._stopping = True
        self._poked.set()
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=self._timeout + 1)
            if not done:
                self._task.cancel()

    def poke(self) -> None:
        """Check now: a request has just failed on the database."""
        self._poked.set()

    def poke_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._poked.set)

    async def check_now(self) -> Availability:
        try:
            await asyncio.wait_for(self._check(), self._timeout)
            if not self._state.available and self._recover is not None:
                await asyncio.wait_for(self._recover(), self._timeout)
        except Exception as error:  # any failure of the check means "down"
            reason = (
                f"no answer within {self._timeout:g} s"
                if isinstance(error, TimeoutError)
                else one_line(error)
            )
            self._mark(available=False, reason=reason)
        else:
            self._mark(available=True, reason=None)
        return self._state

    def _mark(self, *, available: bool, reason: str | None) -> None:
        if available == self._state.available:
            if not available:
                self._state = Availability(False, self._state.since, reason)
            return
        self._state = Availability(available, time.time(), reason)
        if available:
            logger.warning("database available again")
        else:
            logger.warning("database unavailable: %s", reason)
            watchers, self._outage_watchers = self._outage_watchers, set()
            for watcher in watchers:
                watcher()
            if self._on_outage is not None:
                self._on_outage()

    async def _run(self) -> None:
        while not self._stopping:
            await self.check_now()
            # Look more often while down, so service resumes promptly.
            interval = self._interval if self.available else min(self._interval, 0.2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), interval)
            self._poked.clear()


def unavailable_response(retry_after: int) -> ErrorJSONResponse:
    return error_response(
        503,
        "database_unavailable",
        "the database is unavailable; nothing was acknowledged: retry after "
        f"{retry_after} s with the same turn ids and client keys",
        headers={"Retry-After": str(retry_after)},
    )


class DatabaseGuard:
    """Answers 503 on every guarded route while the database is unavailable.

    A request in flight when the probe fails is answered 503 at once unless its
    response has started; its work is left to finish or fail on its own, and
    whatever it would have answered is dropped. So is a write (a turn, a new
    conversation) still unanswered after `write_deadline` seconds: the
    database answers the check but does not commit (a new primary waiting for
    its synchronous standby), and the device is told to retry rather than
    left waiting.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        monitor: Callable[[], DatabaseMonitor | None],
        unguarded: frozenset[str],
        retry_after: int,
        write_deadline: float | None = None,
    ) -> None:
        self.app = app
        self._monitor = monitor
        self._unguarded = unguarded
        self._retry_after = retry_after
        self._write_deadline = write_deadline

    # Long because: on every request; its three callbacks share one request's state
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        monitor = self._monitor()
        if (
            scope["type"] != "http"
            or monitor is None
            or scope["path"] in self._unguarded
        ):
            await self.app(scope, receive, send)
            return
        if not monitor.available:
            await unavailable_response(self._retry_after)(scope, receive, send)
            return
        started = answered = False
        answering: asyncio.Task[None] | None = None

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return  # the client already has its 503
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        def on_outage() -> None:
            nonlocal answered, answering
            if started or answered:
                return
            answered = True
            answering = asyncio.get_running_loop().create_task(
                unavailable_response(self._retry_after)(scope, receive, send)
            )

        def on_deadline() -> None:
            if not (started or answered):
                logger.warning(
                    "a write unanswered after %g s answered 503", self._write_deadline
                )
                monitor.poke()
            on_outage()

        # The request runs in its own task; only an outage (or a deadline)
        # starts another one, which answers 503 while the work goes on to
        # finish or fail.
        monitor.watch_outage(on_outage)
        timer = (
            asyncio.get_running_loop().call_later(self._write_deadline, on_deadline)
            if self._write_deadline is not None and _is_write(scope)
            else None
        )
        try:
            await self.app(scope, receive, guarded_send)
        except Exception as error:
            if not answered:
                raise
            if not is_outage(error):
                logger.warning(
                    "a request answered 503 later failed: %s", one_line(error)
                )
        finally:
            if timer is not None:
                timer.cancel()
            monitor.unwatch_outage(on_outage)
            if answering is not None:
                await answering


def _is_write(scope: Scope) -> bool:
    """A turn write or a conversation start: what devices send all the time."""
    method, path = scope["method"], scope["path"]
    if method == "PUT":
        return "/turns/" in path
    return method == "POST" and path.rstrip("/") == "/v1/conversations"


def install_outage_handlers(app: FastAPI, *, retry_after: int) -> None:
    """Every outage error, from any layer, becomes a 503 (and a check now)."""

    async def on_outage(request: Request, error: Exception) -> Response:
        monitor: DatabaseMonitor | None = getattr(
            request.app.state, "database_monitor", None
        )
        if monitor is not None:
            monitor.poke()
        logger.warning("database error answered 503: %s", one_line(error))
        return unavailable_response(retry_after)

    for kind in OUTAGE_ERRORS:
        app.add_exception_handler(kind, on_outage)
