"""Planning a window on sizes alone: the frame that is always sent, then the walk.

`frame_request` measures what every request carries (system, question and
the fold when it fits) and refuses when that alone breaks the byte limit or
the context; `plan_window` walks back from the newest pair and stops at the
first that breaks a limit (see window.py for the rules, in order).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from turnledger.domain.errors import (
    MandatoryInputOverContextError,
    MandatoryInputTooLargeError,
)
from turnledger.projections.dropped import DropReason, FoldDropReason
from turnledger.projections.formats import RequestParts, label_fold, render_body
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import TokenCounter, trim_text
from turnledger.projections.window_parts import FrameBytes, frame_bytes
from turnledger.projections.window_turns import PairCandidate


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """Which pairs fit, decided from sizes alone."""

    kept_newest_first: tuple[PairCandidate, ...]
    stop_reason: DropReason | None
    stopped_at: str | None  # the newest turn left out, if any
    body_bytes: int
    history_tokens: int
    floor_over_budget: int
    stopped_position: int | None = None  # its position, when candidates carry one


def plan_window(
    *,
    candidates_newest_first: Iterable[PairCandidate],
    wire_format: str,
    base_bytes: int,
    max_bytes: int,
    token_budget: int | None,
    max_pairs: int | None,
    floor_pairs: int,
    context_budget: int | None = None,
) -> WindowPlan:
    """Walk back from the newest pair; stop at the first that breaks a limit.

    `base_bytes` is the body without history (system, fold, question).
    `context_budget` is the history's share of the model's context: a hard
    limit like the bytes and the counts. `token_budget` is soft: the first
    `floor_pairs` pairs are kept over it, never over a hard limit. When a
    pair breaks several limits the hard one is reported. The iterable is
    consumed only as far as the walk goes.
    """
    if base_bytes > max_bytes:
        raise MandatoryInputTooLargeError(base_bytes, max_bytes)
    if context_budget is not None and context_budget < 0:
        raise ValueError("the context budget of the history cannot be negative")
    remaining = max_bytes - base_bytes
    tokens = 0
    kept: list[PairCandidate] = []
    over_budget = 0
    stop_reason: DropReason | None = None
    stopped: PairCandidate | None = None
    for candidate in candidates_newest_first:
        with_pair = tokens + candidate.tokens
        if max_pairs is not None and len(kept) >= max_pairs:
            stop_reason = "count"
        elif candidate.bytes_in(wire_format) > remaining:
            stop_reason = "bytes"
        elif context_budget is not None and with_pair > context_budget:
            stop_reason = "context"
        elif token_budget is not None and with_pair > token_budget:
            if len(kept) >= floor_pairs:
                stop_reason = "tokens"
            else:
                over_budget += 1
        if stop_reason is not None:
            stopped = candidate
            break
        kept.append(candidate)
        remaining -= candidate.bytes_in(wire_format)
        tokens = with_pair
    return WindowPlan(
        kept_newest_first=tuple(kept),
        stop_reason=stop_reason,
        stopped_at=None if stopped is None else stopped.turn_id,
        body_bytes=max_bytes - remaining,
        history_tokens=tokens,
        floor_over_budget=over_budget,
        stopped_position=None if stopped is None else stopped.position,
    )


def context_token_budget(policy: WindowPolicy, *, fixed_tokens: int) -> int | None:
    """Tokens of the model's context left for what `fixed_tokens` leaves out.

    With `context_tokens` set, everything sent plus the output reserve must
    fit in it: the result is context - reserve - fixed, negative when the
    fixed part alone does not fit. None when no context is set.
    """
    if policy.context_tokens is None:
        return None
    return policy.context_tokens - policy.reserved_output_tokens - fixed_tokens


@dataclass(frozen=True, slots=True)
class PreparedFold:
    """The fold as it will be sent, if it fits beside the mandatory input."""

    fold_id: str
    text: str  # labelled and trimmed to the fold's budget
    tokens: int
    omitted_tokens: int


def prepare_fold(
    fold_id: str, summary: str, counter: TokenCounter, policy: WindowPolicy
) -> PreparedFold:
    trimmed = trim_text(summary, counter, policy.fold_max_tokens)
    text = label_fold(trimmed.text)
    return PreparedFold(fold_id, text, counter.count(text), trimmed.omitted_tokens)


@dataclass(frozen=True, slots=True)
class Frame:
    """What is always sent, and the byte base the history is added to."""

    parts: RequestParts
    fold: PreparedFold | None  # None when there is none or it did not fit
    fold_id: str | None
    base_bytes: int
    fixed_tokens: int
    # The history's share of the model's context (None: no context set).
    context_budget: int | None = None
    fold_dropped_reason: FoldDropReason | None = None
    # The bytes and tokens of the envelope, system and question.
    sizes: FrameBytes | None = None
    system_tokens: int = 0


def frame_request(
    *,
    model: str,
    system: str,
    question: str,
    fold: PreparedFold | None,
    policy: WindowPolicy,
    counter: TokenCounter,
) -> Frame:
    """System + question (+ the fold when it fits): mandatory or an error.

    System + question must fit the byte limit and, with a context, leave the
    output reserve in it; otherwise MandatoryInputTooLargeError or
    MandatoryInputOverContextError. The fold is sent only when it fits both
    beside them; else it is reported as dropped, with the limit it broke.
    """
    parts = RequestParts(
        model=model,
        system=system,
        question=question,
        max_output_tokens=policy.reserved_output_tokens,
    )
    mandatory = len(render_body(policy.wire_format, parts))
    if mandatory > policy.max_bytes:
        raise MandatoryInputTooLargeError(mandatory, policy.max_bytes)
    system_tokens = counter.count(system)
    fixed_tokens = system_tokens + counter.count(question)
    context_budget = context_token_budget(policy, fixed_tokens=fixed_tokens)
    if context_budget is not None and context_budget < 0:
        assert policy.context_tokens is not None
        raise MandatoryInputOverContextError(
            input_tokens=fixed_tokens,
            reserved_output_tokens=policy.reserved_output_tokens,
            context_tokens=policy.context_tokens,
            token_counter=counter.name,
        )
    bare = Frame(
        parts,
        None,
        None,
        mandatory,
        fixed_tokens,
        context_budget,
        sizes=frame_bytes(policy.wire_format, parts, mandatory),
        system_tokens=system_tokens,
    )
    return bare if fold is None else _with_fold(bare, fold, policy)


def _with_fold(bare: Frame, fold: PreparedFold, policy: WindowPolicy) -> Frame:
    """The frame with the fold sent, or with it reported as dropped."""
    with_fold = replace(bare.parts, fold=fold.text)
    with_fold_bytes = len(render_body(policy.wire_format, with_fold))
    budget = bare.context_budget
    dropped_for: FoldDropReason | None = None
    if with_fold_bytes > policy.max_bytes:
        dropped_for = "bytes"
    elif budget is not None and fold.tokens > budget:
        dropped_for = "context"
    if dropped_for is not None:
        return replace(bare, fold_id=fold.fold_id, fold_dropped_reason=dropped_for)
    return replace(
        bare,
        parts=with_fold,
        fold=fold,
        fold_id=fold.fold_id,
        base_bytes=with_fold_bytes,
        fixed_tokens=bare.fixed_tokens + fold.tokens,
        context_budget=None if budget is None else budget - fold.tokens,
    )


def plan_in_frame(
    frame: Frame,
    candidates_newest_first: Iterable[PairCandidate],
    policy: WindowPolicy,
) -> WindowPlan:
    return plan_window(
        candidates_newest_first=candidates_newest_first,
        wire_format=policy.wire_format,
        base_bytes=frame.base_bytes,
        max_bytes=policy.max_bytes,
        token_budget=policy.max_tokens,
        context_budget=frame.context_budget,
        max_pairs=policy.max_pairs_total,
        floor_pairs=policy.floor_pairs,
    )
