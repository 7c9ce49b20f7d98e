"""Signed checkpoints of the transparency log, proofs, and audits against them.

A checkpoint is the tree size, the root hash and the time, signed with
Ed25519 by a key the database never holds (TURNLEDGER_AUDIT_SIGNING_KEY or
_FILE), written as JSON to a directory of the operator's choosing. Beside the
checkpoints the directory keeps `leaves.bin`, every leaf hash in log order
(32 bytes each): with it an audit names the first event that differs even
when the tree cache in the database was altered as well. docs/transparency.md
documents the formats and what a verifier needs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from turnledger.domain.application import Conversations
from turnledger.domain.errors import CheckpointError
from turnledger.domain.findings import (
    CHECKPOINT_MISMATCH,
    LOG_CHANGED,
    LOG_INSERTED,
    LOG_REMOVED,
    LOG_TRUNCATED,
    Finding,
)
from turnledger.domain.merkle import (
    Frontier,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
    verify_consistency,
    verify_inclusion,
)
from turnledger.domain.transparency import (
    LeafFacts,
    RawLog,
    differences,
    first_difference,
    leaf_input,
    read_leaf_input,
)
from turnledger.infra.merkle_store import (
    Followed,
    LeafStore,
    follow,
    open_leaf_store,
)
from turnledger.infra.raw_log import open_raw_log
from turnledger.infra.settings import Settings

CHECKPOINT_FORMAT = "turnledger-checkpoint/v1"
INCLUSION_FORMAT = "turnledger-inclusion-proof/v1"
CONSISTENCY_FORMAT = "turnledger-consistency-proof/v1"
LEAVES_FILE = "leaves.bin"
MAX_LOCATED = 50  # findings listed one by one; the rest are counted


# Keys --------------------------------------------------------------------------


def new_signing_key() -> str:
    """A fresh Ed25519 key as TURNLEDGER_AUDIT_SIGNING_KEY takes it."""
    raw = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return base64.b64encode(raw).decode("ascii")


def _parse_private_key(text: str, source: str) -> Ed25519PrivateKey:
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_private_key(text.encode(), password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise ValueError("the PEM key is not an Ed25519 key")
            return key
        raw = base64.b64decode(text, validate=True)
        return Ed25519PrivateKey.from_private_bytes(raw)
    except (ValueError, TypeError, binascii.Error) as error:
        raise CheckpointError(
            f"{source} is not an Ed25519 private key (base64 of 32 bytes, or PEM): "
            f"{error}"
        ) from None


def signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The checkpoint signing key from the settings, never from the database."""
    if settings.audit_signing_key is not None and settings.audit_signing_key_file:
        raise CheckpointError(
            "set TURNLEDGER_AUDIT_SIGNING_KEY or TURNLEDGER_AUDIT_SIGNING_KEY_FILE, "
            "not both"
        )
    if settings.audit_signing_key is not None:
        return _parse_private_key(
            settings.audit_signing_key.get_secret_value(),
            "TURNLEDGER_AUDIT_SIGNING_KEY",
        )
    if settings.audit_signing_key_file is not None:
        try:
            text = settings.audit_signing_key_file.read_text()
        except OSError as error:
            raise CheckpointError(
                f"cannot read TURNLEDGER_AUDIT_SIGNING_KEY_FILE: {error}"
            ) from None
        return _parse_private_key(text, str(settings.audit_signing_key_file))
    raise CheckpointError(
        "no signing key: set TURNLEDGER_AUDIT_SIGNING_KEY or "
        "TURNLEDGER_AUDIT_SIGNING_KEY_FILE (see docs/transparency.md)"
    )


def _public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _parse_public_key(text: str, source: str) -> Ed25519PublicKey:
    try:
        return Ed25519PublicKey.from_public_bytes(
            base64.b64decode(text.strip(), validate=True)
        )
    except (ValueError, TypeError, binascii.Error) as error:
        raise CheckpointError(
            f"{source} is not an Ed25519 public key (base64 of 32 bytes): {error}"
        ) from None


def trusted_public_key(settings: Settings) -> Ed25519PublicKey | None:
    """The key checkpoints must be signed with, if the settings pin one."""
    if settings.audit_public_key is not None:
        return _parse_public_key(
            settings.audit_public_key, "TURNLEDGER_AUDIT_PUBLIC_KEY"
        )
    if settings.audit_signing_key is not None or settings.audit_signing_key_file:
        return signing_key(settings).public_key()
    return None


