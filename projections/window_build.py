"""The window itself: the rendered body, what was left out and the report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnledger.projections.dropped import (
    DroppedSpan,
    DroppedTurns,
    EligibleTurns,
    FoldDropReason,
    TurnIdLister,
)
from turnledger.projections.formats import RequestParts, render_body
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.reasoning import DroppedReasoning
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter
from turnledger.projections.turn_shapes import WireIds
from turnledger.projections.window_parts import PartSize, part_sizes
from turnledger.projections.window_plan import Frame, WindowPlan
from turnledger.projections.window_turns import (
    OpenedTurn,
    TrimmedMessage,
    WindowTurn,
    as_pair,
)


@dataclass(frozen=True, slots=True)
class Window:
    """A request body and the report of what went into it."""

    body: bytes
    kept_turn_ids: tuple[str, ...]
    dropped: DroppedTurns
    max_bytes: int
    wire_format: str = "openai-chat"
    token_counter: str = CHAR_ESTIMATE.name
    estimated_tokens: int = 0
    history_tokens: int = 0
    trimmed: tuple[TrimmedMessage, ...] = ()
    floor_over_budget: int = 0  # kept pairs the floor kept past the token budget
    fold_id: str | None = None
    fold_sent: bool = False
    fold_due: bool = False
    # Why the fold (fold_id) was not sent: it broke the byte limit or the
    # context. Its covered turns are then dropped as "fold_dropped".
    fold_dropped_reason: FoldDropReason | None = None
    # Reasoning parts of sent turns left out (another format or model).
    dropped_reasoning: tuple[DroppedReasoning, ...] = ()
    # Bytes and tokens by part of the request (window_parts.py).
    by_part: tuple[PartSize, ...] = ()

    @property
    def byte_length(self) -> int:
        return len(self.body)

    @property
    def dropped_turn_ids(self) -> tuple[str, ...]:
        return self.dropped.turn_ids()

    @property
    def omitted(self) -> bool:
        """True when an eligible turn was not sent as itself."""
        return bool(self.dropped)

    def report(
        self, *, with_turn_ids: bool = True, list_ids: TurnIdLister | None = None
    ) -> dict[str, object]:
        """The report as plain data (no message text), e.g. for JSON output.

        `dropped_spans` says what was left out in constant size; with
        `with_turn_ids` every dropped turn is listed too (`dropped`), which
        needs explicit ids or a lister (here or in `dropped`).
        """
        report: dict[str, object] = {
            "wire_format": self.wire_format,
            "body_bytes": self.byte_length,
            "max_bytes": self.max_bytes,
            "token_counter": self.token_counter,
            "estimated_tokens": self.estimated_tokens,
            "history_tokens": self.history_tokens,
            "kept_turn_ids": list(self.kept_turn_ids),
            "dropped_counts": self.dropped.counts(),
            "dropped_spans": [span.summary() for span in self.dropped.spans],
            "trimmed": [item.summary() for item in self.trimmed],
            "floor_over_budget": self.floor_over_budget,
            "fold_id": self.fold_id,
            "fold_sent": self.fold_sent,
            "fold_dropped_reason": self.fold_dropped_reason,
            "fold_due": self.fold_due,
            "omitted": self.omitted,
            "dropped_reasoning": [d.summary() for d in self.dropped_reasoning],
            "by_part": [part.summary() for part in self.by_part],
        }
        if with_turn_ids:
            report["dropped"] = [
                {"turn_id": turn.turn_id, "reason": turn.reason}
                for turn in self.dropped.turns(list_ids)
            ]
        return report


def report_dropped(
    *,
    frame: Frame,
    plan: WindowPlan,
    after_fold: EligibleTurns,
    fold_covers: EligibleTurns | None = None,
    list_ids: TurnIdLister | None = None,
) -> DroppedTurns:
    """What the window left out, as spans, from the plan and plain facts.

    `after_fold` are the eligible turns the walk could reach (after the
    current fold, or all of them); `fold_covers` the eligible turns the
    current fold covers. Covered turns are dropped as "fold" when the fold
    was sent and as "fold_dropped" when it did not fit. Of `after_fold`, the
    turns older than the kept suffix are dropped for the limit that stopped
    the walk: the span runs from `after_fold.first_position` to the position
    of the pair where the walk stopped. `list_ids` is handed to the result.
    """
    kept = len(plan.kept_newest_first)
    if kept > after_fold.count:
        raise ValueError("the plan kept more turns than the walk could reach")
    spans: list[DroppedSpan] = []
    if fold_covers is not None:
        spans.append(
            DroppedSpan(
                "fold" if frame.fold is not None else "fold_dropped",
                fold_covers.count,
                fold_covers.newest_turn_id,
                fold_covers.first_position,
                fold_covers.last_position,
                fold_covers.turn_ids,
            )
        )
    left_out = after_fold.count - kept
    if plan.stop_reason is not None and left_out > 0:
        ids = after_fold.turn_ids
        has_range = after_fold.first_position is not None
        if has_range and plan.stopped_position is None:
            raise ValueError("a ranged report needs candidates with positions")
        spans.append(
            DroppedSpan(
                plan.stop_reason,
                left_out,
                plan.stopped_at,
                after_fold.first_position if has_range else None,
                plan.stopped_position if has_range else None,
                None if ids is None else ids[:left_out],
            )
        )
    return DroppedTurns(spans, list_ids=list_ids)


def build_window(
    *,
    frame: Frame,
    plan: WindowPlan,
    sent_turns: Sequence[WindowTurn | OpenedTurn],
    dropped: DroppedTurns,
    policy: WindowPolicy,
    counter: TokenCounter,
    fold_due: bool = False,
    wire_ids: Sequence[WireIds] | None = None,
    dropped_reasoning: tuple[DroppedReasoning, ...] = (),
) -> Window:
    """Render the planned window. `sent_turns` are the kept turns, oldest first,
    with their texts already trimmed; `wire_ids` their wire ids when settled
    (settle_wire_ids), else they are worked out again."""
    parts = RequestParts(
        model=frame.parts.model,
        system=frame.parts.system,
        question=frame.parts.question,
        pairs=tuple(as_pair(turn) for turn in sent_turns),
        fold=frame.parts.fold,
        max_output_tokens=frame.parts.max_output_tokens,
        wire_ids=wire_ids,
    )
    body = render_body(policy.wire_format, parts)
    # The plan counted these bytes from recorded sizes; a mismatch would mean
    # the accounting is wrong, and the budget could be broken silently.
    if len(body) != plan.body_bytes or len(body) > policy.max_bytes:
        raise AssertionError(
            f"window body is {len(body)} bytes, planned {plan.body_bytes}, "
            f"limit {policy.max_bytes}"
        )
    return Window(
        body=body,
        kept_turn_ids=tuple(turn.turn_id for turn in sent_turns),
        dropped=dropped,
        max_bytes=policy.max_bytes,
        wire_format=policy.wire_format,
        token_counter=counter.name,
        estimated_tokens=frame.fixed_tokens + plan.history_tokens,
        history_tokens=plan.history_tokens,
        trimmed=_trimmed(frame, plan),
        floor_over_budget=plan.floor_over_budget,
        fold_id=frame.fold_id,
        fold_sent=frame.fold is not None,
        fold_due=fold_due,
        fold_dropped_reason=frame.fold_dropped_reason,
        dropped_reasoning=dropped_reasoning,
        by_part=_by_part(frame, plan, len(body)),
    )


def _trimmed(frame: Frame, plan: WindowPlan) -> tuple[TrimmedMessage, ...]:
    """The messages sent as head + marker + tail, in the body's order."""
    trimmed: list[TrimmedMessage] = []
    fold = frame.fold
    if fold is not None and fold.omitted_tokens:
        trimmed.append(
            TrimmedMessage(fold.fold_id, "fold", fold.omitted_tokens, fold.tokens)
        )
    for candidate in reversed(plan.kept_newest_first):
        turn_id = candidate.turn_id
        question, answer = candidate.question, candidate.answer
        if question.omitted_tokens:
            trimmed.append(
                TrimmedMessage(
                    turn_id, "question", question.omitted_tokens, question.tokens
                )
            )
        if candidate.steps is not None:
            trimmed += candidate.steps.trimmed
        if answer.omitted_tokens:
            trimmed.append(
                TrimmedMessage(turn_id, "answer", answer.omitted_tokens, answer.tokens)
            )
    return tuple(trimmed)


def _by_part(frame: Frame, plan: WindowPlan, body_bytes: int) -> tuple[PartSize, ...]:
    if frame.sizes is None:
        return ()
    fold_tokens = 0 if frame.fold is None else frame.fold.tokens
    return part_sizes(
        frame=frame.sizes,
        base_bytes=frame.base_bytes,
        body_bytes=body_bytes,
        system_tokens=frame.system_tokens,
        fold_tokens=fold_tokens,
        history_tokens=plan.history_tokens,
        question_tokens=frame.fixed_tokens - frame.system_tokens - fold_tokens,
    )
