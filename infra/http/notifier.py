"""Wake long-polling sync requests when the log may have grown.

PostgreSQL: a dedicated connection LISTENs on the channel the event store
NOTIFYs on every write, so a write through any service process (or any other
client of the same database) wakes every process. SQLite and memory: a thread
polls the log's head position. Writes made by this process also wake waiters
directly, which saves the round trip.

A wake-up only says "look again": waiters re-read the log, so spurious
wake-ups (the channel is shared by every schema of the database) cost a query
and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql

logger = logging.getLogger(__name__)


class ChangeSignal:
    """An asyncio event that is replaced each time it fires.

    A waiter takes the current event *before* reading the log, so a change
    committed between its read and its wait still wakes it.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def current(self) -> asyncio.Event:
        """The event the next change will set; call it from the event loop."""
        if self._event is None:  # served without a lifespan (some test clients)
            self.bind(asyncio.get_running_loop())
        assert self._event is not None
        return self._event

    def fire(self) -> None:
        """Wake every waiter; callable from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        # RuntimeError: the loop closed meanwhile, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._fire_in_loop)

    def _fire_in_loop(self) -> None:
        event, self._event = self._event, asyncio.Event()
        if event is not None:
            event.set()


class _Watcher:
    def __init__(self, signal: ChangeSignal) -> None:
        self._signal = signal
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=type(self).__name__, daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        raise NotImplementedError


class PostgresListener(_Watcher):
    """LISTEN on the event store's channel; reconnect after a lost connection."""

    def __init__(self, signal: ChangeSignal, conninfo: str, channel: str) -> None:
        super().__init__(signal)
        self._conninfo = conninfo
        self._channel = channel

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as connection:
                    connection.execute(
                        sql.SQL("LISTEN {}").format(sql.Identifier(self._channel))
                    )
                    # Anything may have been written while (re)connecting.
                    self._signal.fire()
                    while not self._stopped.is_set():
                        for _ in connection.notifies(timeout=0.5, stop_after=1):
                            self._signal.fire()
            except psycopg.Error as error:
                logger.warning("sync listener lost its connection: %s", error)
                self._signal.fire()
                self._stopped.wait(1.0)


class HeadPoller(_Watcher):
    """Poll the head position of the log (SQLite and memory)."""

    def __init__(
        self, signal: ChangeSignal, head_position: Callable[[], int], interval: float
    ) -> None:
        super().__init__(signal)
        self._head_position = head_position
        self._interval = interval

    def _run(self) -> None:
        last = -1
        while not self._stopped.wait(self._interval):
            try:
                head = self._head_position()
            except Exception as error:  # a transient database error: try again
                logger.warning("sync poller could not read the log head: %s", error)
                continue
            if head != last:
                last = head
                self._signal.fire()
