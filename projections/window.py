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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from turnledger.domain.conversation import TurnSizes
from turnledger.domain.errors import (
    MandatoryInputOverContextError,
    MandatoryInputTooLargeError,
)
from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
    Attachment,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
    TurnParts,
    attachment_of,
    decode_part_documents,
    steps_of,
)
from turnledger.domain.text import json_string_size
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
    WIRE_FORMATS,
    RequestParts,
    encode_json,
    label_fold,
    pair_bytes,
    render_body,
    turn_bytes,
)
from turnledger.projections.media_tokens import file_tokens, image_tokens
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.reasoning import (
    REASONING_FORMATS,
    DroppedReasoning,
    dropped_reasoning,
)
from turnledger.projections.tokens import (
    CHAR_ESTIMATE,
    TokenCounter,
    Trimmed,
    char_estimate,
    needs_trim_by_chars,
    trim_text,
)
from turnledger.projections.turn_shapes import (
    SentTurn,
    WireIds,
    attachment_note,
    sent_as_note,
)
from turnledger.projections.window_parts import (
    FrameBytes,
    PartSize,
    frame_bytes,
    part_sizes,
)
from turnledger.projections.wire_ids import request_wire_ids, wire_id_growth

__all__ = [
    "DROP_REASONS",
    "DropReason",
    "DroppedSpan",
    "DroppedTurn",
    "DroppedTurns",
    "EligibleTurns",
    "FoldDropReason",
    "MessageSize",
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
    "context_token_budget",
    "encode_json",
    "frame_request",
    "mandatory_size",
    "measure_pair",
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
    sizes = frame_bytes(policy.wire_format, parts, mandatory)
    if fold is None:
        return Frame(
            parts,
            None,
            None,
            mandatory,
            fixed_tokens,
            context_budget,
            sizes=sizes,
            system_tokens=system_tokens,
        )
    with_fold = RequestParts(
        model=model,
        system=system,
        question=question,
        fold=fold.text,
        max_output_tokens=policy.reserved_output_tokens,
    )
    with_fold_bytes = len(render_body(policy.wire_format, with_fold))
    dropped_for: FoldDropReason | None = None
    if with_fold_bytes > policy.max_bytes:
        dropped_for = "bytes"
    elif context_budget is not None and fold.tokens > context_budget:
        dropped_for = "context"
    if dropped_for is not None:
        return Frame(
            parts,
            None,
            fold.fold_id,
            mandatory,
            fixed_tokens,
            context_budget,
            fold_dropped_reason=dropped_for,
            sizes=sizes,
            system_tokens=system_tokens,
        )
    return Frame(
        with_fold,
        fold,
        fold.fold_id,
        with_fold_bytes,
        fixed_tokens + fold.tokens,
        None if context_budget is None else context_budget - fold.tokens,
        sizes=sizes,
        system_tokens=system_tokens,
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
        with_parts = [turn for turn in turns if _as_pair(turn) is turn]
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


# The dropped report -------------------------------------------------------------


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
        pairs=tuple(_as_pair(turn) for turn in sent_turns),
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
    trimmed: list[TrimmedMessage] = []
    if frame.fold is not None and frame.fold.omitted_tokens:
        trimmed.append(
            TrimmedMessage(
                frame.fold.fold_id, "fold", frame.fold.omitted_tokens, frame.fold.tokens
            )
        )
    for candidate in reversed(plan.kept_newest_first):
        if candidate.question.omitted_tokens:
            trimmed.append(
                TrimmedMessage(
                    candidate.turn_id,
                    "question",
                    candidate.question.omitted_tokens,
                    candidate.question.tokens,
                )
            )
        if candidate.steps is not None:
            trimmed += candidate.steps.trimmed
        if candidate.answer.omitted_tokens:
            trimmed.append(
                TrimmedMessage(
                    candidate.turn_id,
                    "answer",
                    candidate.answer.omitted_tokens,
                    candidate.answer.tokens,
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
        fold_dropped_reason=frame.fold_dropped_reason,
        dropped_reasoning=dropped_reasoning,
        by_part=_by_part(frame, plan, len(body)),
    )


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


# The whole window from texts in memory -----------------------------------------


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


def _as_pair(turn: WindowTurn | OpenedTurn) -> tuple[str, str] | SentTurn:
    """A text-only turn as its two texts; a turn with parts as itself."""
    if isinstance(turn, OpenedTurn) or turn.attachments or turn.steps:
        return turn
    return (turn.question, turn.answer)


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
