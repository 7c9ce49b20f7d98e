"""Where a read is served: the streaming replica when it has replayed far enough.

Read-your-writes is kept by WAL position (docs/scaling.md). Every read names
the position it must see: the highest of the one the client sent (its
`TurnLedger-Position` header or its sync cursor) and the highest commit this
process knows of on the primary (its own writes, and every other process's
through the NOTIFY each commit sends). The replica serves the read once its
replay position has reached that; a read waits for that up to
`TURNLEDGER_POSTGRES_REPLICA_MAX_WAIT_SECONDS`, polling, and is otherwise
served by the primary. A replica that fails is skipped for a few seconds.
With `TURNLEDGER_POSTGRES_REPLICA_READS=strict`, a read also asks the primary
for its position first, so it sees every commit made before it began.

Positions come from PostgreSQL: `pg_current_wal_flush_lsn()` on the primary
right after a write commits (a commit is flushed before it returns, unless
`synchronous_commit` is off, when the insert position is taken instead),
`pg_last_wal_replay_lsn()` on the replica.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from eventsourcing.persistence import OperationalError as LibraryOperationalError
from psycopg_pool import PoolTimeout

from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import ConversationFeed

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How often a waiting read asks the replica how far it has replayed.
_POLL_SECONDS = 0.002
# How long a replica that failed a read is left alone.
_RETRY_REPLICA_SECONDS = 5.0
_FAILURES = (psycopg.OperationalError, PoolTimeout, LibraryOperationalError)

PRIMARY_POSITION = (
    "SELECT CASE WHEN current_setting('synchronous_commit') = 'off' "
    "THEN pg_current_wal_insert_lsn() ELSE pg_current_wal_flush_lsn() END "
    "- '0/0'::pg_lsn AS position"
)
REPLAY_POSITION = "SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn AS position"


@dataclass(frozen=True, slots=True)
class Source:
    """The database a read is served from, and the WAL position to hand back:
    a later read that names it sees at least what this one saw."""

    ledger: Conversations
    feed: ConversationFeed
    on_replica: bool
    position: int


class ReadRouter:
    """Chooses the primary or the replica for each read; tracks WAL positions.

    Without a replica every read goes to the primary and positions stay 0:
    nothing is queried and cursors are those of a single database.
    """

    def __init__(
        self,
        primary: Conversations,
        primary_feed: ConversationFeed,
        replica: Conversations | None,
        *,
        max_wait_seconds: float,
        strict: bool = False,
    ) -> None:
        self._primary = Source(primary, primary_feed, on_replica=False, position=0)
        self._replica_ledger = replica
        self._replica_feed = None if replica is None else ConversationFeed(replica)
        self._max_wait = max_wait_seconds
        self._strict = strict
        self._lock = threading.Lock()
        self._known = 0  # the highest primary position known to be committed
        self._replayed = 0  # the highest replay position the replica reported
        self._replica_down_until = 0.0
        self.replica_reads = 0
        self.primary_reads = 0

    @property
    def has_replica(self) -> bool:
        return self._replica_ledger is not None

    @property
    def known_position(self) -> int:
        return self._known

    def note_commit(self, position: int) -> None:
        """A commit on the primary at `position` (from a write or a NOTIFY)."""
        with self._lock:
            if position > self._known:
                self._known = position

    def primary_position(self) -> int:
        """The primary's position now (0: no replica); after a write, one its
        commit is at or before."""
        if not self.has_replica:
            return 0
        position = _position(self._primary.ledger, PRIMARY_POSITION)
        self.note_commit(position)
        return position

    def note_primary_position(self, connection: psycopg.Connection[Any]) -> None:
        """Read the primary's position on `connection` (the sync listener's,
        after a NOTIFY), before the waiters it wakes read."""
        if not self.has_replica:
            return
        row = connection.execute(PRIMARY_POSITION).fetchone()
        if row is not None and row[0] is not None:
            self.note_commit(int(row[0]))

    def read(self, required: int, work: Callable[[Source], T]) -> tuple[T, int]:
        """Run `work` on a database that has replayed `required` or more, and
        the position to hand back with its result."""
        required = max(required, self._known)
        if self._strict and self.has_replica:
            required = max(required, self.primary_position())
        replica = self._replica_source(required)
        if replica is not None:
            try:
                result = work(replica)
            except _FAILURES as error:
                self._replica_failed(error)
            else:
                self.replica_reads += 1
                return result, replica.position
        self.primary_reads += 1
        result = work(self._primary)
        if not self.has_replica:
            return result, 0
        # What the primary served may be newer than anything this process
        # heard of: hand back its position as of after the read.
        return result, max(required, self.primary_position())

    def _replica_source(self, required: int) -> Source | None:
        ledger, feed = self._replica_ledger, self._replica_feed
        if ledger is None or feed is None:
            return None
        if time.monotonic() < self._replica_down_until:
            return None
        replayed = self._replayed
        if replayed < required:
            try:
                replayed = self._wait_for_replay(ledger, required)
            except _FAILURES as error:
                self._replica_failed(error)
                return None
            if replayed < required:
                return None
        return Source(ledger, feed, on_replica=True, position=replayed)

    def _wait_for_replay(self, ledger: Conversations, required: int) -> int:
        deadline = time.monotonic() + self._max_wait
        while True:
            replayed = _position(ledger, REPLAY_POSITION)
            with self._lock:
                if replayed > self._replayed:
                    self._replayed = replayed
            if replayed >= required or time.monotonic() >= deadline:
                return replayed
            time.sleep(_POLL_SECONDS)

    def _replica_failed(self, error: BaseException) -> None:
        logger.warning(
            "replica read failed, reading from the primary for %.0f s: %s",
            _RETRY_REPLICA_SECONDS,
            str(error).strip().splitlines()[0] if str(error).strip() else error,
        )
        self._replica_down_until = time.monotonic() + _RETRY_REPLICA_SECONDS


def _position(ledger: Conversations, statement: str) -> int:
    """One WAL position query on the ledger's own connection pool; 0 when the
    server has none (a replica's replay position on a server not in recovery)."""
    datastore = ledger.recorder.datastore  # type: ignore[attr-defined]
    with datastore.get_connection() as connection:
        row = connection.execute(statement).fetchone()
    value = None if row is None else row["position"]
    return 0 if value is None else int(value)
