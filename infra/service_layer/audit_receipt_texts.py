"""The texts the audit's receipt pass needs (audit_receipts.py): every
turn's question, answer and parts, and each receipt's system instructions,
opened in one vault call where they can be, one by one where some cannot."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from turnledger.domain.errors import TurnKeyDamagedError
from turnledger.domain.parts import TurnParts, decode_parts
from turnledger.domain.ports import TextVault
from turnledger.infra.service_layer.audit_collected import ReceiptToCheck

Texts = dict[tuple[str, str], str | None]
# The field under which `open_receipt_texts` marks a turn whose key is damaged.
DAMAGED = "key-damaged"


def open_receipt_texts(
    vault: TextVault,
    conversation_id: UUID,
    owner_id: str | None,
    events: list[Any],
    receipts: list[ReceiptToCheck],
) -> Texts:
    """Every readable text the receipts may need, opened in one vault call.

    A text whose key is gone maps to None; one whose ciphertext fails to
    open (altered) is left out, so using it reports the failure there.
    """
    items = _sealed_texts(events, receipts)
    damaged: set[str] = set()
    try:
        opened = vault.open_many(conversation_id, items, owner_id)
        return {(t, f): text for (t, f, _), text in zip(items, opened, strict=True)}
    except TurnKeyDamagedError as error:
        # Those turns are marked (DAMAGED), the rest opened as usual.
        damaged.update(error.turn_ids)
        items = [item for item in items if item[0] not in damaged]
    except Exception:  # noqa: BLE001 - find the unreadable ones one by one
        pass
    texts: Texts = {(turn_id, DAMAGED): None for turn_id in damaged}
    try:
        opened = vault.open_many(conversation_id, items, owner_id)
        texts.update(
            ((t, f), text) for (t, f, _), text in zip(items, opened, strict=True)
        )
        return texts
    except Exception:  # noqa: BLE001 - find the unreadable ones one by one
        for turn_id, field_name, sealed in items:
            try:
                texts[(turn_id, field_name)] = vault.open_many(
                    conversation_id, [(turn_id, field_name, sealed)], owner_id
                )[0]
            except Exception:  # noqa: BLE001, S112 - reported where it is used
                continue
        return texts


def _sealed_texts(
    events: list[Any], receipts: list[ReceiptToCheck]
) -> list[tuple[str, str, bytes]]:
    """(turn id, field, sealed text) of every turn's texts and each receipt's
    system instructions."""
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
    return items


def turns_of(texts: Texts) -> dict[str, TurnParts]:
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
