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
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PublicKey,
)
from psycopg import sql

from turnledger.domain.errors import CheckpointError
from turnledger.domain.findings import RECORD_ALTERED, RECORD_LOST, RECORD_ROLLED_BACK
from turnledger.domain.merkle import (
    leaf_hash,
    root,
)
from turnledger.infra.deletion_record import (
    DeletionRecord,
    DeletionRecordError,
    RecordHead,
)
from turnledger.infra.merkle_store import (
    CountedLog,
    Followed,
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

CHECKPOINT_FORMAT = "turnledger-checkpoint/v1"
RECORD_HEAD_FORMAT = "turnledger-deletion-record-head/v1"
LEAVES_FILE = "leaves.bin"
LEAF_INPUTS_FILE = "leaf-inputs.bin"
LEAF_INPUT_RECORD = 185
"""A leaf input's record in leaf-inputs.bin: its length in one byte, then the
input padded with zeros (the longest leaf input is 184 bytes); length 0: not
known (a directory older than the file, whose cache no longer held it)."""

__all__ = ["LogInconsistentError"]  # raised here, defined beside the tree cache


@dataclass(frozen=True, slots=True)
class SignedRecordHead:
    """The deletion record's head as a checkpoint signed it."""

    head: RecordHead
    signature: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "format": RECORD_HEAD_FORMAT,
            "record_id": self.head.record_id,
            "entries": self.head.entries,
            "head": self.head.head.hex(),
            "signature": base64.b64encode(self.signature).decode("ascii"),
        }


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed tree head, as read from (and checked against) its file."""

    origin: str
    tree_size: int
    root_hash: bytes
    timestamp: str
    public_key: bytes
    signature: bytes
    path: Path | None = None
    # None: taken without a deletion record (memory), or before they were signed.
    record: SignedRecordHead | None = None

    def signed_bytes(self) -> bytes:
        return signed_message(
            self.origin, self.tree_size, self.root_hash.hex(), self.timestamp
        )

    def to_json(self) -> dict[str, Any]:
        document = {
            "format": CHECKPOINT_FORMAT,
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root_hash": self.root_hash.hex(),
            "timestamp": self.timestamp,
            "public_key": base64.b64encode(self.public_key).decode("ascii"),
            "key_id": hashlib.sha256(self.public_key).hexdigest()[:16],
            "signature": base64.b64encode(self.signature).decode("ascii"),
        }
        if self.record is not None:
            document["deletion_record"] = self.record.to_json()
        return document

    def summary(self) -> dict[str, Any]:
        return {
            "path": None if self.path is None else str(self.path),
            "tree_size": self.tree_size,
            "root_hash": self.root_hash.hex(),
            "timestamp": self.timestamp,
            "key_id": hashlib.sha256(self.public_key).hexdigest()[:16],
        }


def signed_message(origin: str, tree_size: int, root_hex: str, timestamp: str) -> bytes:
    """The exact bytes a checkpoint's signature covers."""
    lines = (CHECKPOINT_FORMAT, origin, str(tree_size), root_hex, timestamp)
    return "".join(f"{line}\n" for line in lines).encode()


def record_head_message(checkpoint_bytes: bytes, head: RecordHead) -> bytes:
    """The exact bytes a deletion record head's signature covers: bound to
    the tree head it was signed with, so it cannot be moved to another."""
    lines = (head.record_id, str(head.entries), head.head.hex())
    return (
        f"{RECORD_HEAD_FORMAT}\n".encode()
        + checkpoint_bytes
        + "".join(f"{line}\n" for line in lines).encode()
    )


def store_origin(settings: Settings) -> str:
    """Names the log a checkpoint is of (informative: moving a store keeps its log)."""
    match settings.persistence:
        case "sqlite":
            return f"sqlite:{settings.sqlite_events_path.resolve()}"
        case "postgres":
            return (
                f"postgres:{settings.postgres_host}:{settings.postgres_port}/"
                f"{settings.postgres_dbname}/{settings.postgres_schema}"
            )
        case _:
            return "memory"


def read_checkpoint(path: Path, trusted: Ed25519PublicKey | None = None) -> Checkpoint:
    """A checkpoint file, its signature checked (with `trusted` when given)."""
    try:
        document = json.loads(path.read_text())
        if document.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"format is {document.get('format')!r}")
        checkpoint = Checkpoint(
            origin=str(document["origin"]),
            tree_size=int(document["tree_size"]),
            root_hash=bytes.fromhex(document["root_hash"]),
            timestamp=str(document["timestamp"]),
            public_key=base64.b64decode(document["public_key"], validate=True),
            signature=base64.b64decode(document["signature"], validate=True),
            path=path,
            record=_signed_record_head(document.get("deletion_record")),
        )
        if checkpoint.tree_size < 0 or len(checkpoint.root_hash) != 32:
            raise ValueError("tree_size or root_hash out of range")
        embedded = Ed25519PublicKey.from_public_bytes(checkpoint.public_key)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(
            f"{path} is not a turnledger checkpoint ({type(error).__name__}: {error})"
        ) from None
    key = trusted or embedded
    if trusted is not None and public_bytes(trusted) != checkpoint.public_key:
        key_id = hashlib.sha256(checkpoint.public_key).hexdigest()[:16]
        raise CheckpointError(
            f"{path} is signed by key {key_id}, not by the configured audit key"
        )
    try:
        key.verify(checkpoint.signature, checkpoint.signed_bytes())
    except InvalidSignature:
        raise CheckpointError(f"{path}: the signature does not verify") from None
    if checkpoint.record is not None:
        message = record_head_message(checkpoint.signed_bytes(), checkpoint.record.head)
        try:
            key.verify(checkpoint.record.signature, message)
        except InvalidSignature:
            raise CheckpointError(
                f"{path}: the deletion record head's signature does not verify"
            ) from None
    return checkpoint


