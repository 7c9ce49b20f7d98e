"""Turns with tool calls and attachments, on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from turnledger.domain.application import Conversations
from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import InvalidInputError, TurnConflictError
from turnledger.domain.parts import (
    AssistantText,
    Attachment,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
    sha256_digest,
)

OWNER = "alice"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))

WEATHER = TurnParts(
    question="What's the weather in Paris? 天气？",
    attachments=(
        Attachment(
            media_type="image/png",
            byte_size=len(PNG),
            data=PNG,
            digest=sha256_digest(PNG),
            width=64,
            height=48,
        ),
        Attachment(
            media_type="application/pdf",
            byte_size=120_000,
            uri="https://files.example/report.pdf",
            name="report.pdf",
        ),
    ),
    steps=(
        AssistantText("Let me look that up."),
        ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
        ToolCall("call_2", "get_time", "{}"),
        ToolResult("call_2", "14:05"),
        ToolResult("call_1", '{"temp_c": 18}'),
        ToolCall("call_3", "get_uv", '{"city":"Paris"}'),
        ToolResult("call_3", "service down", is_error=True),
    ),
    answer="It is 18 °C in Paris at 14:05.",
)


def test_a_turn_with_tools_and_attachments_reads_back_whole(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=WEATHER)
    ledger.confirm_turn(
        OWNER, conversation_id, turn_id="t2", question="hi", answer="hello"
    )
    items = ledger.get_history(OWNER, conversation_id).items
    assert items[0].parts == WEATHER
    assert (items[0].question, items[0].answer) == (WEATHER.question, WEATHER.answer)
    assert items[1].parts == TurnParts(question="hi", answer="hello")


def test_a_retry_with_equal_parts_is_a_no_op_and_different_parts_conflict(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    first = ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=WEATHER)
    again = ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=WEATHER)
    assert again == first
    changed = TurnParts(
        question=WEATHER.question,
        answer=WEATHER.answer,
        attachments=WEATHER.attachments,
        steps=WEATHER.steps[:-1] + (ToolResult("call_3", "ok"),),
    )
    with pytest.raises(TurnConflictError):
        ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=changed)
    with pytest.raises(TurnConflictError):
        # The same texts without the parts are different content too.
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id="t1",
            question=WEATHER.question,
            answer=WEATHER.answer,
        )


def test_an_abandoned_turn_may_end_mid_tool_and_reads_back(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    mid_tool = TurnParts(
        question="Book a table for two",
        steps=(Refusal("Not that one."), ToolCall("c9", "book", '{"party": 2}')),
    )
    receipt = ledger.record_abandoned_turn(
        OWNER, conversation_id, turn_id="t1", outcome="stopped", parts=mid_tool
    )
    assert receipt.status is TurnStatus.STOPPED
    (item,) = ledger.get_history(OWNER, conversation_id).items
    assert item.parts == mid_tool
    assert item.parts.open_calls == (mid_tool.steps[1],)


def test_a_confirmed_turn_must_answer_every_call_and_nothing_is_written(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    mid_tool = TurnParts(
        question="q",
        answer="a",
        steps=(ToolCall("c1", "f", "{}"),),
    )
    with pytest.raises(InvalidInputError) as raised:
        ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=mid_tool)
    assert raised.value.field == "steps"
    with pytest.raises(InvalidInputError) as raised:
        ledger.confirm_turn(
            OWNER, conversation_id, turn_id="t1", parts=mid_tool, question="q"
        )
    assert raised.value.field == "parts"
    assert ledger.get_conversation(OWNER, conversation_id).turn_count == 0
