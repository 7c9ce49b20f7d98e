"""The transparency log's tree, kept beside each store and followed from the log.

A follower reads the rows after the last notification id it has seen, turns
each into its leaf and appends it to the tree, storing every complete subtree
it completes (`merkle_nodes`), each leaf's input (`merkle_leaves`: what a
finding names) and its position (`merkle_tracking`) in one transaction per
page, so a crash leaves the tree at a page boundary, never half a page.
Appending k leaves costs O(k log n) hashes; a proof reads O(log n) nodes.

Why not the library's `Projection` with a `TrackingRecorder`: a projection
receives decoded domain events, and a leaf must be the row's raw cells (a row
that does not decode, or that the recorder would skip, still needs its leaf).
The follower keeps the same discipline instead: rows and tracking position
in one transaction, resumable from the tracked position.

These tables live where the DBA can reach them: they are a cache that makes
proofs and checkpoints cheap, never evidence. The audit recomputes every leaf
from the stored rows and compares the result with a signed checkpoint kept
outside the database (infra/checkpoint.py).

SQLite keeps the tree in its own file (merkle.sqlite3 beside the events), so
following the log never takes the event store's write lock; PostgreSQL keeps
it in the store's schema; the in-memory store keeps it in the process.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg import sql

from turnledger.domain.errors import CheckpointError
from turnledger.domain.merkle import (
    Coordinate,
    Frontier,
    Node,
    ProofError,
    leaf_hash,
    tree_fault,
)
from turnledger.domain.transparency import RawLog, leaf_input
from turnledger.infra.migrations.runner import (
    StoreNames,
    ensure_schema,
    migrate_postgres,
    migrate_sqlite,
    sqlite_write_transaction,
)
from turnledger.infra.migrations.stores import (
    MERKLE,
    POSTGRES_MERKLE_STEPS,
    SQLITE_MERKLE_STEPS,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings

FOLLOW_PAGE = 5000


class TreeWriter(Protocol):
    """One transaction of the follower."""

    def tracking(self) -> tuple[int, int | None]:
        """(leaves in the tree, notification id of the last one)."""
        ...

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]: ...

    def append(
        self,
        nodes: Sequence[Node],
        leaves: Sequence[tuple[int, int, bytes, bytes]],
        size: int,
        last_id: int,
    ) -> None:
        """Store new nodes (level 1 up) and (position, notification id, leaf
        input, leaf hash) rows."""
        ...


class LeafStore(Protocol):
    def writing(self) -> Any:
        """A context manager giving a `TreeWriter` inside one locked transaction."""
        ...

    def size(self) -> int: ...

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]: ...

    def leaf_inputs(self, start: int, end: int) -> list[bytes]:
        """The stored leaf inputs of positions [start, end)."""
        ...

    def position_of(self, notification_id: int) -> int | None: ...

    def level_nodes(self, level: int) -> list[tuple[int, bytes]]:
        """(index, hash) of every stored node of a level, in index order; level
        0: the leaf hashes by position."""
        ...

    def close(self) -> None: ...


class LogInconsistentError(CheckpointError):
    """Raised when the log no longer extends the newest checkpoint in a directory,
    or the tree cache contradicts the log or itself (so nothing is signed)."""


class CountedLog(RawLog, Protocol):
    def count_through(self, notification_id: int | None) -> int:
        """How many rows have a notification id at or below this one (None: 0)."""
        ...


@dataclass(slots=True)
class Followed:
    """Where a follow left the tree, and the leaf hashes (and inputs) it appended."""

    frontier: Frontier
    first_new: int
    new_leaves: list[bytes]
    new_inputs: list[bytes]
    last_id: int | None = None


def follow(log: RawLog, store: LeafStore, *, page_size: int = FOLLOW_PAGE) -> Followed:
    """Append every row after the tree's last one, a page per transaction."""
    followed: Followed | None = None
    while True:
        with store.writing() as writer:
            size, last_id = writer.tracking()
            if followed is None or followed.frontier.size != size:
                # First page, or another follower moved the tree meanwhile.
                frontier = Frontier.load(size, writer.read_nodes)
                followed = Followed(frontier, size, [], [], last_id)
            page = log.rows(last_id, page_size)
            if not page:
                return followed
            frontier = followed.frontier
            nodes: list[Node] = []
            leaves: list[tuple[int, int, bytes, bytes]] = []
            for row in page:
                data = leaf_input(row)
                leaf = leaf_hash(data)
                leaves.append((frontier.size, row.notification_id, data, leaf))
                followed.new_leaves.append(leaf)
                followed.new_inputs.append(data)
                # Leaf hashes are kept with their leaves: nodes from level 1.
                nodes.extend(frontier.append(leaf)[1:])
            writer.append(nodes, leaves, frontier.size, page[-1].notification_id)
            followed.last_id = page[-1].notification_id
        if len(page) < page_size:
            return followed


