"""What the audit's chain pass keeps per conversation while it reads the log,
and how a row verified on its fast path extends it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from eventsourcing.utils import get_topic

from turnledger.domain.chain import (
    ENVELOPE_DIGEST_AT,
    ENVELOPE_DIGEST_END,
    ENVELOPE_MIN_LENGTH,
    ENVELOPE_PREVIOUS_AT,
    GENESIS,
    SEAL_DIGEST_COVERS,
    SEAL_DIGEST_KEY,
    SEAL_END,
    SEAL_PREVIOUS_KEY,
    SEAL_SUFFIX_LENGTH,
    digest_prefixes,
)
from turnledger.domain.conversation import Conversation
from turnledger.domain.findings import UNSEALED, ChainRow, ConversationAudit
from turnledger.domain.transparency import leaf_hash_prefix

STARTED_TOPIC = get_topic(Conversation.Started)
CONFIRMED_TOPIC = get_topic(Conversation.TurnConfirmed)
TURN_TOPICS = frozenset({CONFIRMED_TOPIC, get_topic(Conversation.TurnAbandoned)})
DELETED_TOPIC = get_topic(Conversation.HistoryDeleted)
HAS_RECEIPT = b'"window_receipt":{'

# What a topic means to the chain pass besides its bytes.
PLAIN, ABANDONED, CONFIRMED, DECODED = 0, 1, 2, 3
TOPIC_ROLES = {
    STARTED_TOPIC: DECODED,
    DELETED_TOPIC: DECODED,
    CONFIRMED_TOPIC: CONFIRMED,
    get_topic(Conversation.TurnAbandoned): ABANDONED,
}
GENESIS_HEX = GENESIS.encode("ascii")
GENESIS_RAW = bytes.fromhex(GENESIS)


@dataclass(frozen=True, slots=True)
class ReceiptToCheck:
    """A confirmed turn's window receipt, found by the chain pass."""

    turn_id: str
    version: int
    document: Any
    sealed_question: bytes
    sealed_system: bytes | None


@dataclass(slots=True)
class CollectedConversation:
    """One conversation's rows as the chain pass has read them so far.

    While its rows come in order and verify (`fast`), only each row's digest
    and position are kept, and `head` (the last digest as 32 bytes) or
    `head_hex` (as its hex, when the last row was a JSON seal) is what the
    next row must link to. The first row that does not fit turns them into
    `rows`, the general path's form, which then takes every later row.
    """

    audit: ConversationAudit
    identity: bytes
    rows: list[ChainRow] = field(default_factory=list)
    receipts: list[ReceiptToCheck] = field(default_factory=list)
    turns: int = 0
    fast: bool = True
    count: int = 0
    head: bytes | None = GENESIS_RAW
    head_hex: bytes | None = GENESIS_HEX
    digests: list[bytes] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    json_prefix: bytes = b""
    envelope_prefix: bytes = b""
    leaf_prefix: bytes = b""

    def __post_init__(self) -> None:
        self.json_prefix, self.envelope_prefix = digest_prefixes(self.identity)
        self.leaf_prefix = leaf_hash_prefix(self.identity)

    @property
    def has_rows(self) -> bool:
        return bool(self.rows) or (self.fast and self.count > 0)

    def to_rows(self) -> None:
        """Leave the fast path: the rows it verified, as the general path has them."""
        if not self.fast:
            return
        previous = GENESIS
        for version, (digest, position) in enumerate(
            zip(self.digests, self.positions, strict=True), start=1
        ):
            recorded = digest.hex() if len(digest) == 32 else digest.decode("ascii")
            self.rows.append(
                ChainRow(
                    version, previous, recorded, recorded, None, UNSEALED, position
                )
            )
            previous = recorded
        self.fast = False
        self.digests = []
        self.positions = []


def shown(value: Any) -> str:
    """A cell for a message: its type, and a short form of its value."""
    if value is None:
        return "NULL"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


_EMPTY_PREVIOUS_KEY = b"{" + SEAL_PREVIOUS_KEY[1:]  # the seal of a state b"{}"
_sha256 = hashlib.sha256


def envelope_digest(
    item: CollectedConversation, numbers: bytes, topic_line: bytes, state: bytes
) -> bytes | None:
    """The digest of a binary envelope that verifies and links to the row
    before it (and is then the conversation's head), or None."""
    head = item.head
    if head is None:
        assert item.head_hex is not None
        head = bytes.fromhex(item.head_hex.decode("ascii"))
    digest = _sha256(
        b"".join(
            (
                item.envelope_prefix,
                numbers[1:9],
                topic_line,
                state[:ENVELOPE_DIGEST_AT],
                state[ENVELOPE_DIGEST_END:],
            )
        )
    ).digest()
    if (
        len(state) < ENVELOPE_MIN_LENGTH
        or not state.startswith(digest, ENVELOPE_DIGEST_AT)
        or not state.startswith(head, ENVELOPE_PREVIOUS_AT)
    ):
        return None
    item.head, item.head_hex = digest, None
    return digest


def json_seal_digest(
    item: CollectedConversation, numbers: bytes, topic_line: bytes, state: bytes
) -> bytes | None:
    """The hex digest of a JSON seal that verifies and links to the row before
    it (and is then the conversation's head), or None."""
    base = len(state) - SEAL_SUFFIX_LENGTH
    head_hex = item.head_hex
    if head_hex is None:
        assert item.head is not None
        head_hex = item.head.hex().encode("ascii")
    digest = (
        _sha256(
            b"".join(
                (
                    item.json_prefix,
                    numbers[1:9],
                    topic_line,
                    state[:SEAL_DIGEST_COVERS],
                )
            )
        )
        .hexdigest()
        .encode("ascii")
    )
    if (
        base < 0
        or not state.endswith(SEAL_DIGEST_KEY + digest + SEAL_END)
        or not (
            state.startswith(SEAL_PREVIOUS_KEY + head_hex, base)
            or state.startswith(_EMPTY_PREVIOUS_KEY + head_hex, base)
        )
    ):
        return None
    item.head, item.head_hex = None, digest
    return digest