def _signed_record_head(document: Any) -> SignedRecordHead | None:
    if document is None:
        return None
    if document.get("format") != RECORD_HEAD_FORMAT:
        raise ValueError(f"deletion_record format is {document.get('format')!r}")
    entries = document["entries"]
    if isinstance(entries, bool) or not isinstance(entries, int) or entries < 0:
        raise ValueError("deletion_record entries out of range")
    head = bytes.fromhex(document["head"])
    if len(head) != 32:
        raise ValueError("deletion_record head is not 32 bytes")
    return SignedRecordHead(
        RecordHead(str(document["record_id"]), entries, head),
        base64.b64decode(document["signature"], validate=True),
    )


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


def checkpoint_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("checkpoint-*.json"))


def newest_checkpoint(
    location: Path, trusted: Ed25519PublicKey | None = None
) -> Checkpoint:
    """The checkpoint in a file, or the newest (largest, then latest) in a directory."""
    if location.is_dir():
        files = checkpoint_files(location)
        if not files:
            raise CheckpointError(f"{location} holds no checkpoint-*.json file")
        checkpoints = [read_checkpoint(path, trusted) for path in files]
        return max(checkpoints, key=lambda c: (c.tree_size, c.timestamp))
    if not location.exists():
        raise CheckpointError(f"{location} does not exist")
    return read_checkpoint(location, trusted)


def read_leaves_file(directory: Path, count: int | None = None) -> list[bytes]:
    path = directory / LEAVES_FILE
    if not path.exists():
        return []
    with path.open("rb") as handle:
        data = handle.read() if count is None else handle.read(count * 32)
    return [data[at : at + 32] for at in range(0, len(data) - len(data) % 32, 32)]


def read_leaf_inputs_file(directory: Path, count: int) -> list[bytes]:
    """The first `count` leaf inputs recorded in the directory (b"": unknown)."""
    path = directory / LEAF_INPUTS_FILE
    if not path.exists():
        return []
    with path.open("rb") as handle:
        data = handle.read(count * LEAF_INPUT_RECORD)
    return [
        data[at + 1 : at + 1 + data[at]]
        for at in range(0, len(data) - len(data) % LEAF_INPUT_RECORD, LEAF_INPUT_RECORD)
    ]


def _records(inputs: list[bytes]) -> bytes:
    return b"".join(
        bytes((len(data),)) + data.ljust(LEAF_INPUT_RECORD - 1, b"\0")
        for data in inputs
    )


def _append_leaves_file(directory: Path, store: LeafStore, followed: Followed) -> None:
    """Bring leaves.bin and leaf-inputs.bin up to the tree's size: the leaves
    just followed, or (a new directory, a crash between two writes) from the
    tree cache, whose inputs are only recorded where they hash to the leaf."""
    size = followed.frontier.size
    leaves = directory / LEAVES_FILE
    have = leaves.stat().st_size // 32 if leaves.exists() else 0
    with leaves.open("ab") as handle:
        handle.truncate(have * 32)  # a torn record from a crash
        handle.seek(have * 32)
        if have >= followed.first_new:
            handle.write(b"".join(followed.new_leaves[have - followed.first_new :]))
            have = size
        step = 10_000
        for start in range(have, size, step):
            inputs = store.leaf_inputs(start, min(size, start + step))
            handle.write(b"".join(leaf_hash(data) for data in inputs))
        handle.flush()
        os.fsync(handle.fileno())
    records = directory / LEAF_INPUTS_FILE
    have = min(
        size, records.stat().st_size // LEAF_INPUT_RECORD if records.exists() else 0
    )
    with records.open("ab") as handle:
        handle.truncate(have * LEAF_INPUT_RECORD)
        handle.seek(have * LEAF_INPUT_RECORD)
        if have >= followed.first_new:
            handle.write(_records(followed.new_inputs[have - followed.first_new :]))
            have = size
        for start in range(have, size, step):
            signed = read_leaves_file(directory, start + step)[start:]
            inputs = store.leaf_inputs(start, min(size, start + step))
            handle.write(
                _records(
                    [
                        data if leaf_hash(data) == leaf else b""
                        for data, leaf in zip(inputs, signed, strict=False)
                    ]
                )
            )
        handle.flush()
        os.fsync(handle.fileno())


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)


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
        _append_leaves_file(self._out_dir, self._store, followed)
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
        _write_atomically(path, json.dumps(checkpoint.to_json(), indent=2) + "\n")
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
