"""The audit's chain pass: every stored row's version, digest and link.

It reads raw stored rows (the notification log, or one conversation's
events) and needs no keys. A cell the ledger never writes (NULL, a wrong
type, a position at or below zero) is a `malformed` finding at its row, never
an exception; with `leaves` set, the same read computes every row's
transparency-log leaf (docs/transparency.md).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from turnledger.domain.chain import (
    ENVELOPE_MAGIC,
    ChainFormatError,
    raw_link,
)
from turnledger.domain.findings import (
    MALFORMED,
    UNDECODABLE,
    UNSEALED,
    ChainRow,
    ConversationAudit,
    Finding,
)
from turnledger.domain.transparency import (
    LEAF_NUMBERS,
    STATE_CELL_TAG,
    RawLog,
    RawRow,
    pages,
    row_leaf,
    topic_cell,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit_collected import (
    CONFIRMED,
    CONFIRMED_TOPIC,
    DECODED,
    DELETED_TOPIC,
    HAS_RECEIPT,
    PLAIN,
    STARTED_TOPIC,
    TOPIC_ROLES,
    TURN_TOPICS,
    CollectedConversation,
    ReceiptToCheck,
    envelope_digest,
    json_seal_digest,
    shown,
)

_MAX_TOPICS = 1000  # a few exist; past this many, rows take the general path


class ChainPass:
    """The chain pass of `Auditor` (infra/service_layer/audit.py)."""

    ledger: Conversations
    raw_log: RawLog
    page_size: int
    progress: Callable[[int], None]
    leaves: list[bytes] | None
    leaf_positions: list[int]
    log_findings: list[Finding]
    _ids: dict[str, UUID]
    _topics: dict[str, tuple[bytes, bytes, int]]
    _by_int: dict[int, CollectedConversation]

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
        self, collected: dict[UUID, CollectedConversation], conversation_id: UUID
    ) -> CollectedConversation:
        item = collected[conversation_id] = self._by_int[conversation_id.int] = (
            CollectedConversation(
                ConversationAudit(conversation_id), conversation_id.bytes
            )
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
            TOPIC_ROLES.get(topic, PLAIN),
        )
        self._topics[topic] = facts
        return facts

    # Long because: the chain pass's per-row hot loop (bench/audit_throughput.py)
    def _collect_page(
        self, collected: dict[UUID, CollectedConversation], page: Sequence[RawRow]
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
        leaves, positions = self.leaves, self.leaf_positions
        by_int, topics = self._by_int, self._topics
        pack, sha256, collect_row = LEAF_NUMBERS.pack, hashlib.sha256, self._collect_row
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
            verify = (
                envelope_digest if state[:4] == ENVELOPE_MAGIC else json_seal_digest
            )
            digest = verify(item, numbers, topic_line, state)
            if digest is None:
                collect_row(collected, row)
                continue
            item.count = version
            item.digests.append(digest)
            item.positions.append(notification_id)
            if leaves is not None:
                leaf = (item.leaf_prefix, numbers, topic_cells, sha256(state).digest())
                leaves.append(sha256(b"".join(leaf)).digest())
                positions.append(notification_id)
            if role:
                self._note_fast_row(item, role, conversation_id, version, topic, state)

    def _note_fast_row(
        self,
        item: CollectedConversation,
        role: int,
        conversation_id: UUID,
        version: int,
        topic: str,
        state: bytes,
    ) -> None:
        """A verified row of a turn or a decoded event: count the turn, and read
        the facts the audit needs from the event."""
        if role != DECODED:
            item.turns += 1
        if role == DECODED or (role == CONFIRMED and HAS_RECEIPT in state):
            stored = StoredEvent(
                originator_id=conversation_id,
                originator_version=version,
                topic=topic,
                state=state,
            )
            self._read_facts(item, stored)

    def _collect_row(
        self, collected: dict[UUID, CollectedConversation], row: RawRow
    ) -> None:
        """The general path: any row, including every malformed one.

        Any cell the ledger would never write (NULL, another type, text that is
        not UTF-8, an id that is no conversation's, a position at or below
        zero) becomes a finding at that row; the rest of the log is still read.
        """
        if self.leaves is not None:
            # The transparency log's leaves, in the same read of the rows.
            self.leaves.append(row_leaf(row))
            self.leaf_positions.append(row[0])
        notification_id, conversation_id, version, topic, state = row
        item = self._item_of_row(collected, row)
        if item is None:
            return
        if state.__class__ is str:  # a hand-edited SQLite row may be TEXT
            state = state.encode("utf-8", "surrogatepass")
        if topic.__class__ is not str or state.__class__ is not bytes:
            problem = (
                f"topic is {shown(topic)}"
                if topic.__class__ is not str
                else f"state is {shown(state)}, not bytes"
            )
            item.rows.append(
                ChainRow(version, "", "", "", problem, MALFORMED, notification_id)
            )
            return
        if topic in TURN_TOPICS:
            item.turns += 1
        item.rows.append(_chain_row(item, notification_id, version, topic, state))
        if topic in (STARTED_TOPIC, DELETED_TOPIC) or (
            topic == CONFIRMED_TOPIC and HAS_RECEIPT in state
        ):
            stored = StoredEvent(
                originator_id=item.audit.conversation_id,
                originator_version=version,
                topic=topic,
                state=state,
            )
            self._read_facts(item, stored)

    def _item_of_row(
        self, collected: dict[UUID, CollectedConversation], row: RawRow
    ) -> CollectedConversation | None:
        """The general path's conversation of a row, None (and a finding) when
        the row names none or its version is no integer."""
        notification_id, conversation_id, version, _, _ = row
        if conversation_id.__class__ is not UUID:
            originator_id = conversation_id
            conversation_id = self._conversation_of(originator_id)
            if conversation_id is None:
                self.log_findings.append(
                    Finding(
                        MALFORMED,
                        None,
                        version if version.__class__ is int else None,
                        f"originator id {shown(originator_id)} is not a "
                        "conversation id: the row belongs to no conversation",
                        notification_id,
                    )
                )
                return None
        # By the id's integer: UUID's own hash and == run in Python.
        item = self._by_int.get(conversation_id.int)
        if item is None:
            item = self._new_item(collected, conversation_id)
        item.to_rows()
        if version.__class__ is not int:
            item.audit.findings.append(
                Finding(
                    MALFORMED,
                    conversation_id,
                    None,
                    f"version {shown(version)} is not an integer",
                    notification_id,
                )
            )
            return None
        if notification_id <= 0:
            item.audit.findings.append(
                Finding(
                    MALFORMED,
                    conversation_id,
                    version,
                    f"notification id {notification_id}: the log numbers "
                    "events from 1, so followers and the index never see this "
                    "row, yet the ledger serves it",
                    notification_id,
                )
            )
        return item

    def _read_facts(self, item: CollectedConversation, stored: StoredEvent) -> None:
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
                    ReceiptToCheck(
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


def _chain_row(
    item: CollectedConversation,
    notification_id: int,
    version: int,
    topic: str,
    state: bytes,
) -> ChainRow:
    """The general path's row: its link, its recorded and computed digests, or
    why its state cannot be read as a seal."""
    try:
        previous, recorded, computed = raw_link(item.identity, version, topic, state)
    except ChainFormatError as error:
        return ChainRow(version, "", "", "", str(error), UNSEALED, notification_id)
    return ChainRow(
        version, previous, recorded, computed, None, UNSEALED, notification_id
    )
