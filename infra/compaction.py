"""Compaction of the PostgreSQL key store: no destroyed key left in any file.

After the purge has deleted key rows, their bytes are still in three places
the server holds: dead tuples in the partitions' files, the WAL segments that
logged the INSERTs (and full-page images of the pages holding the keys), and,
if WAL is recycled, old segments renamed for reuse with their contents. This
module removes all three and *verifies* it before reporting complete:

1. **Horizon.** VACUUM FULL keeps dead rows that a transaction older than the
   deletion may still see. Before rewriting, it waits (briefly) until no such
   transaction exists anywhere in the cluster: sessions of this database
   (snapshot or xid), transactions holding an xid in *any* database (every new
   snapshot, VACUUM's own included, treats them as running), prepared
   transactions, standbys' feedback and replication slots.
2. **Rewrite.** `VACUUM (FULL, VERBOSE)` of the partitions the purge deleted
   from, and of the same partitions of the read side's turn and fold tables
   (their old row versions hold the sizes the deletion erased), under a
   `lock_timeout`: a session holding a lock on one makes compaction give up
   and stay pending rather than queue every key read and write behind it.
   The server's own report ("N dead row versions cannot be removed yet") is
   the verification: anything but 0 leaves it pending.
3. **WAL.** With `wal_recycle = off`, segments the server no longer needs are
   unlinked, not renamed with their contents. The purge records the highest
   segment present after the rewrite; every segment up to that one may hold
   destroyed keys. When it may (superuser, or EXECUTE on pg_switch_wal and the
   pg_checkpoint role), it switches the insert position past that segment and
   runs CHECKPOINT, which removes older segments; the checkpoint runs in a
   thread of its own, which the caller waits for only briefly and which marks
   the compaction complete when it ends. Complete only when
   `pg_ls_waldir()` (pg_monitor) shows none of them left. What keeps them
   (archiving, replication slots, wal_keep_size, wal_recycle, privileges) is
   reported as the reason compaction is pending; a later run re-checks.

The steps have modules of their own: the horizon (compaction_horizon.py),
the rewrite and its verification (compaction_rewrite.py) and the WAL's holds
(compaction_wal.py); this one runs them and keeps the state. The state lives
in `<schema>.key_compaction` (made by the key store's migration step 3,
infra/migrations/stores.py), so every process (and the HTTP route) sees why
a compaction is pending. See docs/deletion.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg_pool import ConnectionPool

from turnledger.infra import wal, wal_members
from turnledger.infra.compaction_horizon import OLDER_TRANSACTIONS, wait_for_horizon
from turnledger.infra.compaction_rewrite import (
    READ_SIDE_SIZE_TABLES,
    read_side_relations,
    rewrite_partitions,
)
from turnledger.infra.compaction_wal import wal_holds
from turnledger.infra.migrations.stores import KEY_COMPACTION_TABLE
from turnledger.infra.pool_queries import fetch_one

__all__ = [
    "DEFAULT_CHECKPOINT_WAIT_SECONDS",
    "DEFAULT_LOCK_TIMEOUT_MS",
    "OLDER_TRANSACTIONS",
    "READ_SIDE_SIZE_TABLES",
    "CompactionOutcome",
    "KeyCompaction",
    "read_side_relations",
    "wait_for_horizon",
]

logger = logging.getLogger("turnledger.purge")

# How long a purge waits for the CHECKPOINT that removes old WAL segments
# before returning "pending" (the checkpoint then completes it by itself).
DEFAULT_CHECKPOINT_WAIT_SECONDS = 0.2

# How long VACUUM FULL may wait for a partition's lock before compaction gives
# up (every key read and write of that partition queues behind it meanwhile).
DEFAULT_LOCK_TIMEOUT_MS = 200


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    """Whether compaction is complete, and what holds it if not."""

    complete: bool
    holds: tuple[str, ...] = ()


class KeyCompaction:
    """Rewrites destroyed keys out of a schema's key partitions and the WAL."""

    def __init__(self, pool: ConnectionPool[Any], conninfo: str, schema: str) -> None:
        self._pool = pool
        self._conninfo = conninfo
        self._tracking = sql.Identifier(schema, "key_purge_tracking")
        self._state = sql.Identifier(schema, KEY_COMPACTION_TABLE)
        self._schema = schema
        self._finishing = threading.RLock()
        self._checkpointer: threading.Thread | None = None

    def run(
        self,
        application_name: str,
        *,
        horizon_wait_seconds: float,
        lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
        checkpoint_wait_seconds: float = DEFAULT_CHECKPOINT_WAIT_SECONDS,
    ) -> CompactionOutcome:
        row = fetch_one(
            self._pool.connection,
            sql.SQL(
                "SELECT destroyed_id, destroyed_xid, dirty_partitions FROM {} "
                "WHERE application_name = %s"
            ).format(self._tracking),
            (application_name,),
        )
        if row is None:
            return CompactionOutcome(complete=False, holds=("nothing purged yet",))
        destroyed_id, destroyed_xid, dirty = row
        with psycopg.connect(self._conninfo, autocommit=True) as connection:
            if dirty:
                holds = self._rewrite(
                    connection,
                    application_name=application_name,
                    destroyed_id=destroyed_id,
                    destroyed_xid=destroyed_xid,
                    partitions=dirty,
                    horizon_wait_seconds=horizon_wait_seconds,
                    lock_timeout_ms=lock_timeout_ms,
                )
                if holds:
                    return self._pending(connection, application_name, holds)
            else:
                # A deletion that found no key rows wrote no key bytes anywhere.
                self._record_rewrite(connection, application_name, destroyed_id, None)
            target = self._wal_target(connection, application_name)
            holds = self._clear_wal(
                connection, application_name, target, checkpoint_wait_seconds
            )
            if holds:
                return self._pending(connection, application_name, holds)
            return self._finish(connection, application_name, target)

    def _finish(
        self,
        connection: psycopg.Connection[Any],
        application_name: str,
        verified_segment: str | None,
    ) -> CompactionOutcome:
        """Mark compaction complete: files rewritten, WAL verified clear.

        Only if nothing changed since the verification: no deletion since the
        rewrite, and the WAL to clear still ends at `verified_segment` (a
        rewrite meanwhile, here or in another process, moves it on).
        """
        with self._finishing:
            marked = connection.execute(
                sql.SQL(
                    "UPDATE {tracking} t SET compacted_id = t.destroyed_id "
                    "FROM {state} s WHERE t.application_name = %(name)s "
                    "AND s.application_name = t.application_name "
                    "AND s.rewritten_id = t.destroyed_id "
                    "AND s.wal_segment IS NOT DISTINCT FROM %(segment)s "
                    "AND t.dirty_partitions = '{{}}'"
                ).format(tracking=self._tracking, state=self._state),
                {"name": application_name, "segment": verified_segment},
            ).rowcount
            if marked != 1:
                # Keys were destroyed meanwhile: the next run covers them.
                return self._pending(
                    connection, application_name, ("new deletions since the rewrite",)
                )
            self._set_holds(connection, application_name, ())
        return CompactionOutcome(complete=True)

    def holds(self, application_name: str) -> tuple[str, ...]:
        """Why the last compaction attempt stayed pending (empty if it did not)."""
        try:
            row = fetch_one(
                self._pool.connection,
                sql.SQL("SELECT holds FROM {} WHERE application_name = %s").format(
                    self._state
                ),
                (application_name,),
            )
        except errors.UndefinedTable:
            # A read-only opening (the audit) of a store that this release
            # has not migrated yet: nothing recorded.
            return ()
        return () if row is None else tuple(row[0])

    # The rewrite ------------------------------------------------------------

    def _rewrite(
        self,
        connection: psycopg.Connection[Any],
        *,
        application_name: str,
        destroyed_id: int,
        destroyed_xid: object,
        partitions: Collection[str],
        horizon_wait_seconds: float,
        lock_timeout_ms: int,
    ) -> tuple[str, ...]:
        if destroyed_xid is not None:
            holders = wait_for_horizon(
                connection, destroyed_xid, timeout_seconds=horizon_wait_seconds
            )
            if holders:
                return tuple(f"older transaction: {h}" for h in holders)
        holds = rewrite_partitions(
            connection, self._schema, partitions, lock_timeout_ms=lock_timeout_ms
        )
        if holds:
            return holds
        highest = wal.highest_segment(connection)
        cleared = connection.execute(
            sql.SQL(
                "UPDATE {} SET dirty_partitions = '{{}}' "
                "WHERE application_name = %s AND destroyed_id = %s"
            ).format(self._tracking),
            (application_name, destroyed_id),
        ).rowcount
        if cleared != 1:
            return ("new deletions during the rewrite",)
        self._record_rewrite(connection, application_name, destroyed_id, highest)
        return ()

    def _record_rewrite(
        self,
        connection: psycopg.Connection[Any],
        application_name: str,
        destroyed_id: int,
        highest_segment: str | None,
    ) -> None:
        # The WAL up to `wal_segment` may hold destroyed keys: it only grows,
        # by place (a segment name's last 16 digits): after a failover a new
        # timeline's name sorts above an old timeline's later place.
        connection.execute(
            sql.SQL(
                "INSERT INTO {} AS s (application_name, rewritten_id, wal_segment) "
                "VALUES (%(name)s, %(id)s, %(segment)s) "
                "ON CONFLICT (application_name) DO UPDATE SET "
                "rewritten_id = GREATEST(s.rewritten_id, EXCLUDED.rewritten_id), "
                "wal_segment = CASE WHEN substr(EXCLUDED.wal_segment, 9) "
                "> coalesce(substr(s.wal_segment, 9), '') "
                "THEN EXCLUDED.wal_segment ELSE s.wal_segment END"
            ).format(self._state),
            {"name": application_name, "id": destroyed_id, "segment": highest_segment},
        )

    # The WAL ----------------------------------------------------------------

    def _wal_target(
        self, connection: psycopg.Connection[Any], application_name: str
    ) -> str | None:
        """The last WAL segment that may hold destroyed keys (None: none may)."""
        row = connection.execute(
            sql.SQL("SELECT wal_segment FROM {} WHERE application_name = %s").format(
                self._state
            ),
            (application_name,),
        ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def _clear_wal(
        self,
        connection: psycopg.Connection[Any],
        application_name: str,
        target: str | None,
        checkpoint_wait_seconds: float,
    ) -> tuple[str, ...]:
        if target is None:
            return ()
        privileges = wal.wal_privileges(connection)
        if not privileges.can_list:
            return (
                "WAL retention: cannot list pg_wal to verify it (grant pg_monitor)",
            )
        config = wal.wal_retention_settings(connection)
        checkpointing = False
        # With several hosts a standby may hold the segments the primary no
        # longer has (an old primary rewound): its restartpoint needs a new
        # checkpoint from the primary to drop them. A member that is away is
        # not verified anyway; forcing WAL out would only keep it from
        # catching up when it is back.
        several = bool(wal_members.members(self._conninfo))
        away = wal_members.away(self._conninfo) if several else []
        if (
            not config
            and privileges.can_force
            and not away
            and (several or wal.segments_up_to(connection, target))
        ):
            wal.move_past(connection, target)
            checkpointing = not self._checkpoint(
                application_name, target, checkpoint_wait_seconds
            )
        remaining = wal.segments_up_to(connection, target)
        return wal_holds(
            connection,
            target=target,
            config=config,
            # Several hosts (a Patroni cluster): every member's own pg_wal.
            members=wal_members.member_holds(self._conninfo, target),
            away=away,
            remaining=remaining,
            checkpointing=checkpointing,
            can_force=privileges.can_force,
        )

    def _checkpoint(
        self, application_name: str, target: str, wait_seconds: float
    ) -> bool:
        """CHECKPOINT (which removes the old segments); True if done in time.

        A checkpoint writes every dirty buffer of the cluster and may take
        seconds: the caller (a deletion) waits `wait_seconds` at most, and the
        checkpoint completes the compaction when it ends.
        """
        with self._finishing:
            thread = self._checkpointer
            if thread is None or not thread.is_alive():
                thread = self._checkpointer = threading.Thread(
                    target=self._checkpoint_and_finish,
                    args=(application_name, target),
                    name="turnledger-wal-checkpoint",
                    daemon=True,
                )
                thread.start()
        thread.join(wait_seconds)
        return not thread.is_alive()

    def _checkpoint_and_finish(self, application_name: str, target: str) -> None:
        try:
            with psycopg.connect(self._conninfo, autocommit=True) as connection:
                connection.execute("CHECKPOINT")
                if wal.segments_up_to(connection, target):
                    # A checkpoint already under way when ours was requested
                    # may have finished first; the next starts after our switch.
                    connection.execute("CHECKPOINT")
                if wal.segments_up_to(connection, target):
                    return  # held after all: the next run says by what
                if wal.wal_retention_settings(connection):
                    return
                if wal_members.member_holds(self._conninfo, target):
                    return  # a standby keeps them: the next run says which
                self._finish(connection, application_name, target)
        except psycopg.Error as error:
            logger.warning("WAL checkpoint of the purge failed (%s); retried", error)

    # State ------------------------------------------------------------------

    def _pending(
        self,
        connection: psycopg.Connection[Any],
        application_name: str,
        holds: tuple[str, ...],
    ) -> CompactionOutcome:
        self._set_holds(connection, application_name, holds)
        return CompactionOutcome(complete=False, holds=holds)

    def _set_holds(
        self,
        connection: psycopg.Connection[Any],
        application_name: str,
        holds: tuple[str, ...],
    ) -> None:
        connection.execute(
            sql.SQL(
                "INSERT INTO {} AS s"
                " (application_name, rewritten_id, holds, checked_at)"
                " VALUES (%(name)s, 0, %(holds)s, now()) "
                "ON CONFLICT (application_name) DO UPDATE SET "
                "holds = EXCLUDED.holds, checked_at = EXCLUDED.checked_at"
            ).format(self._state),
            {"name": application_name, "holds": list(holds)},
        )
