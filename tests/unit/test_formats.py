"""Each wire format is the JSON a standard serializer produces for the request."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import hostile_text
from turnledger.domain.text import json_string_size
from turnledger.projections.formats import (
    WIRE_FORMATS,
    RequestParts,
    pair_bytes,
    render_body,
    request_document,
)


def _standard(document: dict[str, Any]) -> bytes:
    # What httpx (and so the OpenAI, Anthropic and Google clients) send.
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


PARTS = RequestParts(
    model="m-1",
    system="Be brief.",
    question="And now? 你好 \U0001f642",
    pairs=(('Q1 "quoted"', "A1\n"), ("Q2 <a&b>", "A2 \u2028")),
    fold="Summary: earlier talk",
    max_output_tokens=512,
)


def test_openai_chat_puts_system_and_fold_inside_messages() -> None:
    expected = {
        "model": "m-1",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "system", "content": "Summary: earlier talk"},
            {"role": "user", "content": 'Q1 "quoted"'},
            {"role": "assistant", "content": "A1\n"},
            {"role": "user", "content": "Q2 <a&b>"},
            {"role": "assistant", "content": "A2 \u2028"},
            {"role": "user", "content": "And now? 你好 \U0001f642"},
        ],
    }
    assert render_body("openai-chat", PARTS) == _standard(expected)


def test_openai_responses_uses_instructions_and_input() -> None:
    expected = {
        "model": "m-1",
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Summary: earlier talk"},
            {"role": "user", "content": 'Q1 "quoted"'},
            {"role": "assistant", "content": "A1\n"},
            {"role": "user", "content": "Q2 <a&b>"},
            {"role": "assistant", "content": "A2 \u2028"},
            {"role": "user", "content": "And now? 你好 \U0001f642"},
        ],
    }
    assert render_body("openai-responses", PARTS) == _standard(expected)


def test_anthropic_messages_has_top_level_system_and_strict_alternation() -> None:
    expected = {
        "model": "m-1",
        "max_tokens": 512,
        "system": [
            {"type": "text", "text": "Be brief."},
            {"type": "text", "text": "Summary: earlier talk"},
        ],
        "messages": [
            {"role": "user", "content": 'Q1 "quoted"'},
            {"role": "assistant", "content": "A1\n"},
            {"role": "user", "content": "Q2 <a&b>"},
            {"role": "assistant", "content": "A2 \u2028"},
            {"role": "user", "content": "And now? 你好 \U0001f642"},
        ],
    }
    assert render_body("anthropic-messages", PARTS) == _standard(expected)
    roles = [
        m["role"] for m in request_document("anthropic-messages", PARTS)["messages"]
    ]
    assert roles == ["user", "assistant"] * 2 + ["user"]


def test_anthropic_without_fold_sends_system_as_a_string_or_not_at_all() -> None:
    bare = RequestParts(model="m", system="S", question="q")
    assert request_document("anthropic-messages", bare)["system"] == "S"
    no_system = RequestParts(model="m", system="", question="q")
    assert "system" not in request_document("anthropic-messages", no_system)


def test_gemini_uses_contents_model_role_and_system_instruction() -> None:
    expected = {
        "system_instruction": {
            "parts": [{"text": "Be brief."}, {"text": "Summary: earlier talk"}]
        },
        "contents": [
            {"role": "user", "parts": [{"text": 'Q1 "quoted"'}]},
            {"role": "model", "parts": [{"text": "A1\n"}]},
            {"role": "user", "parts": [{"text": "Q2 <a&b>"}]},
            {"role": "model", "parts": [{"text": "A2 \u2028"}]},
            {"role": "user", "parts": [{"text": "And now? 你好 \U0001f642"}]},
        ],
    }
    assert render_body("gemini-contents", PARTS) == _standard(expected)


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown wire format"):
        render_body("openai-completions", PARTS)


@settings(max_examples=60, deadline=None)
@given(
    wire_format=st.sampled_from(WIRE_FORMATS),
    system=hostile_text,
    question=hostile_text,
    fold=st.none() | hostile_text,
    pairs=st.lists(st.tuples(hostile_text, hostile_text), max_size=5),
)
def test_body_size_is_the_base_plus_the_recorded_pair_sizes(
    wire_format: str,
    system: str,
    question: str,
    fold: str | None,
    pairs: list[tuple[str, str]],
) -> None:
    """The accounting the window uses equals the bytes of the rendered body."""
    base = RequestParts(model="m", system=system, question=question, fold=fold)
    full = RequestParts(
        model="m", system=system, question=question, fold=fold, pairs=pairs
    )
    expected = len(render_body(wire_format, base)) + sum(
        pair_bytes(wire_format, json_string_size(q), json_string_size(a))
        for q, a in pairs
    )
    body = render_body(wire_format, full)
    assert len(body) == expected
    assert json.loads(body) == request_document(wire_format, full)
