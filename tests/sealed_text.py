"""Checks that a deleted turn's sealed texts are in the log and unreadable."""

from __future__ import annotations

from uuid import UUID

from turnledger.infra.service_layer.application import Conversations

SEALED_FIELDS = ("question", "answer", "parts")


def assert_sealed_and_unreadable(
    readers: list[Conversations], conversation_id: UUID, turn_ids: list[str]
) -> None:
    """Every turn's question, answer and parts are still in the log, sealed,
    and no reader (this process or a fresh one on the same store) opens them."""
    ledger = readers[0]
    rows = ledger.recorder.select_events(conversation_id)
    events = [ledger.mapper.to_domain_event(row) for row in rows]
    sealed = [
        (event.turn_id, name, getattr(event, f"sealed_{name}"))
        for event in events
        if getattr(event, "turn_id", None) in turn_ids
        for name in SEALED_FIELDS
    ]
    assert len(sealed) == len(turn_ids) * len(SEALED_FIELDS)
    assert all(blob is not None for _, _, blob in sealed)
    for reader in readers:
        assert reader.vault.open_many(conversation_id, sealed) == [None] * len(sealed)
