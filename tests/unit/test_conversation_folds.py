"""The aggregate's fold events and its count of eligible turns."""

from __future__ import annotations

from turnledger.domain.conversation import Conversation, TurnSizes, TurnStatus

SIZES = TurnSizes(
    question_json_bytes=3, answer_json_bytes=3, question_chars=1, answer_chars=1
)


def conversation_with(*turns: tuple[str, TurnStatus]) -> Conversation:
    conversation = Conversation(owner_id="o")
    for turn_id, status in turns:
        if status is TurnStatus.CONFIRMED:
            conversation.confirm_turn(
                turn_id=turn_id, sealed_question=b"q", sealed_answer=b"a", sizes=SIZES
            )
        else:
            conversation.abandon_turn(
                turn_id=turn_id,
                outcome=status,
                sealed_question=b"q",
                sealed_answer=b"a",
                sizes=SIZES,
            )
    return conversation


def test_the_eligible_count_follows_confirmations_and_deletions() -> None:
    conversation = conversation_with(
        ("c1", TurnStatus.CONFIRMED),
        ("f1", TurnStatus.FAILED),
        ("c2", TurnStatus.CONFIRMED),
    )
    assert conversation.eligible_count == 2
    conversation.delete_history(turn_ids=["c1", "f1"], deleted_by="o")
    assert conversation.eligible_count == 1


def test_an_aggregate_from_an_older_snapshot_counts_on_first_use() -> None:
    conversation = conversation_with(
        ("c1", TurnStatus.CONFIRMED), ("c2", TurnStatus.CONFIRMED)
    )
    del conversation.__dict__["_eligible_count"]
    del conversation.__dict__["folds"]
    assert conversation.eligible_count == 2
    assert conversation.current_fold is None


def test_a_fold_counts_the_eligible_turns_it_covers() -> None:
    conversation = conversation_with(
        ("c1", TurnStatus.CONFIRMED),
        ("s1", TurnStatus.STOPPED),
        ("c2", TurnStatus.CONFIRMED),
    )
    conversation.record_fold(
        fold_id="f",
        covers_through_turn_id="s1",
        sealed_summary=b"x",
        summary_json_bytes=3,
        summary_chars=1,
    )
    fold = conversation.current_fold
    assert fold is not None
    assert (fold.covered_turns, fold.covered_eligible) == (2, 1)


def test_deleting_a_covered_turn_records_the_withdrawal() -> None:
    conversation = conversation_with(
        ("c1", TurnStatus.CONFIRMED), ("c2", TurnStatus.CONFIRMED)
    )
    conversation.record_fold(
        fold_id="f",
        covers_through_turn_id="c1",
        sealed_summary=b"x",
        summary_json_bytes=3,
        summary_chars=1,
    )
    conversation.collect_events()
    conversation.delete_history(turn_ids=["c2"], deleted_by="o")
    assert [type(e).__name__ for e in conversation.collect_events()] == [
        "HistoryDeleted"
    ]
    conversation.delete_history(turn_ids=["c1"], deleted_by="o")
    events = conversation.collect_events()
    assert [type(e).__name__ for e in events] == ["HistoryDeleted", "FoldWithdrawn"]
    assert events[1].fold_ids == ["f"]  # type: ignore[attr-defined]
    assert conversation.current_fold is None