# Checkpoints -------------------------------------------------------------------


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

    def signed_bytes(self) -> bytes:
        return signed_message(
            self.origin, self.tree_size, self.root_hash.hex(), self.timestamp
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root_hash": self.root_hash.hex(),
            "timestamp": self.timestamp,
            "public_key": base64.b64encode(self.public_key).decode("ascii"),
            "key_id": hashlib.sha256(self.public_key).hexdigest()[:16],
            "signature": base64.b64encode(self.signature).decode("ascii"),
        }

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
        )
        if checkpoint.tree_size < 0 or len(checkpoint.root_hash) != 32:
            raise ValueError("tree_size or root_hash out of range")
        embedded = Ed25519PublicKey.from_public_bytes(checkpoint.public_key)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(
            f"{path} is not a turnledger checkpoint ({type(error).__name__}: {error})"
        ) from None
    key = trusted or embedded
    if trusted is not None and _public_bytes(trusted) != checkpoint.public_key:
        key_id = hashlib.sha256(checkpoint.public_key).hexdigest()[:16]
        raise CheckpointError(
            f"{path} is signed by key {key_id}, not by the configured audit key"
        )
    try:
        key.verify(checkpoint.signature, checkpoint.signed_bytes())
    except InvalidSignature:
        raise CheckpointError(f"{path}: the signature does not verify") from None
    return checkpoint


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


def _append_leaves_file(directory: Path, store: LeafStore, followed: Followed) -> None:
    """Bring leaves.bin up to the tree's size: the leaves just followed, or
    (a new directory, a crash between two writes) from the tree cache."""
    path = directory / LEAVES_FILE
    size = followed.frontier.size
    have = path.stat().st_size // 32 if path.exists() else 0
    with path.open("ab") as handle:
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


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)


class LogInconsistentError(CheckpointError):
    """Raised when the log no longer extends the newest checkpoint in a directory."""


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
        self._log = open_raw_log(settings, ledger)
        try:
            self._store = open_leaf_store(settings, ledger)
        except BaseException:
            self._log.close()
            raise

    def _newest(self) -> Checkpoint | None:
        if not checkpoint_files(self._out_dir):
            return None
        return newest_checkpoint(self._out_dir, self._key.public_key())

    def write(self) -> Checkpoint:
        followed = follow(self._log, self._store)
        size = followed.frontier.size
        previous = self._previous
        if previous is not None and not _extends(previous, size, self._store):
            raise LogInconsistentError(
                f"the log of {size} events does not extend checkpoint "
                f"{previous.path} ({previous.tree_size} events): run "
                f"`turnledger audit --checkpoint {self._out_dir}` to locate the change"
            )
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
            public_key=_public_bytes(self._key.public_key()),
            signature=self._key.sign(message),
            path=path,
        )
        _write_atomically(path, json.dumps(checkpoint.to_json(), indent=2) + "\n")
        self._previous = checkpoint
        return checkpoint

    def close(self) -> None:
        self._log.close()
        if self._settings.persistence != "memory":
            self._store.close()


def write_checkpoint(
    ledger: Conversations | None, settings: Settings, out_dir: Path
) -> Checkpoint:
    """Follow the log, then sign and write one checkpoint of it into `out_dir`."""
    writer = CheckpointWriter(ledger, settings, out_dir)
    try:
        return writer.write()
    finally:
        writer.close()


def _extends(previous: Checkpoint, size: int, store: LeafStore) -> bool:
    return previous.tree_size <= size and (
        root(previous.tree_size, store.read_nodes) == previous.root_hash
    )


# Proofs ------------------------------------------------------------------------


def _event_json(data: bytes) -> dict[str, Any]:
    facts = read_leaf_input(data)
    assert facts is not None

    def number(text: str) -> int | str:
        return int(text) if text.lstrip("-").isdigit() else text

    return {
        "originator_id": facts.conversation,
        "originator_version": number(facts.version),
        "notification_id": number(facts.notification_id),
        "leaf_input": data.hex(),
    }


def prove_event(
    ledger: Conversations | None,
    settings: Settings,
    conversation_id: UUID,
    version: int,
    checkpoint: Checkpoint,
) -> dict[str, Any]:
    """An inclusion proof of one stored event in a checkpoint's tree."""
    log = open_raw_log(settings, ledger)
    store = open_leaf_store(settings, ledger)
    try:
        rows = [r for r in log.rows_of(conversation_id) if r.version == version]
        if not rows:
            raise CheckpointError(
                f"conversation {conversation_id} has no stored event at version "
                f"{version}"
            )
        row = rows[0]
        follow(log, store)
        position = store.position_of(row.notification_id)
        if position is None or position >= checkpoint.tree_size:
            raise CheckpointError(
                f"the event (notification id {row.notification_id}) is newer than "
                f"the checkpoint's {checkpoint.tree_size} events: take a new one"
            )
        data = leaf_input(row)
        path = inclusion_proof(position, checkpoint.tree_size, store.read_nodes)
    finally:
        log.close()
        if settings.persistence != "memory":
            store.close()
    leaf = leaf_hash(data)
    if not verify_inclusion(
        leaf, position, checkpoint.tree_size, path, checkpoint.root_hash
    ):
        raise LogInconsistentError(
            "the stored event or the tree cache no longer matches the checkpoint: "
            "run `turnledger audit --checkpoint` to locate the change"
        )
    return {
        "format": INCLUSION_FORMAT,
        "checkpoint": checkpoint.to_json(),
        "leaf_index": position,
        "event": {
            **_event_json(data),
            "topic": row.topic if isinstance(row.topic, str) else None,
            "state_sha256": hashlib.sha256(_state_bytes(row.state)).hexdigest(),
        },
        "leaf_hash": leaf.hex(),
        "audit_path": [h.hex() for h in path],
    }