def follow_checked(log: CountedLog, store: LeafStore) -> Followed:
    """`follow`, then check the tree against the log itself and against itself.

    The tree cache lives where the DBA can write: its tracking row could skip
    rows (which no checkpoint would then cover, and whose deletion no audit
    would see), a node could be altered that only a later proof reads. So the
    rows at or below the last one followed must be exactly the tree's leaves
    in number, and every stored node must be the hash of its children.
    Costs one count of the rows and one hash per leaf (docs/benchmarks.md).
    """
    followed = follow(log, store)
    size = followed.frontier.size
    stored = log.count_through(followed.last_id)
    if stored != size:
        raise LogInconsistentError(
            f"the log holds {stored} rows up to notification id {followed.last_id}, "
            f"the tree cache covers {size}: the cache (merkle_tracking) was altered "
            "and would leave rows uncovered; nothing was signed (drop the three "
            "merkle tables and they are rebuilt from the rows)"
        )
    fault = tree_fault(size, store.level_nodes)
    if fault is not None:
        raise LogInconsistentError(
            f"the tree cache was altered: {fault}; nothing was signed (run "
            "`turnledger audit --checkpoint DIR`; if it passes, only the cache was "
            "altered: drop the three merkle tables and they are rebuilt from the "
            "rows)"
        )
    return followed


def _checked(
    coordinates: Sequence[Coordinate], found: dict[Coordinate, bytes]
) -> list[bytes]:
    try:
        return [found[coordinate] for coordinate in coordinates]
    except KeyError as missing:
        raise ProofError(f"the tree store lacks node {missing.args[0]}") from None


# SQLite ------------------------------------------------------------------------

# The tree's tables are versioned steps: infra/migrations/stores.py.


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

    def append(
        self,
        nodes: Sequence[Node],
        leaves: Sequence[tuple[int, int, bytes, bytes]],
        size: int,
        last_id: int,
    ) -> None:
        self._connection.executemany(
            "INSERT INTO merkle_nodes VALUES (?, ?, ?)",
            [(n.level, n.offset, n.hash) for n in nodes],
        )
        self._connection.executemany(
            "INSERT INTO merkle_leaves VALUES (?, ?, ?, ?)", leaves
        )
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
    return _checked(coordinates, found)


