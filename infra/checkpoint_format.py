"""A signed checkpoint of the transparency log, as a file (infra/checkpoint.py):
the tree head and the deletion record's head, what each signature covers,
and reading them back, checked against a trusted key. docs/transparency.md
documents the formats."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PublicKey,
)

from turnledger.domain.errors import CheckpointError
from turnledger.infra.deletion_record import (
    RecordHead,
)
from turnledger.infra.settings import Settings
from turnledger.infra.signing import public_bytes

_log = logging.getLogger("turnledger.checkpoint")

CHECKPOINT_FORMAT = "turnledger-checkpoint/v1"
RECORD_HEAD_FORMAT = "turnledger-deletion-record-head/v1"


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
