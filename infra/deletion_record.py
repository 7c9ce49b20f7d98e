"""The deletion record: every destroyed key's id, kept where backups of the
store do not reach (docs/deletion.md, "Restores").

A text file, append-only, one line per deletion after a header line. A line
is `<sha256 hex> <json>`, where the hash covers the previous line's hash and
this line's JSON: changing, removing or reordering any line but the last
breaks every hash after it. The JSON holds ids only (conversation, key ids,
the log position of the deletion, a timestamp): no text and no sizes, nothing
that confirms a guess of a deleted text.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from uuid import UUID

from turnledger.domain.errors import TurnLedgerError

FORMAT = "turnledger-deletion-record/1"


class DeletionRecordError(TurnLedgerError):
    """Raised when a store is behind its deletion record and may not be
    repaired here (a read-only open), or the record cannot be read."""


class DeletionRecordLostError(DeletionRecordError):
    """Raised when the deletion record is missing, altered, replaced or
    behind the store: deletions it should remember may be forgotten."""


@dataclass(slots=True)
class RecordState:
    """What the record says, verified line by line."""

    record_id: str
    head: bytes  # hash of the last line read
    size: int  # bytes read, up to the last complete line
    entries: int = 0
    ids: set[tuple[UUID, str]] = field(default_factory=set)
    # For each entry, the ids it named (to count deletions a store lacks).
    entry_ids: list[frozenset[tuple[UUID, str]]] = field(default_factory=list)


class DeletionRecord:
    """One record file; safe to append from several threads and processes."""

    def __init__(self, path: Path, record_id: str | None = None) -> None:
        """`record_id`: the id a record created here gets (default: random)."""
        self.path = path
        self._new_id = record_id or secrets.token_hex(16)
        self._state: RecordState | None = None
        self._lock = threading.Lock()

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> RecordState:
        """Start an empty record (refused if one exists: it is never replaced)."""
        header = json.dumps(
            {
                "format": FORMAT,
                "record_id": self._new_id,
                "created_at": datetime.now(UTC).isoformat(),
            },
            separators=(",", ":"),
        )
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(header + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        _sync_directory(self.path.parent)
        return self.load()

    def load(self) -> RecordState:
        """Read and verify the whole record."""
        with self._lock, open(self.path, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            self._state = _read(handle.read(), self.path)
            return self._state

    def remember(
        self, conversation_id: UUID, key_ids: Collection[str], *, position: int
    ) -> None:
        """Append a deletion of those keys not recorded yet, durably."""
        with self._lock, open(self.path, "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            state = self._caught_up(handle)
            new = sorted(
                {key for key in key_ids if (conversation_id, key) not in state.ids}
            )
            if not new:
                return
            body = json.dumps(
                {
                    "n": state.entries + 1,
                    "c": conversation_id.hex,
                    "k": new,
                    "p": position,
                    "at": datetime.now(UTC).isoformat(),
                },
                separators=(",", ":"),
            ).encode()
            digest = hashlib.sha256(state.head + body).digest()
            handle.truncate(state.size)  # drop a line torn by a crash, if any
            handle.seek(state.size)
            line = digest.hex().encode() + b" " + body + b"\n"
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
            _add_entry(state, conversation_id, new, digest)
            state.size += len(line)

    def remember_all(self, ids: Iterable[tuple[UUID, str]], *, position: int) -> None:
        by_conversation: dict[UUID, list[str]] = {}
        for conversation_id, key_id in ids:
            by_conversation.setdefault(conversation_id, []).append(key_id)
        for conversation_id, key_ids in sorted(by_conversation.items()):
            self.remember(conversation_id, key_ids, position=position)

    def _caught_up(self, handle: BinaryIO) -> RecordState:
        """The state including lines other processes appended since."""
        size = os.fstat(handle.fileno()).st_size
        if self._state is None or self._state.size > size:
            handle.seek(0)
            self._state = _read(handle.read(), self.path)
        elif self._state.size < size:
            handle.seek(self._state.size)
            _read_entries(handle.read(), self._state, self.path)
        return self._state


def _read(data: bytes, path: Path) -> RecordState:
    end = data.find(b"\n")
    if end < 0:
        raise DeletionRecordLostError(f"the deletion record {path} has no header")
    try:
        header = json.loads(data[:end])
        if header.get("format") != FORMAT:
            raise ValueError(header.get("format"))
        record_id = str(header["record_id"])
    except (ValueError, KeyError, TypeError):
        raise DeletionRecordLostError(
            f"the deletion record {path} has no valid header"
        ) from None
    state = RecordState(
        record_id=record_id,
        head=hashlib.sha256(data[:end]).digest(),
        size=end + 1,
    )
    _read_entries(data[end + 1 :], state, path)
    return state


def _read_entries(data: bytes, state: RecordState, path: Path) -> None:
    # A last line without its newline was torn by a crash while appending: the
    # deletion it was writing had not been done yet (its keys are destroyed
    # only after the line is durable), and the next append replaces it.
    complete = data[: data.rfind(b"\n") + 1]
    for line in complete.splitlines():
        number = state.entries + 1
        digest_hex, _, body = line.partition(b" ")
        try:
            digest = bytes.fromhex(digest_hex.decode())
            entry = json.loads(body)
            conversation_id = UUID(hex=entry["c"])
            key_ids = [str(key) for key in entry["k"]]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise DeletionRecordLostError(
                f"the deletion record {path} is damaged at entry {number}"
            ) from None
        if hashlib.sha256(state.head + body).digest() != digest:
            raise DeletionRecordLostError(
                f"the deletion record {path} was altered at entry {number}: its "
                "hash chain is broken"
            )
        _add_entry(state, conversation_id, key_ids, digest)
        state.size += len(line) + 1


def _add_entry(
    state: RecordState, conversation_id: UUID, key_ids: list[str], digest: bytes
) -> None:
    named = frozenset((conversation_id, key) for key in key_ids)
    state.ids.update(named)
    state.entry_ids.append(named)
    state.entries += 1
    state.head = digest


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
