"""The dropped report is a plain value: spans fixed when the window is made.

A span names its reason, its count, the positions it covers and its newest
turn; ids are explicit, or listed by a function over fixed facts that the
caller supplies. Nothing in a report reads a live aggregate after the call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE
from turnledger.projections.window import (
    DROP_REASONS,
    DroppedSpan,
    DroppedTurn,
    DroppedTurns,
    EligibleTurns,
    MessageSize,
    PairCandidate,
    TurnIdsUnavailableError,
    WindowTurn,
    frame_request,
    plan_in_frame,
    report_dropped,
    select_window,
)

OWNER = "owner"


@pytest.fixture
def ledger() -> Iterator[Conversations]:
    app = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        yield app
    finally:
        app.close()


def limits(max_bytes: int, *, max_pairs: int | None) -> WindowPolicy:
    """Bytes and a pair limit only, validated like any policy."""
    document = WindowPolicy.bytes_only(max_bytes).model_dump()
    return WindowPolicy.model_validate({**document, "max_pairs": max_pairs})


# The value ----------------------------------------------------------------------------


def test_a_span_is_a_frozen_value_without_callables() -> None:
    span = DroppedSpan("bytes", 2, "t2", 4, 9, ["t1", "t2"])  # type: ignore[arg-type]
    assert span.turn_ids == ("t1", "t2")  # a list is kept as a tuple
    with pytest.raises(dataclasses.FrozenInstanceError):
        span.count = 3  # type: ignore[misc]
    for item in dataclasses.fields(span):
        assert not callable(getattr(span, item.name))
    assert span == DroppedSpan("bytes", 2, "t2", 4, 9, ("t1", "t2"))
    assert hash(span) == hash(DroppedSpan("bytes", 2, "t2", 4, 9, ("t1", "t2")))
    assert span.summary() == {
        "reason": "bytes",
        "count": 2,
        "newest_turn_id": "t2",
        "first_position": 4,
        "last_position": 9,
    }


@pytest.mark.parametrize(
    "arguments",
    [
        ("why", 1, "t1"),  # unknown reason
        ("bytes", -1, "t1"),
        ("bytes", 1, "t1", 3, None),  # half a range
        ("bytes", 1, "t1", 5, 2),  # out of order
        ("bytes", 2, "t1", None, None, ("t1",)),  # ids disagree with the count
    ],
)
def test_a_span_refuses_inconsistent_facts(arguments: tuple[object, ...]) -> None:
    with pytest.raises(ValueError):
        DroppedSpan(*arguments)  # type: ignore[arg-type]


def test_every_reason_is_enumerated() -> None:
    assert set(DROP_REASONS) == {
        "bytes",
        "count",
        "context",
        "tokens",
        "fold",
        "fold_dropped",
        "key-damaged",
    }


def test_ranged_spans_are_listed_by_the_lister_the_caller_supplies() -> None:
    # Positions 0..6: t0 t1 x2 t3 t4 x5 t6, where x are turns that are never
    # sent (failed or deleted): a range may hold them, its count does not.
    facts = ("t0", "t1", None, "t3", "t4", None, "t6")

    def list_ids(first: int, last: int) -> tuple[str, ...]:
        return tuple(t for t in facts[first : last + 1] if t is not None)

    spans = [
        DroppedSpan("fold", 2, "x2", 0, 2),
        DroppedSpan("count", 2, "t4", 3, 4),
    ]
    unlisted = DroppedTurns(spans)
    assert len(unlisted) == 4 and unlisted.counts() == {"fold": 2, "count": 2}
    assert not unlisted.listable
    with pytest.raises(TurnIdsUnavailableError):
        list(unlisted)
    assert unlisted.turn_ids(list_ids) == ("t0", "t1", "t3", "t4")
    listed = DroppedTurns(spans, list_ids=list_ids)
    assert listed.listable
    assert list(listed) == [
        DroppedTurn("t0", "fold"),
        DroppedTurn("t1", "fold"),
        DroppedTurn("t3", "count"),
        DroppedTurn("t4", "count"),
    ]
    assert listed == unlisted and hash(listed) == hash(unlisted)  # lister ignored
    resolved = listed.resolved()
    assert [span.turn_ids for span in resolved.spans] == [("t0", "t1"), ("t3", "t4")]
    assert resolved.listable and list(resolved) == list(listed)


def test_a_lister_that_disagrees_with_the_count_is_caught() -> None:
    """A lister reading another version than the window lists other turns."""
    dropped = DroppedTurns(
        [DroppedSpan("tokens", 3, "t3", 1, 3)],
        list_ids=lambda first, last: ("t1", "t3"),  # t2 deleted since
    )
    with pytest.raises(AssertionError, match="dropped 3"):
        dropped.turn_ids()


def test_a_report_without_ids_needs_no_lister() -> None:
    turns = [WindowTurn(f"t{i}", "q" * 8, "a" * 8) for i in range(5)]
    result = select_window(
        model="m",
        system="s",
        turns=turns,
        question="Q?",
        policy=limits(10_000, max_pairs=2),
    )
    report = result.report(with_turn_ids=False)
    assert "dropped" not in report
    assert report["dropped_spans"] == [
        {
            "reason": "count",
            "count": 3,
            "newest_turn_id": "t2",
            "first_position": None,
            "last_position": None,
        }
    ]
    assert result.report()["dropped"] == [
        {"turn_id": f"t{i}", "reason": "count"} for i in range(3)
    ]


# The planner with positions -----------------------------------------------------------


def candidate(turn_id: str, position: int, tokens: int = 5) -> PairCandidate:
    size = MessageSize(json_bytes=4 * tokens + 2, tokens=tokens)
    return PairCandidate(turn_id, size, size, position)


@settings(max_examples=200, deadline=None)
@given(
    statuses=st.lists(st.booleans(), max_size=30),
    fold_through=st.none() | st.integers(0, 29),
    max_pairs=st.none() | st.integers(1, 10),
)
def test_ranged_spans_list_exactly_what_the_window_left_out(
    statuses: list[bool], fold_through: int | None, max_pairs: int | None
) -> None:
    """From positions alone, the report names the same turns as a full scan."""
    ids = [f"t{position}" for position in range(len(statuses))]
    eligible = [ids[p] for p, ok in enumerate(statuses) if ok]
    boundary = -1 if fold_through is None else min(fold_through, len(ids) - 1)
    covered = [ids[p] for p in range(boundary + 1) if statuses[p]]
    after = [(p, ids[p]) for p in range(boundary + 1, len(ids)) if statuses[p]]

    def list_ids(first: int, last: int) -> tuple[str, ...]:
        return tuple(ids[p] for p in range(first, last + 1) if statuses[p])

    policy = limits(100_000, max_pairs=max_pairs)
    frame = frame_request(
        model="m",
        system="s",
        question="q",
        fold=None,
        policy=policy,
        counter=CHAR_ESTIMATE,
    )
    plan = plan_in_frame(
        frame, (candidate(turn_id, p) for p, turn_id in reversed(after)), policy
    )
    dropped = report_dropped(
        frame=frame,
        plan=plan,
        after_fold=EligibleTurns(
            len(after), first_position=boundary + 1, last_position=len(ids) - 1
        ),
        fold_covers=None
        if fold_through is None
        else EligibleTurns(len(covered), ids[boundary] if ids else None, 0, boundary),
        list_ids=list_ids,
    )
    kept = [turn_id for _, turn_id in after][len(after) - len(plan.kept_newest_first) :]
    assert dropped.turn_ids() == tuple(t for t in eligible if t not in kept)
    assert len(dropped) == len(eligible) - len(kept)
    for span in dropped.spans:
        assert span.first_position is not None and span.last_position is not None


# Through the ledger -------------------------------------------------------------------


def confirm(ledger: Conversations, conversation_id: object, *turn_ids: str) -> None:
    for turn_id in turn_ids:
        ledger.confirm_turn(
            OWNER,
            conversation_id,  # type: ignore[arg-type]
            turn_id=turn_id,
            question=f"question {turn_id}",
            answer=f"answer {turn_id}",
        )


def project(ledger: Conversations, conversation_id: object, max_pairs: int):  # type: ignore[no-untyped-def]
    policy = limits(100_000, max_pairs=max_pairs)
    return ledger.project_window(
        OWNER,
        conversation_id,  # type: ignore[arg-type]
        question="now?",
        system="",
        model="m",
        policy=policy,
    ).window


def test_a_report_keeps_what_it_was_after_later_writes(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t0", "t1", "t2", "t3", "t4", "t5")
    first = project(ledger, conversation_id, max_pairs=2)
    assert first.kept_turn_ids == ("t4", "t5")
    [span] = first.dropped.spans
    assert (span.reason, span.count, span.newest_turn_id) == ("count", 4, "t3")
    assert (span.first_position, span.last_position) == (0, 3)
    # Later writes, and a query that fast-forwards the shared aggregate.
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    confirm(ledger, conversation_id, "t6")
    second = project(ledger, conversation_id, max_pairs=2)
    assert second.kept_turn_ids == ("t5", "t6")
    # The first report still names the turns that window left out.
    assert first.dropped_turn_ids == ("t0", "t1", "t2", "t3")
    assert first.report()["dropped"] == [
        {"turn_id": t, "reason": "count"} for t in ("t0", "t1", "t2", "t3")
    ]
    assert second.dropped_turn_ids == ("t0", "t2", "t3", "t4")
    [span] = second.dropped.spans
    assert (span.first_position, span.last_position, span.count) == (0, 4, 4)


def test_ledger_spans_cover_positions_of_every_status(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t0")
    ledger.record_abandoned_turn(
        OWNER,
        conversation_id,
        turn_id="x1",
        question="q",
        outcome="failed",
        partial_answer="",
    )
    confirm(ledger, conversation_id, "t2", "t3", "t4")
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="t2",
        summary="t0 and t2 happened",
        fold_id="f1",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    window = project(ledger, conversation_id, max_pairs=1)
    assert window.kept_turn_ids == ("t4",) and window.fold_sent
    assert [span.summary() for span in window.dropped.spans] == [
        {
            "reason": "fold",
            "count": 2,
            "newest_turn_id": "t2",
            "first_position": 0,
            "last_position": 2,
        },
        {
            "reason": "count",
            "count": 1,
            "newest_turn_id": "t3",
            "first_position": 3,
            "last_position": 3,
        },
    ]
    assert window.dropped_turn_ids == ("t0", "t2", "t3")
    frozen = window.dropped.resolved()
    assert [span.turn_ids for span in frozen.spans] == [("t0", "t2"), ("t3",)]


def _listed(dropped: DroppedTurns) -> Sequence[tuple[str, str]]:
    return [(turn.turn_id, turn.reason) for turn in dropped]


def test_a_fold_over_the_bytes_reports_its_turns_through_the_ledger(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "t0", "t1", "t2")
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="t1",
        summary="s" * 3_000,
        fold_id="f1",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    window = ledger.project_window(
        OWNER,
        conversation_id,
        question="now?",
        system="",
        model="m",
        policy=WindowPolicy.bytes_only(1_000),
    ).window
    assert window.fold_id == "f1" and not window.fold_sent
    assert window.fold_dropped_reason == "bytes"
    assert window.kept_turn_ids == ("t2",)
    assert _listed(window.dropped) == [("t0", "fold_dropped"), ("t1", "fold_dropped")]
    assert window.report()["fold_dropped_reason"] == "bytes"


def test_a_ranged_report_needs_positions_from_the_walk() -> None:
    policy = limits(10_000, max_pairs=1)
    frame = frame_request(
        model="m",
        system="s",
        question="q",
        fold=None,
        policy=policy,
        counter=CHAR_ESTIMATE,
    )
    size = MessageSize(json_bytes=3, tokens=1)
    unpositioned = [PairCandidate("t1", size, size), PairCandidate("t0", size, size)]
    plan = plan_in_frame(frame, unpositioned, policy)
    assert plan.stop_reason == "count" and plan.stopped_position is None
    with pytest.raises(ValueError, match="positions"):
        report_dropped(
            frame=frame,
            plan=plan,
            after_fold=EligibleTurns(2, first_position=0, last_position=1),
        )
    # Without a range the same plan gives a count, and ids only if explicit.
    dropped = report_dropped(frame=frame, plan=plan, after_fold=EligibleTurns(2))
    assert dropped.counts() == {"count": 1} and not dropped.listable