class SQLiteLeafStore:
    def __init__(self, path: Path, *, create: bool = True) -> None:
        self._connection = sqlite3.connect(
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

    def size(self) -> int:
        with self._lock:
            return _SQLiteWriter(self._connection).tracking()[0]

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        with self._lock:
            return _sqlite_nodes(self._connection, coordinates)

    def leaf_inputs(self, start: int, end: int) -> list[bytes]:
        with self._lock:
            rows = self._connection.execute(
                "SELECT leaf_input FROM merkle_leaves WHERE position >= ? "
                "AND position < ? ORDER BY position",
                (start, end),
            ).fetchall()
        return [bytes(row[0]) for row in rows]

    def position_of(self, notification_id: int) -> int | None:
        with self._lock:
            row = self._connection.execute(
                "SELECT position FROM merkle_leaves WHERE notification_id = ?",
                (notification_id,),
            ).fetchone()
        return None if row is None else int(row[0])

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


# PostgreSQL --------------------------------------------------------------------


class _PostgresWriter:
    def __init__(self, store: PostgresLeafStore, cursor: psycopg.Cursor[Any]) -> None:
        self._store = store
        self._cursor = cursor

    def tracking(self) -> tuple[int, int | None]:
        # FOR UPDATE: two followers (the service, a CLI run) take turns.
        row = self._cursor.execute(
            sql.SQL(
                "SELECT size, notification_id FROM {} WHERE id = 1 FOR UPDATE"
            ).format(self._store.tables["tracking"])
        ).fetchone()
        assert row is not None
        return int(row[0]), row[1]

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        return self._store.nodes_with(self._cursor, coordinates)

    def append(
        self,
        nodes: Sequence[Node],
        leaves: Sequence[tuple[int, int, bytes, bytes]],
        size: int,
        last_id: int,
    ) -> None:
        tables = self._store.tables
        copy_nodes = sql.SQL("COPY {} (level, idx, hash) FROM STDIN").format(
            tables["nodes"]
        )
        with self._cursor.copy(copy_nodes) as copy:
            for node in nodes:
                copy.write_row((node.level, node.offset, node.hash))
        copy_leaves = sql.SQL(
            "COPY {} (position, notification_id, leaf_input, leaf_hash) FROM STDIN"
        ).format(tables["leaves"])
        with self._cursor.copy(copy_leaves) as copy:
            for leaf in leaves:
                copy.write_row(leaf)
        self._cursor.execute(
            sql.SQL(
                "UPDATE {} SET size = %s, notification_id = %s WHERE id = 1"
            ).format(tables["tracking"]),
            (size, last_id),
        )


class PostgresLeafStore:
    def __init__(self, conninfo: str, schema: str, *, create: bool = True) -> None:
        self.tables = {
            name: sql.Identifier(schema, f"merkle_{name}")
            for name in ("nodes", "leaves", "tracking")
        }
        self._connection = psycopg.connect(conninfo, autocommit=True)
        self._lock = threading.Lock()
        if not create:
            self._connection.read_only = True
            return
        ensure_schema(self._connection, schema)
        migrate_postgres(
            self._connection,
            MERKLE,
            POSTGRES_MERKLE_STEPS,
            StoreNames(schema=schema),
            # The tree is a cache of the log: dropped, it is made again.
            cache_table="merkle_tracking",
        )

    @contextmanager
    def writing(self) -> Iterator[_PostgresWriter]:
        with (
            self._lock,
            self._connection.transaction(),
            self._connection.cursor() as cursor,
        ):
            # The tree is a cache rebuilt from the log: a commit lost in a crash
            # is followed again, so it need not wait for the WAL flush.
            cursor.execute("SET LOCAL synchronous_commit = off")
            yield _PostgresWriter(self, cursor)

    def nodes_with(
        self, cursor: psycopg.Cursor[Any], coordinates: Sequence[Coordinate]
    ) -> list[bytes]:
        if not coordinates:
            return []
        found: dict[Coordinate, bytes] = {}
        positions = [index for level, index in coordinates if level == 0]
        if positions:
            rows = cursor.execute(
                sql.SQL(
                    "SELECT position, leaf_hash FROM {} WHERE position = ANY(%s)"
                ).format(self.tables["leaves"]),
                (positions,),
            ).fetchall()
            found.update({(0, r[0]): bytes(r[1]) for r in rows})
        upper = [c for c in coordinates if c[0]]
        if upper:
            rows = cursor.execute(
                sql.SQL(
                    "SELECT level, idx, hash FROM {} WHERE (level, idx) IN "
                    "(SELECT * FROM unnest(%s::smallint[], %s::bigint[]))"
                ).format(self.tables["nodes"]),
                ([c[0] for c in upper], [c[1] for c in upper]),
            ).fetchall()
            found.update({(r[0], r[1]): bytes(r[2]) for r in rows})
        return _checked(coordinates, found)

    def size(self) -> int:
        with self._lock:
            row = self._connection.execute(
                sql.SQL("SELECT size FROM {} WHERE id = 1").format(
                    self.tables["tracking"]
                )
            ).fetchone()
        return 0 if row is None else int(row[0])

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        with self._lock, self._connection.cursor() as cursor:
            return self.nodes_with(cursor, coordinates)

    def leaf_inputs(self, start: int, end: int) -> list[bytes]:
        with self._lock:
            rows = self._connection.execute(
                sql.SQL(
                    "SELECT leaf_input FROM {} WHERE position >= %s AND position < %s "
                    "ORDER BY position"
                ).format(self.tables["leaves"]),
                (start, end),
            ).fetchall()
        return [bytes(row[0]) for row in rows]

    def position_of(self, notification_id: int) -> int | None:
        with self._lock:
            row = self._connection.execute(
                sql.SQL("SELECT position FROM {} WHERE notification_id = %s").format(
                    self.tables["leaves"]
                ),
                (notification_id,),
            ).fetchone()
        return None if row is None else int(row[0])

    def level_nodes(self, level: int) -> list[tuple[int, bytes]]:
        statement = (
            sql.SQL("SELECT idx, hash FROM {} WHERE level = %s ORDER BY idx").format(
                self.tables["nodes"]
            )
            if level
            else sql.SQL("SELECT position, leaf_hash FROM {} ORDER BY position").format(
                self.tables["leaves"]
            )
        )
        with self._lock, self._connection.cursor(binary=True) as cursor:
            # Binary results are already (int, bytes): the columns are bigint
            # and bytea. Converting 100,000 rows again cost a third of the read.
            rows: list[tuple[int, bytes]] = cursor.execute(
                statement, (level,) if level else ()
            ).fetchall()
        return rows

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """For a reader of the same database to share (one connection fewer)."""
        return self._connection

    def close(self) -> None:
        self._connection.close()


# Memory ------------------------------------------------------------------------


class MemoryLeafStore:
    """The in-memory store's tree: lives as long as its ledger."""

    def __init__(self) -> None:
        self._nodes: dict[Coordinate, bytes] = {}
        self._leaves: list[tuple[int, bytes]] = []
        self._positions: dict[int, int] = {}
        self._last_id: int | None = None
        self._lock = threading.Lock()

    @contextmanager
    def writing(self) -> Iterator[MemoryLeafStore]:
        with self._lock:
            yield self

    def tracking(self) -> tuple[int, int | None]:
        return len(self._leaves), self._last_id

    def append(
        self,
        nodes: Sequence[Node],
        leaves: Sequence[tuple[int, int, bytes, bytes]],
        size: int,
        last_id: int,
    ) -> None:
        for node in nodes:
            self._nodes[(node.level, node.offset)] = node.hash
        for position, notification_id, data, leaf in leaves:
            self._leaves.append((notification_id, data))
            self._nodes[(0, position)] = leaf
            self._positions[notification_id] = position
        self._last_id = last_id

    def size(self) -> int:
        return len(self._leaves)

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        return _checked(coordinates, self._nodes)

    def leaf_inputs(self, start: int, end: int) -> list[bytes]:
        return [data for _, data in self._leaves[start:end]]

    def position_of(self, notification_id: int) -> int | None:
        return self._positions.get(notification_id)

    def level_nodes(self, level: int) -> list[tuple[int, bytes]]:
        return sorted(
            (index, value) for (at, index), value in self._nodes.items() if at == level
        )

    def close(self) -> None:
        pass


_MEMORY_TREES: weakref.WeakKeyDictionary[Conversations, MemoryLeafStore] = (
    weakref.WeakKeyDictionary()
)


def open_leaf_store(
    settings: Settings, ledger: Conversations | None = None, *, create: bool = True
) -> LeafStore:
    """The tree beside the store these settings name (memory: beside `ledger`).

    `create=False` opens it read-only and creates nothing (for the audit).
    """
    match settings.persistence:
        case "sqlite":
            if create:
                settings.data_dir.mkdir(parents=True, exist_ok=True)
            return SQLiteLeafStore(settings.data_dir / "merkle.sqlite3", create=create)
        case "postgres":
            return PostgresLeafStore(
                settings.postgres_conninfo(), settings.postgres_schema, create=create
            )
        case "memory":
            if ledger is None:
                raise ValueError("the in-memory store's tree lives beside its ledger")
            return _MEMORY_TREES.setdefault(ledger, MemoryLeafStore())
