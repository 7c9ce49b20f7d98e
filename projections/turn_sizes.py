"""The sizes the read side keeps of a turn, so windows can plan without reading it."""

from __future__ import annotations

from turnledger.domain.conversation import PartsSizes, TurnSizes
from turnledger.domain.parts import AssistantText, Refusal, ToolResult, TurnParts
from turnledger.domain.text import TextMetrics
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.tokens import CHAR_ESTIMATE
from turnledger.projections.window import WindowTurn, measure_pair


def turn_sizes(turn: TurnParts) -> TurnSizes:
    """Sizes of the turn's texts and, for a turn with parts, of its parts."""
    question, answer = TextMetrics.of(turn.question), TextMetrics.of(turn.answer)
    return TurnSizes(
        question_json_bytes=question.json_bytes,
        answer_json_bytes=answer.json_bytes,
        question_chars=question.chars,
        answer_chars=answer.chars,
        parts=None if turn.text_only else parts_sizes(turn),
    )


def parts_sizes(turn: TurnParts) -> PartsSizes:
    """Measured exactly as a window measures the turn untrimmed (measure_pair)."""
    as_window = WindowTurn.of("t", turn)
    turn_bytes, tokens = [], []
    for wire_format in WIRE_FORMATS:
        candidate, _ = measure_pair(as_window, CHAR_ESTIMATE, None, wire_format)
        assert candidate.steps is not None
        turn_bytes.append(candidate.steps.turn_bytes)
        tokens.append(candidate.steps.tokens)
    trimmable = [
        len(step.content if isinstance(step, ToolResult) else step.text)
        for step in turn.steps
        if isinstance(step, AssistantText | Refusal | ToolResult)
    ]
    return PartsSizes(
        chars=sum(len(text) for text in turn.texts()[1:-1]),
        longest_chars=max(trimmable, default=0),
        turn_bytes=tuple(turn_bytes),
        tokens=tuple(tokens),
    )