def _state_bytes(state: Any) -> bytes:
    if isinstance(state, bytes | bytearray | memoryview):
        return bytes(state)
    return b""


def prove_consistency(
    ledger: Conversations | None,
    settings: Settings,
    old: Checkpoint,
    new: Checkpoint,
) -> dict[str, Any]:
    """A proof that `old`'s tree is a prefix of `new`'s."""
    if old.tree_size > new.tree_size:
        raise CheckpointError(
            f"the old checkpoint has {old.tree_size} events, more than the new "
            f"one's {new.tree_size}: give them in order"
        )
    log = open_raw_log(settings, ledger)
    store = open_leaf_store(settings, ledger)
    try:
        size = follow(log, store).frontier.size
        if new.tree_size > size:
            raise CheckpointError(
                f"the new checkpoint has {new.tree_size} events, the log {size}"
            )
        proof = consistency_proof(old.tree_size, new.tree_size, store.read_nodes)
    finally:
        log.close()
        if settings.persistence != "memory":
            store.close()
    if not verify_consistency(
        old.tree_size, new.tree_size, proof, old.root_hash, new.root_hash
    ):
        raise LogInconsistentError(
            "the two checkpoints are not consistent with each other and this log: "
            "one of them, or the tree cache, commits to other events"
        )
    return {
        "format": CONSISTENCY_FORMAT,
        "old": old.to_json(),
        "new": new.to_json(),
        "proof": [h.hex() for h in proof],
    }


# Audit -------------------------------------------------------------------------


def _conversation(facts: LeafFacts | None) -> UUID | None:
    if facts is None:
        return None
    try:
        return UUID(facts.conversation)
    except ValueError:
        return None


def _version(facts: LeafFacts | None) -> int | None:
    try:
        return None if facts is None else int(facts.version)
    except ValueError:
        return None


def _finding(kind: str, facts: LeafFacts | None, detail: str) -> Finding:
    notification_id: int | None = None
    if facts is not None:
        try:
            notification_id = int(facts.notification_id)
        except ValueError:
            notification_id = None
    return Finding(kind, _conversation(facts), _version(facts), detail, notification_id)


def _root_of(leaves: Sequence[bytes], size: int) -> bytes:
    frontier = Frontier()
    push = frontier.push
    for position in range(size):
        push(leaves[position])
    return frontier.root()


def _reference(
    checkpoint: Checkpoint, directory: Path | None, store: LeafStore | None
) -> tuple[list[bytes], dict[int, LeafFacts], str] | None:
    """The checkpoint's own leaves, from a copy whose root is the signed root.

    leaves.bin (outside the database) first, then the tree cache. A leaf
    hash binds the row's identity, so any cached leaf input that hashes to an
    authenticated leaf names that leaf's event, wherever the cache keeps it.
    """
    size = checkpoint.tree_size
    inputs: list[bytes] = []
    if store is not None:
        try:
            inputs = store.leaf_inputs(0, 2**62)
        except Exception:  # noqa: BLE001 - an unreadable cache is no reference
            inputs = []
    by_hash = {leaf_hash(data): data for data in inputs}
    candidates: list[tuple[list[bytes], str]] = []
    if directory is not None:
        candidates.append((read_leaves_file(directory, size), LEAVES_FILE))
    candidates.append(([leaf_hash(data) for data in inputs[:size]], "the tree cache"))
    for leaves, source in candidates:
        if len(leaves) == size and _root_of(leaves, size) == checkpoint.root_hash:
            facts: dict[int, LeafFacts] = {}
            for position, leaf in enumerate(leaves):
                data = by_hash.get(leaf)
                fact = None if data is None else read_leaf_input(data)
                if fact is not None:
                    facts[position] = fact
            return leaves, facts, source
    return None


