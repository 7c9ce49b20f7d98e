"""A turn's metadata (`TurnParts.metadata`): what an adapter keeps of its
messages beyond their parts (LangChain's ids, names, response metadata and
system messages). It is sealed and deleted with the turn, counted in its byte
limit, and never sent: a window of a turn with metadata is the same bytes as
without it, and its receipts re-derive in an audit."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import pytest

from tests.conftest import durable_stores
from tests.sealed_text import assert_sealed_and_unreadable
from turnledger.domain.errors import InvalidInputError, TurnTooLargeError
from turnledger.domain.parts import ToolCall, ToolResult, TurnParts
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy

OWNER = "alice"
METADATA = '{"langchain": [{"type": "ai", "id": "run-SECRET-7"}]}'
TOOL_STEPS = (
    ToolCall(call_id="c1", name="get_weather", arguments='{"city":"Oslo"}'),
    ToolResult(call_id="c1", content="18"),
)


def _turns(metadata: str | None) -> list[TurnParts]:
    return [
        TurnParts(question="Hi", answer="Hello", metadata=metadata),
        TurnParts(
            question="Weather?", answer="18 °C", steps=TOOL_STEPS, metadata=metadata
        ),
    ]


def _record(ledger: Conversations, metadata: str | None) -> UUID:
    conversation = ledger.start_conversation(OWNER)
    for index, turn in enumerate(_turns(metadata)):
        ledger.confirm_turn(OWNER, conversation, turn_id=f"t{index}", parts=turn)
    return conversation


def test_metadata_is_never_sent(ledger: Conversations) -> None:
    """The same turns with and without metadata give the same bytes in every
    format (a turn with only metadata is sent as text-only), and the history
    gives the metadata back."""
    with_metadata = _record(ledger, METADATA)
    without = _record(ledger, None)
    for wire_format in WIRE_FORMATS:
        policy = WindowPolicy(wire_format=wire_format)
        bodies = [
            ledger.project_window(
                OWNER, conversation, question="?", system="S", model="m", policy=policy
            ).window.body
            for conversation in (with_metadata, without)
        ]
        assert bodies[0] == bodies[1]
        assert b"SECRET" not in bodies[0]
    items = ledger.get_history(OWNER, with_metadata).items
    assert [item.parts for item in items] == _turns(METADATA)
    # Not a part: HTTP, sync and export (part_documents) do not carry it.
    documents = [i.parts.part_documents() for i in items if i.parts is not None]
    assert "SECRET" not in str(documents)


@durable_stores
def test_metadata_is_sealed_and_deleted_with_its_turn(
    open_ledger: Callable[[], Conversations],
) -> None:
    ledger = open_ledger()
    conversation = _record(ledger, METADATA)
    rows = ledger.recorder.select_events(conversation)
    assert all(b"SECRET" not in row.state for row in rows)
    ledger.delete_history(OWNER, conversation, turn_ids=None)
    assert_sealed_and_unreadable(
        [ledger, open_ledger()],
        conversation,
        ["t0", "t1"],
    )


def test_receipts_of_turns_with_metadata_re_derive_in_an_audit(
    memory_ledger: Conversations,
) -> None:
    conversation = _record(memory_ledger, METADATA)
    for index, wire_format in enumerate(WIRE_FORMATS):
        projected = memory_ledger.project_window(
            OWNER,
            conversation,
            question="Now?",
            system="S",
            model="m",
            policy=WindowPolicy(wire_format=wire_format),
        )
        memory_ledger.confirm_turn(
            OWNER,
            conversation,
            turn_id=f"receipt-{index}",
            parts=TurnParts(question="Now?", answer="Yes", metadata=METADATA),
            window=projected,
        )
    report = Auditor(memory_ledger).audit()
    assert report.ok
    found = report.conversation(conversation)
    assert found.receipts_verified == len(WIRE_FORMATS)


def test_metadata_counts_in_the_turn_byte_limit() -> None:
    ledger = open_conversations(
        Settings(_env_file=None, persistence="memory", max_turn_bytes=200)
    )
    try:
        conversation = ledger.start_conversation(OWNER)
        big = '{"langchain": "' + "x" * 200 + '"}'
        with pytest.raises(TurnTooLargeError):
            ledger.confirm_turn(
                OWNER,
                conversation,
                turn_id="t",
                parts=TurnParts(question="Hi", answer="Hello", metadata=big),
            )
        assert ledger.get_conversation(OWNER, conversation).turn_count == 0
    finally:
        ledger.close()


@pytest.mark.parametrize(
    "metadata",
    ["[1]", "not json", '{"a": NaN}', "{}" + "\ud800", "[" * 100 + "]" * 100],
)
def test_metadata_that_is_no_json_object_is_refused(metadata: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        TurnParts(question="Hi", answer="Hello", metadata=metadata)
    assert refused.value.field == "metadata"
