"""Bodies a provider would refuse, and arguments that must be refused when given.

Each test is a case a provider answered with a 400 (or the service with a
500) before call ids were mapped to wire ids (docs/tools.md, "Call ids on the
wire"), Gemini's responses were put in their calls' order, and a call's
arguments were checked for lone surrogates and depth.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import (
    MAX_ARGUMENT_DEPTH,
    ToolCall,
    ToolResult,
    TurnParts,
)
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.window import WindowTurn, select_window

ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")


def body(wire_format: str, *turns: TurnParts) -> dict[str, Any]:
    window = select_window(
        model="m",
        system="S",
        turns=[WindowTurn.of(f"t{i}", turn) for i, turn in enumerate(turns)],
        question="next?",
        policy=WindowPolicy(wire_format=wire_format, max_bytes=100_000),  # type: ignore[arg-type]
    )
    assert len(window.kept_turn_ids) == len(turns)
    document: dict[str, Any] = json.loads(window.body)
    return document


def tool_turn(call_id: str, name: str = "f", content: str = "ok") -> TurnParts:
    return TurnParts(
        question="q",
        steps=(ToolCall(call_id, name, "{}"), ToolResult(call_id, content)),
        answer="a",
    )


def anthropic_ids(document: dict[str, Any]) -> tuple[list[str], list[str]]:
    uses, results = [], []
    for message in document["messages"]:
        if isinstance(message["content"], str):
            continue
        for block in message["content"]:
            if block["type"] == "tool_use":
                uses.append(block["id"])
            elif block["type"] == "tool_result":
                results.append(block["tool_use_id"])
    return uses, results


def test_an_id_anthropic_refuses_is_sent_as_a_valid_one_paired_with_its_result() -> (
    None
):
    document = body("anthropic-messages", tool_turn("functions.f:0"))
    uses, results = anthropic_ids(document)
    assert len(uses) == 1 and ANTHROPIC_ID.fullmatch(uses[0])
    assert results == uses


def test_an_id_anthropic_accepts_is_sent_unchanged() -> None:
    uses, results = anthropic_ids(body("anthropic-messages", tool_turn("toolu_01A")))
    assert uses == results == ["toolu_01A"]


def test_the_same_id_in_two_turns_is_sent_once_per_request() -> None:
    document = body("anthropic-messages", tool_turn("call_0"), tool_turn("call_0"))
    uses, results = anthropic_ids(document)
    assert len(set(uses)) == 2 and results == uses
    assert uses[0] == "call_0"  # the oldest keeps it: appending changes no byte


@pytest.mark.parametrize("wire_format", ["openai-chat", "openai-responses"])
def test_openai_formats_also_get_unique_ids_per_request(wire_format: str) -> None:
    document = body(wire_format, tool_turn("call_0"), tool_turn("call_0"))
    text = json.dumps(document)
    calls = re.findall(r'"(?:id|call_id|tool_call_id)": "([^"]+)"', text)
    assert len(calls) == 4 and len(set(calls)) == 2


def test_openai_chat_ids_longer_than_40_are_mapped() -> None:
    long_id = "c" * 41
    document = body("openai-chat", tool_turn(long_id))
    [assistant] = [m for m in document["messages"] if m.get("tool_calls")]
    [tool] = [m for m in document["messages"] if m["role"] == "tool"]
    wire = assistant["tool_calls"][0]["id"]
    assert len(wire) <= 40 and tool["tool_call_id"] == wire


def test_gemini_responses_follow_their_calls_order() -> None:
    turn = TurnParts(
        question="q",
        steps=(
            ToolCall("c1", "a", "{}"),
            ToolCall("c2", "b", "{}"),
            ToolResult("c2", "from b"),
            ToolResult("c1", "from a"),
        ),
        answer="done",
    )
    contents = body("gemini-contents", turn)["contents"]
    calls = [p["functionCall"]["name"] for p in contents[1]["parts"]]
    responses = [p["functionResponse"] for p in contents[2]["parts"]]
    assert calls == ["a", "b"]
    assert [r["name"] for r in responses] == ["a", "b"]
    assert [r["response"]["output"] for r in responses] == ["from a", "from b"]


def test_the_wire_ids_of_a_window_are_the_same_each_time() -> None:
    turns = (tool_turn("functions.f:0"), tool_turn("functions.f:0"))
    for wire_format in WIRE_FORMATS:
        assert body(wire_format, *turns) == body(wire_format, *turns)


def test_the_stored_id_is_kept_as_given() -> None:
    turn = tool_turn("functions.f:0")
    assert turn.steps[0] == ToolCall("functions.f:0", "f", "{}")


@pytest.mark.parametrize(
    "arguments",
    [
        '{"x":"\\ud800"}',  # a lone surrogate: no UTF-8 for it
        '{"\\udfff":1}',  # in a key
        '{"a":' * 5_000 + "1" + "}" * 5_000,  # nested 5,000 deep
        '{"a":' * (MAX_ARGUMENT_DEPTH + 1) + "1" + "}" * (MAX_ARGUMENT_DEPTH + 1),
        '{"a":' + "[" * MAX_ARGUMENT_DEPTH + "]" * MAX_ARGUMENT_DEPTH + "}",
    ],
)
def test_arguments_no_body_can_carry_are_refused(arguments: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        ToolCall("c1", "f", arguments)
    assert raised.value.field == "tool_call.arguments"


def test_arguments_at_the_nesting_limit_are_accepted() -> None:
    depth = MAX_ARGUMENT_DEPTH - 1  # the object itself is the first level
    arguments = '{"a":' + "[" * depth + "]" * depth + "}"
    ToolCall("c1", "f", arguments)


def test_an_error_in_a_part_names_the_part_the_client_sent() -> None:
    parts = [
        {"kind": "tool_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"kind": "tool_result", "call_id": "c2", "content": "x"},
    ]
    with pytest.raises(InvalidInputError) as raised:
        TurnParts.from_documents(question="q", answer="a", parts=parts)
    assert raised.value.field == "parts[1]"
    bad = [{"kind": "tool_call", "call_id": "c1", "name": "f", "arguments": "[]"}]
    with pytest.raises(InvalidInputError) as raised:
        TurnParts.from_documents(question="q", answer="a", parts=bad)
    assert raised.value.field == "parts[0].arguments"


def test_an_unanswered_call_names_the_parts_field() -> None:
    parts = [{"kind": "tool_call", "call_id": "c1", "name": "f", "arguments": "{}"}]
    turn = TurnParts.from_documents(question="q", answer="a", parts=parts)
    with pytest.raises(InvalidInputError) as raised:
        turn.check_complete()
    assert raised.value.field == "steps"  # the Python API's own field
