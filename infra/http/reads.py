"""Where a read is served: a hot standby when it has replayed far enough.

Read-your-writes is kept by WAL position (docs/scaling.md). Every read names
the position it must see: the highest of the one the client sent (its
`TurnLedger-Position` header or its sync cursor) and the highest commit this
process knows of on the primary (its own writes, and every other process's
through the NOTIFY each commit sends). A standby serves the read once its
replay position has reached that on the primary's timeline (infra/http/
standbys.py); a read waits for that up to
`TURNLEDGER_POSTGRES_REPLICA_MAX_WAIT_SECONDS`, polling, and is otherwise
served by the primary. A standby that fails is skipped for a few seconds.
With `TURNLEDGER_POSTGRES_REPLICA_READS=strict`, a read also asks the primary
for its position first, so it sees every commit made before it began.

Positions come from PostgreSQL: `pg_current_wal_flush_lsn()` on the primary
right after a write commits (a commit is flushed before it returns, unless
`synchronous_commit` is off, when the insert position is taken instead), with
the timeline of its WAL file; `pg_last_wal_replay_lsn()` on a standby.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from turnledger.infra.http.standbys import FAILURES, Standby
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import ConversationFeed

T = TypeVar("T")

_POLL_SECONDS = 0.002
"""How often a waiting read asks the standbys how far they have replayed."""

PRIMARY_POSITION = (
    "SELECT at - '0/0'::pg_lsn AS position,"
    " substr(pg_walfile_name(at), 1, 8) AS timeline"
    " FROM (SELECT CASE WHEN current_setting('synchronous_commit') = 'off'"
    " THEN pg_current_wal_insert_lsn() ELSE pg_current_wal_flush_lsn() END AS at)"
    " AS here"
)


@dataclass(frozen=True, slots=True)
class Source:
    """The database a read is served from, and the WAL position to hand back:
    a later read that names it sees at least what this one saw."""

    ledger: Conversations
    feed: ConversationFeed
    on_replica: bool
    position: int


class ReadRouter:
    """Chooses the primary or a standby for each read; tracks WAL positions.

    Without standbys every read goes to the primary and positions stay 0:
    nothing is queried and cursors are those of a single database.
    """

    def __init__(
        self,
        primary: Conversations,
        primary_feed: ConversationFeed,
        standbys: list[Standby],
        *,
        max_wait_seconds: float,
        strict: bool = False,
    ) -> None:
        self._primary = Source(primary, primary_feed, on_replica=False, position=0)
        self._standbys = standbys
        self._max_wait = max_wait_seconds
        self._strict = strict
        self._lock = threading.Lock()
        self._known = 0  # the highest primary position known to be committed
        self._timeline = 0  # the primary's timeline at that position
        self.replica_reads = 0
        self.primary_reads = 0

    @property
    def has_replica(self) -> bool:
        return bool(self._standbys)

    @property
    def known_position(self) -> int:
        return self._known

    def note_commit(self, position: int, timeline: int = 0) -> None:
        """A commit on the primary at `position` (from a write or a NOTIFY)."""
        with self._lock:
            if position > self._known:
                self._known = position
            if timeline > self._timeline:
                self._timeline = timeline

    def primary_position(self) -> int:
        """The primary's position now (0: no standby); after a write, one its
        commit is at or before."""
        if not self.has_replica:
            return 0
        datastore = self._primary.ledger.recorder.datastore  # type: ignore[attr-defined]
        with datastore.get_connection() as connection:
            return self._note(connection.execute(PRIMARY_POSITION).fetchone())

    def note_primary_position(self, connection: psycopg.Connection[Any]) -> None:
        """Read the primary's position on `connection` (the sync listener's,
        after a NOTIFY), before the waiters it wakes read."""
        if self.has_replica:
            with connection.cursor(row_factory=dict_row) as cursor:
                self._note(cursor.execute(PRIMARY_POSITION).fetchone())

    def _note(self, row: dict[str, Any] | None) -> int:
        if row is None or row["position"] is None:
            return 0
        position = int(row["position"])
        self.note_commit(position, int(row["timeline"], 16))
        return position

    def read(self, required: int, work: Callable[[Source], T]) -> tuple[T, int]:
        """Run `work` on a database that has replayed `required` or more, and
        the position to hand back with its result."""
        required = max(required, self._known)
        if self._strict and self.has_replica:
            required = max(required, self.primary_position())
        standby = self._standby_for(required)
        if standby is not None:
            # _standby_for returns only an open standby that has replayed.
            ledger, feed, replayed = standby.ledger, standby.feed, standby.replayed
            assert ledger is not None and feed is not None and replayed is not None
            position = replayed.position
            try:
                result = work(Source(ledger, feed, True, position))
            except FAILURES as error:
                standby.failed(error)
            else:
                if standby.still_as_checked():
                    self.replica_reads += 1
                    return result, position
                standby.forget()
        self.primary_reads += 1
        result = work(self._primary)
        if not self.has_replica:
            return result, 0
        # What the primary served may be newer than anything this process
        # heard of: hand back its position as of after the read.
        return result, max(required, self.primary_position())

    def _standby_for(self, required: int) -> Standby | None:
        """A standby known to have replayed `required` on the primary's
        timeline, asking them (for up to the wait) if none is yet."""
        ready = [s for s in self._standbys if s.available and s.open()]
        for standby in ready:
            if self._serves(standby, required) and standby.still_as_checked():
                return standby
        deadline = time.monotonic() + self._max_wait
        while ready:
            for standby in ready:
                try:
                    standby.ask(self._timeline)
                except FAILURES as error:
                    standby.failed(error)
                if self._serves(standby, required):
                    return standby
            ready = [s for s in ready if s.available]
            if time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_SECONDS)
        return None

    def _serves(self, standby: Standby, required: int) -> bool:
        replayed = standby.replayed
        if not standby.available or replayed is None:
            return False
        if replayed.timeline is not None and replayed.timeline < self._timeline:
            return False  # asked before the primary changed timeline
        return replayed.position >= required
