"""Replay: a conversation's history as it stood at a past version or time.

The past state is the read side's turns recorded by that version. What the owner has
deleted since stays deleted: time travel never brings text back. A turn is
shown as deleted when it was deleted at that version or at any later one, and
its text is never read.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from turnledger.domain.errors import InvalidInputError
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.results import MAX_HISTORY_PAGE, HistoryPage


def history_at(
    ledger: Conversations,
    owner_id: str,
    conversation_id: UUID,
    *,
    version: int | None = None,
    at: datetime | None = None,
) -> HistoryPage:
    """Every turn as the owner saw them at `version`, or at time `at`."""
    if (version is None) == (at is None):
        raise InvalidInputError("at", "give exactly one of a version or a time")
    current = ledger.get_conversation(owner_id, conversation_id)
    if at is not None:
        version = version_at(ledger, current.conversation_id, at)
    assert version is not None
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or not (1 <= version <= current.version)
    ):
        raise InvalidInputError(
            "version", f"must be an integer from 1 to {current.version}"
        )
    # Turns recorded by `version`, each with its deletion as it stands now:
    # a deletion made since is never undone by looking back.
    rows = []
    offset = 0
    while True:
        page = ledger.read_side.turns_page(
            current.conversation_id,
            offset=offset,
            limit=MAX_HISTORY_PAGE,
            as_of=version,
        )
        rows.extend(page)
        if len(page) < MAX_HISTORY_PAGE:
            break
        offset += MAX_HISTORY_PAGE
    items = ledger.queries.history_items(
        current.conversation_id, rows, owner_id=owner_id
    )
    return HistoryPage(
        conversation_id=current.conversation_id,
        version=version,
        total_turns=len(items),
        items=items,
        next_offset=None,
    )


def version_at(ledger: Conversations, conversation_id: UUID, at: datetime) -> int:
    """The version the conversation had at time `at` (its last event by then)."""
    if not isinstance(at, datetime) or at.tzinfo is None:
        raise InvalidInputError("at", "expected a timezone-aware datetime")
    version = 0
    for recorded in ledger.events.get(conversation_id):
        if recorded.timestamp > at:  # type: ignore[attr-defined]
            break
        version = recorded.originator_version
    if version == 0:
        raise InvalidInputError("at", f"the conversation did not exist yet at {at}")
    return version
