"""The transparency log's leaves and the comparison of a log with a checkpoint.

Pure: rows come in already read, nothing here touches a store or a clock.

Every stored event is one leaf, in log order (ascending notification id, of
any value). A leaf commits to the row's raw cells, never to decoded fields,
so it outlives crypto-shredding (the stored bytes never change) and a row
whose cells the ledger would never write still has a leaf::

    leaf = b"turnledger/leaf/v1\\n" || cell(originator_id) || cell(version)
           || cell(notification_id) || cell(topic) || cell(state)

A well-formed row's cells are ``u`` + the id's 16 bytes, ``i`` + the version
and the notification id as 8-byte signed big-endian integers, ``s`` +
SHA-256 of the topic's UTF-8 and ``b`` + SHA-256 of the state's bytes. Other
tags (see `cell`) stand for cells the ledger never writes: NULL, text where
bytes belong, invalid UTF-8. docs/transparency.md describes the format.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol
from uuid import UUID

LEAF_TAG = b"turnledger/leaf/v1\n"
_INT64 = range(-(2**63), 2**63)


@dataclass(frozen=True, slots=True)
class InvalidText:
    """A TEXT cell whose bytes are not UTF-8 (SQLite stores whatever it is given)."""

    raw: bytes


class RawRow(NamedTuple):
    """One stored event's cells exactly as the store holds them."""

    notification_id: int
    originator_id: Any
    version: Any
    topic: Any
    state: Any


class RawLog(Protocol):
    """Every stored event as stored, in notification id order (ids of any value)."""

    def rows(self, after: int | None, limit: int) -> Sequence[RawRow]:
        """Up to `limit` rows with ids above `after` (None: from the first)."""
        ...

    def rows_of(self, conversation_id: UUID) -> Sequence[RawRow]:
        """One conversation's rows, in notification id order."""
        ...

    def close(self) -> None: ...


def pages(log: RawLog, page_size: int) -> Iterator[Sequence[RawRow]]:
    """The whole log, page by page (through `log.pages` if it reads ahead)."""
    read_ahead = getattr(log, "pages", None)
    if read_ahead is not None:
        yield from read_ahead(page_size)
        return
    after: int | None = None
    while True:
        page = log.rows(after, page_size)
        if not page:
            return
        yield page
        after = page[-1].notification_id


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def cell(value: Any, *, uuid_text: bool = False) -> bytes:
    """One cell, tagged by its type; `uuid_text`: SQLite's 32-hex form is a UUID."""
    if value is None:
        return b"n"
    if isinstance(value, UUID):
        return b"u" + value.bytes
    if isinstance(value, bool):
        return b"?" + _digest(repr(value).encode())
    if isinstance(value, int):
        if value in _INT64:
            return b"i" + value.to_bytes(8, "big", signed=True)
        return b"I" + _digest(str(value).encode())
    if isinstance(value, str):
        if uuid_text and len(value) == 32:
            try:
                parsed = UUID(hex=value)
            except ValueError:
                parsed = None
            if parsed is not None and parsed.hex == value:
                return b"u" + parsed.bytes
        return b"s" + _digest(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bytes | bytearray | memoryview):
        return b"b" + _digest(bytes(value))
    if isinstance(value, InvalidText):
        return b"t" + _digest(value.raw)
    return b"?" + _digest(f"{type(value).__name__}:{value!r}".encode())


_TOPIC_CELLS: dict[str, bytes] = {}
_SQLITE_IDS: dict[str, UUID | None] = {}  # 32-hex text -> its UUID, or None
_UUID = UUID
_LEAF_U = LEAF_TAG + b"u"
_sha256 = hashlib.sha256


def leaf_input(row: RawRow) -> bytes:
    notification_id, originator_id, version, topic, state = row
    # The audit's inner loop: the common shape of a row, without the general
    # dispatch of `cell` (which gives the same bytes; to_bytes refuses a
    # number beyond 64 bits, which `cell` then tags).
    if originator_id.__class__ is str:  # SQLite: the same few ids, many rows
        parsed = _SQLITE_IDS.get(originator_id, False)
        if parsed is False:
            id_cell = cell(originator_id, uuid_text=True)
            parsed = UUID(bytes=id_cell[1:]) if id_cell[:1] == b"u" else None
            if len(_SQLITE_IDS) < 100_000:
                _SQLITE_IDS[originator_id] = parsed
        if parsed is not None:
            originator_id = parsed
    if (
        originator_id.__class__ is _UUID
        and version.__class__ is int
        and notification_id.__class__ is int
        and state.__class__ is bytes
        and topic.__class__ is str
    ):
        topic_cell = _TOPIC_CELLS.get(topic)
        if topic_cell is None:
            topic_cell = cell(topic)
            if len(_TOPIC_CELLS) < 1000:  # a few topics exist; stay bounded anyway
                _TOPIC_CELLS[topic] = topic_cell
        try:
            return b"".join(
                (
                    _LEAF_U,
                    originator_id.int.to_bytes(16, "big"),
                    b"i",
                    version.to_bytes(8, "big", signed=True),
                    b"i",
                    notification_id.to_bytes(8, "big", signed=True),
                    topic_cell,
                    b"b",
                    _sha256(state).digest(),
                )
            )
        except OverflowError:
            pass
    return b"".join(
        (
            LEAF_TAG,
            cell(row.originator_id, uuid_text=True),
            cell(row.version),
            cell(row.notification_id),
            cell(row.topic),
            cell(row.state),
        )
    )


