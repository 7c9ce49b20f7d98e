"""The budgeted request window: a pure function of the history and a policy.

The window is the longest contiguous newest suffix of whole eligible turns
(after the fold, if there is one) that obeys every limit of the policy:

1. TRIM   history messages over ``max_message_tokens`` to head + marker + tail;
          the current question is never trimmed.
2. BYTES  the exact UTF-8 length of the body in the chosen wire format never
          exceeds ``max_bytes``; system + question alone over it is an error.
3. COUNT  at most ``max_messages`` history messages and ``max_pairs`` pairs.
4. FLOOR  the newest ``floor_messages`` are kept even over the token budget,
          never over the byte or count limits.
5. TOKENS past the floor, pairs are added while the history stays within
          the token budget.

The walk goes back from the newest turn and stops at the first pair that
breaks a limit: a large recent pair is never skipped to pack an older one, so
the window is always a suffix and the open edge only moves outward.

Selection never serializes candidate suffixes. In every wire format a pair
adds a constant plus the JSON-string sizes of its texts (see formats.py), and
those sizes are recorded when a turn is confirmed; so the walk costs one
addition per pair it keeps, whatever the length of the history, and only the
pairs it keeps need to be decrypted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from turnledger.domain.errors import MandatoryInputTooLargeError
from turnledger.domain.text import json_string_size
from turnledger.projections.formats import (
    RequestParts,
    encode_json,
    label_fold,
    pair_bytes,
    render_body,
)
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import (
    CHAR_ESTIMATE,
    TokenCounter,
    Trimmed,
    trim_text,
)

__all__ = [
    "DropReason",
    "DroppedSpan",
    "DroppedTurn",
    "DroppedTurns",
    "MessageSize",
    "PairCandidate",
    "PreparedFold",
    "TrimmedMessage",
    "Window",
    "WindowFold",
    "WindowPlan",
    "WindowTurn",
    "build_window",
    "encode_json",
    "history_token_budget",
    "mandatory_size",
    "measure_pair",
    "plan_window",
    "prepare_fold",
    "render_request",
    "select_window",
    "turn_cost",
]

DropReason = Literal["bytes", "tokens", "count", "fold"]


@dataclass(frozen=True, slots=True)
class WindowTurn:
    """One confirmed exchange as the window sees it."""

    turn_id: str
    question: str
    answer: str


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
class PairCandidate:
    """A turn the walk may add: the sizes of its two messages as sent."""

    turn_id: str
    question: MessageSize
    answer: MessageSize

    @property
    def tokens(self) -> int:
        return self.question.tokens + self.answer.tokens

    def bytes_in(self, wire_format: str) -> int:
        return pair_bytes(wire_format, self.question.json_bytes, self.answer.json_bytes)


@dataclass(frozen=True, slots=True)
class TrimmedMessage:
    """A history message sent as head + marker + tail."""

    turn_id: str
    part: Literal["question", "answer", "fold"]
    omitted_tokens: int
    sent_tokens: int


@dataclass(frozen=True, slots=True)
class DroppedTurn:
    turn_id: str
    reason: DropReason


@dataclass(frozen=True, slots=True)
class DroppedSpan:
    """`count` contiguous eligible turns left out for one reason.

    The ids are produced on demand: listing every dropped turn of a long
    conversation costs time proportional to its length, which the window
    itself never spends.
    """

    reason: DropReason
    count: int
    newest_turn_id: str | None
    ids: Callable[[], Iterable[str]] = field(repr=False, compare=False)

    def turn_ids(self) -> tuple[str, ...]:
        return tuple(self.ids())


class DroppedTurns:
    """The eligible turns a window left out, oldest first, with reasons."""

    __slots__ = ("_spans",)

    def __init__(self, spans: Iterable[DroppedSpan] = ()) -> None:
        self._spans = tuple(span for span in spans if span.count > 0)

    @property
    def spans(self) -> tuple[DroppedSpan, ...]:
        return self._spans

    def __len__(self) -> int:
        return sum(span.count for span in self._spans)

    def __bool__(self) -> bool:
        return bool(self._spans)

    def __iter__(self) -> Iterator[DroppedTurn]:
        for span in self._spans:
            for turn_id in span.ids():
                yield DroppedTurn(turn_id, span.reason)

    def turn_ids(self) -> tuple[str, ...]:
        return tuple(turn.turn_id for turn in self)

    def counts(self) -> dict[str, int]:
        """Dropped turns per reason."""
        totals: dict[str, int] = {}
        for span in self._spans:
            totals[span.reason] = totals.get(span.reason, 0) + span.count
        return totals

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DroppedTurns):
            return NotImplemented
        return list(self) == list(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"DroppedTurns({self.counts()})"


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

    def report(self, *, with_turn_ids: bool = True) -> dict[str, object]:
        """The report as plain data (no message text), e.g. for JSON output."""
        report: dict[str, object] = {
            "wire_format": self.wire_format,
            "body_bytes": self.byte_length,
            "max_bytes": self.max_bytes,
            "token_counter": self.token_counter,
            "estimated_tokens": self.estimated_tokens,
            "history_tokens": self.history_tokens,
            "kept_turn_ids": list(self.kept_turn_ids),
            "dropped_counts": self.dropped.counts(),
            "trimmed": [
                {
                    "turn_id": item.turn_id,
                    "part": item.part,
                    "omitted_tokens": item.omitted_tokens,
                    "sent_tokens": item.sent_tokens,
                }
                for item in self.trimmed
            ],
            "floor_over_budget": self.floor_over_budget,
            "fold_id": self.fold_id,
            "fold_sent": self.fold_sent,
            "fold_due": self.fold_due,
            "omitted": self.omitted,
        }
        if with_turn_ids:
            report["dropped"] = [
                {"turn_id": turn.turn_id, "reason": turn.reason}
                for turn in self.dropped
            ]
        return report


# Planning ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WindowPlan:
    """Which pairs fit, decided from sizes alone."""

    kept_newest_first: tuple[PairCandidate, ...]
    stop_reason: DropReason | None
    stopped_at: str | None  # the newest turn left out, if any
    body_bytes: int
    history_tokens: int
    floor_over_budget: int


def plan_window(
    *,
    candidates_newest_first: Iterable[PairCandidate],
    wire_format: str,
    base_bytes: int,
    max_bytes: int,
    token_budget: int | None,
    max_pairs: int | None,
    floor_pairs: int,
) -> WindowPlan:
    """Walk back from the newest pair; stop at the first that breaks a limit.

    `base_bytes` is the body without history (system, fold, question). The
    iterable is consumed only as far as the walk goes.
    """
    if base_bytes > max_bytes:
        raise MandatoryInputTooLargeError(base_bytes, max_bytes)
    remaining = max_bytes - base_bytes
    tokens = 0
    kept: list[PairCandidate] = []
    over_budget = 0
    stop_reason: DropReason | None = None
    stopped_at: str | None = None
    for candidate in candidates_newest_first:
        if max_pairs is not None and len(kept) >= max_pairs:
            stop_reason = "count"
        elif candidate.bytes_in(wire_format) > remaining:
            stop_reason = "bytes"
        elif token_budget is not None and tokens + candidate.tokens > token_budget:
            if len(kept) >= floor_pairs:
                stop_reason = "tokens"
            else:
                over_budget += 1
        if stop_reason is not None:
            stopped_at = candidate.turn_id
            break
        kept.append(candidate)
        remaining -= candidate.bytes_in(wire_format)
        tokens += candidate.tokens
    return WindowPlan(
        kept_newest_first=tuple(kept),
        stop_reason=stop_reason,
        stopped_at=stopped_at,
        body_bytes=max_bytes - remaining,
        history_tokens=tokens,
        floor_over_budget=over_budget,
    )


def history_token_budget(policy: WindowPolicy, *, fixed_tokens: int) -> int | None:
    """The history's token budget: the policy's, shrunk to fit the context.

    `fixed_tokens` are the tokens of what is always sent (system, fold and
    question). With a context window, history + fixed + the output reserve
    must fit in it.
    """
    budgets = [] if policy.max_tokens is None else [policy.max_tokens]
    if policy.context_tokens is not None:
        budgets.append(
            max(0, policy.context_tokens - policy.reserved_output_tokens - fixed_tokens)
        )
    return min(budgets) if budgets else None


# Measuring --------------------------------------------------------------------


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
    turn: WindowTurn, counter: TokenCounter, max_message_tokens: int | None
) -> tuple[PairCandidate, WindowTurn]:
    """The candidate for `turn` and the turn as it would be sent (trimmed)."""
    question, question_size = measure_message(
        turn.question, counter, max_message_tokens
    )
    answer, answer_size = measure_message(turn.answer, counter, max_message_tokens)
    return (
        PairCandidate(turn.turn_id, question_size, answer_size),
        WindowTurn(turn.turn_id, question.text, answer.text),
    )


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


def frame_request(
    *,
    model: str,
    system: str,
    question: str,
    fold: PreparedFold | None,
    policy: WindowPolicy,
    counter: TokenCounter,
) -> Frame:
    """System + question (+ the fold when it fits): mandatory or an error."""
    parts = RequestParts(
        model=model,
        system=system,
        question=question,
        max_output_tokens=policy.reserved_output_tokens,
    )
    mandatory = len(render_body(policy.wire_format, parts))
    if mandatory > policy.max_bytes:
        raise MandatoryInputTooLargeError(mandatory, policy.max_bytes)
    fixed_tokens = counter.count(system) + counter.count(question)
    fold_id = None if fold is None else fold.fold_id
    if fold is not None:
        with_fold = RequestParts(
            model=model,
            system=system,
            question=question,
            fold=fold.text,
            max_output_tokens=policy.reserved_output_tokens,
        )
        with_fold_bytes = len(render_body(policy.wire_format, with_fold))
        if with_fold_bytes <= policy.max_bytes:
            return Frame(
                with_fold, fold, fold_id, with_fold_bytes, fixed_tokens + fold.tokens
            )
    return Frame(parts, None, fold_id, mandatory, fixed_tokens)


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
        token_budget=history_token_budget(policy, fixed_tokens=frame.fixed_tokens),
        max_pairs=policy.max_pairs_total,
        floor_pairs=policy.floor_pairs,
    )


def build_window(
    *,
    frame: Frame,
    plan: WindowPlan,
    sent_turns: Sequence[WindowTurn],
    dropped: DroppedTurns,
    policy: WindowPolicy,
    counter: TokenCounter,
    fold_due: bool = False,
) -> Window:
    """Render the planned window. `sent_turns` are the kept turns, oldest first,
    with their texts already trimmed."""
    parts = RequestParts(
        model=frame.parts.model,
        system=frame.parts.system,
        question=frame.parts.question,
        pairs=tuple((turn.question, turn.answer) for turn in sent_turns),
        fold=frame.parts.fold,
        max_output_tokens=frame.parts.max_output_tokens,
    )
    body = render_body(policy.wire_format, parts)
    # The plan counted these bytes from recorded sizes; a mismatch would mean
    # the accounting is wrong, and the budget could be broken silently.
    if len(body) != plan.body_bytes or len(body) > policy.max_bytes:
        raise AssertionError(
            f"window body is {len(body)} bytes, planned {plan.body_bytes}, "
            f"limit {policy.max_bytes}"
        )
    trimmed: list[TrimmedMessage] = []
    if frame.fold is not None and frame.fold.omitted_tokens:
        trimmed.append(
            TrimmedMessage(
                frame.fold.fold_id, "fold", frame.fold.omitted_tokens, frame.fold.tokens
            )
        )
    for candidate in reversed(plan.kept_newest_first):
        for size, part in (
            (candidate.question, "question"),
            (candidate.answer, "answer"),
        ):
            if size.omitted_tokens:
                trimmed.append(
                    TrimmedMessage(
                        candidate.turn_id,
                        "question" if part == "question" else "answer",
                        size.omitted_tokens,
                        size.tokens,
                    )
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
        trimmed=tuple(trimmed),
        floor_over_budget=plan.floor_over_budget,
        fold_id=frame.fold_id,
        fold_sent=frame.fold is not None,
        fold_due=fold_due,
    )


# The whole window from texts in memory -----------------------------------------


def _explicit(ids: Sequence[str]) -> Callable[[], Iterable[str]]:
    return lambda: ids


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
        measure_pair(turn, counter, policy.max_message_tokens)
        for turn in reversed(turns)
    ]
    plan = plan_in_frame(frame, (candidate for candidate, _ in measured), policy)
    kept = len(plan.kept_newest_first)
    sent = [sent_turn for _, sent_turn in measured[:kept]][::-1]
    left_out = [turn.turn_id for turn in turns[: len(turns) - kept]]
    spans = []
    if fold is not None:
        spans.append(
            DroppedSpan(
                "fold",
                len(fold.covered_turn_ids),
                fold.covered_turn_ids[-1] if fold.covered_turn_ids else None,
                _explicit(tuple(fold.covered_turn_ids)),
            )
        )
    if plan.stop_reason is not None:
        spans.append(
            DroppedSpan(
                plan.stop_reason, len(left_out), plan.stopped_at, _explicit(left_out)
            )
        )
    return build_window(
        frame=frame,
        plan=plan,
        sent_turns=sent,
        dropped=DroppedTurns(spans),
        policy=policy,
        counter=counter,
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
