"""The texts a sync read serves: turns' texts opened for their owner, and
those of turns deleted by the time of the read withheld.

Two ways to the same answer. On every store: decrypt with one key read for
all the read's conversations, then ask the read side which of its turns are
deleted by now (a deletion records its event before destroying keys, so
checking after decrypting catches one landing in between). On PostgreSQL the
read's own statement brings each turn's wrapped key and deletion flag with
its event (`OwnerTurnLog`), in one snapshot: a deletion committed before it
shows as deleted, and one committed after it has not destroyed the key yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import Notification

from turnledger.domain.conversation import Conversation
from turnledger.domain.parts import TurnParts, decode_parts
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.vault import KeyVault
from turnledger.projections.turn_texts import sealed_fields

# The sealed fields of a turn event the feed serves (its system text is not).
_TURN_TEXT_FIELDS = frozenset({"question", "answer", "parts"})

TurnState = tuple[str, bool, bytes | None]
"""A turn event's turn id, whether the turn is deleted, its wrapped key."""


class OwnerTurnLog(Protocol):
    """The per-user feed index read with each turn's state (PostgreSQL)."""

    def select_owner_reads(
        self, owner_id: str, after: int, limit: int
    ) -> tuple[Sequence[Notification], Mapping[int, TurnState], int]:
        """As `OwnerLog.select_owner_notifications`, with each turn event's
        `TurnState` by log position, and the log's head position."""
        ...


def is_turn(recorded: Any) -> bool:
    return isinstance(recorded, Conversation.TurnConfirmed | Conversation.TurnAbandoned)


def open_texts(
    ledger: Conversations,
    events: Sequence[Any],
    owner_id: str,
    damaged: set[tuple[UUID, str]],
) -> dict[tuple[UUID, str], TurnParts]:
    """Decrypt the turns, then drop those of turns deleted by now; those whose
    stored key is damaged are left out and added to `damaged`. Each step is
    one statement for every conversation of the read (keys, then turn rows)."""
    by_conversation = _turns_by_conversation(events)
    if not by_conversation:
        return {}
    vault = ledger.vault
    assert isinstance(vault, KeyVault)  # the only TextVault of the service
    items = _sealed_items(ledger, by_conversation, owner_id)
    opened = vault.open_across(items, owner_id=owner_id, damaged=damaged)
    texts = _texts(items, opened)
    for deleted in ledger.read_side.deleted_turns(
        {
            conversation_id: {recorded.turn_id for recorded in recorded_turns}
            for conversation_id, recorded_turns in by_conversation.items()
        }
    ):
        texts.pop(deleted, None)
        damaged.discard(deleted)
    return texts


def open_read_texts(
    ledger: Conversations,
    read: Sequence[tuple[Notification, Any]],
    turns: Mapping[int, TurnState],
    owner_id: str,
    damaged: set[tuple[UUID, str]],
) -> dict[tuple[UUID, str], TurnParts] | None:
    """`open_texts` from the keys and deletion flags read with the events
    (`read`: each notification and its decoded event); None if a turn event's
    state is missing or names another turn (then use `open_texts`)."""
    wrapped: dict[UUID, dict[str, bytes]] = {}
    live: list[Any] = []
    for notification, recorded in read:
        if not is_turn(recorded):
            continue
        state = turns.get(notification.id)
        if state is None or state[0] != recorded.turn_id:
            return None
        _, deleted, key = state
        if deleted:
            continue  # withheld: never opened
        live.append(recorded)
        if key is not None:
            conversation_id = _as_uuid(recorded.originator_id)
            wrapped.setdefault(conversation_id, {})[recorded.turn_id] = key
    by_conversation = _turns_by_conversation(live)
    if not by_conversation:
        return {}
    vault = ledger.vault
    assert isinstance(vault, KeyVault)
    items = _sealed_items(ledger, by_conversation, owner_id)
    opened = vault.open_across(
        items, owner_id=owner_id, damaged=damaged, wrapped=wrapped
    )
    return _texts(items, opened)


def _turns_by_conversation(events: Sequence[Any]) -> dict[UUID, list[Any]]:
    by_conversation: dict[UUID, list[Any]] = {}
    for recorded in events:
        if is_turn(recorded):
            by_conversation.setdefault(_as_uuid(recorded.originator_id), []).append(
                recorded
            )
    return by_conversation


def _sealed_items(
    ledger: Conversations, turns: dict[UUID, list[Any]], owner_id: str
) -> dict[UUID, list[tuple[str, str, bytes]]]:
    """Each conversation's sealed texts to open for `owner_id`. Texts sealed
    before owners were bound open only for the owner of the Started event,
    whatever the owner index says (`owned_events` raises otherwise)."""
    return {
        conversation_id: [
            (recorded.turn_id, field, sealed)
            for recorded in ledger.queries.owned_events(
                conversation_id, owner_id, recorded_turns
            )
            for field, sealed in sealed_fields(recorded)
            if field in _TURN_TEXT_FIELDS
        ]
        for conversation_id, recorded_turns in turns.items()
    }


def _texts(
    items: dict[UUID, list[tuple[str, str, bytes]]],
    opened: dict[UUID, list[str | None]],
) -> dict[tuple[UUID, str], TurnParts]:
    """The turns whose texts opened (a turn whose key is gone or damaged is
    left out)."""
    texts: dict[tuple[UUID, str], TurnParts] = {}
    for conversation_id, found in items.items():
        fields: dict[str, dict[str, str | None]] = {}
        for (turn_id, field, _), text in zip(
            found, opened[conversation_id], strict=True
        ):
            fields.setdefault(turn_id, {})[field] = text
        for turn_id, texts_of in fields.items():
            question, answer = texts_of.get("question"), texts_of.get("answer")
            parts = texts_of.get("parts")
            if question is None or answer is None:
                continue
            if "parts" in texts_of and parts is None:
                continue
            texts[(conversation_id, turn_id)] = decode_parts(
                question=question, answer=answer, parts_text=parts
            )
    return texts


def _as_uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
