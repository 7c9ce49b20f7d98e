"""Build the ledger from settings: the event store and the key store."""

from __future__ import annotations

import fcntl
import logging
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager

import psycopg

from turnledger.domain.errors import InvalidInputError
from turnledger.infra.keystore import KeyStore
from turnledger.infra.postgres import PostgresKeyStore, ensure_schema
from turnledger.infra.read_side import upgrade_if_needed
from turnledger.infra.restore import check_read_only, check_restore, deletion_record
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.sqlite import SQLiteKeyStore
from turnledger.infra.sqlite_keys import MEMORY
from turnledger.infra.vault import (
    KeyVault,
    MasterKeyError,
    decode_master_key,
    load_or_create_key_file,
    new_master_key,
)

_log = logging.getLogger(__name__)

# An empty file in an SQLite data directory: held while a process opens it.
OPENING_LOCK = "opening.lock"


def eventsourcing_env(settings: Settings) -> dict[str, str]:
    """The library's configuration, complete, so no shell variable leaks in."""
    env = {
        "CREATE_TABLE": "y",
        # The aggregate loads from its read-side row; no library snapshots.
        "IS_SNAPSHOTTING_ENABLED": "n",
    }
    # Each store is the library's, with a recorder that writes the read side in
    # the events' transaction (the library's documented recorder extension).
    # The memory store is the SQLite store on an in-memory database of its own.
    match settings.persistence:
        case "memory":
            env["PERSISTENCE_MODULE"] = "turnledger.infra.sqlite:SQLiteReadSideFactory"
            env["SQLITE_DBNAME"] = memory_database_uri()
            env["SQLITE_LOCK_TIMEOUT"] = "30"
        case "sqlite":
            env["PERSISTENCE_MODULE"] = "turnledger.infra.sqlite:SQLiteReadSideFactory"
            env["SQLITE_DBNAME"] = str(settings.sqlite_events_path)
            env["SQLITE_LOCK_TIMEOUT"] = "30"
        case "postgres":
            env.update(
                PERSISTENCE_MODULE=(
                    "turnledger.infra.postgres:PostgresReadSideFactory"
                ),
                POSTGRES_DBNAME=settings.postgres_dbname,
                POSTGRES_HOST=settings.postgres_host,
                POSTGRES_PORT=str(settings.postgres_port),
                POSTGRES_USER=settings.postgres_user,
                POSTGRES_PASSWORD=settings.postgres_password.get_secret_value(),
                POSTGRES_SCHEMA=settings.postgres_schema,
                POSTGRES_POOL_SIZE=str(settings.postgres_pool_size),
                # Writes go through one group committer, so a burst needs few
                # connections beyond the pool; the library's default (10 more)
                # lets a few processes exhaust a server's max_connections.
                POSTGRES_MAX_OVERFLOW="2",
                POSTGRES_CONNECT_TIMEOUT=str(settings.postgres_connect_timeout),
                # Ours, not the library's: read by PostgresReadSideFactory.
                POSTGRES_TARGET_SESSION_ATTRS=settings.postgres_target_session_attrs,
            )
            options = settings.postgres_session_options()
            if options is not None:
                env["POSTGRES_SESSION_OPTIONS"] = options  # ours too
    return env


def memory_database_uri() -> str:
    """A new in-memory SQLite database's name, private to the ledger given it.

    The library's pool opens several connections to it: shared cache makes them
    one database (its pool lets no reader in while a writer works, which
    shared cache needs), and the name's random part keeps two ledgers of one
    process apart. The database lives while a connection to it is open: the
    factory holds one (infra/sqlite.py).
    """
    return f"file:turnledger-{uuid.uuid4().hex}?mode=memory&cache=shared"


def master_key(settings: Settings, *, create: bool = True) -> bytes:
    if settings.master_key is not None:
        return decode_master_key(settings.master_key.get_secret_value())
    if settings.master_key_file is not None:
        if not settings.master_key_file.is_file():
            raise MasterKeyError(
                f"TURNLEDGER_MASTER_KEY_FILE {settings.master_key_file} is not a file"
            )
        # Never created here: a configured file is the operator's.
        return load_or_create_key_file(settings.master_key_file)
    if settings.persistence == "sqlite":
        if not create and not settings.default_master_key_path.exists():
            raise MasterKeyError(
                f"{settings.default_master_key_path} is missing: nothing to read"
            )
        # The event log holds the sealed text; the key file may just have been
        # created empty by the key store.
        return load_or_create_key_file(
            settings.default_master_key_path,
            data_exists=settings.sqlite_events_path.exists(),
        )
    return decode_master_key(new_master_key())  # memory: lives as long as the process


def key_store(settings: Settings, *, read_only: bool = False) -> KeyStore:
    match settings.persistence:
        case "memory":
            # A database of the store's own connection: gone when it closes.
            return SQLiteKeyStore(MEMORY)
        case "sqlite":
            return SQLiteKeyStore(
                settings.sqlite_keys_path,
                read_only=read_only,
                events_path=settings.sqlite_events_path,
            )
        case "postgres":
            return PostgresKeyStore(
                settings.postgres_conninfo(),
                settings.postgres_schema,
                pool_size=4,
                read_only=read_only,
                connect_timeout=settings.postgres_connect_timeout,
            )


