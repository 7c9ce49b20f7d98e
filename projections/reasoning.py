"""Which reasoning parts a request sends back (domain/parts.py, Reasoning).

A provider's reasoning state is sent back only to what produced it: in the
wire format of its provider (Anthropic's thinking blocks in
anthropic-messages, OpenAI's reasoning items in openai-responses, Gemini's
thought signatures in gemini-contents; OpenAI chat has no place for any) and
to the model whose name it carries. Every other reasoning part is left out
of the body, whole, and reported in the window (`dropped_reasoning`):
providers accept a history without the reasoning of earlier turns (Anthropic
and OpenAI ignore or strip it; Gemini requires signatures only for the
current turn's calls, which a window never holds).

A turn's recorded sizes count the reasoning its format can carry, whatever
the model; a window for another model leaves it out and its body is that
much shorter (projections/window.py, settle_wire_ids).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from turnledger.domain.parts import AssistantStep, Attachment, steps_of
from turnledger.projections.turn_shapes import SentTurn

REASONING_FORMATS = {
    "anthropic": "anthropic-messages",
    "openai": "openai-responses",
    "gemini": "gemini-contents",
}

ReasoningDropReason = Literal["other_format", "other_model", "no_part"]


def drop_reason(
    step: Mapping[str, Any], wire_format: str, model: str | None
) -> ReasoningDropReason | None:
    """Why this reasoning document is not sent (None: it is). With `model`
    None, a reasoning part is sent to every model of its format (the turn's
    recorded size)."""
    if REASONING_FORMATS[step["provider"]] != wire_format:
        return "other_format"
    if model is not None and step["model"] != model:
        return "other_model"
    return None


@dataclass(frozen=True, slots=True)
class DroppedReasoning:
    """A reasoning part a window left out, and why."""

    turn_id: str
    step: int  # its index among the turn's steps
    reason: ReasoningDropReason

    def summary(self) -> dict[str, object]:
        return {"turn_id": self.turn_id, "step": self.step, "reason": self.reason}


def dropped_reasoning(
    turn: SentTurn, wire_format: str, model: str | None
) -> list[DroppedReasoning]:
    """The reasoning parts of `turn` its request leaves out. A Gemini thought
    signature goes on the part after it (a call, a text or the answer): one
    followed by a result or by another signature has no part ("no_part")."""
    documents = turn.step_documents
    reasons: dict[int, ReasoningDropReason | None] = {
        index: drop_reason(step, wire_format, model)
        for index, step in enumerate(documents)
        if step["kind"] == "reasoning"
    }
    dropped = []
    for index, reason in reasons.items():
        if reason is None and documents[index]["provider"] == "gemini":
            following = [
                step
                for at, step in enumerate(documents[index + 1 :], index + 1)
                if reasons.get(at, "sent") is None or step["kind"] != "reasoning"
            ]
            if following and following[0]["kind"] in ("tool_result", "reasoning"):
                reason = "no_part"
        if reason is not None:
            dropped.append(DroppedReasoning(turn.turn_id, index, reason))
    return dropped


@dataclass(frozen=True, slots=True)
class WithoutReasoning:
    """A turn as sent: without the reasoning parts its request leaves out."""

    turn: SentTurn
    step_documents: tuple[Mapping[str, Any], ...]

    @property
    def turn_id(self) -> str:
        return self.turn.turn_id

    @property
    def question(self) -> str:
        return self.turn.question

    @property
    def answer(self) -> str:
        return self.turn.answer

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        return self.turn.attachments

    @property
    def attachment_documents(self) -> Sequence[Mapping[str, Any]]:
        return self.turn.attachment_documents

    @property
    def steps(self) -> tuple[AssistantStep, ...]:
        return steps_of(self.step_documents)


def as_sent(turn: SentTurn, wire_format: str, model: str | None) -> SentTurn:
    """`turn` itself, or without the reasoning parts this request leaves out."""
    documents = turn.step_documents
    if not any(step["kind"] == "reasoning" for step in documents):
        return turn
    kept = tuple(
        step
        for step in documents
        if step["kind"] != "reasoning" or drop_reason(step, wire_format, model) is None
    )
    if len(kept) == len(documents):
        return turn
    return WithoutReasoning(turn, kept)
