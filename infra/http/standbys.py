"""The hot standbys reads may be served from, one per configured replica host.

Each host gets a ledger of its own, whose pool connects to that server alone,
so the check that a standby has replayed a read's position and the read that
relies on it run on the same server. One pool over the host list let libpq
choose the server for each connection: after a failover its connections
reached different members, and a read checked on one member ran on another
that had not replayed the write.

A standby is trusted with a read only while it streams from the primary on the
primary's timeline, because positions on different timelines cannot be
compared. An old primary brought back as a standby replays WAL that the new
primary never had, up to a position past the new primary's first commits,
until it is rewound. PostgreSQL shows a standby's WAL receiver status and
timeline (`pg_stat_wal_receiver`) to superusers and to members of
`pg_read_all_stats`; for any other role only the replayed position is checked
(docs/ha.md).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from eventsourcing.persistence import OperationalError as LibraryOperationalError
from psycopg_pool import PoolTimeout

from turnledger.infra.persistence import open_standby
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import ConversationFeed
from turnledger.infra.settings import Settings

logger = logging.getLogger(__name__)

FAILURES = (psycopg.OperationalError, PoolTimeout, LibraryOperationalError)

RETRY_SECONDS = 5.0
"""How long a standby that failed, or turned out not to be a standby, is left
alone."""

POOL_WAIT_SECONDS = 0.25
"""How long a standby's read waits for a connection before the primary serves
it: the library would wait its connect timeout, for every read, while a
standby is down."""

STANDBY_STATE = (
    "SELECT pg_is_in_recovery() AS in_recovery,"
    " pg_last_wal_replay_lsn() - '0/0'::pg_lsn AS position,"
    " receiver.pid AS receiver, receiver.status, receiver.received_tli AS timeline"
    " FROM (SELECT) AS here LEFT JOIN pg_stat_wal_receiver AS receiver ON true"
)


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a standby has replayed, as far as a read may rely on it."""

    position: int
    timeline: int | None
    """The timeline it streams; None when the role may not see it."""


def trusted_replay(row: dict[str, Any], primary_timeline: int) -> Replayed | None:
    """What the standby behind `row` (STANDBY_STATE) may serve; None if a read
    may not rely on it at all: not in recovery (a promoted member), no WAL
    receiver, or streaming from elsewhere than the primary's timeline."""
    if not row["in_recovery"] or row["receiver"] is None:
        return None
    position = int(row["position"] or 0)
    if row["status"] is None:  # a role without pg_read_all_stats
        return Replayed(position, None)
    timeline = int(row["timeline"])
    if row["status"] != "streaming" or timeline < primary_timeline:
        return None
    return Replayed(position, timeline)


@dataclass
class Standby:
    """One replica host: its ledger (opened on first use, again after a
    failure) and what it was last seen to have replayed."""

    settings: Settings
    ledger: Conversations | None = None
    feed: ConversationFeed | None = None
    replayed: Replayed | None = None
    _broken_at_check: int = 0
    _in_recovery: bool = True
    _down_until: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def host(self) -> str:
        return f"{self.settings.postgres_host}:{self.settings.postgres_port}"

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    def open(self, *, wait: bool = False) -> bool:
        """Whether the ledger is open. If it is not, it is opened: at once with
        `wait` (at start-up), else on a thread of its own, since a host that
        is down would hold a request for its connect timeout."""
        if self.ledger is None and self._lock.acquire(blocking=wait):
            if wait:
                self._open()
            else:
                threading.Thread(
                    target=self._open, name="turnledger-standby-open", daemon=True
                ).start()
        return self.ledger is not None

    def _open(self) -> None:
        try:
            ledger = open_standby(self.settings, wait_seconds=POOL_WAIT_SECONDS)
            self.feed = ConversationFeed(ledger)
            self.ledger = ledger
        except Exception as error:  # logged; tried again after RETRY_SECONDS
            self.failed(error)
        finally:
            self._lock.release()

    def ask(self, primary_timeline: int) -> None:
        """Ask the server what it has replayed (`replayed`: None if it may
        not serve)."""
        broken = self._broken_connections()
        with self._datastore().get_connection() as connection:
            row = connection.execute(STANDBY_STATE).fetchone()
        replayed = None if row is None else trusted_replay(row, primary_timeline)
        in_recovery = row is not None and bool(row["in_recovery"])
        if not in_recovery:
            self._down_until = time.monotonic() + RETRY_SECONDS
        if in_recovery != self._in_recovery:  # said once, not every few seconds
            logger.warning(
                "%s is %sa standby: reads %s",
                self.host,
                "" if in_recovery else "not ",
                "may go to it" if in_recovery else "go elsewhere",
            )
            self._in_recovery = in_recovery
        self.replayed, self._broken_at_check = replayed, broken

    def still_as_checked(self) -> bool:
        """Whether every connection the standby's reads used since it was last
        asked reached the server that answered: a connection found broken
        means it may have restarted, and replayed less than it said."""
        return self._broken_connections() == self._broken_at_check

    def forget(self) -> None:
        """Ask the server again before it serves a read."""
        self.replayed = None

    def _broken_connections(self) -> int:
        if self.ledger is None:
            return 0
        stats = self._datastore().pool.get_stats()
        return int(stats.get("connections_lost", 0)) + int(stats.get("returns_bad", 0))

    def _datastore(self) -> Any:
        assert self.ledger is not None
        return self.ledger.recorder.datastore  # type: ignore[attr-defined]

    def failed(self, error: BaseException) -> None:
        text = str(error).strip()
        logger.warning(
            "reads on standby %s failed, reading elsewhere for %.0f s: %s",
            self.host,
            RETRY_SECONDS,
            text.splitlines()[0] if text else repr(error),
        )
        self.forget()
        self._down_until = time.monotonic() + RETRY_SECONDS

    def close(self) -> None:
        with self._lock:  # not while it is being opened
            if self.ledger is not None:
                self.ledger.close()


def standby_settings(settings: Settings) -> list[Settings]:
    """The replica's settings once for each of its hosts ("db1,db2,db3": one
    standby each, whose pool reaches that server alone); empty without one."""
    replica = settings.replica_settings()
    if replica is None:
        return []
    hosts = [host.strip() for host in replica.postgres_host.split(",")]
    return [replica.model_copy(update={"postgres_host": host}) for host in hosts]


def standbys(settings: Settings) -> list[Standby]:
    """A standby for each replica host, opened now if it answers (a host that
    does not is tried again when reads need it)."""
    found = [Standby(one) for one in standby_settings(settings)]
    for standby in found:
        standby.open(wait=True)
    return found
