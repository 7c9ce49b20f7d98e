"""Turns written as JSON text are the serialized documents, byte for byte.

A body holding turns with parts is written as text (turn_shapes.TURN_TEXTS,
formats._render_text) rather than built as documents and serialized, from
the turn's objects or from the documents its sealed parts text parses to (an
OpenedTurn, as a window reads it from the ledger). Over random turns (tool
rounds, refusals, attachments of every kind, hostile text, abandoned turns
with open calls), text-only pairs, folds and systems, in every wire format,
the text must be exactly the compact JSON of the documents the shape
functions build from the turn's objects.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import (
    abandoned_mid_tool,
    hostile_text,
    sendable_text,
    tool_arguments,
    tool_turns,
)
from turnledger.domain.parts import ToolCall, TurnParts, decode_parts, encode_parts
from turnledger.projections import turn_json
from turnledger.projections.formats import (
    WIRE_FORMATS,
    RequestParts,
    encode_json,
    render_body,
    request_document,
)
from turnledger.projections.turn_shapes import (
    TURN_SHAPES,
    TURN_TEXTS,
    arguments_json,
    arguments_json_many,
)
from turnledger.projections.window import OpenedTurn, WindowTurn
from turnledger.projections.wire_ids import derived_id

turns_with_parts = st.one_of(
    tool_turns(with_parts=True), abandoned_mid_tool(), tool_turns(with_parts=False)
)


def opened(turn: TurnParts) -> OpenedTurn:
    """The turn as a window opens it from the ledger."""
    return OpenedTurn.of("t", turn.question, turn.answer, encode_parts(turn))


def as_sent(turn: TurnParts, from_ledger: bool) -> WindowTurn | OpenedTurn:
    return opened(turn) if from_ledger else WindowTurn.of("t", turn)


@settings(max_examples=300, deadline=None)
@given(turn=turns_with_parts, wire_format=st.sampled_from(WIRE_FORMATS))
def test_each_message_is_the_compact_json_of_its_document(
    turn: TurnParts, wire_format: str
) -> None:
    expected = [
        encode_json(m) for m in TURN_SHAPES[wire_format](WindowTurn.of("t", turn))
    ]
    for sent in (WindowTurn.of("t", turn), opened(turn)):
        assert [m.encode() for m in TURN_TEXTS[wire_format](sent)] == expected


@settings(max_examples=150, deadline=None)
@given(turn=turns_with_parts, wire_format=st.sampled_from(WIRE_FORMATS))
def test_with_wire_ids_each_message_is_still_its_document(
    turn: TurnParts, wire_format: str
) -> None:
    """Wire ids (projections/wire_ids.py) go into both renderings alike."""
    calls = [s.call_id for s in turn.steps if isinstance(s, ToolCall)]
    ids = {call: derived_id("t", index) for index, call in enumerate(calls)}
    expected = [
        encode_json(m) for m in TURN_SHAPES[wire_format](WindowTurn.of("t", turn), ids)
    ]
    for sent in (WindowTurn.of("t", turn), opened(turn)):
        assert [
            m.encode() for m in TURN_TEXTS[wire_format](sent, None, ids)
        ] == expected


@settings(max_examples=100, deadline=None)
@given(turn=turns_with_parts)
def test_an_opened_turn_holds_the_turn(turn: TurnParts) -> None:
    sent = opened(turn)
    assert (sent.attachments, sent.steps) == (turn.attachments, turn.steps)
    assert sent.step_documents == WindowTurn.of("t", turn).step_documents
    assert sent.attachment_documents == WindowTurn.of("t", turn).attachment_documents


@pytest.mark.parametrize("wire_format", WIRE_FORMATS)
def test_a_part_of_no_known_kind_is_refused(wire_format: str) -> None:
    parts_text = '[{"kind":"assistant_text","text":"a"},{"kind":"aside","text":"b"}]'
    sent = OpenedTurn.of("t", "q", "a", parts_text)
    with pytest.raises(ValueError, match="aside"):
        TURN_TEXTS[wire_format](sent, None)
    with pytest.raises(ValueError, match="aside"):
        decode_parts(question="q", answer="a", parts_text=parts_text)


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(
        st.one_of(
            st.builds(as_sent, turns_with_parts, st.booleans()),
            st.tuples(sendable_text, sendable_text),
        ),
        max_size=4,
    ),
    system=hostile_text,
    fold=st.none() | hostile_text,
    question=sendable_text,
    model=sendable_text,
    reserve=st.integers(1, 10**6),
    wire_format=st.sampled_from(WIRE_FORMATS),
)
def test_a_body_with_parts_is_its_document_serialized(
    pairs: list[tuple[str, str] | WindowTurn | OpenedTurn],
    system: str,
    fold: str | None,
    question: str,
    model: str,
    reserve: int,
    wire_format: str,
) -> None:
    parts = RequestParts(
        model=model,
        system=system,
        question=question,
        pairs=tuple(pairs),
        fold=fold,
        max_output_tokens=reserve,
    )
    assert render_body(wire_format, parts) == encode_json(
        request_document(wire_format, parts)
    )


@pytest.mark.parametrize(
    "arguments",
    [
        '{"city": "Paris", "units": "metric"}',
        '{"city":"\\u6771\\u4eac","n":1.50,"big":12345678901234567890}',
        '{"a": 1, "a": 2, "nested": {"x": [1e5, -0, true, null]}}',
        '{"esc": "\\/\\"\\\\\\n\\u0001\\u2028"}',
        "{}",
    ],
)
def test_arguments_are_the_object_serialized_again(arguments: str) -> None:
    ToolCall("c", "f", arguments)  # a valid call
    assert arguments_json(arguments).encode() == encode_json(json.loads(arguments))


@settings(max_examples=200, deadline=None)
@given(arguments=st.lists(tool_arguments(), max_size=6))
def test_arguments_serialized_together_are_each_serialized_alone(
    arguments: list[str],
) -> None:
    assert arguments_json_many(arguments) == [arguments_json(a) for a in arguments]


def test_arguments_holding_the_mark_are_serialized_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "\\ud800" (an escape the JSON text may hold, though no provider could
    # take it) parses to the mark the serialized list is split at.
    arguments = ['{"a": 1}', '{"x": [1, "\\ud800", 2]}', "{}"]
    alone = [arguments_json(a) for a in arguments]
    assert alone[1] == '{"x":[1,"\ud800",2]}'
    calls: list[str] = []

    def counted(text: str) -> str:
        calls.append(text)
        return arguments_json(text)

    monkeypatch.setattr(turn_json, "arguments_json", counted)
    assert arguments_json_many(arguments) == alone
    assert calls == arguments
