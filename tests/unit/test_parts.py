"""The part types: immutable, strictly checked, typed errors naming the field."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import (
    MAX_INLINE_ATTACHMENT_BYTES,
    AssistantText,
    Attachment,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
    decode_parts,
    encode_parts,
    sha256_digest,
)


def image(**overrides: Any) -> Attachment:
    fields: dict[str, Any] = {"media_type": "image/png", "byte_size": 3, "data": b"abc"}
    fields.update(overrides)
    return Attachment(**fields)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: image(media_type="PNG"), "attachment.media_type"),
        (lambda: image(byte_size=-1), "attachment.byte_size"),
        (lambda: image(byte_size=True), "attachment.byte_size"),
        (lambda: image(byte_size=4), "attachment.byte_size"),
        (lambda: image(uri="https://x/y"), "attachment"),
        (lambda: image(data=None), "attachment"),
        (lambda: image(data="abc"), "attachment.data"),
        (lambda: image(digest="sha256:00"), "attachment.digest"),
        (lambda: image(digest=sha256_digest(b"abd")), "attachment.digest"),
        (lambda: image(width=10), "attachment.width"),
        (lambda: image(width=0, height=1), "attachment.width"),
        (
            lambda: image(
                data=bytes(MAX_INLINE_ATTACHMENT_BYTES + 1),
                byte_size=MAX_INLINE_ATTACHMENT_BYTES + 1,
            ),
            "attachment.data",
        ),
        (
            lambda: image(data=None, uri="data:image/png;base64,AAAA"),
            "attachment.uri",
        ),
        (lambda: image(data=None, uri="no scheme"), "attachment.uri"),
        (lambda: ToolCall("c 1", "f", "{}"), "tool_call.call_id"),
        (lambda: ToolCall("c1", "f.g", "{}"), "tool_call.name"),
        (lambda: ToolCall("c1", "f", "{"), "tool_call.arguments"),
        (lambda: ToolCall("c1", "f", "[1]"), "tool_call.arguments"),
        (lambda: ToolResult("c1", "x", is_error=1), "tool_result.is_error"),
        (lambda: ToolResult("c1", "a\x00b"), "tool_result.content"),
        (lambda: AssistantText(" "), "assistant_text.text"),
        (lambda: Refusal(""), "refusal.text"),
        (lambda: TurnParts(question=""), "question"),
        (lambda: TurnParts(question="q", steps=[object()]), "steps[0]"),
        (lambda: TurnParts(question="q", steps="abc"), "steps"),
        (lambda: TurnParts(question="q", attachments=(b"x",)), "attachments[0]"),
        (
            lambda: TurnParts(question="q", steps=(ToolResult("c1", "x"),)),
            "steps[0]",
        ),
        (
            lambda: TurnParts(
                question="q",
                steps=(ToolCall("c1", "f", "{}"), ToolCall("c1", "f", "{}")),
            ),
            "steps[1]",
        ),
        (
            lambda: TurnParts(
                question="q",
                steps=(
                    ToolCall("c1", "f", "{}"),
                    ToolResult("c1", "x"),
                    ToolResult("c1", "x"),
                ),
            ),
            "steps[2]",
        ),
        (
            # A result of an older round: providers pair results with the
            # assistant message just before them.
            lambda: TurnParts(
                question="q",
                steps=(
                    ToolCall("c1", "f", "{}"),
                    ToolCall("c2", "f", "{}"),
                    ToolResult("c1", "x"),
                    AssistantText("meanwhile"),
                    ToolResult("c2", "y"),
                ),
            ),
            "steps[3]",
        ),
    ],
)
def test_bad_parts_raise_a_typed_error_naming_the_field(make: Any, field: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        make()
    assert raised.value.field == field


def test_parts_are_immutable() -> None:
    call = ToolCall("c1", "f", "{}")
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.name = "g"  # type: ignore[misc]
    turn = TurnParts(question="q", steps=[call, ToolResult("c1", "x")], answer="a")
    assert isinstance(turn.steps, tuple)


def test_an_open_call_is_refused_only_when_the_turn_is_confirmed() -> None:
    turn = TurnParts(question="q", steps=(ToolCall("c1", "f", "{}"),))
    assert turn.open_calls == (ToolCall("c1", "f", "{}"),)
    with pytest.raises(InvalidInputError) as raised:
        TurnParts(
            question="q", answer="a", steps=(ToolCall("c1", "f", "{}"),)
        ).check_complete()
    assert raised.value.field == "steps"
    with pytest.raises(InvalidInputError) as raised:
        TurnParts(question="q").check_complete()
    assert raised.value.field == "answer"


def test_text_after_a_call_in_the_same_run_is_allowed() -> None:
    TurnParts(
        question="q",
        answer="a",
        steps=(
            ToolCall("c1", "f", "{}"),
            AssistantText("while it runs"),
            ToolResult("c1", "x"),
        ),
    ).check_complete()


def test_parts_round_trip_through_their_sealed_form() -> None:
    turn = TurnParts(
        question="q 中文",
        answer="a",
        attachments=(
            image(digest=sha256_digest(b"abc"), name="a.png", width=2, height=3),
            Attachment(media_type="application/pdf", byte_size=10, file_id="file-1"),
        ),
        steps=(
            AssistantText("t"),
            Refusal("no"),
            ToolCall("c1", "f", '{ "a" : 1 }'),
            ToolResult("c1", "", is_error=True),
        ),
    )
    assert (
        decode_parts(
            question=turn.question, answer=turn.answer, parts_text=encode_parts(turn)
        )
        == turn
    )
    # Arguments keep their exact text (spaces included).
    assert '{ \\"a\\" : 1 }' in encode_parts(turn)


def test_the_summary_names_parts_without_their_text() -> None:
    turn = TurnParts(
        question="secret question",
        answer="secret answer",
        attachments=(image(),),
        steps=(
            AssistantText("secret"),
            ToolCall("c1", "lookup", '{"q": "secret"}'),
            ToolResult("c1", "secret", is_error=True),
            Refusal("secret"),
        ),
    )
    assert turn.summary() == (
        "image/png; text; call lookup c1; result c1 (error); refusal"
    )
