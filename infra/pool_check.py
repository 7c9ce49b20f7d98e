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
from eventsourcing.postgres import ConnectionPool as LibraryConnectionPool
from eventsourcing.postgres import PostgresDatastore
from psycopg_pool import ConnectionPool


def check_unless_quiet(connection: psycopg.Connection[Any]) -> None:
    """Return if the connection may be lent; raise if it is broken."""
    if not connection.closed:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
        if not readable:
            return
    ConnectionPool.check_connection(connection)


def use_quiet_check(datastore: PostgresDatastore) -> None:
    """Give the library's datastore a pool that checks with `check_unless_quiet`.

    The library offers the pool's full ping (POSTGRES_PRE_PING) or none; its
    pool takes the check only when it is made. So the datastore's pool, made
    but not yet opened, is replaced by one made with the same settings and
    this check.
    """
    built = datastore.pool
    datastore.pool = LibraryConnectionPool(
        get_password_func=built.get_password_func,
        connection_class=built.connection_class,
        kwargs=built.kwargs,
        min_size=built.min_size,
        max_size=built.max_size,
        open=False,
        configure=datastore.after_connect_func(),
        timeout=built.timeout,
        max_waiting=built.max_waiting,
        max_lifetime=built.max_lifetime,
        check=check_unless_quiet,
    )
