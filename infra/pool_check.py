"""How the service's psycopg pools check, replace and recover connections.

A server that stops, restarts or ends the session closes the connection (or
sends an error first): either is waiting to be read on the idle socket, and
then the connection is pinged and, if the ping fails, replaced instead of
handed out. A quiet connection is lent as it is: the pool's own check
(`ConnectionPool.check_connection`) pings every time, a round trip that
doubled the round trips of a lookup and added one to every transaction.

A pool replaces a lost connection in the background and, while the server is
down, retries with a growing back-off (1, 2, 4, 8 s...). Left at psycopg_pool's
default `reconnect_timeout` (5 minutes) those retries hold the pool's slots, so
once the server is back a request waits for the next retry: 5-11 s after a
restart. Here a replacement gives up after `RECONNECT_TIMEOUT_SECONDS`, which
frees its slot, and the next request that needs a connection makes one at once
(the pool grows on demand). `pool_serves` is what the service's readiness runs
while it is recovering (infra/http/database.py).
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg_pool import ConnectionPool

from turnledger.infra.library_compat import replace_pool_check

RECONNECT_TIMEOUT_SECONDS = 0.5
"""How long a pool keeps retrying to replace a lost connection before it gives
the slot up (psycopg_pool's `reconnect_timeout`): short, so no back-off outlives
an outage by more than this."""


def check_unless_quiet(connection: psycopg.Connection[Any]) -> None:
    """Return if the connection may be lent; raise if it is broken."""
    if not connection.closed:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
        if not readable:
            return
    ConnectionPool.check_connection(connection)


def pool_serves(pool: ConnectionPool[Any], timeout: float) -> None:
    """Raise unless `pool` lends a connection that answers within `timeout`.

    `check()` first: it pings the idle connections, drops those an outage
    broke and starts replacing them, so none is lent broken afterwards (the
    pool sleeps a second after lending a broken one).
    """
    pool.check()
    with pool.connection(timeout=timeout) as connection:
        connection.execute("SELECT 1")


def use_quiet_check(
    datastore: PostgresDatastore,
    *,
    target_session_attrs: str = "any",
    options: str | None = None,
    wait_seconds: float | None = None,
) -> None:
    """Give the library's datastore a pool that checks with `check_unless_quiet`
    and gives up a lost connection's slot after `RECONNECT_TIMEOUT_SECONDS`.

    The library offers the pool's full ping (POSTGRES_PRE_PING) or none, and
    psycopg_pool's default reconnection; its pool takes both only when it is
    made. So the datastore's pool, made but not yet opened, is replaced by one
    made with the same settings and these, and libpq's `target_session_attrs`
    (a multi-host connection to a Patroni cluster: docs/ha.md), which the
    library does not pass either (`library_compat.replace_pool_check`), and
    libpq's `options` (a replica's `lock_timeout`, `Settings.replica_settings`),
    and how long a connection is waited for (`wait_seconds`; the library waits
    its connect timeout: a standby's reads wait less, infra/http/standbys.py).
    """
    connection = {}
    if target_session_attrs != "any":
        connection["target_session_attrs"] = target_session_attrs
    if options:
        connection["options"] = options
    pool: dict[str, float] = {"reconnect_timeout": RECONNECT_TIMEOUT_SECONDS}
    if wait_seconds is not None:
        pool["timeout"] = wait_seconds
    replace_pool_check(datastore, check_unless_quiet, connection=connection, **pool)
