"""Turns with tool calls and attachments, on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import pytest

from tests.conftest import durable_stores
from tests.tool_pairing import pairing_problems
from turnledger.domain.chain import decode_envelope
from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import (
    InvalidInputError,
    TurnConflictError,
    TurnTooLargeError,
)
from turnledger.domain.parts import (
    AssistantText,
    Attachment,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
    sha256_digest,
)
from turnledger.infra.migrations import MIGRATIONS_TABLE
from turnledger.infra.read_side import rebuild_read_side
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.service_layer.export import export_records
from turnledger.infra.service_layer.replay import history_at
from turnledger.infra.settings import Settings
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.window import WindowTurn, select_window

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


# Windows, receipts, deletion and the read side, on every store ------------------


def tool_history(ledger: Conversations) -> uuid.UUID:
    conversation_id = ledger.start_conversation(OWNER)
    ledger.confirm_turn(
        OWNER, conversation_id, turn_id="t1", question="hi", answer="yo"
    )
    ledger.confirm_turn(OWNER, conversation_id, turn_id="t2", parts=WEATHER)
    ledger.record_abandoned_turn(
        OWNER,
        conversation_id,
        turn_id="t3",
        outcome="failed",
        parts=TurnParts(
            question="And Rome?",
            steps=(ToolCall("call_9", "get_weather", '{"city":"Rome"}'),),
        ),
    )
    return conversation_id


@pytest.mark.parametrize("wire_format", WIRE_FORMATS)
def test_windows_send_whole_tool_turns_never_the_abandoned_one_and_audit_clean(
    ledger: Conversations, wire_format: str
) -> None:
    conversation_id = tool_history(ledger)
    policy = WindowPolicy(wire_format=wire_format, max_bytes=100_000)  # type: ignore[arg-type]
    projected = ledger.project_window(
        OWNER, conversation_id, question="Next?", system="sys", model="m", policy=policy
    )
    window = projected.window
    assert window.kept_turn_ids == ("t1", "t2")
    assert pairing_problems(wire_format, window.body) == []
    body = window.body.decode()
    assert "call_1" in body and "call_9" not in body and "Rome" not in body
    # The same bytes as the window over the turns in memory.
    expected = select_window(
        model="m",
        system="sys",
        turns=[
            WindowTurn("t1", "hi", "yo"),
            WindowTurn.of("t2", WEATHER),
        ],
        question="Next?",
        policy=policy,
    )
    assert window.body == expected.body
    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id="t4",
        parts=TurnParts(
            question="Next?",
            steps=(ToolCall("c", "f", "{}"), ToolResult("c", "r")),
            answer="done",
        ),
        window=projected,
    )
    report = Auditor(ledger).audit()
    assert report.ok, report.failures
    assert report.conversation(conversation_id).receipts_verified == 1


def test_a_long_tool_result_is_trimmed_the_arguments_never(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    long_arguments = json.dumps({"text": "x" * 4_000})
    turn = TurnParts(
        question="q",
        steps=(
            ToolCall("c1", "summarize", long_arguments),
            ToolResult("c1", "r" * 4_000),
        ),
        answer="a",
    )
    ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=turn)
    policy = WindowPolicy(max_bytes=100_000, max_message_tokens=100)
    window = ledger.project_window(
        OWNER, conversation_id, question="q2", system="s", model="m", policy=policy
    ).window
    document = json.loads(window.body)
    call = document["messages"][2]["tool_calls"][0]["function"]
    assert call["arguments"] == long_arguments
    result = document["messages"][3]["content"]
    assert "tokens omitted" in result and len(result) < 1_000
    assert [(t.part, t.step) for t in window.trimmed] == [("tool_result", 1)]


def test_deleting_a_tool_turn_destroys_its_parts_and_inline_bytes(
    ledger: Conversations,
) -> None:
    conversation_id = tool_history(ledger)
    rows = ledger.recorder.select_events(conversation_id)
    events = [ledger.mapper.to_domain_event(row) for row in rows]
    (sealed,) = [e.sealed_parts for e in events if getattr(e, "turn_id", "") == "t2"]
    assert sealed is not None
    opened = ledger.vault.open_many(conversation_id, [("t2", "parts", sealed)], OWNER)
    assert opened[0] is not None and "get_weather" in opened[0]
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t2", "t3"])
    items = ledger.get_history(OWNER, conversation_id).items
    assert [item.parts is None for item in items] == [False, True, True]
    # The sealed parts (with the inline image) stay in the log; no key opens them.
    assert ledger.vault.open_many(conversation_id, [("t2", "parts", sealed)]) == [None]
    assert Auditor(ledger).audit().ok


def test_the_rebuilt_read_side_knows_which_turns_have_parts(
    ledger: Conversations,
) -> None:
    conversation_id = tool_history(ledger)
    before = ledger.read_side.turns_by_id(conversation_id, ["t1", "t2", "t3"])
    view = rebuild_read_side(ledger)
    after = ledger.read_side.turns_by_id(conversation_id, ["t1", "t2", "t3"])
    assert after == before
    assert before["t1"].sizes.parts is None  # type: ignore[union-attr]
    assert (
        before["t2"].sizes.parts.chars
        == sum(  # type: ignore[union-attr]
            len(text) for text in WEATHER.texts()[1:-1]
        )
    )
    assert view is not None


@durable_stores
def test_a_store_from_before_parts_gains_the_column_and_keeps_its_turns(
    settings: Settings, open_ledger: Callable[[], Conversations]
) -> None:
    ledger = open_ledger()
    conversation_id = ledger.start_conversation(OWNER)
    ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", question="q", answer="a")
    ledger.close()
    # A store from before parts: no column, and no record of versioned steps.
    drop = "ALTER TABLE {0}conversation_turns DROP COLUMN parts_sizes"
    forget = f"DROP TABLE {{0}}{MIGRATIONS_TABLE}"
    if settings.persistence == "sqlite":
        with sqlite3.connect(settings.sqlite_events_path) as connection:
            connection.execute(drop.format(""))
            connection.execute(forget.format(""))
    else:
        with psycopg.connect(settings.postgres_conninfo()) as connection:
            connection.execute(drop.format(f'"{settings.postgres_schema}".'))
            connection.execute(forget.format(f'"{settings.postgres_schema}".'))
    reopened = open_ledger()
    reopened.confirm_turn(OWNER, conversation_id, turn_id="t2", parts=WEATHER)
    items = reopened.get_history(OWNER, conversation_id).items
    assert [item.parts for item in items] == [
        TurnParts(question="q", answer="a"),
        WEATHER,
    ]
    window = reopened.project_window(
        OWNER, conversation_id, question="n", system="s", model="m", max_bytes=50_000
    ).window
    assert window.kept_turn_ids == ("t1", "t2")
    assert Auditor(reopened).audit().ok


def test_export_and_replay_carry_every_part(ledger: Conversations) -> None:
    conversation_id = tool_history(ledger)
    version = ledger.get_conversation(OWNER, conversation_id).version
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    records = list(export_records(ledger, OWNER, exported_at=datetime.now(UTC)))
    turns = [r for r in records if r["record"] == "turn"]
    assert [t["parts"] is None for t in turns] == [True, False, False]
    assert turns[1]["parts"] == WEATHER.part_documents()
    assert json.loads(json.dumps(turns[1]["parts"])) == turns[1]["parts"]
    past = history_at(ledger, OWNER, conversation_id, version=version)
    assert [item.parts for item in past.items][1:] == [
        WEATHER,
        ledger.get_history(OWNER, conversation_id).items[2].parts,
    ]
    assert past.items[0].parts is None  # deleted since: never brought back


def test_text_only_turns_are_stored_as_before_and_parts_in_one_more_blob(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", question="q", answer="a")
    ledger.confirm_turn(OWNER, conversation_id, turn_id="t2", parts=WEATHER)
    stored = ledger.recorder.select_events(conversation_id)[1:]
    envelopes = [decode_envelope(row.state) for row in stored]
    # No new field, no new class version: readers of the release before
    # parts decode a text-only turn written now, and the reverse.
    assert [sorted(e.blobs) for e in envelopes] == [
        ["sealed_answer", "sealed_question"],
        ["sealed_answer", "sealed_parts", "sealed_question"],
    ]
    assert [e.class_version for e in envelopes] == [2, 2]
    assert b"parts" not in envelopes[0].json


def test_the_turn_limit_counts_step_texts_and_inline_bytes(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    ledger.max_turn_bytes = 100
    over_by_steps = TurnParts(
        question="q" * 10,
        steps=(ToolCall("c1", "f", "{}"), ToolResult("c1", "r" * 85)),
        answer="a" * 5,
    )
    data = bytes(90)
    over_by_bytes = TurnParts(
        question="q" * 10,
        attachments=(Attachment(media_type="image/png", byte_size=90, data=data),),
        answer="a",
    )
    for turn in (over_by_steps, over_by_bytes):
        with pytest.raises(TurnTooLargeError):
            ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=turn)
    assert ledger.get_conversation(OWNER, conversation_id).turn_count == 0
