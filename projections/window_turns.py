"""What the window walks over: turns as sent, their measured sizes, the fold.

A `WindowTurn` holds a turn's texts as they are sent (trimmed or not); an
`OpenedTurn` is a turn with parts read straight from its sealed part
documents. A `PairCandidate` is what the planner sees of a turn: the bytes
and tokens of its messages, never their texts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from turnledger.domain.parts import (
    AssistantStep,
    Attachment,
    TurnParts,
    attachment_of,
    decode_part_documents,
    steps_of,
)
from turnledger.projections.formats import pair_bytes
from turnledger.projections.turn_shapes import SentTurn


@dataclass(frozen=True, slots=True)
class WindowTurn:
    """One confirmed exchange as the window sees it (texts as they are sent)."""

    turn_id: str
    question: str
    answer: str
    attachments: tuple[Attachment, ...] = ()
    steps: tuple[AssistantStep, ...] = ()

    @classmethod
    def of(cls, turn_id: str, turn: TurnParts) -> WindowTurn:
        return cls(turn_id, turn.question, turn.answer, turn.attachments, turn.steps)

    @property
    def attachment_documents(self) -> tuple[dict[str, Any], ...]:
        return tuple(attachment.to_document() for attachment in self.attachments)

    @property
    def step_documents(self) -> tuple[dict[str, Any], ...]:
        return tuple(step.to_document() for step in self.steps)


@dataclass(frozen=True, slots=True)
class OpenedTurn:
    """A turn with parts as a window reads it to send it untrimmed: its
    attachments and steps are the part documents its sealed parts were parsed
    to, which the body is written from (turn_shapes.TURN_TEXTS) without making
    their objects (`attachments` and `steps` make them when asked)."""

    turn_id: str
    question: str
    answer: str
    attachment_documents: tuple[Mapping[str, Any], ...]
    step_documents: tuple[Mapping[str, Any], ...]

    @classmethod
    def of(
        cls, turn_id: str, question: str, answer: str, parts_text: str
    ) -> OpenedTurn:
        return cls(turn_id, question, answer, *decode_part_documents(parts_text))

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        return tuple(map(attachment_of, self.attachment_documents))

    @property
    def steps(self) -> tuple[AssistantStep, ...]:
        return steps_of(self.step_documents)


@dataclass(frozen=True, slots=True)
class WindowFold:
    """A summary standing in for every turn up to a given one."""

    fold_id: str
    summary: str
    covered_turn_ids: Sequence[str] = ()  # the eligible turns it replaces


@dataclass(frozen=True, slots=True)
class MessageSize:
    """One history message as it would be sent: JSON bytes and tokens."""

    json_bytes: int
    tokens: int
    omitted_tokens: int = 0


@dataclass(frozen=True, slots=True)
class StepsSize:
    """A turn's attachments and steps as sent in one wire format."""

    wire_format: str
    turn_bytes: int  # the whole turn's bytes in that format
    tokens: int  # of the attachments and steps
    trimmed: tuple[TrimmedMessage, ...] = ()  # tool results and texts cut


@dataclass(frozen=True, slots=True)
class PairCandidate:
    """A turn the walk may add: the sizes of its messages as sent."""

    turn_id: str
    question: MessageSize
    answer: MessageSize
    # Its position in the conversation's turn order (every status counted),
    # when the caller knows it; the dropped report's ranges come from it.
    position: int | None = None
    steps: StepsSize | None = None  # None: a text-only turn

    @property
    def tokens(self) -> int:
        extra = 0 if self.steps is None else self.steps.tokens
        return self.question.tokens + self.answer.tokens + extra

    def bytes_in(self, wire_format: str) -> int:
        if self.steps is None:
            return pair_bytes(
                wire_format, self.question.json_bytes, self.answer.json_bytes
            )
        if self.steps.wire_format != wire_format:
            raise ValueError(
                f"turn {self.turn_id} was measured in {self.steps.wire_format}"
            )
        return self.steps.turn_bytes


@dataclass(frozen=True, slots=True)
class TrimmedMessage:
    """A history message sent as head + marker + tail."""

    turn_id: str
    part: Literal[
        "question", "answer", "fold", "assistant_text", "tool_result", "refusal"
    ]
    omitted_tokens: int
    sent_tokens: int
    step: int | None = None  # the step's index in the turn, for a step

    def summary(self) -> dict[str, object]:
        summary: dict[str, object] = {
            "turn_id": self.turn_id,
            "part": self.part,
            "omitted_tokens": self.omitted_tokens,
            "sent_tokens": self.sent_tokens,
        }
        if self.step is not None:
            summary["step"] = self.step
        return summary


def as_pair(turn: WindowTurn | OpenedTurn) -> tuple[str, str] | SentTurn:
    """A text-only turn as its two texts; a turn with parts as itself."""
    if isinstance(turn, OpenedTurn) or turn.attachments or turn.steps:
        return turn
    return (turn.question, turn.answer)
