"""Golden bodies: a turn with tool rounds and attachments in each provider's shape.

Each expected body is written out from the provider's documented request
shape (references beside each), and the rendered bytes must equal its
compact JSON exactly, key order included.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.tool_pairing import pairing_problems
from turnledger.domain.parts import (
    AssistantText,
    Attachment,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
)
from turnledger.projections.formats import WIRE_FORMATS, encode_json
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.window import WindowTurn, select_window

PNG = b"\x89PNG\r\n\x1a\n"
PNG_B64 = base64.b64encode(PNG).decode()
PDF_URL = "https://files.example/report.pdf"

TURN = TurnParts(
    question="Weather in Paris and Rome? See photo.",
    attachments=(
        Attachment(media_type="image/png", byte_size=len(PNG), data=PNG),
        Attachment(media_type="application/pdf", byte_size=9000, uri=PDF_URL),
    ),
    steps=(
        AssistantText("Checking both."),
        ToolCall("call_a", "weather", '{"city": "Paris"}'),
        ToolCall("call_b", "weather", '{"city":"Rome"}'),
        ToolResult("call_a", "18C"),
        ToolResult("call_b", "timeout", is_error=True),
        ToolCall("call_c", "weather", '{"city":"Rome","retry":true}'),
        ToolResult("call_c", "22C"),
        Refusal("I won't guess the photo's location."),
    ),
    answer="Paris 18C, Rome 22C.",
)


def render(wire_format: str) -> bytes:
    window = select_window(
        model="m",
        system="S",
        turns=[WindowTurn.of("t1", TURN)],
        question="Thanks!",
        policy=WindowPolicy(wire_format=wire_format, max_bytes=100_000),  # type: ignore[arg-type]
    )
    assert window.kept_turn_ids == ("t1",)
    return window.body


# https://platform.openai.com/docs/api-reference/chat/create (messages:
# user content parts image_url / file, assistant tool_calls and refusal, tool)
OPENAI_CHAT: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "S"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": TURN.question},
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:image/png;base64,{PNG_B64}"},
                },
                {
                    "type": "text",
                    "text": f"[attachment (application/pdf, 9000 bytes): {PDF_URL}]",
                },
            ],
        },
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "timeout"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_c",
                    "type": "function",
                    "function": {
                        "name": "weather",
                        "arguments": '{"city":"Rome","retry":true}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_c", "content": "22C"},
        {
            "role": "assistant",
            "content": None,
            "refusal": "I won't guess the photo's location.",
        },
        {"role": "assistant", "content": "Paris 18C, Rome 22C."},
        {"role": "user", "content": "Thanks!"},
    ],
}

# https://platform.openai.com/docs/api-reference/responses/create (input items:
# input_image / input_file, function_call, function_call_output)
OPENAI_RESPONSES: dict[str, Any] = {
    "model": "m",
    "instructions": "S",
    "input": [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": TURN.question},
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{PNG_B64}",
                    "detail": "auto",
                },
                {"type": "input_file", "file_url": PDF_URL},
            ],
        },
        {"role": "assistant", "content": "Checking both."},
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "weather",
            "arguments": '{"city": "Paris"}',
        },
        {
            "type": "function_call",
            "call_id": "call_b",
            "name": "weather",
            "arguments": '{"city":"Rome"}',
        },
        {"type": "function_call_output", "call_id": "call_a", "output": "18C"},
        {"type": "function_call_output", "call_id": "call_b", "output": "timeout"},
        {
            "type": "function_call",
            "call_id": "call_c",
            "name": "weather",
            "arguments": '{"city":"Rome","retry":true}',
        },
        {"type": "function_call_output", "call_id": "call_c", "output": "22C"},
        {"role": "assistant", "content": "I won't guess the photo's location."},
        {"role": "assistant", "content": "Paris 18C, Rome 22C."},
        {"role": "user", "content": "Thanks!"},
    ],
}

# https://docs.anthropic.com/en/api/messages (content blocks: image and
# document with base64 / url sources, tool_use, tool_result with is_error;
# user and assistant alternate)
ANTHROPIC: dict[str, Any] = {
    "model": "m",
    "max_tokens": 1000,
    "system": "S",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": TURN.question},
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": PNG_B64,
                    },
                },
                {"type": "document", "source": {"type": "url", "url": PDF_URL}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {
                    "type": "tool_use",
                    "id": "call_a",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "call_b",
                    "name": "weather",
                    "input": {"city": "Rome"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "18C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_b",
                    "content": "timeout",
                    "is_error": True,
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_c",
                    "name": "weather",
                    "input": {"city": "Rome", "retry": True},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_c", "content": "22C"}
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I won't guess the photo's location."},
                {"type": "text", "text": "Paris 18C, Rome 22C."},
            ],
        },
        {"role": "user", "content": "Thanks!"},
    ],
}

# https://ai.google.dev/api/generate-content (Content parts: inlineData,
# fileData, functionCall, functionResponse; user and model alternate)
GEMINI: dict[str, Any] = {
    "system_instruction": {"parts": [{"text": "S"}]},
    "contents": [
        {
            "role": "user",
            "parts": [
                {"text": TURN.question},
                {"inlineData": {"mimeType": "image/png", "data": PNG_B64}},
                {"fileData": {"mimeType": "application/pdf", "fileUri": PDF_URL}},
            ],
        },
        {
            "role": "model",
            "parts": [
                {"text": "Checking both."},
                {
                    "functionCall": {
                        "id": "call_a",
                        "name": "weather",
                        "args": {"city": "Paris"},
                    }
                },
                {
                    "functionCall": {
                        "id": "call_b",
                        "name": "weather",
                        "args": {"city": "Rome"},
                    }
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "call_a",
                        "name": "weather",
                        "response": {"output": "18C"},
                    }
                },
                {
                    "functionResponse": {
                        "id": "call_b",
                        "name": "weather",
                        "response": {"error": "timeout"},
                    }
                },
            ],
        },
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {
                        "id": "call_c",
                        "name": "weather",
                        "args": {"city": "Rome", "retry": True},
                    }
                }
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "call_c",
                        "name": "weather",
                        "response": {"output": "22C"},
                    }
                }
            ],
        },
        {
            "role": "model",
            "parts": [
                {"text": "I won't guess the photo's location."},
                {"text": "Paris 18C, Rome 22C."},
            ],
        },
        {"role": "user", "parts": [{"text": "Thanks!"}]},
    ],
}

GOLDEN = {
    "openai-chat": OPENAI_CHAT,
    "openai-responses": OPENAI_RESPONSES,
    "anthropic-messages": ANTHROPIC,
    "gemini-contents": GEMINI,
}


@pytest.mark.parametrize("wire_format", WIRE_FORMATS)
def test_the_body_is_the_documented_shape_byte_for_byte(wire_format: str) -> None:
    body = render(wire_format)
    assert body == encode_json(GOLDEN[wire_format])
    assert pairing_problems(wire_format, body) == []


def test_the_pairing_check_catches_an_orphan_in_every_format() -> None:
    """The checker used by the properties can fail."""
    orphaned = {
        "openai-chat": {
            "model": "m",
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "tool", "tool_call_id": "x", "content": "r"},
                {"role": "user", "content": "q"},
            ],
        },
        "openai-responses": {
            "model": "m",
            "input": [
                {"role": "user", "content": "q"},
                {
                    "type": "function_call",
                    "call_id": "x",
                    "name": "f",
                    "arguments": "{}",
                },
                {"role": "user", "content": "q"},
            ],
        },
        "anthropic-messages": {
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "x", "name": "f", "input": {}}
                    ],
                },
                {"role": "user", "content": "q"},
            ]
        },
        "gemini-contents": {
            "contents": [
                {"role": "user", "parts": [{"text": "q"}]},
                {"role": "user", "parts": [{"text": "q"}]},
            ]
        },
    }
    for wire_format, document in orphaned.items():
        assert pairing_problems(wire_format, encode_json(document)), wire_format
