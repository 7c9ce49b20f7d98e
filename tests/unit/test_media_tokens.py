"""Attachment tokens follow each provider's documented method (docs/tools.md)."""

from __future__ import annotations

import json

import pytest

from turnledger.domain.parts import Attachment, TurnParts
from turnledger.projections.media_tokens import file_tokens, image_tokens
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.window import WindowTurn, select_window


def image(width: int | None, height: int | None) -> Attachment:
    return Attachment(
        media_type="image/png",
        byte_size=10,
        uri="https://files.example/i.png",
        width=width,
        height=height,
    )


@pytest.mark.parametrize(
    ("wire_format", "size", "tokens"),
    [
        # OpenAI's worked examples (vision guide, high detail).
        ("openai-chat", (1024, 1024), 765),
        ("openai-responses", (2048, 4096), 1105),
        ("openai-chat", (4096, 8192), 1105),
        # Anthropic: width x height / 750, the long edge fitted in 1568.
        ("anthropic-messages", (1000, 1000), 1334),
        ("anthropic-messages", (3136, 1568), 1600),
        ("anthropic-messages", (1092, 1092), 1590),
        # Gemini: 258 up to 384 x 384, else 258 a 768 x 768 tile.
        ("gemini-contents", (384, 384), 258),
        ("gemini-contents", (1000, 1000), 1032),
        # Unknown sizes are taken as 1024 x 1024.
        ("openai-chat", (None, None), 765),
        ("anthropic-messages", (None, None), 1399),
        ("gemini-contents", (None, None), 1032),
    ],
)
def test_image_tokens(
    wire_format: str, size: tuple[int | None, int | None], tokens: int
) -> None:
    assert image_tokens(wire_format, image(*size)) == tokens


def test_other_files_are_estimated_at_four_bytes_a_token() -> None:
    pdf = Attachment(media_type="application/pdf", byte_size=10_001, file_id="f")
    assert file_tokens(pdf) == 2_501


def test_a_window_counts_the_image_in_its_tokens() -> None:
    turn = TurnParts(question="q", answer="a", attachments=(image(1000, 1000),))
    windows = {
        wire_format: select_window(
            model="m",
            system="",
            turns=[WindowTurn.of("t1", turn)],
            question="next",
            policy=WindowPolicy(wire_format=wire_format, max_bytes=10_000),  # type: ignore[arg-type]
        )
        for wire_format in ("openai-chat", "anthropic-messages", "gemini-contents")
    }
    # q and a are one token each (char/4); the rest is the image.
    assert {f: w.history_tokens - 2 for f, w in windows.items()} == {
        "openai-chat": 765,
        "anthropic-messages": 1334,
        "gemini-contents": 1032,
    }


def test_anthropic_sends_a_file_it_cannot_take_as_a_text_note() -> None:
    csv = Attachment(
        media_type="text/csv",
        byte_size=42,
        uri="https://files.example/d.csv",
        name="d.csv",
    )
    turn = TurnParts(question="q", answer="a", attachments=(csv,))
    window = select_window(
        model="m",
        system="",
        turns=[WindowTurn.of("t1", turn)],
        question="next",
        policy=WindowPolicy(wire_format="anthropic-messages", max_bytes=10_000),
    )
    user = json.loads(window.body)["messages"][0]["content"]
    assert user == [
        {"type": "text", "text": "q"},
        {
            "type": "text",
            "text": "[attachment d.csv (text/csv, 42 bytes): https://files.example/d.csv]",
        },
    ]
