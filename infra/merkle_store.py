"""The transparency log's tree, kept beside each store and followed from the log.

The follower (`merkle_follow.py`) appends each row's leaf to the tree, one
transaction per page; the tree is kept by a leaf store (`merkle_ports.py`):
SQLite keeps it in its own file (`merkle_sqlite.py`), PostgreSQL in the
store's schema (`merkle_postgres.py`), the memory store in an SQLite
database in memory beside its ledger (`merkle_sqlite.py` too).
`open_leaf_store` opens the one the settings name.

These tables live where the DBA can reach them: they are a cache that makes
proofs and checkpoints cheap, never evidence. The audit recomputes every leaf
from the stored rows and compares the result with a signed checkpoint kept
outside the database (infra/checkpoint.py).
"""

from __future__ import annotations

import weakref

from turnledger.infra.merkle_follow import (
    FOLLOW_PAGE,
    Followed,
    LogInconsistentError,
    follow,
    follow_checked,
)
from turnledger.infra.merkle_ports import (
    CountedLog,
    LeafStore,
    TreeWriter,
)
from turnledger.infra.merkle_postgres import PostgresLeafStore
from turnledger.infra.merkle_sqlite import SQLiteLeafStore
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.sqlite_keys import MEMORY

__all__ = [
    "FOLLOW_PAGE",
    "CountedLog",
    "Followed",
    "LeafStore",
    "LogInconsistentError",
    "PostgresLeafStore",
    "SQLiteLeafStore",
    "TreeWriter",
    "follow",
    "follow_checked",
    "open_leaf_store",
]


# The memory store's trees: each an SQLite database in memory, kept by one
# connection for as long as its ledger lives (callers do not close it).
_MEMORY_TREES: weakref.WeakKeyDictionary[Conversations, SQLiteLeafStore] = (
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
            tree = _MEMORY_TREES.get(ledger)
            if tree is None:  # a racing opener's store is kept if it came first
                tree = _MEMORY_TREES.setdefault(ledger, SQLiteLeafStore(MEMORY))
            return tree
