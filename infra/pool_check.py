"""The check a psycopg pool runs before lending a connection.

A server that stops, restarts or ends the session closes the connection (or
sends an error first): either is waiting to be read on the idle socket, and
then the connection is pinged and, if the ping fails, replaced instead of
handed out. A quiet connection is lent as it is: the pool's own check
(`ConnectionPool.check_connection`) pings every time, a round trip that
doubled the round trips of a lookup and added one to every transaction.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg_pool import ConnectionPool

from turnledger.infra.library_compat import replace_pool_check


def check_unless_quiet(connection: psycopg.Connection[Any]) -> None:
    """Return if the connection may be lent; raise if it is broken."""
    if not connection.closed:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
        if not readable:
            return
    ConnectionPool.check_connection(connection)


def use_quiet_check(datastore: PostgresDatastore) -> None:
    """Give the library's datastore a pool that checks with `check_unless_quiet`
    (the pool is remade: see `library_compat.replace_pool_check`)."""
    replace_pool_check(datastore, check_unless_quiet)
