"""The transparency log's tree, kept beside each store and followed from the log.

The follower (`merkle_follow.py`) appends each row's leaf to the tree, one
transaction per page; the tree is kept by a leaf store (`merkle_ports.py`):
SQLite keeps it in its own file (`merkle_sqlite.py`), PostgreSQL in the
store's schema (`merkle_postgres.py`), the in-memory store in the process
(below). `open_leaf_store` opens the one the settings name.

These tables live where the DBA can reach them: they are a cache that makes
proofs and checkpoints cheap, never evidence. The audit recomputes every leaf
from the stored rows and compares the result with a signed checkpoint kept
outside the database (infra/checkpoint.py).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from turnledger.domain.merkle import Coordinate, Node
from turnledger.infra.merkle_follow import (
    FOLLOW_PAGE,
    Followed,
    LogInconsistentError,
    follow,
    follow_checked,
)
from turnledger.infra.merkle_ports import (
    CountedLog,
    LeafRow,
    LeafStore,
    TreeWriter,
    checked_nodes,
)
from turnledger.infra.merkle_postgres import PostgresLeafStore
from turnledger.infra.merkle_sqlite import SQLiteLeafStore
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings

__all__ = [
    "FOLLOW_PAGE",
    "CountedLog",
    "Followed",
    "LeafStore",
    "LogInconsistentError",
    "MemoryLeafStore",
    "PostgresLeafStore",
    "SQLiteLeafStore",
    "TreeWriter",
    "follow",
    "follow_checked",
    "open_leaf_store",
]


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

    def append(self, nodes: Sequence[Node], leaves: Sequence[LeafRow]) -> None:
        for node in nodes:
            self._nodes[(node.level, node.offset)] = node.hash
        for position, notification_id, data, leaf in leaves:
            self._leaves.append((notification_id, data))
            self._nodes[(0, position)] = leaf
            self._positions[notification_id] = position

    def track(self, size: int, last_id: int) -> None:
        # The size is the number of leaves appended, kept by `append`.
        self._last_id = last_id

    def size(self) -> int:
        return len(self._leaves)

    def read_nodes(self, coordinates: Sequence[Coordinate]) -> list[bytes]:
        return checked_nodes(coordinates, self._nodes)

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
