"""A user's data, as JSON-ready records: what is still readable, and what was deleted.

The record layout is documented in docs/export.md; bump EXPORT_SCHEMA when
it changes incompatibly.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

from turnledger.domain.text import check_identifier
from turnledger.infra.service_layer.application import MAX_HISTORY_PAGE, Conversations
from turnledger.infra.service_layer.feed import ConversationFeed, HistoryDeletedChange
from turnledger.projections.results import HistoryItem

EXPORT_SCHEMA = "turnledger.export/1"


def conversation_ids_of(ledger: Conversations, owner_id: str) -> Iterator[UUID]:
    """The owner's conversations, oldest first (an indexed read-side query)."""
    check_identifier("owner_id", owner_id)
    for row in ledger.read_side.conversations_of(owner_id):
        yield row.conversation_id


def export_records(
    ledger: Conversations, owner_id: str, *, exported_at: datetime
) -> Iterator[dict[str, Any]]:
    """Every record of the owner's export, header first and trailer last."""
    check_identifier("owner_id", owner_id)
    yield {
        "record": "export",
        "schema": EXPORT_SCHEMA,
        "owner_id": owner_id,
        "exported_at": exported_at.isoformat(),
    }
    totals = {"conversations": 0, "turns": 0, "deleted_turns": 0}
    # The owner's deletions through the per-user feed: one indexed read that
    # decodes the deletions alone, not every event of every conversation.
    deletions: dict[UUID, list[HistoryDeletedChange]] = {}
    for deletion in ConversationFeed(ledger).deletions_of(owner_id):
        deletions.setdefault(deletion.conversation_id, []).append(deletion)
    for conversation_id in conversation_ids_of(ledger, owner_id):
        conversation = ledger.get_conversation(owner_id, conversation_id)
        totals["conversations"] += 1
        yield {
            "record": "conversation",
            "conversation_id": str(conversation_id),
            "started_at": conversation.created_at.isoformat(),
            "version": conversation.version,
            "turn_count": conversation.turn_count,
        }
        for item in _history(ledger, owner_id, conversation_id):
            totals["turns"] += 1
            totals["deleted_turns"] += item.deleted
            yield _turn_record(conversation_id, item)
        for deletion in deletions.get(conversation_id, ()):
            yield _deletion_record(conversation_id, deletion)
    yield {"record": "end", **totals}


def _history(
    ledger: Conversations, owner_id: str, conversation_id: UUID
) -> Iterator[HistoryItem]:
    """The conversation's turns in order, read a page at a time."""
    offset: int | None = 0
    while offset is not None:
        page = ledger.get_history(
            owner_id, conversation_id, offset=offset, limit=MAX_HISTORY_PAGE
        )
        yield from page.items
        offset = page.next_offset


def _turn_record(conversation_id: UUID, item: HistoryItem) -> dict[str, Any]:
    return {
        "record": "turn",
        "conversation_id": str(conversation_id),
        "position": item.position,
        "turn_id": item.turn_id,
        "status": item.status.value,
        "recorded_at": item.recorded_at.isoformat(),
        "deleted": item.deleted,
        "deleted_at": item.deleted_at.isoformat() if item.deleted_at else None,
        "question": item.question,
        "answer": item.answer,
        # Why a turn not deleted has no text ("key-damaged"), as in history;
        # null when it has its text or was deleted.
        "unreadable": item.unreadable,
        # Attachments and steps in order ([] for a text-only turn).
        "parts": None if item.parts is None else item.parts.part_documents(),
    }


def _deletion_record(
    conversation_id: UUID, deletion: HistoryDeletedChange
) -> dict[str, Any]:
    return {
        "record": "deletion",
        "conversation_id": str(conversation_id),
        "deleted_at": deletion.at.isoformat(),
        "deleted_by": deletion.deleted_by,
        "whole_history": deletion.whole_history,
        "turn_ids": list(deletion.turn_ids),
    }
