"""Measuring turns for the walk: from their texts (trimmed as they would be
sent) or, for a turn the read side recorded, from its stored sizes alone."""

from __future__ import annotations

from typing import Literal

from turnledger.domain.conversation import TurnSizes
from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
    Attachment,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
)
from turnledger.domain.text import json_string_size
from turnledger.projections.formats import WIRE_FORMATS, turn_bytes
from turnledger.projections.media_tokens import file_tokens, image_tokens
from turnledger.projections.reasoning import REASONING_FORMATS
from turnledger.projections.tokens import (
    TokenCounter,
    Trimmed,
    char_estimate,
    needs_trim_by_chars,
    trim_text,
)
from turnledger.projections.turn_shapes import attachment_note, sent_as_note
from turnledger.projections.window_turns import (
    MessageSize,
    PairCandidate,
    StepsSize,
    TrimmedMessage,
    WindowTurn,
)


def measure_message(
    text: str, counter: TokenCounter, max_tokens: int | None
) -> tuple[Trimmed, MessageSize]:
    trimmed = trim_text(text, counter, max_tokens)
    return trimmed, MessageSize(
        json_bytes=json_string_size(trimmed.text),
        tokens=trimmed.tokens,
        omitted_tokens=trimmed.omitted_tokens,
    )


def measure_pair(
    turn: WindowTurn,
    counter: TokenCounter,
    max_message_tokens: int | None,
    wire_format: str | None = None,
) -> tuple[PairCandidate, WindowTurn]:
    """The candidate for `turn` and the turn as it would be sent (trimmed).

    A turn with attachments or steps is measured in `wire_format` (its bytes
    and image tokens depend on it). Trimming may cut the question, the answer,
    assistant texts, refusals and tool results, never a call's arguments.
    """
    question, question_size = measure_message(
        turn.question, counter, max_message_tokens
    )
    answer, answer_size = measure_message(turn.answer, counter, max_message_tokens)
    if not turn.attachments and not turn.steps:
        return (
            PairCandidate(turn.turn_id, question_size, answer_size),
            WindowTurn(turn.turn_id, question.text, answer.text),
        )
    if wire_format is None:
        raise ValueError("a turn with parts is measured in a wire format")
    steps, tokens, trimmed = _trim_steps(turn, counter, max_message_tokens, wire_format)
    tokens += sum(
        _attachment_tokens(wire_format, attachment, counter)
        for attachment in turn.attachments
    )
    as_sent = WindowTurn(
        turn.turn_id, question.text, answer.text, turn.attachments, steps
    )
    size = StepsSize(wire_format, turn_bytes(wire_format, as_sent), tokens, trimmed)
    return PairCandidate(turn.turn_id, question_size, answer_size, steps=size), as_sent


_STEP_PARTS: dict[type, Literal["assistant_text", "tool_result", "refusal"]] = {
    AssistantText: "assistant_text",
    ToolResult: "tool_result",
    Refusal: "refusal",
}


def candidate_from_sizes(
    turn_id: str,
    sizes: TurnSizes,
    wire_format: str,
    position: int | None = None,
) -> PairCandidate:
    """The candidate of an untrimmed turn from its recorded sizes (char/4)."""
    question = MessageSize(
        sizes.question_json_bytes, char_estimate(sizes.question_chars)
    )
    answer = MessageSize(sizes.answer_json_bytes, char_estimate(sizes.answer_chars))
    steps = None
    if sizes.parts is not None:
        index = WIRE_FORMATS.index(wire_format)
        steps = StepsSize(
            wire_format, sizes.parts.turn_bytes[index], sizes.parts.tokens[index]
        )
    return PairCandidate(turn_id, question, answer, position, steps)


def needs_trim(sizes: TurnSizes, max_tokens: int | None) -> bool:
    """Whether a trim at `max_tokens` (char/4) would cut any text of the turn."""
    longest = max(
        sizes.question_chars,
        sizes.answer_chars,
        0 if sizes.parts is None else sizes.parts.longest_chars,
    )
    return needs_trim_by_chars(longest, max_tokens)


def _trim_steps(
    turn: WindowTurn, counter: TokenCounter, limit: int | None, wire_format: str
) -> tuple[tuple[AssistantStep, ...], int, tuple[TrimmedMessage, ...]]:
    steps: list[AssistantStep] = []
    tokens = 0
    trimmed: list[TrimmedMessage] = []
    for index, step in enumerate(turn.steps):
        if isinstance(step, Reasoning):
            # Opaque, never cut; counted where its format carries it.
            steps.append(step)
            if REASONING_FORMATS[step.provider] == wire_format:
                tokens += counter.count(step.payload)
            continue
        if isinstance(step, ToolCall):
            # Arguments are never cut: a cut call could not be parsed or run.
            steps.append(step)
            tokens += counter.count(step.name) + counter.count(step.arguments)
            continue
        text = step.content if isinstance(step, ToolResult) else step.text
        cut = trim_text(text, counter, limit)
        tokens += cut.tokens
        if cut.omitted_tokens:
            part = _STEP_PARTS[type(step)]
            trimmed.append(
                TrimmedMessage(
                    turn.turn_id, part, cut.omitted_tokens, cut.tokens, step=index
                )
            )
            step = (
                ToolResult(step.call_id, cut.text, step.is_error)
                if isinstance(step, ToolResult)
                else type(step)(cut.text)
            )
        steps.append(step)
    return tuple(steps), tokens, tuple(trimmed)


def _attachment_tokens(
    wire_format: str, attachment: Attachment, counter: TokenCounter
) -> int:
    if sent_as_note(wire_format, attachment):
        return counter.count(attachment_note(attachment))
    if attachment.is_image:
        return image_tokens(wire_format, attachment)
    return file_tokens(attachment)
