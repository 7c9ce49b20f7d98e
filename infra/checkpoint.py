"""Signed checkpoints of the transparency log, proofs, and audits against them.

A checkpoint is the tree size, the root hash and the time, signed with
Ed25519 by a key the database never holds (TURNLEDGER_AUDIT_SIGNING_KEY or
_FILE), written as JSON to a directory of the operator's choosing. Beside the
checkpoints the directory keeps `leaves.bin`, every leaf hash in log order
(32 bytes each), and `leaf-inputs.bin`, every leaf input: with them an audit
names every event that differs even when the tree cache in the database was
altered as well. A checkpoint also carries the deletion record's head
(infra/deletion_record.py), signed apart from the tree head but bound to it,
so that the record, kept outside the database, cannot be rolled back or
rewritten unseen either. docs/transparency.md documents the formats and what
a verifier needs.

The checkpoint's format and reading it back are checkpoint_format.py, the
leaf files beside it checkpoint_leaves.py; this module follows the log,
writes checkpoints and keeps them coming, and every name of the three is
importable from here.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from turnledger.domain.findings import RECORD_ALTERED, RECORD_LOST, RECORD_ROLLED_BACK
from turnledger.domain.merkle import (
    root,
)
from turnledger.infra.checkpoint_format import (
    CHECKPOINT_FORMAT,
    RECORD_HEAD_FORMAT,
    Checkpoint,
    SignedRecordHead,
    checkpoint_files,
    newest_checkpoint,
    read_checkpoint,
    record_head_message,
    signed_message,
    store_origin,
)
from turnledger.infra.checkpoint_leaves import (
    LEAF_INPUT_RECORD,
    LEAF_INPUTS_FILE,
    LEAVES_FILE,
    append_leaves_file,
    read_leaf_inputs_file,
    read_leaves_file,
    write_atomically,
)
from turnledger.infra.deletion_record import (
    DeletionRecord,
    DeletionRecordError,
    RecordHead,
)
from turnledger.infra.merkle_store import (
    CountedLog,
    LeafStore,
    LogInconsistentError,
    PostgresLeafStore,
    follow_checked,
    open_leaf_store,
)
from turnledger.infra.persistence import key_store
from turnledger.infra.raw_log import PostgresRawLog, open_raw_log
from turnledger.infra.restore import RECORD_META
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.signing import public_bytes, signing_key

_log = logging.getLogger("turnledger.checkpoint")

__all__ = [
    "CHECKPOINT_FORMAT",
    "LEAF_INPUTS_FILE",
    "LEAF_INPUT_RECORD",
    "LEAVES_FILE",
    "RECORD_HEAD_FORMAT",
    "Checkpoint",
    "CheckpointWriter",
    "LogInconsistentError",  # raised here, defined beside the tree cache
    "SignedRecordHead",
    "checkpoint_files",
    "checkpoint_periodically",
    "followed_record",
    "newest_checkpoint",
    "read_checkpoint",
    "read_leaf_inputs_file",
    "read_leaves_file",
    "record_departure",
    "record_head_message",
    "signed_message",
    "store_origin",
    "write_checkpoint",
]


def followed_record(
    settings: Settings, connection: psycopg.Connection[Any] | None = None
) -> DeletionRecord | None:
    """The deletion record the store follows (None: the memory store, or a
    store no opening has attached to a record yet). On PostgreSQL, with the
    `connection` of a tree cache when given (a key store of its own would
    cost a pool's start and stop on every one-shot checkpoint)."""
    if settings.persistence == "memory":
        return None
    if settings.persistence == "sqlite" and not settings.sqlite_keys_path.exists():
        return None
    if settings.persistence == "postgres" and connection is not None:
        record_id = _postgres_meta(connection, settings.postgres_schema, RECORD_META)
    else:
        keys = key_store(settings, read_only=True)
        try:
            record_id = keys.read_meta(RECORD_META)
        finally:
            keys.close()
    if record_id is None:
        return None
    directory = settings.deletion_record_directory
    return DeletionRecord(directory / f"deletions-{record_id}.log", record_id)


def _postgres_meta(
    connection: psycopg.Connection[Any], schema: str, name: str
) -> str | None:
    """A value of the key store's metadata (infra/postgres_keys.py)."""
    table = f"{schema}.key_store_meta"
    found = connection.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    if found is None or found[0] is None:
        return None
    row = connection.execute(
        sql.SQL("SELECT value FROM {} WHERE name = %s").format(
            sql.Identifier(schema, "key_store_meta")
        ),
        (name,),
    ).fetchone()
    return None if row is None else str(row[0])


def record_departure(
    record: DeletionRecord | None, signed: RecordHead
) -> tuple[str, str] | None:
    """(kind, detail) if `record` does not extend the head a checkpoint
    signed: missing, another record, fewer entries, or other entries up to
    the signed count (rewritten, every hash recomputed or not)."""
    where = f"the deletion record {signed.record_id}"
    if record is None or not record.exists():
        return RECORD_LOST, (
            f"{where} the checkpoint signed ({signed.entries} entries) is missing"
            + ("" if record is None else f" from {record.path}")
        )
    try:
        found = record.head_at(signed.entries)
    except DeletionRecordError as error:
        return RECORD_ALTERED, str(error)
    if found is None:
        entries = record.load().entries
        return RECORD_ROLLED_BACK, (
            f"{where} at {record.path} holds {entries} entries, the checkpoint "
            f"signed {signed.entries}: deletions were removed from it"
        )
    if found.record_id != signed.record_id or found.head != signed.head:
        return RECORD_ALTERED, (
            f"{where} at {record.path} holds other entries than the checkpoint "
            f"signed (its head after {signed.entries} entries is "
            f"{found.head.hex()[:16]}, signed {signed.head.hex()[:16]}): it was "
            "rewritten"
        )
    return None


class CheckpointWriter:
    """Writes checkpoints of one store into one directory, keeping connections.

    For the serve process: build one, call `write()` periodically, `close()`
    at shutdown. Each write follows the log (O(k log n) for k new events),
    refuses (LogInconsistentError) when the tree no longer extends the newest
    checkpoint in the directory, so a checkpoint writer is also a monitor,
    then appends leaves.bin and signs.
    """

    def __init__(
        self, ledger: Conversations | None, settings: Settings, out_dir: Path
    ) -> None:
        self._key = signing_key(settings)
        self._settings = settings
        self._out_dir = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self._previous = self._newest()
        self._store = open_leaf_store(settings, ledger)
        try:
            self._log = _log_beside(self._store, settings, ledger)
        except BaseException:
            self._close_store()
            raise
        try:
            self._record = followed_record(
                settings,
                self._store.connection
                if isinstance(self._store, PostgresLeafStore)
                else None,
            )
        except BaseException:
            self.close()
            raise
        # Whether the record was checked, in full, against the newest
        # checkpoint; afterwards only what is appended is read.
        self._record_checked = False

    def _newest(self) -> Checkpoint | None:
        files = checkpoint_files(self._out_dir)
        if not files:
            return None
        # Names sort by size, then time (zero-padded): the last is the newest
        # this key wrote. A file there that this key did not sign stops the
        # writer (CheckpointError) rather than being built upon.
        return read_checkpoint(files[-1], self._key.public_key())

    def write(self, *, skip_unchanged: bool = False) -> Checkpoint:
        """Sign the log as it is now; with `skip_unchanged`, return the newest
        checkpoint instead when no event was added since it."""
        # The cache must cover every row and be a tree of its own leaves; with
        # the previous root checked below, its every node is then the signed one.
        followed = follow_checked(self._log, self._store)
        size = followed.frontier.size
        previous = self._previous
        if previous is not None and not _extends(previous, size, self._store):
            raise LogInconsistentError(
                f"the log of {size} events, as the tree cache holds it, does not "
                f"extend checkpoint {previous.path} ({previous.tree_size} events): "
                f"run `turnledger audit --checkpoint {self._out_dir}` to locate the "
                "change (if it passes, only the cache was altered: drop it and it "
                "is rebuilt from the rows)"
            )
        record = self._record_head(previous)
        if (
            skip_unchanged
            and previous is not None
            and previous.tree_size == size
            and (record is None or _same_head(previous, record))
        ):
            return previous
        tree_root = followed.frontier.root()
        append_leaves_file(self._out_dir, self._store, followed)
        timestamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        origin = store_origin(self._settings)
        message = signed_message(origin, size, tree_root.hex(), timestamp)
        path = (
            self._out_dir / f"checkpoint-{size:015d}-{timestamp.replace(':', '')}.json"
        )
        checkpoint = Checkpoint(
            origin=origin,
            tree_size=size,
            root_hash=tree_root,
            timestamp=timestamp,
            public_key=public_bytes(self._key.public_key()),
            signature=self._key.sign(message),
            path=path,
            record=None
            if record is None
            else SignedRecordHead(
                record, self._key.sign(record_head_message(message, record))
            ),
        )
        write_atomically(path, json.dumps(checkpoint.to_json(), indent=2) + "\n")
        self._previous = checkpoint
        return checkpoint

    def _record_head(self, previous: Checkpoint | None) -> RecordHead | None:
        """The deletion record's head to sign; LogInconsistentError if the
        record does not extend the one the newest checkpoint signed."""
        signed = None if previous is None else previous.record
        if self._record is None:
            if signed is not None:
                raise LogInconsistentError(
                    f"checkpoint {previous and previous.path} signed deletion "
                    f"record {signed.head.record_id}, and this store follows none"
                )
            return None
        if signed is not None and not self._record_checked:
            departure = record_departure(self._record, signed.head)
            if departure is not None:
                raise LogInconsistentError(
                    f"{departure[1]} (newest checkpoint {previous and previous.path})"
                    f": run `turnledger audit --checkpoint {self._out_dir}`"
                )
        try:
            head = self._record.current_head()
        except FileNotFoundError:
            raise LogInconsistentError(
                f"the deletion record {self._record.path} this store follows is "
                "missing: nothing is signed without it (docs/deletion.md)"
            ) from None
        self._record_checked = True
        if signed is not None and head.entries < signed.head.entries:
            raise LogInconsistentError(
                f"the deletion record {self._record.path} holds {head.entries} "
                f"entries, the newest checkpoint signed {signed.head.entries}"
            )
        return head

    def close(self) -> None:
        self._log.close()
        self._close_store()

    def _close_store(self) -> None:
        if self._settings.persistence != "memory":
            self._store.close()


def _log_beside(
    store: LeafStore, settings: Settings, ledger: Conversations | None
) -> CountedLog:
    """The raw log, on the tree cache's connection where it has one: a
    one-shot `turnledger checkpoint` then connects once, not twice."""
    if isinstance(store, PostgresLeafStore):
        return PostgresRawLog(
            settings.postgres_conninfo(),
            settings.postgres_schema,
            connection=store.connection,
        )
    return open_raw_log(settings, ledger)


def write_checkpoint(
    ledger: Conversations | None, settings: Settings, out_dir: Path
) -> Checkpoint:
    """Follow the log, then sign and write one checkpoint of it into `out_dir`."""
    writer = CheckpointWriter(ledger, settings, out_dir)
    try:
        return writer.write()
    finally:
        writer.close()


def _same_head(checkpoint: Checkpoint, head: RecordHead) -> bool:
    return checkpoint.record is not None and checkpoint.record.head == head


def _extends(previous: Checkpoint, size: int, store: LeafStore) -> bool:
    return previous.tree_size <= size and (
        root(previous.tree_size, store.read_nodes) == previous.root_hash
    )


def checkpoint_periodically(
    ledger: Conversations | None, settings: Settings, stop: threading.Event
) -> None:
    """Write a checkpoint into TURNLEDGER_AUDIT_CHECKPOINT_DIR (by default
    data_dir/checkpoints once a signing key is set) every
    TURNLEDGER_AUDIT_CHECKPOINT_INTERVAL_SECONDS until `stop` is set; a round
    that finds no new event writes nothing.

    For the service, in a thread of its own. A refused checkpoint (the log no
    longer extends the last one) is logged as an error on every round and
    never overwritten: the evidence stays as it was.
    """
    directory = settings.checkpoint_dir_in_effect
    if directory is None:
        return
    writer: CheckpointWriter | None = None
    try:
        while True:
            try:
                if writer is None:
                    writer = CheckpointWriter(ledger, settings, directory)
                writer.write(skip_unchanged=True)
            except LogInconsistentError as error:
                _log.error("checkpoint refused: %s", error)
            except (psycopg.OperationalError, psycopg.InterfaceError) as error:
                # Its connections are gone (an outage, a failover: the primary
                # is another server now): new ones next round.
                _log.warning(
                    "checkpoint postponed, database unavailable: %s",
                    (str(error).strip().splitlines() or [type(error).__name__])[0],
                )
                writer = _closed(writer)
            except Exception:  # noqa: BLE001 - keep serving; try again next round
                _log.exception("checkpoint failed")
            if stop.wait(settings.audit_checkpoint_interval_seconds):
                return
    finally:
        _closed(writer)


def _closed(writer: CheckpointWriter | None) -> None:
    if writer is not None:
        try:
            writer.close()
        except psycopg.Error as error:  # a connection already lost
            _log.debug("closing the checkpoint writer: %s", error)
