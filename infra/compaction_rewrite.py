"""The rewrite of a key compaction (infra/compaction.py, step 2): `VACUUM
(FULL, VERBOSE)` of the key partitions a purge deleted from and of the read
side's partitions beside them, verified by the server's own report."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import psycopg
from psycopg import errors, sql

from turnledger.infra.migrations.ledger import read_side_partition

_LEADING_COUNT = re.compile(r"^\s*(\d+)")

# The read side's tables whose rows held sizes a deletion erased: the row
# versions from before the erasure stay in their files until rewritten.
# Partitioned by the key table's hash (infra/migrations/ledger.py, step 5).
READ_SIDE_SIZE_TABLES = ("conversation_turns", "conversation_folds")


def read_side_relations(key_partitions: Collection[str]) -> list[str]:
    """The read side's partitions that hold the rows of the conversations
    whose keys are in `key_partitions`."""
    return sorted(
        {
            read_side_partition(table, name)
            for table in READ_SIDE_SIZE_TABLES
            for name in key_partitions
        }
    )


def rewrite_partitions(
    connection: psycopg.Connection[Any],
    schema: str,
    partitions: Collection[str],
    *,
    lock_timeout_ms: int,
) -> tuple[str, ...]:
    """Rewrite the key `partitions` and their read-side partitions; what
    keeps the rewrite from being verified complete (empty: nothing)."""
    # The key partitions, then the read side's tables whose old row
    # versions hold the deleted texts' sizes: before the WAL position is
    # recorded, so the WAL that logged those rows is cleared too.
    relations = [*sorted(partitions), *read_side_relations(partitions)]
    try:
        kept = _vacuum_full(connection, schema, relations, lock_timeout_ms)
    except errors.LockNotAvailable:
        return (
            f"lock: another session holds a lock on a key partition or a "
            f"read-side partition (waited {lock_timeout_ms} ms)",
        )
    unverified = sorted(set(relations) - set(kept))
    if unverified:
        return (f"rewrite not verified: no report from VACUUM for {unverified}",)
    dead = {relname: count for relname, count in kept.items() if count}
    return tuple(
        f"older transaction: VACUUM FULL kept {count} dead row(s) of {name}"
        for name, count in sorted(dead.items())
    )


def _vacuum_full(
    connection: psycopg.Connection[Any],
    schema: str,
    relations: list[str],
    lock_timeout_ms: int,
) -> dict[str, int]:
    """VACUUM FULL each relation under `lock_timeout_ms`: the dead row
    versions the server reports it kept, by the relations it reported on."""
    kept: dict[str, int] = {}
    counts: list[int] = []

    def collect(diagnostic: psycopg.errors.Diagnostic) -> None:
        # VACUUM (FULL, VERBOSE) reports '"schema.partition": found R
        # removable, N nonremovable row versions in P pages' with the
        # detail 'D dead row versions cannot be removed yet. CPU: ...'.
        # Only the detail's leading count is read: the wording is
        # translated with lc_messages, the count stays first.
        counted = _LEADING_COUNT.match(diagnostic.message_detail or "")
        if counted:
            counts.append(int(counted[1]))

    connection.add_notice_handler(collect)
    connection.execute(
        sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{lock_timeout_ms}ms"))
    )
    try:
        for relname in relations:
            counts.clear()
            connection.execute(
                sql.SQL("VACUUM (FULL, VERBOSE) {}").format(
                    sql.Identifier(schema, relname)
                )
            )
            if counts:
                kept[relname] = max(counts)
    finally:
        connection.execute("RESET lock_timeout")
        connection.remove_notice_handler(collect)
    return kept
