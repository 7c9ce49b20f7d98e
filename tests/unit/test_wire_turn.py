"""A turn's fields are defined once on the wire (infra/wire/turn.py): the
history, the sync answer and the turn's receipt spell them alike."""

from __future__ import annotations

from pydantic import BaseModel, TypeAdapter

from turnledger.infra.wire.schemas import HistoryItemOut, TurnIn, TurnReceiptOut
from turnledger.infra.wire.sync import TurnRecordedOut

TURN_FIELDS = ("status", "question", "answer", "unreadable", "parts")


def _schema(model: type[BaseModel], name: str) -> object:
    field = model.model_fields[name]
    return (
        TypeAdapter(field.annotation).json_schema(),
        field.description,
        field.default,
    )


def test_history_and_sync_spell_a_turns_fields_alike() -> None:
    for name in TURN_FIELDS:
        assert _schema(HistoryItemOut, name) == _schema(TurnRecordedOut, name), name


def test_every_body_with_a_status_accepts_the_same_statuses() -> None:
    statuses = {
        str(TypeAdapter(model.model_fields["status"].annotation).json_schema())
        for model in (TurnIn, TurnReceiptOut, HistoryItemOut, TurnRecordedOut)
    }
    assert len(statuses) == 1
