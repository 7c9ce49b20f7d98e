"""Where devices are kept: an SQLite file of their own (the memory store: an
SQLite database in memory), or a table in the PostgreSQL schema. The registry
(infra/devices.py) is the same for both."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from turnledger.domain.errors import DatabaseUnavailableError
from turnledger.infra.devices import Device, DeviceStore
from turnledger.infra.migrations.runner import (
    StoreNames,
    migrate_postgres,
    migrate_sqlite,
    sqlite_write_transaction,
)
from turnledger.infra.migrations.stores import (
    DEVICES,
    POSTGRES_DEVICE_STEPS,
    SQLITE_DEVICE_STEPS,
)
from turnledger.infra.pool_check import RECONNECT_TIMEOUT_SECONDS, check_unless_quiet
from turnledger.infra.pool_queries import execute, fetch_all, fetch_one
from turnledger.infra.postgres import DEVICE_TABLE, ensure_schema
from turnledger.infra.settings import Settings
from turnledger.infra.sqlite_keys import MEMORY

_COLUMNS = "device_id, user_id, name, created_at, revoked_at, added_by"


def _device(row: tuple[object, ...]) -> Device:
    device_id, user_id, name, created_at, revoked_at, added_by = row
    return Device(
        device_id=str(device_id),
        user_id=str(user_id),
        name=str(name),
        created_at=_as_datetime(created_at),
        revoked_at=None if revoked_at is None else _as_datetime(revoked_at),
        added_by=None if added_by is None else str(added_by),
    )


def _as_datetime(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


class SQLiteDeviceStore:
    """Devices in their own SQLite file, beside the event log's file (or, for
    the memory store, `MEMORY`: a database as long-lived as this object)."""

    def __init__(self, path: Path | str) -> None:
        self._connection = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=30
        )
        self._lock = threading.Lock()
        with (
            self._cursor() as connection,
            sqlite_write_transaction(connection) as cursor,
        ):
            migrate_sqlite(cursor, DEVICES, SQLITE_DEVICE_STEPS, StoreNames())

    @contextmanager
    def _cursor(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._connection
            except sqlite3.OperationalError as error:  # locked past the timeout, I/O
                raise DatabaseUnavailableError(str(error)) from None

    def insert(self, device: Device, token_digest: bytes) -> None:
        with self._cursor() as connection:
            connection.execute(
                f"INSERT INTO devices ({_COLUMNS}, token_digest) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    device.device_id,
                    device.user_id,
                    device.name,
                    device.created_at.isoformat(),
                    None,
                    device.added_by,
                    token_digest,
                ),
            )

    def find_by_digests(
        self, token_digests: Collection[bytes]
    ) -> dict[bytes, tuple[Device, bytes]]:
        found = {}
        with self._cursor() as connection:
            for wanted in token_digests:
                row = connection.execute(
                    f"SELECT {_COLUMNS}, token_digest FROM devices"
                    " WHERE token_digest = ?",
                    (wanted,),
                ).fetchone()
                if row is not None:
                    found[wanted] = (_device(row[:6]), bytes(row[6]))
        return found

    def get(self, device_id: str) -> Device | None:
        with self._cursor() as connection:
            row = connection.execute(
                f"SELECT {_COLUMNS} FROM devices WHERE device_id = ?", (device_id,)
            ).fetchone()
        return None if row is None else _device(row)

    def list(self, user_id: str | None) -> list[Device]:
        with self._cursor() as connection:
            if user_id is None:
                rows = connection.execute(
                    f"SELECT {_COLUMNS} FROM devices ORDER BY created_at, device_id"
                ).fetchall()
            else:
                rows = connection.execute(
                    f"SELECT {_COLUMNS} FROM devices WHERE user_id = ? "
                    "ORDER BY created_at, device_id",
                    (user_id,),
                ).fetchall()
        return [_device(row) for row in rows]

    def mark_revoked(self, device_id: str, at: datetime) -> None:
        with self._cursor() as connection:
            connection.execute(
                "UPDATE devices SET revoked_at = ? WHERE device_id = ? "
                "AND revoked_at IS NULL",
                (at.isoformat(), device_id),
            )

    def revoked_since(self, at: datetime) -> Sequence[Device]:
        # Every timestamp is written by isoformat() in UTC, so text order is
        # time order.
        with self._cursor() as connection:
            rows = connection.execute(
                f"SELECT {_COLUMNS} FROM devices WHERE revoked_at >= ?",
                (at.astimezone(UTC).isoformat(),),
            ).fetchall()
        return [_device(row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._connection.close()


class PostgresDeviceStore:
    """Devices in `<schema>.devices`, through a small psycopg pool.

    The pool checks a connection before lending it (a connection the server
    ended, by a restart or otherwise, is replaced, not handed out:
    `check_unless_quiet`) and waits at most
    `pool_timeout` seconds for one: an outage is reported as
    DatabaseUnavailableError within that time instead of after the pool's
    default 30 s.
    """

    def __init__(
        self,
        conninfo: str,
        schema: str,
        *,
        pool_size: int = 4,
        pool_timeout: float = 1.0,
    ) -> None:
        self._table = sql.Identifier(schema, DEVICE_TABLE)
        # NOTIFYed with the user id in the transaction that revokes a device.
        self.revocation_channel = f"{schema}_devices"[:63]
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            open=True,
            name="turnledger-devices",
            timeout=pool_timeout,
            check=check_unless_quiet,
            reconnect_timeout=RECONNECT_TIMEOUT_SECONDS,
            # Every request authenticates: in autocommit its lookup is one
            # round trip, not SELECT then COMMIT. Each write here is one
            # statement, or in a transaction of its own (mark_revoked).
            kwargs={"autocommit": True},
        )
        # Rendered once: a Composed is rendered again at every execution,
        # and every request runs this one.
        self._find_by_digests = (
            sql.SQL(
                "SELECT " + _COLUMNS + ", token_digest FROM {} "
                "WHERE token_digest = ANY(%s)"
            )
            .format(self._table)
            .as_bytes(None)
        )
        try:
            with self._connection() as connection:
                migrate_postgres(
                    connection,
                    DEVICES,
                    POSTGRES_DEVICE_STEPS,
                    StoreNames(schema=schema),
                )
        except BaseException:
            self._pool.close()
            raise

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        try:
            with self._pool.connection() as connection:
                yield connection
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            # PoolTimeout included: no connection could be had in time.
            raise DatabaseUnavailableError(_first_line(error)) from None

    def insert(self, device: Device, token_digest: bytes) -> None:
        execute(
            self._connection,
            sql.SQL(
                "INSERT INTO {} (" + _COLUMNS + ", token_digest) "
                "VALUES (%s, %s, %s, %s, NULL, %s, %s)"
            ).format(self._table),
            (
                device.device_id,
                device.user_id,
                device.name,
                device.created_at,
                device.added_by,
                token_digest,
            ),
        )

    def find_by_digests(
        self, token_digests: Collection[bytes]
    ) -> dict[bytes, tuple[Device, bytes]]:
        rows = fetch_all(
            self._connection, self._find_by_digests, (list(token_digests),)
        )
        return {bytes(row[6]): (_device(row[:6]), bytes(row[6])) for row in rows}

    def get(self, device_id: str) -> Device | None:
        row = fetch_one(
            self._connection,
            sql.SQL("SELECT " + _COLUMNS + " FROM {} WHERE device_id = %s").format(
                self._table
            ),
            (device_id,),
        )
        return None if row is None else _device(row)

    def list(self, user_id: str | None) -> list[Device]:
        query = "SELECT " + _COLUMNS + " FROM {}"
        params: tuple[str, ...] = ()
        if user_id is not None:
            query += " WHERE user_id = %s"
            params = (user_id,)
        rows = fetch_all(
            self._connection,
            sql.SQL(query + " ORDER BY created_at, device_id").format(self._table),
            params,
        )
        return [_device(row) for row in rows]

    def mark_revoked(self, device_id: str, at: datetime) -> None:
        with self._connection() as connection, connection.transaction():
            row = connection.execute(
                sql.SQL(
                    "UPDATE {} SET revoked_at = %s WHERE device_id = %s "
                    "AND revoked_at IS NULL RETURNING user_id"
                ).format(self._table),
                (at, device_id),
            ).fetchone()
            if row is not None:
                # Delivered on commit, to every service process listening.
                connection.execute(
                    "SELECT pg_notify(%s, %s)", (self.revocation_channel, str(row[0]))
                )

    def revoked_since(self, at: datetime) -> Sequence[Device]:
        query = "SELECT " + _COLUMNS + " FROM {} WHERE revoked_at >= %s"
        rows = fetch_all(self._connection, sql.SQL(query).format(self._table), (at,))
        return [_device(row) for row in rows]

    def connection_pools(self) -> list[ConnectionPool[Any]]:
        """The pool the service's readiness checks (infra/http/database.py)."""
        return [self._pool]

    def close(self) -> None:
        self._pool.close()


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def open_device_store(settings: Settings) -> DeviceStore:
    """The device store for these settings, its table created if needed."""
    match settings.persistence:
        case "memory":
            return SQLiteDeviceStore(MEMORY)
        case "sqlite":
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            return SQLiteDeviceStore(settings.data_dir / "devices.sqlite3")
        case "postgres":
            ensure_schema(settings.postgres_conninfo(), settings.postgres_schema)
            return PostgresDeviceStore(
                settings.postgres_conninfo(),
                settings.postgres_schema,
                pool_timeout=settings.http_database_timeout_seconds,
            )
