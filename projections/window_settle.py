"""A plan's turns once their call ids are wire ids and reasoning goes only to
the model that produced it: the bytes that changes, and the turns it drops."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from turnledger.projections.formats import turn_bytes
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.reasoning import DroppedReasoning, dropped_reasoning
from turnledger.projections.turn_shapes import SentTurn, WireIds
from turnledger.projections.window_plan import WindowPlan
from turnledger.projections.window_turns import (
    OpenedTurn,
    PairCandidate,
    WindowTurn,
    as_pair,
)
from turnledger.projections.wire_ids import request_wire_ids, wire_id_growth


@dataclass(frozen=True, slots=True)
class SettledWindow:
    """A plan, its turns (oldest first) and their wire ids, once settled."""

    plan: WindowPlan
    turns: list[WindowTurn | OpenedTurn]
    wire_ids: Sequence[WireIds]  # of each turn with parts, in order
    dropped_reasoning: tuple[DroppedReasoning, ...] = ()


def settle_wire_ids(
    plan: WindowPlan,
    sent_turns: Sequence[WindowTurn | OpenedTurn],
    policy: WindowPolicy,
    model: str | None = None,
) -> SettledWindow:
    """The plan and its turns (oldest first) once call ids are sent as wire ids
    and reasoning parts only to the `model` that produced them.

    Turns are measured with their stored ids and with the reasoning parts
    their format carries; a body sends each call's wire id (wire_ids.py),
    which is longer or shorter where a stored id does not fit the format or
    is used again, and leaves out the reasoning of another model
    (reasoning.py). The difference is added to the body's bytes, and while it
    breaks the byte limit the oldest kept turn is left out (for "bytes", so
    the window stays a suffix): mapped ids make a window at most one derived
    id per call larger than planned, never over its limit.
    """
    wire_format = policy.wire_format
    turns = list(sent_turns)
    kept = list(plan.kept_newest_first)
    dropped: PairCandidate | None = None
    body_bytes, tokens = plan.body_bytes, plan.history_tokens
    over_budget = plan.floor_over_budget
    while True:
        with_parts = [turn for turn in turns if as_pair(turn) is turn]
        reasoning = [turn for turn in with_parts if _has_reasoning(turn)]
        mapped = request_wire_ids(wire_format, with_parts)
        growth = sum(wire_id_growth(with_parts, mapped))
        growth -= sum(_reasoning_left_out(t, wire_format, model) for t in reasoning)
        if body_bytes + growth <= policy.max_bytes or not turns:
            break
        dropped = kept.pop()  # the oldest: the floor's pairs over budget go first
        turns.pop(0)
        body_bytes -= dropped.bytes_in(wire_format)
        tokens -= dropped.tokens
        over_budget = max(0, over_budget - 1)
    left_out = tuple(
        drop
        for turn in reasoning
        for drop in dropped_reasoning(turn, wire_format, model)
    )
    if dropped is None:
        return SettledWindow(
            replace(plan, body_bytes=body_bytes + growth), turns, mapped, left_out
        )
    settled = replace(
        plan,
        kept_newest_first=tuple(kept),
        stop_reason="bytes",
        stopped_at=dropped.turn_id,
        stopped_position=dropped.position,
        body_bytes=body_bytes + growth,
        history_tokens=tokens,
        floor_over_budget=over_budget,
    )
    return SettledWindow(settled, turns, mapped, left_out)


def _has_reasoning(turn: SentTurn) -> bool:
    return any(step["kind"] == "reasoning" for step in turn.step_documents)


def _reasoning_left_out(turn: SentTurn, wire_format: str, model: str | None) -> int:
    """Bytes of the reasoning its recorded size counts that `model` is not sent."""
    if model is None or not any(
        drop.reason == "other_model"
        for drop in dropped_reasoning(turn, wire_format, model)
    ):
        return 0
    return turn_bytes(wire_format, turn) - turn_bytes(wire_format, turn, model)
