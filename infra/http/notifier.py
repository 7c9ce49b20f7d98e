"""Wake a user's long-polling sync requests when that user's data changes.

Each user with a waiting long-poll has one wake-up event; a change wakes only
the waiters of the user who owns it, so idle long-polls of other users cost
nothing per write.

- PostgreSQL: a dedicated connection LISTENs on the channel every write
  transaction NOTIFYs on; the notification names the owners of what the
  transaction wrote (`wake_payload`), so waking them reads nothing back. A
  notification naming no one (a batch whose owners do not fit a payload, or
  a write through the library's own insert) wakes every waiter once. Device
  revocations arrive on a second channel, NOTIFYed in the revoking
  transaction, so a revoked device's long-polls are released at once whichever
  process revoked it.
- SQLite and memory: a thread polls the log head and the revocations, and
  reads the owners of the events committed since it last looked.

Writes made by this process also wake their user directly, which saves the
round trip. A lost notification only delays a wake-up until the long-poll's
timeout; after a lost connection every waiter is woken once to look again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from turnledger.domain.errors import LongPollLimitError
from turnledger.infra.devices import DeviceRegistry
from turnledger.infra.http.wake_follow import LogFollower
from turnledger.infra.postgres import woken_owners

logger = logging.getLogger(__name__)

_REVOCATION_OVERLAP = timedelta(seconds=5)

T = TypeVar("T")


class SharedReads:
    """One read for the long-polls of a user that a change woke together.

    Long-polls of one user's devices that are caught up hold the same cursor,
    and one change wakes them all at once: the first to read starts the read
    and the others await its result, so the change is read, decoded and
    decrypted once, not once per device.

    A waiter may wait on the result only if the read cannot have missed a
    change it must see. Such a read is *exact* for it: read from its cursor,
    and keyed by the wake-up event the waiter took before reading
    (`UserSignals.current`): every waiter holding that event took it before
    any later change fired it, and a change the shared read missed fires that
    same event, so all of them wake and read again. A read that must see a
    WAL position (reads on a replica) is joined only by waiters that need no
    more than it.

    With `any_cursor`, a waiter also joins a read in flight that started at
    or before its cursor, under another event: devices whose cursors drifted
    apart (each answered at a different moment while writes keep coming) are
    served by one read again, and from then on hold the same cursor. Such a
    result is not exact: the caller keeps the changes after its own cursor
    and, if none are left, reads for itself before it may wait.
    """

    def __init__(self) -> None:
        self._reads: dict[Hashable, _InFlight] = {}
        self.started = 0
        self.joined = 0

    async def read(
        self,
        key: Hashable,
        *,
        position: int,
        wal: int,
        woken: asyncio.Event,
        start: Callable[[], Awaitable[T]],
        any_cursor: bool = False,
    ) -> tuple[T, bool]:
        """The result of a read from `position` (joined or started), and
        whether it is exact for this waiter."""
        entry = self._reads.get(key)
        if entry is not None and entry.wal >= wal and not entry.future.done():
            exact = entry.position == position and entry.woken is woken
            if exact or (any_cursor and entry.position <= position):
                self.joined += 1
                result: T = await asyncio.shield(entry.future)
                return result, exact
        future: asyncio.Future[T] = asyncio.ensure_future(start())
        started = _InFlight(position, wal, woken, future)
        self._reads[key] = started
        self.started += 1

        def forget(_: asyncio.Future[T]) -> None:
            if self._reads.get(key) is started:
                del self._reads[key]

        future.add_done_callback(forget)
        # Shielded: a waiter whose client went away must not cancel the read
        # the others are waiting for.
        return await asyncio.shield(future), True


@dataclass(frozen=True, slots=True)
class _InFlight:
    position: int
    wal: int
    woken: asyncio.Event
    future: asyncio.Future[Any]


class UserSignals:
    """One wake-up event per user with a waiting long-poll, and their counts.

    A waiter takes its user's current event *before* reading the log, so a
    change committed between its read and its wait still wakes it: firing
    sets the event and forgets it, and the next reader gets a fresh one.
    """

    def __init__(self, *, per_device: int, per_user: int) -> None:
        self._per_device = per_device
        self._per_user = per_user
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, asyncio.Event] = {}
        self._users: Counter[str] = Counter()
        self._devices: Counter[str] = Counter()
        # The token digests of each user's waiting long-polls: a read started
        # for one of them checks all of them (`credentials`).
        self._credentials: dict[str, Counter[bytes]] = {}
        self._closing = False
        self.shared_reads = SharedReads()
        _OPEN_SIGNALS.add(self)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def closing(self) -> bool:
        """True once the service is stopping: long-polls answer at once."""
        return self._closing

    @property
    def waiting_users(self) -> int:
        return len(self._users)

    def credentials(self, user_id: str) -> frozenset[bytes]:
        """The token digests of the user's waiting long-polls."""
        found = self._credentials.get(user_id)
        return frozenset(found) if found else frozenset()

    @contextlib.contextmanager
    def waiting(
        self, user_id: str, device_id: str, credential: bytes | None = None
    ) -> Iterator[None]:
        """Count one long-poll of this device (sent with the token whose
        digest is `credential`), or refuse it over the caps."""
        if self._devices[device_id] >= self._per_device:
            raise LongPollLimitError(
                "device", self._per_device, "TURNLEDGER_HTTP_MAX_LONG_POLLS_PER_DEVICE"
            )
        if self._users[user_id] >= self._per_user:
            raise LongPollLimitError(
                "user", self._per_user, "TURNLEDGER_HTTP_MAX_LONG_POLLS_PER_USER"
            )
        self._devices[device_id] += 1
        self._users[user_id] += 1
        if credential is not None:
            self._credentials.setdefault(user_id, Counter())[credential] += 1
        try:
            yield
        finally:
            self._devices[device_id] -= 1
            if not self._devices[device_id]:
                del self._devices[device_id]
            if credential is not None:
                held = self._credentials[user_id]
                held[credential] -= 1
                if not held[credential]:
                    del held[credential]
            self._users[user_id] -= 1
            if not self._users[user_id]:
                del self._users[user_id]
                self._events.pop(user_id, None)
                self._credentials.pop(user_id, None)

    def current(self, user_id: str) -> asyncio.Event:
        """The event the user's next change will set; call from the event loop."""
        if self._loop is None:  # served without a lifespan (some test clients)
            self._loop = asyncio.get_running_loop()
        event = self._events.get(user_id)
        if event is None:
            event = self._events[user_id] = asyncio.Event()
            if self._closing:
                event.set()
        return event

    def fire(self, user_ids: Iterable[str]) -> None:
        """Wake these users' waiters; callable from any thread.

        Users with no waiter are skipped here, without a hop to the event
        loop. That cannot miss one: a waiter takes its event before it reads
        the log, and the change being announced is already committed, so a
        waiter arriving after this check reads it.
        """
        events = self._events
        users = [user for user in user_ids if user in events]
        if users:
            self._call_in_loop(self._fire_in_loop, users)

    def fire_all(self) -> None:
        """Wake every waiter once (after a lost connection: anything may be new)."""
        self._call_in_loop(self._fire_in_loop, None)

    def close(self) -> None:
        """Stop waiting: every long-poll answers now, and new ones do not wait."""
        self._closing = True
        self.fire_all()

    def _call_in_loop(self, function: Callable[..., None], *arguments: object) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            function(*arguments)
            return
        # RuntimeError: the loop closed meanwhile, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(function, *arguments)

    def _fire_in_loop(self, users: list[str] | None) -> None:
        for user in list(self._events) if users is None else users:
            event = self._events.pop(user, None)
            if event is not None:
                event.set()


