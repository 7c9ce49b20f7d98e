"""The request window of a stored conversation: choose from metadata, read little.

The pure policy lives in `projections/window.py`; this module feeds it from
the aggregate. Each turn's JSON-string sizes and code-point counts were
recorded when it was confirmed, so with the default char/4 counter the whole
choice is made from metadata and only the turns that are sent are read and
decrypted. Text is read before the choice only where it is needed to know a
message's size as sent:

- a message over the per-message token limit (trimming changes its bytes),
- every message, when the counter is a real tokenizer (token counts depend on
  the tokenizer, so they are not recorded).

The walk is bounded by the window, so at most one turn that is not sent (the
one where the walk stops) is decrypted, and only in those two cases.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from uuid import UUID

from turnledger.domain.conversation import Conversation, FoldEntry, TurnEntry
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import (
    CharEstimate,
    TokenCounter,
    char_estimate,
    needs_trim_by_chars,
)
from turnledger.projections.window import (
    DroppedTurns,
    EligibleTurns,
    Frame,
    MessageSize,
    PairCandidate,
    Window,
    WindowPlan,
    WindowTurn,
    build_window,
    frame_request,
    measure_pair,
    plan_in_frame,
    prepare_fold,
    report_dropped,
)

logger = logging.getLogger("turnledger.window")

ReadTexts = Callable[[Sequence[TurnEntry]], dict[str, tuple[str, str]]]
ReadFold = Callable[[FoldEntry], str]


@dataclass(frozen=True, slots=True)
class FoldStatus:
    """Whether the turns after the current fold call for a new one.

    `unfolded_tokens` is the char/4 estimate of the eligible turns after the
    fold, counted from the newest back until the threshold is passed (so it is
    exact when `due` is false, and a lower bound when it is true).
    """

    fold_id: str | None
    covers_through_turn_id: str | None
    unfolded_tokens: int
    threshold_tokens: int
    due: bool


def newest_after_fold(conversation: Conversation) -> Iterator[TurnEntry]:
    """Turns newest first, down to the current fold's last covered turn.

    A lazy walk over the turn index: it costs the turns it reaches, never the
    length of the history.
    """
    fold = conversation.current_fold
    boundary = None if fold is None else fold.covers_through_turn_id
    for entry in reversed(conversation.turns.values()):
        if entry.turn_id == boundary:
            return
        yield entry


def fold_status(conversation: Conversation, threshold_tokens: int) -> FoldStatus:
    fold = conversation.current_fold
    tokens = 0
    for entry in newest_after_fold(conversation):
        if entry.eligible:
            tokens += char_estimate(entry.question_chars)
            tokens += char_estimate(entry.answer_chars)
            if tokens > threshold_tokens:
                break
    return FoldStatus(
        fold_id=None if fold is None else fold.fold_id,
        covers_through_turn_id=None if fold is None else fold.covers_through_turn_id,
        unfolded_tokens=tokens,
        threshold_tokens=threshold_tokens,
        due=tokens > threshold_tokens,
    )


# A cached aggregate may be fast-forwarded by another thread while a query
# walks its turn index; the walk then starts again on the newer state.
_WALK_ATTEMPTS = 3


def window_for(
    conversation: Conversation,
    *,
    question: str,
    system: str,
    model: str,
    policy: WindowPolicy,
    counter: TokenCounter,
    read_texts: ReadTexts,
    read_fold: ReadFold,
) -> Window:
    """The window of `conversation` for `question` under `policy`."""
    for attempt in range(_WALK_ATTEMPTS):
        try:
            window = _window_once(
                conversation,
                question=question,
                system=system,
                model=model,
                policy=policy,
                counter=counter,
                read_texts=read_texts,
                read_fold=read_fold,
            )
        except RuntimeError as error:
            if "changed size" not in str(error) or attempt == _WALK_ATTEMPTS - 1:
                raise
            continue
        _log_if_bounded(conversation.id, window)
        return window
    raise AssertionError("unreachable")


def _window_once(
    conversation: Conversation,
    *,
    question: str,
    system: str,
    model: str,
    policy: WindowPolicy,
    counter: TokenCounter,
    read_texts: ReadTexts,
    read_fold: ReadFold,
) -> Window:
    fold = conversation.current_fold
    prepared = (
        None
        if fold is None
        else prepare_fold(fold.fold_id, read_fold(fold), counter, policy)
    )
    frame = frame_request(
        model=model,
        system=system,
        question=question,
        fold=prepared,
        policy=policy,
        counter=counter,
    )
    from_metadata = isinstance(counter, CharEstimate)
    limit = policy.max_message_tokens
    sent: dict[str, WindowTurn] = {}
    walked: list[TurnEntry] = []
    # One copy of the (immutable) entries: the walk and the listing of
    # dropped ids, which may run later, read the same facts.
    entries = tuple(conversation.turns.values())
    boundary = None if fold is None else fold.covers_through_turn_id

    def candidates() -> Iterator[PairCandidate]:
        for position in range(len(entries) - 1, -1, -1):
            entry = entries[position]
            if entry.turn_id == boundary:
                return
            if not entry.eligible:
                continue
            walked.append(entry)
            if from_metadata and not (
                needs_trim_by_chars(entry.question_chars, limit)
                or needs_trim_by_chars(entry.answer_chars, limit)
            ):
                yield PairCandidate(
                    entry.turn_id,
                    MessageSize(
                        entry.question_json_bytes, char_estimate(entry.question_chars)
                    ),
                    MessageSize(
                        entry.answer_json_bytes, char_estimate(entry.answer_chars)
                    ),
                    position,
                )
                continue
            question_text, answer_text = read_texts([entry])[entry.turn_id]
            candidate, as_sent = measure_pair(
                WindowTurn(entry.turn_id, question_text, answer_text), counter, limit
            )
            sent[entry.turn_id] = as_sent
            yield replace(candidate, position=position)

    plan = plan_in_frame(frame, candidates(), policy)
    kept = len(plan.kept_newest_first)
    kept_entries = walked[:kept][::-1]
    texts = read_texts([entry for entry in kept_entries if entry.turn_id not in sent])
    sent_turns = [
        sent.get(entry.turn_id) or WindowTurn(entry.turn_id, *texts[entry.turn_id])
        for entry in kept_entries
    ]
    return build_window(
        frame=frame,
        plan=plan,
        sent_turns=sent_turns,
        dropped=_dropped(conversation, fold, entries, frame, plan),
        policy=policy,
        counter=counter,
        fold_due=fold_status(conversation, policy.fold_threshold_tokens).due,
    )


def _dropped(
    conversation: Conversation,
    fold: FoldEntry | None,
    entries: tuple[TurnEntry, ...],
    frame: Frame,
    plan: WindowPlan,
) -> DroppedTurns:
    """Spans of dropped turns; their ids are listed from `entries` when asked."""

    def list_ids(first: int, last: int) -> tuple[str, ...]:
        return tuple(e.turn_id for e in entries[first : last + 1] if e.eligible)

    covered = 0 if fold is None else fold.covered_eligible
    # covered_turns counts every turn up to and including the last covered one.
    after = 0 if fold is None else fold.covered_turns
    return report_dropped(
        frame=frame,
        plan=plan,
        after_fold=EligibleTurns(
            conversation.eligible_count - covered,
            first_position=after,
            last_position=len(entries) - 1,
        ),
        fold_covers=None
        if fold is None
        else EligibleTurns(covered, fold.covers_through_turn_id, 0, after - 1),
        list_ids=list_ids,
    )


def _log_if_bounded(conversation_id: UUID, window: Window) -> None:
    """One structured record when anything was left out; never message text."""
    if not window.dropped:
        return
    logger.info(
        "window bounded: %d turns dropped, %d kept, ~%d tokens",
        len(window.dropped),
        len(window.kept_turn_ids),
        window.estimated_tokens,
        extra={
            "event": "window_bounded",
            "conversation_id": str(conversation_id),
            "dropped": len(window.dropped),
            "dropped_by_reason": window.dropped.counts(),
            "kept": len(window.kept_turn_ids),
            "estimated_tokens": window.estimated_tokens,
            "body_bytes": window.byte_length,
            "wire_format": window.wire_format,
            "trimmed": len(window.trimmed),
        },
    )
