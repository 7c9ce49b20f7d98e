"""Opening a recorded turn: its sealed texts and parts, back to TurnParts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

from turnledger.domain.errors import TurnKeyDamagedError
from turnledger.domain.parts import TurnParts, decode_parts
from turnledger.domain.ports import TextVault

# The sealed fields of a turn's event, by the field name bound into each.
_FIELDS = (
    ("question", "sealed_question"),
    ("answer", "sealed_answer"),
    ("parts", "sealed_parts"),
)


def sealed_fields(event: Any) -> list[tuple[str, bytes]]:
    """(field, sealed text) of every text a turn or fold event holds."""
    return [
        (field_name, sealed)
        for field_name, attribute in (*_FIELDS, ("system", "sealed_system"))
        + (("summary", "sealed_summary"),)
        if isinstance(sealed := getattr(event, attribute, None), bytes)
    ]


def open_turns(
    vault: TextVault,
    conversation_id: UUID,
    events: Iterable[Any],
    *,
    owner_id: str | None,
    damaged: set[str] | None = None,
) -> dict[str, TurnParts]:
    """The turns these TurnConfirmed/TurnAbandoned events hold, by turn id.

    One vault call for all of them. A turn whose key is gone is left out.
    A turn whose stored key is damaged raises TurnKeyDamagedError, unless
    `damaged` is given: it is then left out too, and its id added there.
    Texts bound to their owner open only for `owner_id` (TextVault.open_many).
    """
    return {
        turn_id: decode_parts(question=question, answer=answer, parts_text=parts)
        for turn_id, (question, answer, parts) in open_turn_texts(
            vault, conversation_id, events, owner_id=owner_id, damaged=damaged
        ).items()
    }


def open_turn_texts(
    vault: TextVault,
    conversation_id: UUID,
    events: Iterable[Any],
    *,
    owner_id: str | None,
    damaged: set[str] | None = None,
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
    opened = _open(vault, conversation_id, items, owner_id, damaged)
    turns: dict[str, tuple[str, str, str | None]] = {}
    for turn_id, start, has_parts in layout:
        question, answer = opened[start], opened[start + 1]
        parts_text = opened[start + 2] if has_parts else None
        if question is None or answer is None or (has_parts and parts_text is None):
            continue
        turns[turn_id] = (question, answer, parts_text)
    return turns


def _open(
    vault: TextVault,
    conversation_id: UUID,
    items: list[tuple[str, str, bytes]],
    owner_id: str | None,
    damaged: set[str] | None,
) -> list[str | None]:
    """The opened items; with `damaged`, those of turns whose key is damaged
    are None (and their turn ids added to it) instead of an error."""
    if not items:
        return []
    if damaged is None:
        return vault.open_many(conversation_id, items, owner_id)
    try:
        return vault.open_many(conversation_id, items, owner_id)
    except TurnKeyDamagedError as error:
        damaged.update(error.turn_ids)
    readable = [item for item in items if item[0] not in damaged]
    opened = iter(
        vault.open_many(conversation_id, readable, owner_id) if readable else []
    )
    return [None if item[0] in damaged else next(opened) for item in items]


def open_noting_damaged(
    vault: TextVault, damaged: set[tuple[UUID, str]]
) -> Callable[[UUID, Sequence[tuple[str, str, bytes]], str | None], list[str | None]]:
    """`vault.open_many`, but a text whose key is damaged opens to None, as
    if its key were gone, and (conversation id, key id) is added to
    `damaged`: for a replay that must go on past one damaged key."""

    def open_texts(
        conversation_id: UUID,
        items: Sequence[tuple[str, str, bytes]],
        owner_id: str | None = None,
    ) -> list[str | None]:
        found: set[str] = set()
        opened = _open(vault, conversation_id, list(items), owner_id, found)
        damaged.update((conversation_id, key_id) for key_id in found)
        return opened

    return open_texts
