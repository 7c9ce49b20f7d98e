"""The textbook window: re-serialize every candidate suffix and measure it.

Quadratic on purpose. It shares no accounting with projections/window.py (only
the rendering of a body and the trim of a text), so it checks that the fast
path's sums, floor and stopping rule produce the very same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from turnledger.domain.errors import (
    MandatoryInputOverContextError,
    MandatoryInputTooLargeError,
    WindowError,
)
from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
)
from turnledger.projections.formats import RequestParts, label_fold, render_body
from turnledger.projections.media_tokens import file_tokens, image_tokens
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import TokenCounter, trim_text
from turnledger.projections.turn_shapes import attachment_note, sent_as_note
from turnledger.projections.window import (
    Window,
    WindowFold,
    WindowTurn,
    select_window,
)


class NaiveWindow(NamedTuple):
    body: bytes
    kept_turn_ids: tuple[str, ...]
    fold_dropped_reason: str | None  # "bytes" or "context" when a fold was not sent


def both_windows(**arguments: Any) -> tuple[Window, NaiveWindow] | None:
    """`select_window` and the reference on the same arguments; None when both
    refuse with the same error (asserted), an AssertionError when only one does."""
    try:
        expected = naive_window(**arguments)
    except WindowError as refused:
        try:
            select_window(**arguments)
        except WindowError as error:
            assert type(error) is type(refused)
            return None
        raise AssertionError(
            "the fast path accepted what the reference refused"
        ) from None
    return select_window(**arguments), expected


def naive_window(
    *,
    model: str,
    system: str,
    turns: Sequence[WindowTurn],
    question: str,
    policy: WindowPolicy,
    counter: TokenCounter,
    fold: WindowFold | None = None,
) -> NaiveWindow:
    """Body, kept turn ids and the fold's fate, trying suffixes longest first.

    A suffix is acceptable when it obeys every hard limit (bytes, counts and,
    with a context, system + fold + history + question + reserve within it)
    and either stays within the soft token budget or is no longer than the
    floor.
    """
    fmt = policy.wire_format

    limit = policy.max_message_tokens

    def body(suffix: Sequence[WindowTurn], fold_text: str | None) -> bytes:
        pairs = [sent_turn(turn, counter, limit) for turn in suffix]
        parts = RequestParts(
            model=model,
            system=system,
            question=question,
            pairs=pairs,
            fold=fold_text,
            max_output_tokens=policy.reserved_output_tokens,
        )
        return render_body(fmt, parts)

    mandatory = len(body([], None))
    if mandatory > policy.max_bytes:
        raise MandatoryInputTooLargeError(mandatory, policy.max_bytes)
    fixed = counter.count(system) + counter.count(question)
    context = policy.context_tokens
    reserve = policy.reserved_output_tokens
    if context is not None and fixed + reserve > context:
        raise MandatoryInputOverContextError(
            input_tokens=fixed,
            reserved_output_tokens=reserve,
            context_tokens=context,
            token_counter=counter.name,
        )
    fold_text = None
    fold_dropped_reason = None
    if fold is not None:
        fold_text = label_fold(
            trim_text(fold.summary, counter, policy.fold_max_tokens).text
        )
        if len(body([], fold_text)) > policy.max_bytes:
            fold_text, fold_dropped_reason = None, "bytes"
        elif context is not None and (
            fixed + counter.count(fold_text) + reserve > context
        ):
            fold_text, fold_dropped_reason = None, "context"
    if fold_text is not None:
        fixed += counter.count(fold_text)
    pair_limit = min(
        [
            n
            for n in (
                policy.max_pairs,
                None if policy.max_messages is None else policy.max_messages // 2,
            )
            if n is not None
        ],
        default=None,
    )
    floor = (policy.floor_messages + 1) // 2
    for start in range(len(turns) + 1):
        suffix = turns[start:]
        candidate = body(suffix, fold_text)
        if len(candidate) > policy.max_bytes:
            continue
        if pair_limit is not None and len(suffix) > pair_limit:
            continue
        tokens = sum(turn_tokens(turn, counter, limit, fmt) for turn in suffix)
        if context is not None and fixed + tokens + reserve > context:
            continue
        if (
            policy.max_tokens is not None
            and tokens > policy.max_tokens
            and len(suffix) > floor
        ):
            continue
        return NaiveWindow(
            candidate, tuple(turn.turn_id for turn in suffix), fold_dropped_reason
        )
    raise AssertionError("the empty suffix always fits")


_REASONING_FORMAT = {
    "anthropic": "anthropic-messages",
    "openai": "openai-responses",
    "gemini": "gemini-contents",
}


def sent_turn(
    turn: WindowTurn, counter: TokenCounter, limit: int | None
) -> tuple[str, str] | WindowTurn:
    """The turn as sent: every text trimmed but the calls' arguments."""

    def cut(text: str) -> str:
        return trim_text(text, counter, limit).text

    if not turn.attachments and not turn.steps:
        return (cut(turn.question), cut(turn.answer))
    steps: list[AssistantStep] = []
    for step in turn.steps:
        if isinstance(step, ToolResult):
            steps.append(ToolResult(step.call_id, cut(step.content), step.is_error))
        elif isinstance(step, AssistantText):
            steps.append(AssistantText(cut(step.text)))
        elif isinstance(step, Refusal):
            steps.append(Refusal(cut(step.text)))
        else:
            steps.append(step)
    return WindowTurn(
        turn.turn_id,
        cut(turn.question),
        cut(turn.answer),
        turn.attachments,
        tuple(steps),
    )


def turn_tokens(
    turn: WindowTurn, counter: TokenCounter, limit: int | None, fmt: str
) -> int:
    """Tokens of the turn as sent: its texts, calls and attachments."""
    sent = sent_turn(turn, counter, limit)
    if isinstance(sent, tuple):
        return counter.count(sent[0]) + counter.count(sent[1])
    tokens = counter.count(sent.question) + counter.count(sent.answer)
    for step in sent.steps:
        if isinstance(step, ToolCall):
            tokens += counter.count(step.name) + counter.count(step.arguments)
        elif isinstance(step, ToolResult):
            tokens += counter.count(step.content)
        elif isinstance(step, Reasoning):
            # Counted where its provider's format carries it (docs/tools.md).
            if _REASONING_FORMAT[step.provider] == fmt:
                tokens += counter.count(step.payload)
        else:
            tokens += counter.count(step.text)
    for attachment in sent.attachments:
        if sent_as_note(fmt, attachment):
            tokens += counter.count(attachment_note(attachment))
        elif attachment.is_image:
            tokens += image_tokens(fmt, attachment)
        else:
            tokens += file_tokens(attachment)
    return tokens