def open_conversations(settings: Settings, *, read_only: bool = False) -> Conversations:
    """The ledger application for these settings, its stores created if needed.

    A store written before the read side existed gets it built from its log.
    With `read_only` (audits, history, windows, exports), nothing is created,
    upgraded or purged: the store is left exactly as it is found.
    """
    if read_only:
        return _open_read_only(settings)
    with _opening_lock(settings):
        return _open_for_writing(settings)


@contextmanager
def _opening_lock(settings: Settings) -> Iterator[None]:
    """On SQLite, one opening at a time per data directory.

    Opening a fresh SQLite store switches each file to WAL and creates its
    tables; SQLite answers "database is locked" at once, without waiting, to
    a connection whose read must become a write while another did so first.
    Processes opening one store together (a service's workers, a CLI beside
    them) take turns here instead. PostgreSQL orders its openings with an
    advisory lock (infra/migrations/) and the record's claim (infra/restore.py).
    """
    if settings.persistence != "sqlite":
        yield
        return
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.data_dir / OPENING_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def _open_for_writing(settings: Settings) -> Conversations:
    if settings.persistence == "postgres":
        ensure_schema(settings.postgres_conninfo(), settings.postgres_schema)
    keys = key_store(settings)
    vault = KeyVault(keys, master_key(settings))
    try:
        # A different key would seal new turns the old ones' key cannot open.
        vault.check_master_key(remember=True)
        ledger = Conversations(
            eventsourcing_env(settings),
            vault=vault,
            max_turn_bytes=settings.max_turn_bytes,
            max_batches_in_flight=batches_in_flight(settings),
        )
    except BaseException:
        vault.close()
        raise
    try:
        upgrade_if_needed(ledger)
        # Deletions a restored backup predates are redone (and the record
        # attached) before anything else runs or is served.
        if settings.persistence != "memory":
            report = check_restore(
                ledger,
                keys,
                deletion_record(settings.deletion_record_directory, keys),
                apply=True,
            )
            if report.restored:
                _log.warning("turnledger: %s", report.describe())
            ledger.restore_report = report
        # Complete any deletion whose purge was interrupted (crash, lost key
        # store connection) before serving anything.
        ledger.purge_deleted_history()
    except BaseException:
        ledger.close()
        raise
    return ledger


def batches_in_flight(settings: Settings) -> int:
    """How many write transactions the ledger keeps going at once.

    On PostgreSQL a second batch can be prepared and sent while the first
    waits for its commit (the table lock still orders them). SQLite has one
    writer at a time (the memory store is SQLite too): a second batch would
    only wait.
    """
    if settings.persistence != "postgres":
        return 1
    return settings.postgres_batches_in_flight


def open_standby(standby: Settings, *, wait_seconds: float) -> Conversations:
    """The ledger read from one streaming replica (one replica host:
    infra/http/standbys.py), read-only, whose reads wait at most
    `wait_seconds` for a connection. It creates, upgrades and purges nothing
    (a hot standby refuses writes anyway): the primary's ledger does all of
    that."""
    # The primary's start-up compares the store with the deletion record; a
    # replica a few milliseconds behind a deletion must not be refused for it.
    return _open_read_only(standby, check_record=False, pool_wait_seconds=wait_seconds)


def _open_read_only(
    settings: Settings,
    *,
    check_record: bool = True,
    pool_wait_seconds: float | None = None,
) -> Conversations:
    if settings.persistence == "sqlite" and not settings.sqlite_events_path.exists():
        raise InvalidInputError(
            "TURNLEDGER_DATA_DIR", f"no store at {settings.data_dir}: nothing to read"
        )
    keys = key_store(settings, read_only=True)
    vault = KeyVault(keys, master_key(settings, create=False))
    try:
        vault.check_master_key(remember=False)
        # A memory store opened to read is a new, empty database: its tables
        # are made so that it reads as empty.
        create = "y" if settings.persistence == "memory" else "n"
        env = {**eventsourcing_env(settings), "CREATE_TABLE": create}
        if pool_wait_seconds is not None:
            env["POSTGRES_POOL_WAIT_SECONDS"] = str(pool_wait_seconds)  # ours
        ledger = Conversations(env, vault=vault, max_turn_bytes=settings.max_turn_bytes)
    except BaseException:
        vault.close()
        raise
    if check_record and settings.persistence != "memory":
        try:
            check_read_only(
                ledger, keys, deletion_record(settings.deletion_record_directory, keys)
            )
        except BaseException:
            ledger.close()
            raise
    if not _has_legacy_snapshots(settings):
        ledger.legacy_snapshots = None
    return ledger


def _has_legacy_snapshots(settings: Settings) -> bool:
    """Whether the store has the snapshot table the first release wrote."""
    match settings.persistence:
        case "sqlite":
            uri = f"file:{settings.sqlite_events_path.resolve()}?mode=ro"
            with closing(sqlite3.connect(uri, uri=True)) as connection:
                row = connection.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'stored_snapshots'"
                ).fetchone()
            return row is not None
        case "postgres":
            with psycopg.connect(settings.postgres_conninfo()) as connection:
                found = connection.execute(
                    "SELECT to_regclass(%s)",
                    (f"{settings.postgres_schema}.conversations_snapshots",),
                ).fetchone()
            return found is not None and found[0] is not None
    return False  # memory: a new database, which the first release never wrote
