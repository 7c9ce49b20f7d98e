"""What the outage probe checks (infra/http/database.py): the database
answers on a connection of the probe's own (`PostgresCheck`), and after an
outage every pool requests are served from lends a connection that answers
(`PoolsServe`, over `service_pools`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg_pool import ConnectionPool

from turnledger.infra.devices import DeviceRegistry
from turnledger.infra.pool_check import pool_serves
from turnledger.infra.service_layer.application import Conversations

logger = logging.getLogger("turnledger.infra.http.database")


def one_line(error: BaseException) -> str:
    """The error's type and first line, short enough for a log line."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]


class PostgresCheck:
    """`SELECT 1` on one connection of its own, reconnecting after a failure."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._connection: psycopg.AsyncConnection[tuple[object, ...]] | None = None

    async def __call__(self) -> None:
        try:
            if self._connection is None or self._connection.closed:
                self._connection = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                )
            await self._connection.execute("SELECT 1")
        except BaseException:
            # Cancelled by the deadline, or failed: start afresh next time.
            await self.close()
            raise

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()


def service_pools(
    ledger: Conversations, registry: DeviceRegistry
) -> list[ConnectionPool[Any]]:
    """The psycopg pools requests are served from: the event store's, the key
    store's and the device store's (none off PostgreSQL)."""
    pools: list[ConnectionPool[Any]] = []
    datastore = getattr(ledger.recorder, "datastore", None)
    if isinstance(datastore, PostgresDatastore):
        pools.append(datastore.pool)
    for part in (ledger.vault.purge_view, registry):
        found = getattr(part, "connection_pools", None)
        if found is not None:
            pools.extend(found())
    return pools


class PoolsServe:
    """Passes when every pool lends a connection that answers `SELECT 1`.

    What readiness waits for after an outage: requests are served from these
    pools, so the service is ready when they are.
    """

    def __init__(self, pools: list[ConnectionPool[Any]], *, timeout: float) -> None:
        self._pools = pools
        self._timeout = timeout

    async def __call__(self) -> None:
        await asyncio.to_thread(self._serve_all)

    def drop_broken(self) -> None:
        """At an outage (or a failover), drop from every pool the idle
        connections it broke, in a worker thread, before requests take them:
        a pool that lends a broken connection replaces it, but sleeps 1 s, then
        2 s..., before the next (psycopg_pool's back-off), and the one thread
        that writes turns would sleep so with every write queued behind it."""
        asyncio.get_running_loop().run_in_executor(None, self._check_all)

    def _check_all(self) -> None:
        for pool in self._pools:
            try:
                pool.check()
            except Exception as error:  # the next check tries again
                logger.warning("pool %s: %s", pool.name, one_line(error))

    def _serve_all(self) -> None:
        for pool in self._pools:
            try:
                pool_serves(pool, self._timeout)
            except Exception as error:
                raise PoolNotServingError(
                    f"pool {pool.name}: {one_line(error)}"
                ) from error


class PoolNotServingError(Exception):
    """A pool of the service does not lend a working connection yet."""
