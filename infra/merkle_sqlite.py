"""The transparency log's tree in SQLite: its own file (merkle.sqlite3 beside
the events), so following the log never takes the event store's write lock.
The tree's tables are versioned steps: infra/migrations/stores.py."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from turnledger.domain.merkle import Coordinate, Node
from turnledger.infra.merkle_ports import (
    LeafRow,
    SQLTreeReads,
    TreeQueries,
    checked_nodes,
)
from turnledger.infra.migrations.runner import (
    StoreNames,
    migrate_sqlite,
    sqlite_write_transaction,
)
from turnledger.infra.migrations.stores import MERKLE, SQLITE_MERKLE_STEPS


class _SQLiteWriter:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def tracking(self) -> tuple[int, int | None]:
        row = self._connection.execute(
            "SELECT size, notification_id FROM merkle_tracking WHERE id = 1"
        ).fetchone()
        return int(row[0]), row[1]

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        return _sqlite_nodes(self._connection, coordinates)

    def append(self, nodes: Sequence[Node], leaves: Sequence[LeafRow]) -> None:
        self._connection.executemany(
            "INSERT INTO merkle_nodes VALUES (?, ?, ?)",
            [(n.level, n.offset, n.hash) for n in nodes],
        )
        self._connection.executemany(
            "INSERT INTO merkle_leaves VALUES (?, ?, ?, ?)", leaves
        )

    def track(self, size: int, last_id: int) -> None:
        self._connection.execute(
            "UPDATE merkle_tracking SET size = ?, notification_id = ? WHERE id = 1",
            (size, last_id),
        )


def _sqlite_nodes(
    connection: sqlite3.Connection, coordinates: Sequence[Coordinate]
) -> list[bytes]:
    found: dict[Coordinate, bytes] = {}
    for level, index in dict.fromkeys(coordinates):
        row = (
            connection.execute(
                "SELECT hash FROM merkle_nodes WHERE level = ? AND idx = ?",
                (level, index),
            ).fetchone()
            if level
            else connection.execute(
                "SELECT leaf_hash FROM merkle_leaves WHERE position = ?", (index,)
            ).fetchone()
        )
        if row is not None:
            found[(level, index)] = bytes(row[0])
    return checked_nodes(coordinates, found)


_QUERIES = TreeQueries(
    size="SELECT size FROM merkle_tracking WHERE id = 1",
    leaf_inputs="SELECT leaf_input FROM merkle_leaves WHERE position >= ? "
    "AND position < ? ORDER BY position",
    position_of="SELECT position FROM merkle_leaves WHERE notification_id = ?",
)


class SQLiteLeafStore(SQLTreeReads):
    queries = _QUERIES

    def __init__(self, path: Path | str, *, create: bool = True) -> None:
        """`path` `MEMORY` (infra/sqlite_keys.py): the memory store's tree, in
        a database that lives as long as this object."""
        self._connection: sqlite3.Connection = sqlite3.connect(
            str(path) if create else f"file:{path}?mode=ro",
            uri=not create,
            isolation_level=None,
            check_same_thread=False,
            timeout=30,
        )
        self._lock = threading.Lock()
        if create:
            self._connection.execute("PRAGMA journal_mode = WAL")
            with sqlite_write_transaction(self._connection) as cursor:
                migrate_sqlite(cursor, MERKLE, SQLITE_MERKLE_STEPS, StoreNames())

    @contextmanager
    def writing(self) -> Iterator[_SQLiteWriter]:
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                yield _SQLiteWriter(self._connection)
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        with self._lock:
            return _sqlite_nodes(self._connection, coordinates)

    def level_nodes(self, level: int) -> list[tuple[int, bytes]]:
        with self._lock:
            rows = self._connection.execute(
                "SELECT idx, hash FROM merkle_nodes WHERE level = ? ORDER BY idx"
                if level
                else "SELECT position, leaf_hash FROM merkle_leaves ORDER BY position",
                (level,) if level else (),
            ).fetchall()
        return [(int(index), bytes(value)) for index, value in rows]

    def close(self) -> None:
        self._connection.close()
