"""Audits: verify every conversation's versions, hash chain, receipts and snapshots.

The chain pass reads raw stored rows (the notification log, or one
conversation's events) and needs no keys: it checks that versions run 1..n
without gaps, that each event's digest matches its stored bytes, that each
event links to the digest of the stored event before it, and that heads
recorded elsewhere (anchors) are still there. A cell the ledger never writes
(NULL, a wrong type, a position at or below zero) is a `malformed` finding at
its row, never an exception; with `leaves` set, the same read computes every
row's transparency-log leaf (docs/transparency.md). The receipt pass replays each
conversation from its events alone (never from a snapshot, which the chain
does not cover) to the version a receipt names, applies the receipt's policy
again with the turn's own question, and compares the body's length and
SHA-256; receipts whose turns were deleted since are reported as not
re-derivable, which is expected, not a failure. Finally every snapshot is
compared with the replay of its events. See docs/audit.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from eventsourcing.domain import Snapshot
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from turnledger.domain.chain import (
    ENVELOPE_DIGEST_AT,
    ENVELOPE_DIGEST_END,
    ENVELOPE_MAGIC,
    ENVELOPE_MIN_LENGTH,
    ENVELOPE_PREVIOUS_AT,
    GENESIS,
    SEAL_DIGEST_COVERS,
    SEAL_DIGEST_KEY,
    SEAL_END,
    SEAL_PREVIOUS_KEY,
    SEAL_SUFFIX_LENGTH,
    ChainFormatError,
    digest_prefixes,
    raw_link,
)
from turnledger.domain.conversation import Conversation
from turnledger.domain.errors import (
    ConversationNotFoundError,
    InvalidInputError,
    TextUnavailableError,
    WindowError,
)
from turnledger.domain.findings import (
    ANCHOR_MISMATCH,
    BROKEN_LINK,
    CHANGED,
    MALFORMED,
    MISSING,
    NOT_REDERIVABLE,
    READ_SIDE_MISMATCH,
    RECEIPT_INVALID,
    RECEIPT_MISMATCH,
    SNAPSHOT_MISMATCH,
    TEXT_MISSING,
    TRUNCATED,
    UNDECODABLE,
    UNREADABLE,
    UNREPLAYABLE,
    UNSEALED,
    Anchor,
    AuditReport,
    ChainRow,
    ConversationAudit,
    Finding,
    check_anchor,
    check_chain,
    vanished_finding,
)
from turnledger.domain.parts import TurnParts, decode_parts
from turnledger.domain.transparency import (
    LEAF_NUMBERS,
    STATE_CELL_TAG,
    RawLog,
    RawRow,
    leaf_hash_prefix,
    pages,
    row_leaf,
    topic_cell,
)
from turnledger.infra.raw_log import RecorderLog
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.ledger_rows import ConversationRow
from turnledger.projections.log_replay import replay_events
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.queries import ConversationQueries
from turnledger.projections.read_side import LedgerView
from turnledger.projections.receipt import (
    WindowReceipt,
    parse_receipt_policy,
    receipt_key_ids,
)
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter

__all__ = [
    "ANCHOR_MISMATCH",
    "BROKEN_LINK",
    "CHANGED",
    "MISSING",
    "NOT_REDERIVABLE",
    "READ_SIDE_MISMATCH",
    "RECEIPT_INVALID",
    "RECEIPT_MISMATCH",
    "SNAPSHOT_MISMATCH",
    "TEXT_MISSING",
    "TRUNCATED",
    "UNDECODABLE",
    "UNREADABLE",
    "UNREPLAYABLE",
    "UNSEALED",
    "Anchor",
    "AuditReport",
    "Auditor",
    "ConversationAudit",
    "Finding",
    "check_anchor",
    "check_chain",
]

STARTED_TOPIC = get_topic(Conversation.Started)
CONFIRMED_TOPIC = get_topic(Conversation.TurnConfirmed)
TURN_TOPICS = frozenset({CONFIRMED_TOPIC, get_topic(Conversation.TurnAbandoned)})
DELETED_TOPIC = get_topic(Conversation.HistoryDeleted)
_HAS_RECEIPT = b'"window_receipt":{'


@dataclass(frozen=True, slots=True)
class _ReceiptToCheck:
    turn_id: str
    version: int
    document: Any
    sealed_question: bytes
    sealed_system: bytes | None


# What a topic means to the chain pass besides its bytes.
_PLAIN, _ABANDONED, _CONFIRMED, _DECODED = 0, 1, 2, 3
_TOPIC_ROLES = {
    STARTED_TOPIC: _DECODED,
    DELETED_TOPIC: _DECODED,
    CONFIRMED_TOPIC: _CONFIRMED,
    get_topic(Conversation.TurnAbandoned): _ABANDONED,
}
_MAX_TOPICS = 1000  # a few exist; past this many, rows take the general path
_GENESIS_HEX = GENESIS.encode("ascii")
_GENESIS_RAW = bytes.fromhex(GENESIS)


@dataclass(slots=True)
class _Collected:
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
    receipts: list[_ReceiptToCheck] = field(default_factory=list)
    turns: int = 0
    fast: bool = True
    count: int = 0
    head: bytes | None = _GENESIS_RAW
    head_hex: bytes | None = _GENESIS_HEX
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


def _state(aggregate: Any) -> tuple[Any, int, dict[str, Any]]:
    """What an aggregate is: its id, version and the state the library's own
    snapshot would record."""
    return aggregate.id, aggregate.version, Snapshot.take(aggregate).state


def _shown(value: Any) -> str:
    """A cell for a message: its type, and a short form of its value."""
    if value is None:
        return "NULL"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


def _receipt_finding(
    conversation_id: UUID, item: _ReceiptToCheck, kind: str, detail: str
) -> Finding:
    return Finding(
        kind, conversation_id, item.version, f"receipt of turn {item.turn_id}: {detail}"
    )


class Auditor:
    """Runs audits over one ledger; `progress` is told how many events were read."""

    def __init__(
        self,
        ledger: Conversations,
        *,
        page_size: int = 1000,
        progress: Callable[[int], None] | None = None,
        token_counters: Mapping[str, TokenCounter] | None = None,
        raw_log: RawLog | None = None,
    ) -> None:
        """`token_counters`: the counters, by name, that windows were built with
        besides the built-in estimate (receipts name theirs). `raw_log` reads
        the rows as stored (infra/raw_log.py); the default reads through the
        library's recorder, which decodes ids and skips positions <= 0.
        """
        self.ledger = ledger
        self.raw_log: RawLog = raw_log or RecorderLog(ledger.recorder)
        self._ids: dict[str, UUID] = {}
        self._topics: dict[str, tuple[bytes, bytes, int]] = {}
        self._by_int: dict[int, _Collected] = {}
        # Set `leaves` to a list to collect every row's transparency-log leaf
        # hash (and `leaf_positions` its notification id) in the same pass.
        self.leaves: list[bytes] | None = None
        self.leaf_positions: list[int] = []
        self.log_findings: list[Finding] = []
        self._snapshot_owners: frozenset[UUID] | None = None
        self.page_size = page_size
        self.token_counters: Mapping[str, TokenCounter] = token_counters or {}
        self.progress = progress or (lambda count: None)

    def total_events(self, conversation_id: UUID | None = None) -> int:
        """An upper bound on the rows an audit reads, for a progress bar."""
        if conversation_id is not None:
            return len(self.ledger.recorder.select_events(conversation_id))
        return self.ledger.recorder.max_notification_id() or 0

    def audit(
        self,
        conversation_id: UUID | None = None,
        *,
        receipts: bool = True,
        anchors: Mapping[UUID, Anchor] | None = None,
        read_side: bool = True,
    ) -> AuditReport:
        """Audit the whole store, or one conversation.

        `anchors` are heads recorded elsewhere (a checkpoint, an earlier
        report): the chain cannot show that a conversation's newest
        events were removed, an anchor beyond the end of the log can. With
        `read_side`, each conversation's read-side row (written with its
        events) is checked against the log, and serves as such an anchor.
        """
        collected: dict[UUID, _Collected] = {}
        self._by_int = {}
        self.log_findings = []
        self._snapshot_owners = self._conversations_with_snapshots()
        for page in self._pages(conversation_id):
            self._collect_page(collected, page)
        if conversation_id is not None and not collected and not self.log_findings:
            raise ConversationNotFoundError(conversation_id)
        anchors = dict(anchors or {})
        if conversation_id is not None:
            anchors = {k: v for k, v in anchors.items() if k == conversation_id}
        for vanished in anchors.keys() - collected.keys():
            collected[vanished] = _Collected(
                ConversationAudit(vanished), vanished.bytes
            )
        audits: list[ConversationAudit] = []
        heads = (
            self.ledger.read_side.conversations(
                [k for k, v in collected.items() if v.has_rows]
            )
            if read_side
            else {}
        )
        for item in collected.values():
            audit = item.audit
            if not item.has_rows:
                audit.findings.append(vanished_finding(audit.conversation_id, anchors))
                audits.append(audit)
                continue
            anchor = anchors.get(audit.conversation_id)
            if anchor is not None:
                item.to_rows()
            if item.fast:  # versions 1..count, each intact and linked: no finding
                audit.events = audit.head_version = item.count
                last_digest = item.digests[-1]
                audit.head_digest = (
                    last_digest.hex()
                    if len(last_digest) == 32
                    else last_digest.decode("ascii")
                )
            else:
                audit.findings.extend(check_chain(audit.conversation_id, item.rows))
                if anchor is not None:
                    audit.findings.extend(
                        check_anchor(audit.conversation_id, item.rows, anchor)
                    )
                audit.events = len(item.rows)
                last = max(item.rows, key=lambda r: r.version)
                audit.head_version = last.version
                audit.head_digest = last.recorded
            if read_side:
                self._check_read_side(audit, item, heads.get(audit.conversation_id))
            if receipts:
                self._check_receipts(audit, item.receipts)
            self._check_snapshots(audit)
            audits.append(audit)
        return AuditReport(audits, log_findings=list(self.log_findings))

    # Chain pass ---------------------------------------------------------------

    def _pages(self, conversation_id: UUID | None) -> Iterator[Sequence[RawRow]]:
        log = self.raw_log
        if conversation_id is not None:
            rows = log.rows_of(conversation_id)
            yield rows
            self.progress(len(rows))
            return
        for page in pages(log, self.page_size):
            yield page
            self.progress(len(page))

    def _conversation_of(self, originator_id: Any) -> UUID | None:
        """The conversation a stored originator id names, None if it names none.

        PostgreSQL hands back UUIDs; SQLite stores the 32-hex form as text.
        """
        if originator_id.__class__ is UUID:
            return originator_id
        known = self._ids.get(originator_id) if originator_id.__class__ is str else None
        if known is not None:
            return known
        try:
            parsed = UUID(hex=originator_id)
        except (TypeError, ValueError, AttributeError):
            return None
        if parsed.hex != originator_id:
            return None
        self._ids[originator_id] = parsed
        return parsed

    def _new_item(
        self, collected: dict[UUID, _Collected], conversation_id: UUID
    ) -> _Collected:
        item = collected[conversation_id] = self._by_int[conversation_id.int] = (
            _Collected(ConversationAudit(conversation_id), conversation_id.bytes)
        )
        return item

    def _topic_facts(self, topic: str) -> tuple[bytes, bytes, int] | None:
        """(the topic's line in a digest header, its leaf cells, its role)."""
        if len(self._topics) >= _MAX_TOPICS:
            return None
        try:
            line = topic.encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate: the general path says so
            return None
        facts = (
            line,
            topic_cell(topic) + STATE_CELL_TAG,
            _TOPIC_ROLES.get(topic, _PLAIN),
        )
        self._topics[topic] = facts
        return facts

    def _collect_page(
        self, collected: dict[UUID, _Collected], page: Sequence[RawRow]
    ) -> None:
        """The audit's inner loop: kept flat, it runs once per stored event.

        The common row (cells of the types the ledger writes, the next version
        of its conversation, a seal that verifies and links to the row before)
        is checked here without building its `ChainRow`, and its leaf hashed
        from the same cells: the same bytes as `row_leaf` (a property test
        holds the two paths to the same report). Any other row takes
        `_collect_row`, the general path, and so do the later rows of its
        conversation.
        """
        leaves = self.leaves
        positions = self.leaf_positions
        by_int = self._by_int
        topics = self._topics
        pack = LEAF_NUMBERS.pack
        sha256 = hashlib.sha256
        collect_row = self._collect_row
        magic = ENVELOPE_MAGIC
        previous_at, digest_at, digest_end = (
            ENVELOPE_PREVIOUS_AT,
            ENVELOPE_DIGEST_AT,
            ENVELOPE_DIGEST_END,
        )
        shortest_envelope, suffix = ENVELOPE_MIN_LENGTH, SEAL_SUFFIX_LENGTH
        covered = SEAL_DIGEST_COVERS
        previous_key, digest_key, end = SEAL_PREVIOUS_KEY, SEAL_DIGEST_KEY, SEAL_END
        empty_previous_key = b"{" + previous_key[1:]  # the seal of a state b"{}"
        for row in page:
            notification_id, conversation_id, version, topic, state = row
            if conversation_id.__class__ is not UUID:
                conversation_id = (
                    self._conversation_of(conversation_id)
                    if conversation_id.__class__ is str
                    else None
                )
            if (
                conversation_id is None
                or version.__class__ is not int
                or notification_id.__class__ is not int
                or notification_id <= 0
                or state.__class__ is not bytes
                or topic.__class__ is not str
            ):
                collect_row(collected, row)
                continue
            # By the id's integer: UUID's own hash and == run in Python.
            item = by_int.get(conversation_id.int)
            if item is None:
                item = self._new_item(collected, conversation_id)
            facts = topics.get(topic) or self._topic_facts(topic)
            if not item.fast or version != item.count + 1 or facts is None:
                collect_row(collected, row)
                continue
            topic_line, topic_cells, role = facts
            try:
                numbers = pack(b"i", version, b"i", notification_id)
            except struct.error:  # beyond 64 bits: the general path tags it
                collect_row(collected, row)
                continue
            if state[:4] == magic:
                head = item.head
                if head is None:
                    assert item.head_hex is not None
                    head = bytes.fromhex(item.head_hex.decode("ascii"))
                digest = sha256(
                    b"".join(
                        (
                            item.envelope_prefix,
                            numbers[1:9],
                            topic_line,
                            state[:digest_at],
                            state[digest_end:],
                        )
                    )
                ).digest()
                if (
                    len(state) < shortest_envelope
                    or not state.startswith(digest, digest_at)
                    or not state.startswith(head, previous_at)
                ):
                    collect_row(collected, row)
                    continue
                item.head, item.head_hex = digest, None
            else:
                base = len(state) - suffix
                head_hex = item.head_hex
                if head_hex is None:
                    assert item.head is not None
                    head_hex = item.head.hex().encode("ascii")
                digest = (
                    sha256(
                        b"".join(
                            (
                                item.json_prefix,
                                numbers[1:9],
                                topic_line,
                                state[:covered],
                            )
                        )
                    )
                    .hexdigest()
                    .encode("ascii")
                )
                if (
                    base < 0
                    or not state.endswith(digest_key + digest + end)
                    or not (
                        state.startswith(previous_key + head_hex, base)
                        or state.startswith(empty_previous_key + head_hex, base)
                    )
                ):
                    collect_row(collected, row)
                    continue
                item.head, item.head_hex = None, digest
            item.count = version
            item.digests.append(digest)
            item.positions.append(notification_id)
            if leaves is not None:
                leaves.append(
                    sha256(
                        b"".join(
                            (
                                item.leaf_prefix,
                                numbers,
                                topic_cells,
                                sha256(state).digest(),
                            )
                        )
                    ).digest()
                )
                positions.append(notification_id)
            if role:
                if role != _DECODED:
                    item.turns += 1
                if role == _DECODED or (role == _CONFIRMED and _HAS_RECEIPT in state):
                    self._read_facts(
                        item,
                        StoredEvent(
                            originator_id=conversation_id,
                            originator_version=version,
                            topic=topic,
                            state=state,
                        ),
                    )

    def _collect_row(self, collected: dict[UUID, _Collected], row: RawRow) -> None:
        """The general path: any row, including every malformed one.

        Any cell the ledger would never write (NULL, another type, text that is
        not UTF-8, an id that is no conversation's, a position at or below
        zero) becomes a finding at that row; the rest of the log is still read.
        """
        if self.leaves is not None:
            # The transparency log's leaves, in the same read of the rows.
            self.leaves.append(row_leaf(row))
            self.leaf_positions.append(row[0])
        decode_wanted = (STARTED_TOPIC, DELETED_TOPIC)
        by_int = self._by_int
        malformed = MALFORMED
        notification_id, conversation_id, version, topic, state = row
        if conversation_id.__class__ is not UUID:
            originator_id = conversation_id
            conversation_id = self._conversation_of(originator_id)
            if conversation_id is None:
                self.log_findings.append(
                    Finding(
                        malformed,
                        None,
                        version if version.__class__ is int else None,
                        f"originator id {_shown(originator_id)} is not a "
                        "conversation id: the row belongs to no conversation",
                        notification_id,
                    )
                )
                return
        # By the id's integer: UUID's own hash and == run in Python.
        item = by_int.get(conversation_id.int)
        if item is None:
            item = self._new_item(collected, conversation_id)
        item.to_rows()
        if version.__class__ is not int:
            item.audit.findings.append(
                Finding(
                    malformed,
                    conversation_id,
                    None,
                    f"version {_shown(version)} is not an integer",
                    notification_id,
                )
            )
            return
        if notification_id <= 0:
            item.audit.findings.append(
                Finding(
                    malformed,
                    conversation_id,
                    version,
                    f"notification id {notification_id}: the log numbers "
                    "events from 1, so followers and the index never see this "
                    "row, yet the ledger serves it",
                    notification_id,
                )
            )
        if state.__class__ is str:  # a hand-edited SQLite row may be TEXT
            state = state.encode("utf-8", "surrogatepass")
        if topic.__class__ is not str or state.__class__ is not bytes:
            problem = (
                f"topic is {_shown(topic)}"
                if topic.__class__ is not str
                else f"state is {_shown(state)}, not bytes"
            )
            item.rows.append(
                ChainRow(version, "", "", "", problem, malformed, notification_id)
            )
            return
        if topic in TURN_TOPICS:
            item.turns += 1
        try:
            previous, recorded, computed = raw_link(
                item.identity, version, topic, state
            )
            item.rows.append(
                ChainRow(
                    version,
                    previous,
                    recorded,
                    computed,
                    None,
                    UNSEALED,
                    notification_id,
                )
            )
        except ChainFormatError as error:
            item.rows.append(
                ChainRow(version, "", "", "", str(error), UNSEALED, notification_id)
            )
        if topic in decode_wanted or (
            topic == CONFIRMED_TOPIC and _HAS_RECEIPT in state
        ):
            stored = StoredEvent(
                originator_id=conversation_id,
                originator_version=version,
                topic=topic,
                state=state,
            )
            self._read_facts(item, stored)

    def _read_facts(self, item: _Collected, stored: StoredEvent) -> None:
        """Owner, deleted turns or receipt: the only events the audit decodes."""
        topic = stored.topic
        try:
            event: Any = self.ledger.mapper.to_domain_event(stored)
            # Each fact is read whole before it is kept, so an event missing a
            # field leaves nothing half-recorded.
            if topic == STARTED_TOPIC:
                item.audit.owner_id = str(event.owner_id)
            elif topic == DELETED_TOPIC:
                item.audit.deleted_turn_ids.extend([str(t) for t in event.turn_ids])
            else:
                item.receipts.append(
                    _ReceiptToCheck(
                        turn_id=event.turn_id,
                        version=stored.originator_version,
                        document=event.window_receipt,
                        sealed_question=event.sealed_question,
                        sealed_system=event.sealed_system,
                    )
                )
        except Exception as error:  # noqa: BLE001 - any decoding failure is a finding
            item.audit.findings.append(
                Finding(
                    UNDECODABLE,
                    item.audit.conversation_id,
                    stored.originator_version,
                    f"{type(error).__name__}: cannot read the stored state",
                )
            )

    # Read-side pass -----------------------------------------------------------

    def _check_read_side(
        self, audit: ConversationAudit, item: _Collected, row: ConversationRow | None
    ) -> None:
        """The conversation's read-side row and deletion marks agree with the log.

        Queries trust the read side (owner checks, which turns are deleted),
        so a row edited in the database must not pass. Every other column is
        compared by `turnledger rebuild --check`, which replays the whole log.
        """
        conversation_id = audit.conversation_id
        if row is None:
            audit.findings.append(
                Finding(
                    READ_SIDE_MISMATCH,
                    conversation_id,
                    None,
                    "the conversation has events but no read-side row",
                )
            )
            return
        differ = [
            f"{name}: read side {mine!r}, log {theirs!r}"
            for name, mine, theirs in (
                ("owner", row.owner_id, audit.owner_id),
                ("version", row.version, audit.head_version),
                ("head digest", row.head_digest, audit.head_digest),
                ("turns", row.turn_count, item.turns),
            )
            if mine != theirs
        ]
        if audit.deleted_turn_ids:
            marked = self.ledger.read_side.turns_by_id(
                conversation_id, audit.deleted_turn_ids
            )
            undeleted = [
                turn_id
                for turn_id in audit.deleted_turn_ids
                if turn_id not in marked or not marked[turn_id].deleted
            ]
            if undeleted:
                differ.append(f"deleted in the log, not on the read side: {undeleted}")
        if differ:
            audit.findings.append(
                Finding(
                    READ_SIDE_MISMATCH,
                    conversation_id,
                    row.version,
                    "; ".join(differ),
                )
            )

    # Receipt pass -------------------------------------------------------------

    def _check_receipts(
        self, audit: ConversationAudit, receipts: list[_ReceiptToCheck]
    ) -> None:
        """Re-derive every receipt of one conversation from one replay.

        The conversation's events are replayed once into a read side of its
        own (never the store's, which the chain does not cover); every fact
        in it names the version that made it, so each receipt's window is
        derived "as of" its ledger version from that one view.
        """
        if not receipts:
            return
        conversation_id = audit.conversation_id
        try:
            events: list[Any] = list(self.ledger.events.get(conversation_id))
            view = self._replay(conversation_id, events)
        except Exception as error:  # noqa: BLE001 - reported, never raised
            audit.findings.append(
                Finding(
                    UNREPLAYABLE,
                    conversation_id,
                    None,
                    f"{type(error).__name__}: the conversation cannot be rebuilt from "
                    "its events, so its receipts cannot be re-derived",
                )
            )
            audit.receipts_failed += len(receipts)
            return
        to_derive: list[tuple[WindowReceipt, _ReceiptToCheck]] = []
        for item in receipts:
            checked = self._precheck(conversation_id, view, item)
            if isinstance(checked, Finding):
                self._tally(audit, checked)
            else:
                to_derive.append((checked, item))
        if not to_derive:
            return
        texts = self._open_texts(conversation_id, events, [i for _, i in to_derive])
        head = view.conversations([conversation_id])[conversation_id]
        queries = ConversationQueries(
            read_side=view, events=self.ledger.events, vault=self.ledger.vault
        )
        if not isinstance(head.version, int):  # a hand-edited version cell
            for _, item in to_derive:
                self._tally(
                    audit,
                    _receipt_finding(
                        conversation_id,
                        item,
                        UNREPLAYABLE,
                        "the conversation's versions are not numbers: its "
                        "receipts cannot be re-derived",
                    ),
                )
            return
        for receipt, item in to_derive:
            if receipt.ledger_version > head.version:
                self._tally(
                    audit,
                    _receipt_finding(
                        conversation_id,
                        item,
                        RECEIPT_INVALID,
                        f"names ledger version {receipt.ledger_version}, beyond the "
                        "log",
                    ),
                )
                continue
            past = _head_at(view, head, receipt.ledger_version)
            self._tally(
                audit,
                self._derive(
                    conversation_id, queries, view, past, receipt, item, texts
                ),
            )

    def _replay(self, conversation_id: UUID, events: list[Any]) -> LedgerView:
        digests = [str(getattr(e, "digest", "") or "") for e in events]
        return replay_events(
            [list(zip(events, digests, strict=True))], self.ledger.vault.open_many
        )

    def _conversations_with_snapshots(self) -> frozenset[UUID] | None:
        """Which conversations have snapshots, in one read (None: ask each)."""
        if self.ledger.legacy_snapshots is None:
            return frozenset()
        listing = getattr(self.raw_log, "snapshot_originators", None)
        if listing is None:
            return None
        try:
            return frozenset(listing())
        except Exception:  # noqa: BLE001 - each conversation is then asked
            return None

    def _check_snapshots(self, audit: ConversationAudit) -> None:
        """Each snapshot must equal the replay of the events up to its version.

        Snapshots are not chained, yet the ledger loads from them: an altered
        snapshot (another owner, an undeleted turn) would be served as truth.
        """
        store = self.ledger.legacy_snapshots
        if store is None:  # a store that never had snapshots
            return
        conversation_id = audit.conversation_id
        owners = self._snapshot_owners
        if owners is not None and conversation_id not in owners:
            return
        try:
            snapshots: list[Any] = list(store.get(conversation_id))
            if not snapshots:
                return
            last = max(s.originator_version for s in snapshots)
            events: list[Any] = list(self.ledger.events.get(conversation_id, lte=last))
        except Exception as error:  # noqa: BLE001 - reported, never raised
            audit.findings.append(
                Finding(
                    SNAPSHOT_MISMATCH,
                    conversation_id,
                    None,
                    f"{type(error).__name__}: snapshots or events cannot be read",
                )
            )
            return
        by_version = {s.originator_version: s for s in snapshots}
        replayed: Any = None
        for event in events:
            try:
                replayed = event.mutate(replayed)
            except Exception:  # noqa: BLE001 - the chain pass reports the cause
                return
            snapshot = by_version.pop(replayed.version, None)
            if snapshot is None:
                continue
            try:
                differs = _state(snapshot.mutate(None)) != _state(replayed)
            except Exception:  # noqa: BLE001 - an unreadable snapshot differs
                differs = True
            if differs:
                audit.findings.append(
                    Finding(
                        SNAPSHOT_MISMATCH,
                        conversation_id,
                        replayed.version,
                        "the snapshot differs from the replay of its events: the "
                        "ledger would serve altered state until it is removed",
                    )
                )
        head = 0 if replayed is None else replayed.version
        for version in sorted(by_version):  # no event replays to these
            audit.findings.append(
                Finding(
                    SNAPSHOT_MISMATCH,
                    conversation_id,
                    version,
                    f"a snapshot at version {version}, which no event of the "
                    f"conversation (head {head}) replays to: written or moved "
                    "by hand",
                )
            )

    def _policy_of(
        self, receipt: WindowReceipt
    ) -> tuple[str, WindowPolicy, TokenCounter]:
        model, policy, counter_name = parse_receipt_policy(receipt.policy)
        counter = (
            CHAR_ESTIMATE
            if counter_name == CHAR_ESTIMATE.name
            else self.token_counters.get(counter_name)
        )
        if counter is None:
            raise InvalidInputError(
                "policy", f"token counter {counter_name!r} is not available here"
            )
        return model, policy, counter

    @staticmethod
    def _tally(audit: ConversationAudit, finding: Finding | None) -> None:
        if finding is None:
            audit.receipts_verified += 1
            return
        if finding.failure:
            audit.receipts_failed += 1
        else:
            audit.receipts_not_rederivable += 1
        audit.findings.append(finding)

    def _precheck(
        self, conversation_id: UUID, view: LedgerView, item: _ReceiptToCheck
    ) -> WindowReceipt | Finding:
        """The receipt, or why it cannot or need not be re-derived."""
        try:
            receipt = WindowReceipt.from_document(item.document)
        except InvalidInputError as error:
            return _receipt_finding(
                conversation_id, item, RECEIPT_INVALID, error.reason
            )
        if receipt.ledger_version >= item.version or item.sealed_system is None:
            return _receipt_finding(
                conversation_id,
                item,
                RECEIPT_INVALID,
                f"names ledger version {receipt.ledger_version}, which is not before "
                "its own turn, or has no sealed system instructions",
            )
        involved = dict.fromkeys((item.turn_id, *receipt.turn_ids))
        rows = view.turns_by_id(conversation_id, list(involved))
        deleted = [
            turn_id for turn_id in involved if turn_id in rows and rows[turn_id].deleted
        ]
        if deleted:
            return _receipt_finding(
                conversation_id,
                item,
                NOT_REDERIVABLE,
                f"not re-derivable: turns deleted ({', '.join(deleted)})",
            )
        if receipt.fold_id is not None:
            folds = {f.fold_id: f for f in view.folds(conversation_id)}
            fold = folds.get(receipt.fold_id)
            if fold is not None and fold.withdrawn_version is not None:
                return _receipt_finding(
                    conversation_id,
                    item,
                    NOT_REDERIVABLE,
                    f"not re-derivable: turns deleted (covered by fold "
                    f"{receipt.fold_id}, since withdrawn)",
                )
        return receipt

    def _open_texts(
        self,
        conversation_id: UUID,
        events: list[Any],
        receipts: list[_ReceiptToCheck],
    ) -> dict[tuple[str, str], str | None]:
        """Every readable text the receipts may need, opened in one vault call.

        A text whose key is gone maps to None; one whose ciphertext fails to
        open (altered) is left out, so using it reports the failure there.
        """
        items: list[tuple[str, str, bytes]] = []
        for event in events:
            sealed_question = getattr(event, "sealed_question", None)
            sealed_answer = getattr(event, "sealed_answer", None)
            if isinstance(sealed_question, bytes) and isinstance(sealed_answer, bytes):
                items.append((event.turn_id, "question", sealed_question))
                items.append((event.turn_id, "answer", sealed_answer))
                sealed_parts = getattr(event, "sealed_parts", None)
                if isinstance(sealed_parts, bytes):
                    items.append((event.turn_id, "parts", sealed_parts))
        for item in receipts:
            assert item.sealed_system is not None
            items.append((item.turn_id, "system", item.sealed_system))
        vault = self.ledger.vault
        try:
            opened = vault.open_many(conversation_id, items)
            return {(t, f): text for (t, f, _), text in zip(items, opened, strict=True)}
        except Exception:  # noqa: BLE001 - find the unreadable ones one by one
            texts: dict[tuple[str, str], str | None] = {}
            for turn_id, field_name, sealed in items:
                try:
                    texts[(turn_id, field_name)] = vault.open_many(
                        conversation_id, [(turn_id, field_name, sealed)]
                    )[0]
                except Exception:  # noqa: BLE001, S112 - reported where it is used
                    continue
            return texts

    def _derive(
        self,
        conversation_id: UUID,
        queries: ConversationQueries,
        view: LedgerView,
        past: ConversationRow,
        receipt: WindowReceipt,
        item: _ReceiptToCheck,
        texts: dict[tuple[str, str], str | None],
    ) -> Finding | None:
        def finding(kind: str, detail: str) -> Finding:
            return _receipt_finding(conversation_id, item, kind, detail)

        question_key, system_key = (item.turn_id, "question"), (item.turn_id, "system")
        if question_key not in texts or system_key not in texts:
            return finding(UNREADABLE, "its sealed text cannot be opened")
        question, system = texts[question_key], texts[system_key]
        if question is None or system is None:
            return finding(TEXT_MISSING, "its key is gone but it was never deleted")
        turn_texts = _turns_of(texts)
        try:
            model, policy, counter = self._policy_of(receipt)
            window = queries.window_at(
                past,
                question=question,
                system=system,
                model=model,
                policy=policy,
                counter=counter,
                texts=turn_texts,
            )
        except InvalidInputError as error:
            return finding(RECEIPT_INVALID, error.reason)
        except TextUnavailableError as error:
            gone = view.turns_by_id(conversation_id, [error.turn_id]).get(error.turn_id)
            if gone is not None and gone.deleted:
                # The window read a turn (e.g. at its edge) deleted since.
                return finding(
                    NOT_REDERIVABLE,
                    f"not re-derivable: turns deleted ({error.turn_id})",
                )
            return finding(
                TEXT_MISSING,
                f"turn {error.turn_id}'s key is gone but it was never deleted",
            )
        except WindowError as error:
            return finding(RECEIPT_MISMATCH, f"the policy no longer applies: {error}")
        except Exception as error:  # noqa: BLE001 - e.g. a ciphertext failing its tag
            return finding(
                UNREADABLE, f"{type(error).__name__}: sealed text cannot be opened"
            )
        sent_fold = window.fold_id if window.fold_sent else None
        mac_key = None
        if receipt.receipt_format >= 2:
            mac_key = self.ledger.vault.receipt_key(
                conversation_id,
                receipt_key_ids(item.turn_id, receipt.turn_ids, receipt.fold_id),
            )
            if mac_key is None:
                return finding(
                    NOT_REDERIVABLE,
                    "not re-derivable: a key its body was bound with is gone",
                )
        if not receipt.matches(
            window.body, window.kept_turn_ids, sent_fold, mac_key=mac_key
        ):
            if tuple(window.kept_turn_ids) != receipt.turn_ids:
                what = (
                    f"turns {list(window.kept_turn_ids)} where the receipt says "
                    f"{list(receipt.turn_ids)}"
                )
            elif sent_fold != receipt.fold_id:
                what = f"fold {sent_fold!r} where the receipt says {receipt.fold_id!r}"
            else:
                what = "the same turns, but a body whose MAC differs"
            return finding(
                RECEIPT_MISMATCH,
                f"re-derived {len(window.body)} bytes with {what}",
            )
        return None


def _head_at(view: LedgerView, head: ConversationRow, version: int) -> ConversationRow:
    """The conversation's row as it stood at `version` (for a past window)."""
    conversation_id = head.conversation_id
    eligible = view.eligible_ids(conversation_id, first=0, last=2**62, as_of=version)
    recorded = len(
        view.turns_page(conversation_id, offset=0, limit=2**62, as_of=version)
    )
    return dataclasses.replace(
        head, version=version, turn_count=recorded, eligible_count=len(eligible)
    )


def _turns_of(texts: dict[tuple[str, str], str | None]) -> dict[str, TurnParts]:
    """The turns whose question, answer (and parts, if any) were opened."""
    turns: dict[str, TurnParts] = {}
    for (turn_id, field_name), question in texts.items():
        if field_name != "question" or question is None:
            continue
        answer = texts.get((turn_id, "answer"))
        parts_text = texts.get((turn_id, "parts"))
        if answer is None or ((turn_id, "parts") in texts and parts_text is None):
            continue
        turns[turn_id] = decode_parts(
            question=question, answer=answer, parts_text=parts_text
        )
    return turns
