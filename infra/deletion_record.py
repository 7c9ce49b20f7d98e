"""The deletion record: every destroyed key's id, kept where backups of the
store do not reach (docs/deletion.md, "Restores").

A text file, append-only, one line per deletion after a header line. A line
is `<sha256 hex> <json>`, where the hash covers the previous line's hash and
this line's JSON: changing, removing or reordering any line but the last
breaks every hash after it. The JSON holds ids only (conversation, key ids,
the log position of the deletion, a timestamp): no text and no sizes, nothing
that confirms a guess of a deleted text.

The record's head (its id, how many entries, the last line's hash) goes into
every signed checkpoint (infra/checkpoint.py), so a record rolled back, or
rewritten with every hash recomputed, is found by `audit --checkpoint`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from uuid import UUID

import orjson

from turnledger.domain.errors import TurnLedgerError

FORMAT = "turnledger-deletion-record/1"


class DeletionRecordError(TurnLedgerError):
    """Raised when a store is behind its deletion record and may not be
    repaired here (a read-only open), or the record cannot be read."""


class DeletionRecordLostError(DeletionRecordError):
    """Raised when the deletion record is missing, altered, replaced or
    behind the store: deletions it should remember may be forgotten."""


# A destroyed key: (conversation id as 32 hex digits, key id). Strings, not
# UUIDs: a start-up compares 100,000 of them.
KeyRef = tuple[str, str]


@dataclass(slots=True)
class RecordState:
    """What the record says, verified line by line."""

    record_id: str
    head: bytes  # hash of the last line read
    size: int  # bytes read, up to the last complete line
    entries: int = 0
    # Every key recorded, with the number of the entry that recorded it.
    ids: dict[KeyRef, int] = field(default_factory=dict)
    # The highest log position a recorded deletion was at.
    max_position: int = 0
    # Where the last line read starts (the header's, 0, when no entry): what
    # `_caught_up` checks is still there before it trusts what it read.
    last_line: int = 0
    # The file read: (device, inode), so that a file renamed over it is seen.
    identity: tuple[int, int] = (0, 0)

    def entries_naming(self, keys: Iterable[KeyRef]) -> int:
        """How many entries (deletions) name at least one of `keys`."""
        return len({self.ids[key] for key in keys if key in self.ids})


@dataclass(frozen=True, slots=True)
class RecordHead:
    """Where a record stood: its id, its entries, the hash after the last."""

    record_id: str
    entries: int
    head: bytes


class DeletionRecord:
    """One record file; safe to append from several threads and processes."""

    def __init__(self, path: Path, record_id: str | None = None) -> None:
        """`record_id`: the id a record created here gets (default: random)."""
        self.path = path
        # The id this record has, or gets when created here.
        self.record_id = record_id or secrets.token_hex(16)
        self._state: RecordState | None = None
        self._lock = threading.Lock()

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> RecordState:
        """Start an empty record (refused if one exists: it is never replaced)."""
        header = orjson.dumps(
            {
                "format": FORMAT,
                "record_id": self.record_id,
                "created_at": datetime.now(UTC).isoformat(),
            }
        ).decode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as error:
            if self.path.exists():
                raise  # never replaced
            raise DeletionRecordError(
                f"cannot create the deletion record {self.path} ({error.strerror}):"
                " set TURNLEDGER_DELETION_RECORD_DIR to a writable directory "
                "outside the data directory"
            ) from None
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
            stat = os.fstat(handle.fileno())
            self._state.identity = (stat.st_dev, stat.st_ino)
            return self._state

    def current_head(self) -> RecordHead:
        """The head as the file holds it now, reading only what was appended
        since this object last read it."""
        with self._lock, open(self.path, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            state = self._caught_up(handle)
            return RecordHead(state.record_id, state.entries, state.head)

    def head_at(self, entries: int) -> RecordHead | None:
        """The head after the first `entries` entries, the whole file read and
        its chain verified up to there; None if it holds fewer."""
        with self._lock, open(self.path, "rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_SH)
            data = handle.read()
        # Only the header and the first `entries` complete lines: those after
        # them were appended later, and are no part of that head.
        at = data.find(b"\n") + 1
        if at == 0:
            _read(data, self.path)  # raises: no header
        for _ in range(entries):
            next_end = data.find(b"\n", at)
            if next_end < 0:
                return None
            at = next_end + 1
        state = _read(data[:at], self.path)
        if state.entries < entries:
            return None
        return RecordHead(state.record_id, state.entries, state.head)

    def remember(
        self, conversation_id: UUID, key_ids: Collection[str], *, position: int
    ) -> None:
        """Append a deletion of those keys not recorded yet, durably."""
        self.remember_many([(conversation_id, key_ids, position)])

    def remember_all(self, ids: Iterable[KeyRef], *, position: int) -> None:
        """Append these keys, one entry per conversation."""
        by_conversation: dict[UUID, list[str]] = {}
        for conversation_hex, key_id in ids:
            by_conversation.setdefault(UUID(hex=conversation_hex), []).append(key_id)
        self.remember_many(
            [(c, keys, position) for c, keys in sorted(by_conversation.items())]
        )

    def remember_many(
        self, deletions: Iterable[tuple[UUID, Collection[str], int]]
    ) -> None:
        """Append one entry per deletion (conversation, key ids, log position),
        leaving out keys already recorded; one write and one fsync in all."""
        with self._lock, open(self.path, "r+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            state = self._caught_up(handle)
            lines: list[bytes] = []
            for conversation_id, key_ids, position in deletions:
                line = _entry(state, conversation_id, key_ids, position)
                if line is not None:
                    lines.append(line)
            if not lines:
                return
            data = b"".join(lines)
            try:
                handle.truncate(state.size)  # drop a line torn by a crash, if any
                handle.seek(state.size)
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            except BaseException:
                self._state = None  # read again from the file next time
                raise
            state.last_line = state.size + len(data) - len(lines[-1])
            state.size += len(data)

    def _caught_up(self, handle: BinaryIO) -> RecordState:
        """The state including lines other processes appended since.

        Only the appended lines are read, after checking that what this
        process read before is still there: the same file, at least as long,
        its last line known still ending the chain it read. A record
        replaced, truncated or rewritten underneath a running process is then
        read again whole, and refused unless it still extends what this
        process knew (DeletionRecordLostError): an append never chains onto a
        head the file no longer has. (Reading the whole file on every append
        would cost a start-up's check per deletion; a rewrite that keeps the
        last line byte for byte breaks the chain before it, which the next
        full read (an opening, `audit --checkpoint`) refuses.)"""
        stat = os.fstat(handle.fileno())
        known = self._state
        if known is not None and not _still_there(handle, known, stat):
            handle.seek(0)
            fresh = _read(handle.read(), self.path)
            fresh.identity = (stat.st_dev, stat.st_ino)
            # Refused again on every later use by this process: what it knew
            # is kept, and the file still does not extend it.
            _check_extends(self.path, known, fresh, handle)
            self._state = fresh
            return fresh
        if known is None:
            handle.seek(0)
            self._state = _read(handle.read(), self.path)
            self._state.identity = (stat.st_dev, stat.st_ino)
        elif known.size < stat.st_size:
            handle.seek(known.size)
            _read_entries(handle.read(), known, self.path)
        return self._state


def _still_there(handle: BinaryIO, state: RecordState, stat: os.stat_result) -> bool:
    """Whether the file is the one `state` was read from, up to its last line."""
    if (stat.st_dev, stat.st_ino) != state.identity or stat.st_size < state.size:
        return False
    handle.seek(state.last_line)
    line = handle.read(state.size - state.last_line)
    if state.last_line == 0:  # no entry yet: the head is the header's hash
        return hashlib.sha256(line[:-1]).digest() == state.head
    return line[:64] == state.head.hex().encode()


def _check_extends(
    path: Path, known: RecordState, fresh: RecordState, handle: BinaryIO
) -> None:
    """Refuse a record read again whole that does not extend `known`."""
    handle.seek(0)
    prefix = _prefix_state(handle.read(), path, known.entries)
    if (
        prefix is None
        or fresh.record_id != known.record_id
        or prefix.head != known.head
    ):
        raise DeletionRecordLostError(
            f"the deletion record {path} was replaced or rewritten while this "
            f"process used it (it had {known.entries} entries, head "
            f"{known.head.hex()[:16]}): put the newest copy back, or run "
            "`turnledger restore-check --rebuild-record` (docs/deletion.md)"
        )


def _prefix_state(data: bytes, path: Path, entries: int) -> RecordState | None:
    """The state after the header and the first `entries` entries of `data`
    (None: it holds fewer)."""
    at = data.find(b"\n") + 1
    for _ in range(entries):
        end = data.find(b"\n", at)
        if end < 0:
            return None
        at = end + 1
    state = _read(data[:at], path)
    return state if state.entries == entries else None


def _entry(
    state: RecordState,
    conversation_id: UUID,
    key_ids: Collection[str],
    position: int,
) -> bytes | None:
    """The line recording these keys (None: all recorded), added to `state`."""
    conversation = conversation_id.hex
    new = sorted({key for key in key_ids if (conversation, key) not in state.ids})
    if not new:
        return None
    body = orjson.dumps(
        {
            "n": state.entries + 1,
            "c": conversation,
            "k": new,
            "p": position,
            "at": datetime.now(UTC).isoformat(),
        }
    )
    digest = hashlib.sha256(state.head + body).digest()
    _add_entry(state, conversation, new, digest)
    state.max_position = max(state.max_position, position)
    return digest.hex().encode() + b" " + body + b"\n"


def _read(data: bytes, path: Path) -> RecordState:
    end = data.find(b"\n")
    if end < 0:
        raise DeletionRecordLostError(f"the deletion record {path} has no header")
    try:
        header = orjson.loads(data[:end])
        if header.get("format") != FORMAT:
            raise ValueError(header.get("format"))
        record_id = str(header["record_id"])
    except (ValueError, KeyError, TypeError, AttributeError):
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
    sha256, loads, ids, head = hashlib.sha256, orjson.loads, state.ids, state.head
    number, max_position = state.entries, state.max_position
    lines = complete.splitlines()
    if lines:
        state.last_line = state.size + len(complete) - len(lines[-1]) - 1
    for line in lines:
        number += 1
        digest_hex, _, body = line.partition(b" ")
        digest = sha256(head + body).digest()
        if digest.hex().encode() != digest_hex:
            raise DeletionRecordLostError(
                f"the deletion record {path} was altered at entry {number}: its "
                "hash chain is broken"
            )
        try:
            entry = loads(body)
            conversation, key_ids, position = entry["c"], entry["k"], entry["p"]
            if position > max_position:
                max_position = position
            for key in key_ids:
                ids.setdefault((conversation, key), number)
        except (ValueError, KeyError, TypeError):
            raise DeletionRecordLostError(
                f"the deletion record {path} is damaged at entry {number}"
            ) from None
        head = digest
    state.entries, state.head, state.max_position = number, head, max_position
    state.size += len(complete)


def _add_entry(
    state: RecordState, conversation: str, key_ids: list[str], digest: bytes
) -> None:
    state.entries += 1
    number = state.entries
    ids = state.ids
    for key in key_ids:
        ids.setdefault((conversation, key), number)
    state.head = digest


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