_LEAF_HEAD = b"\x00" + _LEAF_U
_VERSION_AND_POSITION = struct.Struct(">cqcq")


def row_leaf(row: RawRow) -> bytes:
    """The leaf hash of one stored row."""
    notification_id, originator_id, version, topic, state = row
    # The audit's inner loop: the common row (a UUID, in-range integers, a
    # topic already seen) hashed in one join; the same bytes as leaf_input.
    if (
        originator_id.__class__ is _UUID
        and version.__class__ is int
        and notification_id.__class__ is int
        and state.__class__ is bytes
    ):
        topic_cell = _TOPIC_CELLS.get(topic) if topic.__class__ is str else None
        if topic_cell is not None:
            try:
                numbers = _VERSION_AND_POSITION.pack(
                    b"i", version, b"i", notification_id
                )
            except struct.error:  # beyond 64 bits: leaf_input tags it
                pass
            else:
                return _sha256(
                    b"".join(
                        (
                            _LEAF_HEAD,
                            originator_id.int.to_bytes(16, "big"),
                            numbers,
                            topic_cell,
                            b"b",
                            _sha256(state).digest(),
                        )
                    )
                ).digest()
    return _sha256(b"\x00" + leaf_input(row)).digest()


LEAF_NUMBERS = _VERSION_AND_POSITION
"""Packs (b"i", version, b"i", notification id): a leaf's two integer cells."""
STATE_CELL_TAG = b"b"


def leaf_hash_prefix(identity: bytes) -> bytes:
    """What the leaf hash of every well-formed row of a conversation starts with:
    0x00, the leaf tag and the id cell; the integer cells, the topic cell and
    the state cell (`STATE_CELL_TAG` + SHA-256 of the state) follow."""
    return _LEAF_HEAD + identity


def topic_cell(topic: str) -> bytes:
    """A well-formed topic's cell in a leaf input."""
    return cell(topic)


@dataclass(frozen=True, slots=True)
class LeafFacts:
    """What a leaf input says about its row: enough to name it in a finding."""

    conversation: str
    version: str
    notification_id: str
    topic: bytes
    state: bytes

    def describe(self) -> str:
        return (
            f"conversation {self.conversation} version {self.version} "
            f"(notification id {self.notification_id})"
        )


def _read_cell(data: bytes, at: int) -> tuple[bytes, bytes, int]:
    tag = data[at : at + 1]
    size = {b"n": 0, b"u": 16, b"i": 8}.get(tag, 32)
    return tag, data[at + 1 : at + 1 + size], at + 1 + size


def _show(tag: bytes, body: bytes) -> str:
    if tag == b"u":
        return str(UUID(bytes=body))
    if tag == b"i":
        return str(int.from_bytes(body, "big", signed=True))
    if tag == b"n":
        return "NULL"
    return f"<{tag.decode('latin-1')}:{body.hex()[:12]}>"


def read_leaf_input(data: bytes) -> LeafFacts | None:
    """The facts a leaf input records, or None if it is not one."""
    if not data.startswith(LEAF_TAG):
        return None
    try:
        at = len(LEAF_TAG)
        parts: list[tuple[bytes, bytes]] = []
        for _ in range(5):
            tag, body, at = _read_cell(data, at)
            parts.append((tag, body))
    except (ValueError, IndexError):
        return None
    if at != len(data):
        return None
    return LeafFacts(
        conversation=_show(*parts[0]),
        version=_show(*parts[1]),
        notification_id=_show(*parts[2]),
        topic=parts[3][0] + parts[3][1],
        state=parts[4][0] + parts[4][1],
    )


def differences(before: LeafFacts, after: LeafFacts) -> str:
    """What changed between two leaves, in words."""
    changed = []
    if before.conversation != after.conversation:
        changed.append(f"conversation {before.conversation} -> {after.conversation}")
    if before.version != after.version:
        changed.append(f"version {before.version} -> {after.version}")
    if before.notification_id != after.notification_id:
        changed.append(
            f"notification id {before.notification_id} -> {after.notification_id}"
        )
    if before.topic != after.topic:
        changed.append("topic")
    if before.state != after.state:
        changed.append("stored state bytes")
    return ", ".join(changed) or "nothing readable (the leaf encoding)"


def first_difference(current: Sequence[bytes], reference: Sequence[bytes]) -> int:
    """The first position where two leaf lists differ (len of the shorter if none)."""
    for position, (left, right) in enumerate(zip(current, reference, strict=False)):
        if left != right:
            return position
    return min(len(current), len(reference))
