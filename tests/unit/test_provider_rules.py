"""Every window is a request its provider accepts (tests/provider_rules.py).

Random tool conversations whose call ids are reused across turns, invalid for
some provider (``functions.f:0``, ``call@1``, 41 to 128 characters, the
derived form itself), with parallel calls answered in any order and every
provider's reasoning parts (for the window's model "m" or another), go through
the window in all four formats under random byte limits; the body must break
none of the providers' rules, stay within its limit, be a suffix of whole
turns, and come out the same twice.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.provider_rules import violations
from tests.strategies import (
    reasoning_parts,
    sendable_text,
    tool_arguments,
    tool_names,
)
from turnledger.domain.errors import WindowError
from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
)
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.reasoning import REASONING_FORMATS
from turnledger.projections.window import WindowTurn, select_window

# Ids some provider refuses, ids every turn reuses, and the derived form.
AWKWARD_IDS = [
    "call_0",
    "call_1",
    "functions.f:0",
    "functions.f:1",
    "call@1",
    "a",
    "c" * 41,
    "d" * 65,
    "e" * 128,
    "tl_0123456789abcdef01234567",
    "toolu_01A09q90qw90lq917835lq9",
]
call_ids = st.sampled_from(AWKWARD_IDS) | st.from_regex(
    r"[A-Za-z0-9_.:@-]{1,128}", fullmatch=True
)


@st.composite
def rounds(draw: st.DrawFn) -> tuple[AssistantStep, ...]:
    ids = iter(draw(st.lists(call_ids, min_size=9, max_size=9, unique=True)))
    steps: list[AssistantStep] = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            steps.append(draw(reasoning_parts(models=("m", "other-model"))))
        said: list[AssistantStep] = [
            draw(
                st.builds(AssistantText, sendable_text)
                | st.builds(Refusal, sendable_text)
            )
            for _ in range(draw(st.integers(0, 1)))
        ]
        calls = [
            ToolCall(next(ids), draw(tool_names), draw(tool_arguments()))
            for _ in range(draw(st.integers(1, 3)))
        ]
        steps += draw(st.permutations(said + calls))
        steps += [
            ToolResult(call.call_id, draw(sendable_text), draw(st.booleans()))
            for call in draw(st.permutations(calls))
        ]
    return tuple(steps)


@st.composite
def conversations(draw: st.DrawFn) -> list[WindowTurn]:
    turns = []
    for index in range(draw(st.integers(1, 6))):
        turn = TurnParts(
            question=draw(sendable_text),
            answer=draw(sendable_text),
            steps=draw(rounds()),
        )
        turns.append(WindowTurn.of(f"turn-{index}", turn))
    return turns


@settings(max_examples=150, deadline=None)
@given(
    turns=conversations(),
    wire_format=st.sampled_from(WIRE_FORMATS),
    max_bytes=st.integers(200, 12_000),
    question=sendable_text,
)
def test_every_window_keeps_every_provider_rule(
    turns: list[WindowTurn], wire_format: str, max_bytes: int, question: str
) -> None:
    policy = WindowPolicy(wire_format=wire_format, max_bytes=max_bytes)  # type: ignore[arg-type]
    try:
        window = select_window(
            model="m", system="S", turns=turns, question=question, policy=policy
        )
    except WindowError:
        return  # the question alone does not fit
    assert violations(wire_format, window.body) == []
    assert len(window.body) <= max_bytes
    kept = window.kept_turn_ids
    assert kept == tuple(t.turn_id for t in turns[len(turns) - len(kept) :])
    again = select_window(
        model="m", system="S", turns=turns, question=question, policy=policy
    )
    assert again.body == window.body


@settings(max_examples=40, deadline=None)
@given(turns=conversations(), wire_format=st.sampled_from(WIRE_FORMATS))
def test_a_newer_turn_never_changes_the_bytes_of_the_older_ones(
    turns: list[WindowTurn], wire_format: str
) -> None:
    """The oldest call keeps an id, so a window grown by one turn sends the
    turns before it as it did (providers' prompt caches see the same prefix)."""
    policy = WindowPolicy(wire_format=wire_format, max_bytes=1_000_000)  # type: ignore[arg-type]

    key = {"openai-responses": "input", "gemini-contents": "contents"}.get(
        wire_format, "messages"
    )

    def history(count: int) -> list[object]:
        window = select_window(
            model="m", system="S", turns=turns[:count], question="?", policy=policy
        )
        messages: list[object] = json.loads(window.body)[key]
        return messages[:-1]  # without the question

    shorter, longer = history(len(turns) - 1), history(len(turns))
    assert longer[: len(shorter)] == shorter


def test_the_validator_catches_what_the_providers_refuse() -> None:
    """The rules are not vacuous: bodies the providers refuse are caught."""
    duplicate = {
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "functions.f:0",
                        "name": "f",
                        "input": {},
                    }
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "no result"}]},
        ]
    }
    found = violations("anthropic-messages", json.dumps(duplicate).encode())
    assert any(v.startswith("A1") for v in found)
    assert any(v.startswith("A3") for v in found)
    out_of_order = {
        "contents": [
            {"role": "user", "parts": [{"text": "q"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "a", "args": {}}},
                    {"functionCall": {"name": "b", "args": {}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "b", "response": {}}},
                    {"functionResponse": {"name": "a", "response": {}}},
                ],
            },
            {"role": "model", "parts": [{"text": ""}]},
            {"role": "user", "parts": [{"text": "next"}]},
        ]
    }
    found = violations("gemini-contents", json.dumps(out_of_order).encode())
    assert any(v.startswith("G2") for v in found)
    assert any(v.startswith("G4") for v in found)
    long_ids = {
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "x" * 41,
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "x" * 41, "content": "r"},
            {"role": "user", "content": "next"},
        ]
    }
    found = violations("openai-chat", json.dumps(long_ids).encode())
    assert [v[:2] for v in found] == ["C1"]


@settings(max_examples=150, deadline=None)
@given(turns=conversations(), wire_format=st.sampled_from(WIRE_FORMATS))
def test_reasoning_goes_back_only_to_its_provider_and_model_and_is_reported(
    turns: list[WindowTurn], wire_format: str
) -> None:
    policy = WindowPolicy(wire_format=wire_format, max_bytes=1_000_000)  # type: ignore[arg-type]
    window = select_window(
        model="m", system="S", turns=turns, question="?", policy=policy
    )
    body = window.body.decode()
    dropped = {(d.turn_id, d.step): d.reason for d in window.dropped_reasoning}
    for turn in turns:
        for index, step in enumerate(turn.steps):
            if not isinstance(step, Reasoning):
                continue
            reason = dropped.get((turn.turn_id, index))
            if REASONING_FORMATS[step.provider] != wire_format:
                assert reason == "other_format"
            elif step.model != "m":
                assert reason == "other_model"
            elif reason is None:
                payload = json.loads(step.payload)
                sent = (
                    json.dumps(payload["thoughtSignature"])
                    if step.provider == "gemini"
                    else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
                )
                assert sent in body
            else:
                assert reason == "no_part" and step.provider == "gemini"
    reasons = {d.reason for d in window.dropped_reasoning}
    assert reasons <= {"other_format", "other_model", "no_part"}
    assert window.report()["dropped_reasoning"] == [
        d.summary() for d in window.dropped_reasoning
    ]