def compare_with_checkpoint(
    leaves: Sequence[bytes],
    notification_ids: Sequence[int],
    checkpoint: Checkpoint,
    *,
    log: RawLog,
    store: LeafStore | None,
    directory: Path | None,
) -> list[Finding]:
    """Findings if the log (its leaves, in order) does not extend the checkpoint."""
    size = checkpoint.tree_size
    if len(leaves) >= size and _root_of(leaves, size) == checkpoint.root_hash:
        return []
    findings = [
        Finding(
            CHECKPOINT_MISMATCH,
            None,
            None,
            f"the log's first {min(size, len(leaves))} of {len(leaves)} events do not "
            f"hash to the root signed at {checkpoint.timestamp} for {size} events: "
            "events it covers were changed, removed, inserted or renumbered",
        )
    ]
    reference = _reference(checkpoint, directory, store)
    if reference is None:
        findings.append(
            Finding(
                CHECKPOINT_MISMATCH,
                None,
                None,
                f"no copy of the checkpoint's leaves matches its root ({LEAVES_FILE} "
                "missing or altered, and the tree cache altered): the change cannot "
                "be located to an event",
            )
        )
        return findings
    expected, facts, source = reference

    def current(position: int) -> LeafFacts | None:
        rows = log.rows(notification_ids[position] - 1, 1)
        return read_leaf_input(leaf_input(rows[0])) if rows else None

    position = first_difference(leaves[:size], expected)
    original = facts.get(position)
    if position >= len(leaves):
        was = original.describe() if original else f"position {position}"
        findings.append(
            _finding(
                LOG_TRUNCATED,
                original,
                f"the log ends after {len(leaves)} events, the checkpoint covers "
                f"{size}: the newest {size - len(leaves)} were removed, from {was} on",
            )
        )
        return findings
    now = current(position)
    if original is None or now is None:
        findings.append(
            _finding(
                LOG_CHANGED,
                now,
                f"the first event that differs from the checkpoint is at log position "
                f"{position}: {now.describe() if now else 'unreadable'} is not the "
                f"event the checkpoint recorded there ({source} names no event)",
            )
        )
        return findings
    findings.extend(_classify(leaves, notification_ids, size, expected, facts, current))
    if len(facts) < size:
        findings.append(
            Finding(
                CHECKPOINT_MISMATCH,
                None,
                None,
                f"{size - len(facts)} of the checkpoint's events cannot be named (the "
                "tree cache no longer holds their leaf inputs): differences among "
                "them are counted in the root, not listed",
            )
        )
    return findings


def _classify(
    leaves: Sequence[bytes],
    notification_ids: Sequence[int],
    size: int,
    expected: Sequence[bytes],
    facts: dict[int, LeafFacts],
    current: Any,
) -> list[Finding]:
    """Every difference, by notification id: changed, removed, inserted."""
    before: dict[int, tuple[int, bytes]] = {}
    for position in range(size):
        fact = facts.get(position)
        if fact is not None:
            before[int(fact.notification_id)] = (position, expected[position])
    last_covered = max(before, default=0)
    now: dict[int, tuple[int, bytes]] = {
        notification_id: (position, leaves[position])
        for position, notification_id in enumerate(notification_ids)
        if notification_id <= last_covered
    }
    found: list[Finding] = []
    newest_now = max(notification_ids, default=0)
    truncated = sorted(n for n in before if n not in now and n > newest_now)
    for notification_id in sorted(before.keys() | now.keys()):
        if notification_id in truncated:
            continue
        old, new = before.get(notification_id), now.get(notification_id)
        if old is not None and new is not None:
            if old[1] == new[1]:
                continue
            was, is_now = facts[old[0]], current(new[0])
            what = differences(was, is_now) if is_now else "unreadable now"
            found.append(
                _finding(
                    LOG_CHANGED,
                    is_now or was,
                    f"notification id {notification_id} held {was.describe()} at "
                    f"the checkpoint; changed: {what}",
                )
            )
        elif old is not None:
            was = facts[old[0]]
            found.append(
                _finding(
                    LOG_REMOVED,
                    was,
                    f"{was.describe()} was at log position {old[0]} at the "
                    "checkpoint and is gone",
                )
            )
        elif new is not None:
            is_now = current(new[0])
            found.append(
                _finding(
                    LOG_INSERTED,
                    is_now,
                    f"{is_now.describe() if is_now else 'an unreadable row'} sits "
                    "inside the checkpoint's range but the checkpoint never covered it",
                )
            )
    if truncated:
        first = facts[before[truncated[0]][0]]
        found.append(
            _finding(
                LOG_TRUNCATED,
                first,
                f"the {len(truncated)} newest events the checkpoint covers are gone, "
                f"from {first.describe()} on",
            )
        )
    if len(found) > MAX_LOCATED:
        rest = len(found) - MAX_LOCATED
        found = found[:MAX_LOCATED] + [
            Finding(CHECKPOINT_MISMATCH, None, None, f"and {rest} more differences")
        ]
    return found
