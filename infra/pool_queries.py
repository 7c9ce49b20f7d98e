"""One statement on a pooled PostgreSQL connection: take a connection, run the
statement, read its rows, give the connection back.

The key store, the device store and the compaction's state all ask their
pools this way. `connect` is what lends the connection: a pool's own
`connection` method, or a store's wrapper of it that turns an unreachable
server into the store's typed error (the device store's `_connection`).
A statement that must share a transaction with others takes the connection
itself instead.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg.abc import Params, Query

Connect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]


def fetch_one(connect: Connect, query: Query, params: Params | None = None) -> Any:
    """The statement's first row, or None."""
    with connect() as connection:
        return connection.execute(query, params).fetchone()


def fetch_all(
    connect: Connect, query: Query, params: Params | None = None
) -> list[Any]:
    """Every row of the statement."""
    with connect() as connection:
        return connection.execute(query, params).fetchall()


def execute(connect: Connect, query: Query, params: Params | None = None) -> int:
    """Run a statement that returns no rows; how many rows it changed."""
    with connect() as connection:
        return connection.execute(query, params).rowcount
