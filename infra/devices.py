"""Devices and their bearer tokens: who may call the HTTP service, as which user.

A token is 32 random bytes from `secrets`, shown once when the device is added
and stored only as its SHA-256 digest. Such a token has too much entropy to be
guessed, so a fast digest is enough (no password hashing); lookups go by the
digest and the final comparison is constant-time. Devices are not conversation
events: they live in a small table beside the ledger (an SQLite file of their
own, a table in the PostgreSQL schema, or memory).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from uuid import uuid4

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from turnledger.domain.errors import (
    DatabaseUnavailableError,
    DeviceNotFoundError,
    InvalidInputError,
    UnauthenticatedError,
)
from turnledger.domain.text import check_identifier, check_text
from turnledger.infra.pool_check import RECONNECT_TIMEOUT_SECONDS, check_unless_quiet
from turnledger.infra.postgres import DEVICE_TABLE, ensure_schema
from turnledger.infra.settings import Settings

TOKEN_PREFIX = "tl1_"
MAX_DEVICE_NAME_CHARS = 100


@dataclass(frozen=True, slots=True)
class Device:
    device_id: str
    user_id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None = None
    added_by: str | None = None
    """The device that added this one over HTTP; None when added by the CLI."""

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


@dataclass(frozen=True, slots=True)
class IssuedDevice:
    """A new device and its token: the only time the token is ever available."""

    device: Device
    token: str


class DeviceStore(Protocol):
    def insert(self, device: Device, token_digest: bytes) -> None: ...

    def find_by_digests(
        self, token_digests: Collection[bytes]
    ) -> dict[bytes, tuple[Device, bytes]]: ...

    def get(self, device_id: str) -> Device | None: ...

    def list(self, user_id: str | None) -> list[Device]: ...

    def mark_revoked(self, device_id: str, at: datetime) -> None: ...

    def revoked_since(self, at: datetime) -> Sequence[Device]: ...

    def close(self) -> None: ...


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class DeviceRegistry:
    """Adds, authenticates, lists and revokes devices."""

    def __init__(self, store: DeviceStore) -> None:
        self._store = store

    def add(
        self, user_id: str, name: str, *, added_by: str | None = None
    ) -> IssuedDevice:
        check_identifier("user_id", user_id)
        check_text("name", name)
        if len(name) > MAX_DEVICE_NAME_CHARS:
            raise InvalidInputError(
                "name", f"must be at most {MAX_DEVICE_NAME_CHARS} characters"
            )
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        device = Device(
            device_id=f"dev_{uuid4().hex}",
            user_id=user_id,
            name=name,
            created_at=datetime.now(UTC),
            added_by=added_by,
        )
        self._store.insert(device, token_digest(token))
        return IssuedDevice(device, token)

    def authenticate(self, token: str | None) -> Device:
        """The device holding `token`; UnauthenticatedError if none may use it."""
        found = self.authenticate_many([token])[0]
        if isinstance(found, UnauthenticatedError):
            raise found
        return found

    def authenticate_many(
        self, tokens: Sequence[str | None]
    ) -> list[Device | UnauthenticatedError]:
        """`authenticate` of each token, in its place, with one lookup for all."""
        digests = [token_digest(token) if token else None for token in tokens]
        wanted = {digest for digest in digests if digest is not None}
        found = self._store.find_by_digests(wanted) if wanted else {}
        return [
            self._device_for(digest, found.get(digest) if digest else None)
            for digest in digests
        ]

    @staticmethod
    def _device_for(
        digest: bytes | None, found: tuple[Device, bytes] | None
    ) -> Device | UnauthenticatedError:
        if digest is None:
            return UnauthenticatedError("send 'Authorization: Bearer <device token>'")
        if found is None or not hmac.compare_digest(found[1], digest):
            return UnauthenticatedError("unknown device token")
        if found[0].revoked:
            return UnauthenticatedError("this device token has been revoked")
        return found[0]

    def list(self, user_id: str | None = None) -> list[Device]:
        if user_id is not None:
            check_identifier("user_id", user_id)
        return self._store.list(user_id)

    def is_revoked(self, device_id: str) -> bool:
        """True if the device was revoked (or is gone) since it authenticated."""
        device = self._store.get(device_id)
        return device is None or device.revoked

    def revoked_since(self, at: datetime) -> Sequence[Device]:
        """Devices revoked at or after `at` (for services that poll)."""
        return self._store.revoked_since(at)

    @property
    def revocation_channel(self) -> str | None:
        """The PostgreSQL channel NOTIFYed with the user id on each revocation."""
        return getattr(self._store, "revocation_channel", None)

    def revoke(self, device_id: str, *, user_id: str | None = None) -> Device:
        """Revoke a device and every device it added, transitively.

        With `user_id`, only one of that user's devices. A stolen token could
        have been used to add devices; revoking it revokes those too. Revoking
        an already revoked device keeps its first revocation time.
        """
        check_text("device_id", device_id)
        device = self._store.get(device_id)
        if device is None or (user_id is not None and device.user_id != user_id):
            raise DeviceNotFoundError(str(device_id))
        at = datetime.now(UTC)
        siblings = self._store.list(device.user_id)
        doomed, frontier = {device.device_id}, [device.device_id]
        while frontier:
            parent = frontier.pop()
            for child in siblings:
                if child.added_by == parent and child.device_id not in doomed:
                    doomed.add(child.device_id)
                    frontier.append(child.device_id)
        for each in siblings:
            if each.device_id in doomed and not each.revoked:
                self._store.mark_revoked(each.device_id, at)
        return device if device.revoked else replace(device, revoked_at=at)

    def connection_pools(self) -> list[ConnectionPool[Any]]:
        """The psycopg pools behind this registry (none off PostgreSQL)."""
        pools = getattr(self._store, "connection_pools", None)
        return list(pools()) if pools is not None else []

    def close(self) -> None:
        self._store.close()


# Stores -----------------------------------------------------------------------


class MemoryDeviceStore:
    def __init__(self) -> None:
        self._rows: dict[str, tuple[Device, bytes]] = {}
        self._lock = threading.Lock()

    def insert(self, device: Device, token_digest: bytes) -> None:
        with self._lock:
            self._rows[device.device_id] = (device, token_digest)

    def find_by_digests(
        self, token_digests: Collection[bytes]
    ) -> dict[bytes, tuple[Device, bytes]]:
        with self._lock:
            return {
                digest: (device, digest)
                for device, digest in self._rows.values()
                if digest in token_digests
            }

    def get(self, device_id: str) -> Device | None:
        with self._lock:
            row = self._rows.get(device_id)
        return row[0] if row else None

    def list(self, user_id: str | None) -> list[Device]:
        with self._lock:
            return [
                device
                for device, _ in self._rows.values()
                if user_id is None or device.user_id == user_id
            ]

    def mark_revoked(self, device_id: str, at: datetime) -> None:
        with self._lock:
            device, digest = self._rows[device_id]
            if not device.revoked:
                self._rows[device_id] = (replace(device, revoked_at=at), digest)

    def revoked_since(self, at: datetime) -> Sequence[Device]:
        with self._lock:
            return [
                device
                for device, _ in self._rows.values()
                if device.revoked_at is not None and device.revoked_at >= at
            ]

    def close(self) -> None:
        pass


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
    """Devices in their own SQLite file, beside the event log's file."""

    def __init__(self, path: Path | str) -> None:
        self._connection = sqlite3.connect(
            str(path), check_same_thread=False, isolation_level=None, timeout=30
        )
        self._lock = threading.Lock()
        with self._cursor() as connection:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS devices ("
                " device_id TEXT PRIMARY KEY,"
                " user_id TEXT NOT NULL,"
                " name TEXT NOT NULL,"
                " created_at TEXT NOT NULL,"
                " revoked_at TEXT,"
                " added_by TEXT,"
                " token_digest BLOB NOT NULL UNIQUE)"
            )

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
                connection.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} ("
                        " device_id text PRIMARY KEY,"
                        " user_id text NOT NULL,"
                        " name text NOT NULL,"
                        " created_at timestamptz NOT NULL,"
                        " revoked_at timestamptz,"
                        " added_by text,"
                        " token_digest bytea NOT NULL UNIQUE)"
                    ).format(self._table)
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
        with self._connection() as connection:
            connection.execute(
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
        with self._connection() as connection:
            rows = connection.execute(
                self._find_by_digests, (list(token_digests),)
            ).fetchall()
        return {bytes(row[6]): (_device(row[:6]), bytes(row[6])) for row in rows}

    def get(self, device_id: str) -> Device | None:
        with self._connection() as connection:
            row = connection.execute(
                sql.SQL("SELECT " + _COLUMNS + " FROM {} WHERE device_id = %s").format(
                    self._table
                ),
                (device_id,),
            ).fetchone()
        return None if row is None else _device(row)

    def list(self, user_id: str | None) -> list[Device]:
        query = "SELECT " + _COLUMNS + " FROM {}"
        params: tuple[str, ...] = ()
        if user_id is not None:
            query += " WHERE user_id = %s"
            params = (user_id,)
        with self._connection() as connection:
            rows = connection.execute(
                sql.SQL(query + " ORDER BY created_at, device_id").format(self._table),
                params,
            ).fetchall()
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
        with self._connection() as connection:
            query = "SELECT " + _COLUMNS + " FROM {} WHERE revoked_at >= %s"
            rows = connection.execute(
                sql.SQL(query).format(self._table),
                (at,),
            ).fetchall()
        return [_device(row) for row in rows]

    def connection_pools(self) -> list[ConnectionPool[Any]]:
        """The pool the service's readiness checks (infra/http/database.py)."""
        return [self._pool]

    def close(self) -> None:
        self._pool.close()


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def open_device_registry(settings: Settings) -> DeviceRegistry:
    """The device registry for these settings, its table created if needed."""
    match settings.persistence:
        case "memory":
            return DeviceRegistry(MemoryDeviceStore())
        case "sqlite":
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            return DeviceRegistry(
                SQLiteDeviceStore(settings.data_dir / "devices.sqlite3")
            )
        case "postgres":
            ensure_schema(settings.postgres_conninfo(), settings.postgres_schema)
            return DeviceRegistry(
                PostgresDeviceStore(
                    settings.postgres_conninfo(),
                    settings.postgres_schema,
                    pool_timeout=settings.http_database_timeout_seconds,
                )
            )
