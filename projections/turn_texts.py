"""Opening a recorded turn: its sealed texts and parts, back to TurnParts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from turnledger.domain.parts import TurnParts, decode_parts
from turnledger.domain.ports import TextVault

# The sealed fields of a turn's event, by the field name bound into each.
_FIELDS = (
    ("question", "sealed_question"),
    ("answer", "sealed_answer"),
    ("parts", "sealed_parts"),
)


def open_turns(
    vault: TextVault, conversation_id: UUID, events: Iterable[Any]
) -> dict[str, TurnParts]:
    """The turns these TurnConfirmed/TurnAbandoned events hold, by turn id.

    One vault call for all of them. A turn whose key is gone is left out.
    """
    return {
        turn_id: decode_parts(question=question, answer=answer, parts_text=parts)
        for turn_id, (question, answer, parts) in open_turn_texts(
            vault, conversation_id, events
        ).items()
    }


def open_turn_texts(
    vault: TextVault, conversation_id: UUID, events: Iterable[Any]
) -> dict[str, tuple[str, str, str | None]]:
    """Like open_turns, each turn as its opened texts: the question, the
    answer and the parts text (encode_parts; None for a text-only turn)."""
    items: list[tuple[str, str, bytes]] = []
    layout: list[tuple[str, int, bool]] = []  # turn id, first item, has parts
    for event in events:
        start = len(items)
        has_parts = False
        for field_name, attribute in _FIELDS:
            sealed = getattr(event, attribute, None)
            if isinstance(sealed, bytes):
                items.append((event.turn_id, field_name, sealed))
                has_parts = has_parts or field_name == "parts"
        layout.append((event.turn_id, start, has_parts))
    opened = vault.open_many(conversation_id, items) if items else []
    turns: dict[str, tuple[str, str, str | None]] = {}
    for turn_id, start, has_parts in layout:
        question, answer = opened[start], opened[start + 1]
        parts_text = opened[start + 2] if has_parts else None
        if question is None or answer is None or (has_parts and parts_text is None):
            continue
        turns[turn_id] = (question, answer, parts_text)
    return turns
