"""What the transparency log's tree is kept in, as the follower and the
proofs see it: a leaf store, and one transaction of it (`TreeWriter`).

Three stores implement it: SQLite (`merkle_sqlite.py`), PostgreSQL
(`merkle_postgres.py`) and memory (`merkle_store.py`, which also opens the
one the settings name). The two SQL stores share their plain reads
(`SQLTreeReads`), each with its own statements.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from turnledger.domain.merkle import Coordinate, Node, ProofError
from turnledger.domain.transparency import RawLog

LeafRow = tuple[int, int, bytes, bytes]
"""(position, notification id, leaf input, leaf hash): one row of `merkle_leaves`."""


class TreeWriter(Protocol):
    """One transaction of the follower."""

    def tracking(self) -> tuple[int, int | None]:
        """(leaves in the tree, notification id of the last one)."""
        ...

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]: ...

    def append(self, nodes: Sequence[Node], leaves: Sequence[LeafRow]) -> None:
        """Store new nodes (level 1 up) and leaf rows."""
        ...

    def track(self, size: int, last_id: int) -> None:
        """Record the tree's size and the notification id of its last leaf."""
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


class CountedLog(RawLog, Protocol):
    def count_through(self, notification_id: int | None) -> int:
        """How many rows have a notification id at or below this one (None: 0)."""
        ...


def checked_nodes(
    coordinates: Sequence[Coordinate], found: dict[Coordinate, bytes]
) -> list[bytes]:
    try:
        return [found[coordinate] for coordinate in coordinates]
    except KeyError as missing:
        raise ProofError(f"the tree store lacks node {missing.args[0]}") from None


@dataclass(frozen=True, slots=True)
class TreeQueries:
    """The tree's reads in one SQL dialect; parameters in the order given."""

    size: Any  # () -> one row (size,)
    leaf_inputs: Any  # (start, end) -> (leaf_input,) rows by position
    position_of: Any  # (notification_id,) -> at most one row (position,)


class SQLTreeReads:
    """The reads that the SQL leaf stores answer alike, each with its own
    statements: a sqlite3 and a psycopg connection both `execute`."""

    _connection: Any
    _lock: threading.Lock
    queries: TreeQueries

    def _fetch(self, statement: Any, params: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            rows: list[Any] = self._connection.execute(statement, params).fetchall()
        return rows

    def size(self) -> int:
        rows = self._fetch(self.queries.size, ())
        return int(rows[0][0]) if rows else 0

    def leaf_inputs(self, start: int, end: int) -> list[bytes]:
        rows = self._fetch(self.queries.leaf_inputs, (start, end))
        return [bytes(row[0]) for row in rows]

    def position_of(self, notification_id: int) -> int | None:
        rows = self._fetch(self.queries.position_of, (notification_id,))
        return int(rows[0][0]) if rows else None