_OPEN_SIGNALS: weakref.WeakSet[UserSignals] = weakref.WeakSet()


def release_long_polls() -> None:
    """Answer every long-poll of this process now: the server is stopping."""
    for signals in list(_OPEN_SIGNALS):
        signals.close()


class _Watcher:
    def __init__(self, signals: UserSignals) -> None:
        self._signals = signals
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
    """LISTEN for commits and revocations; reconnect after a lost connection."""

    def __init__(
        self,
        signals: UserSignals,
        conninfo: str,
        *,
        events_channel: str,
        devices_channel: str | None,
        on_commits: Callable[[psycopg.Connection[tuple[object, ...]]], None]
        | None = None,
    ) -> None:
        """`on_commits` is called on the listening connection after commits
        were notified, before their users are woken (reads on a replica
        learn the position those commits must be replayed to)."""
        super().__init__(signals)
        self._on_commits = on_commits
        self._conninfo = conninfo
        self._events_channel = events_channel
        self._devices_channel = devices_channel

    def _run(self) -> None:
        failing = False
        while not self._stopped.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as connection:
                    for channel in (self._events_channel, self._devices_channel):
                        if channel:
                            connection.execute(
                                sql.SQL("LISTEN {}").format(sql.Identifier(channel))
                            )
                    # Anything may have been written while (re)connecting,
                    # and its notifications are lost (a failover keeps none):
                    # learn how far the primary is first, so woken reads on a
                    # replica wait for all of it, then wake every long-poll to
                    # read from its cursor.
                    if self._on_commits is not None:
                        self._on_commits(connection)
                    self._signals.fire_all()
                    if failing:
                        logger.warning("sync listener connected again")
                        failing = False
                    while not self._stopped.is_set():
                        self._serve(connection)
            except Exception as error:  # a lost connection or a failed read
                if not failing:  # once per outage, not every half second
                    logger.warning("sync listener lost its connection: %s", error)
                    failing = True
                self._signals.fire_all()
                self._stopped.wait(0.5)

    def _serve(self, connection: psycopg.Connection[tuple[object, ...]]) -> None:
        notifies = list(connection.notifies(timeout=0.5, stop_after=1))
        if not notifies:
            return
        # Drain what else is queued, so a burst of commits costs one read.
        notifies += connection.notifies(timeout=0.0)
        users = {n.payload for n in notifies if n.channel == self._devices_channel}
        commits = [n.payload for n in notifies if n.channel == self._events_channel]
        if commits and self._on_commits is not None:
            self._on_commits(connection)
        for payload in commits:
            owners = woken_owners(payload)
            if owners is None:
                self._signals.fire_all()
                return
            users |= owners
        self._signals.fire(users)


class Poller(_Watcher):
    """Poll the log and the revocations (SQLite and memory)."""

    def __init__(
        self,
        signals: UserSignals,
        follower: LogFollower,
        registry: DeviceRegistry,
        interval: float,
    ) -> None:
        super().__init__(signals)
        self._follower = follower
        self._registry = registry
        self._interval = interval

    def _run(self) -> None:
        # Revocations are read with an overlap, as a revocation may commit a
        # little after the time it records; those already seen are skipped.
        seen: dict[str, datetime] = {}
        while not self._stopped.wait(self._interval):
            try:
                users = self._follower.changed_owners()
                now = datetime.now(UTC)
                revoked = self._registry.revoked_since(now - _REVOCATION_OVERLAP)
            except Exception as error:  # a transient database error: try again
                logger.warning("sync poller could not read the log: %s", error)
                continue
            for device in revoked:
                if device.device_id not in seen and device.revoked_at is not None:
                    seen[device.device_id] = device.revoked_at
                    users.add(device.user_id)
            for device_id, at in list(seen.items()):
                if at < now - 2 * _REVOCATION_OVERLAP:
                    del seen[device_id]
            self._signals.fire(users)
