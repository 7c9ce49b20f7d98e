"""The budgeted request window: a pure function of the history and a policy.

The window is the longest contiguous newest suffix of whole eligible turns
(after the fold, if there is one) that obeys every limit of the policy:

1. TRIM   history messages over ``max_message_tokens`` to head + marker + tail;
          the current question is never trimmed.
2. BYTES  the exact UTF-8 length of the body in the chosen wire format never
          exceeds ``max_bytes``; system + question alone over it is an error.
3. COUNT  at most ``max_messages`` history messages and ``max_pairs`` pairs.
4. CONTEXT with ``context_tokens`` set, system + fold + history + question +
          the output reserve never exceed it; system + question + reserve
          alone over it is an error.
5. FLOOR  the newest ``floor_messages`` are kept even over the token budget,
          never over the byte, count or context limits.
6. TOKENS past the floor, pairs are added while the history stays within
          the (soft) token budget ``max_tokens``.

The walk goes back from the newest turn and stops at the first pair that
breaks a limit: a large recent pair is never skipped to pack an older one, so
the window is always a suffix and the open edge only moves outward.

Selection never serializes candidate suffixes. In every wire format a pair
adds a constant plus the JSON-string sizes of its texts (see formats.py), and
a turn with tool calls or attachments adds its own messages and one comma
each; both are recorded when a turn is confirmed (a turn with parts: its
bytes in every format), so the walk costs one addition per pair it keeps,
whatever the length of the history, and only the pairs it keeps need to be
decrypted. A turn is always whole: its tool calls go with their results.

The window is built in steps, each in its own module, and this one keeps
the names the rest of the code and its users import:

- window_turns.py   what the walk goes over: turns, their sizes, candidates
- window_measure.py measuring a turn, from its texts or its recorded sizes
- window_plan.py    the frame always sent, then the walk on sizes alone
- window_settle.py  the plan once call ids are wire ids (the bytes that adds)
- window_build.py   the rendered body, the dropped report and `Window`
"""

from __future__ import annotations

from collections.abc import Sequence

from turnledger.projections.dropped import (
    DROP_REASONS,
    DroppedSpan,
    DroppedTurn,
    DroppedTurns,
    DropReason,
    EligibleTurns,
    FoldDropReason,
    TurnIdLister,
    TurnIdsUnavailableError,
)
from turnledger.projections.formats import (
    RequestParts,
    encode_json,
    pair_bytes,
    render_body,
)
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter
from turnledger.projections.window_build import Window, build_window, report_dropped
from turnledger.projections.window_measure import (
    candidate_from_sizes,
    measure_message,
    measure_pair,
    needs_trim,
)
from turnledger.projections.window_plan import (
    Frame,
    PreparedFold,
    WindowPlan,
    context_token_budget,
    frame_request,
    plan_in_frame,
    plan_window,
    prepare_fold,
)
from turnledger.projections.window_settle import SettledWindow, settle_wire_ids
from turnledger.projections.window_turns import (
    MessageSize,
    OpenedTurn,
    PairCandidate,
    StepsSize,
    TrimmedMessage,
    WindowFold,
    WindowTurn,
)

__all__ = [
    "DROP_REASONS",
    "DropReason",
    "DroppedSpan",
    "DroppedTurn",
    "DroppedTurns",
    "EligibleTurns",
    "FoldDropReason",
    "MessageSize",
    "StepsSize",
    "OpenedTurn",
    "PairCandidate",
    "PreparedFold",
    "TrimmedMessage",
    "Window",
    "WindowFold",
    "WindowPlan",
    "WindowTurn",
    "Frame",
    "SettledWindow",
    "TurnIdLister",
    "TurnIdsUnavailableError",
    "build_window",
    "candidate_from_sizes",
    "context_token_budget",
    "encode_json",
    "frame_request",
    "mandatory_size",
    "measure_message",
    "measure_pair",
    "needs_trim",
    "plan_in_frame",
    "plan_window",
    "prepare_fold",
    "render_request",
    "report_dropped",
    "resolve_policy",
    "select_window",
    "settle_wire_ids",
    "turn_cost",
]


def select_window(
    *,
    model: str,
    system: str,
    turns: Sequence[WindowTurn],
    question: str,
    max_bytes: int | None = None,
    policy: WindowPolicy | None = None,
    counter: TokenCounter = CHAR_ESTIMATE,
    fold: WindowFold | None = None,
) -> Window:
    """The request for `question` from eligible `turns` (oldest first).

    With a fold, `turns` are the eligible turns after it. Without a policy the
    window obeys only `max_bytes`. Raises MandatoryInputTooLargeError when
    system + question alone do not fit.
    """
    policy = resolve_policy(policy, max_bytes)
    prepared = (
        None
        if fold is None
        else prepare_fold(fold.fold_id, fold.summary, counter, policy)
    )
    frame = frame_request(
        model=model,
        system=system,
        question=question,
        fold=prepared,
        policy=policy,
        counter=counter,
    )
    measured = [
        measure_pair(turn, counter, policy.max_message_tokens, policy.wire_format)
        for turn in reversed(turns)
    ]
    plan = plan_in_frame(frame, (candidate for candidate, _ in measured), policy)
    kept = len(plan.kept_newest_first)
    settled = settle_wire_ids(
        plan, [sent_turn for _, sent_turn in measured[:kept]][::-1], policy, model
    )
    plan = settled.plan
    dropped = report_dropped(
        frame=frame,
        plan=plan,
        after_fold=EligibleTurns.of_ids([turn.turn_id for turn in turns]),
        fold_covers=None
        if fold is None
        else EligibleTurns.of_ids(fold.covered_turn_ids),
    )
    return build_window(
        frame=frame,
        plan=plan,
        sent_turns=settled.turns,
        dropped=dropped,
        policy=policy,
        counter=counter,
        wire_ids=settled.wire_ids,
        dropped_reasoning=settled.dropped_reasoning,
    )


def resolve_policy(policy: WindowPolicy | None, max_bytes: int | None) -> WindowPolicy:
    """The policy to apply: `max_bytes`, when given, overrides the policy's."""
    if policy is None:
        if max_bytes is None:
            return WindowPolicy()
        return WindowPolicy.bytes_only(max_bytes)
    if max_bytes is not None and max_bytes != policy.max_bytes:
        return WindowPolicy.model_validate(
            {**policy.model_dump(), "max_bytes": max_bytes}
        )
    return policy


# The first window's helpers, kept for callers of the chat-completions case ----


def turn_cost(question_json_bytes: int, answer_json_bytes: int) -> int:
    """Bytes one whole turn adds to a chat-completions body."""
    return pair_bytes("openai-chat", question_json_bytes, answer_json_bytes)


def render_request(
    *, model: str, system: str, turns: Sequence[WindowTurn], question: str
) -> bytes:
    parts = RequestParts(
        model=model,
        system=system,
        question=question,
        pairs=tuple((turn.question, turn.answer) for turn in turns),
    )
    return render_body("openai-chat", parts)


def mandatory_size(*, model: str, system: str, question: str) -> int:
    return len(render_request(model=model, system=system, turns=(), question=question))
