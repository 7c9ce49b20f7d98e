"""The aggregate's rules, checked on the events it records.

The aggregate keeps no per-turn state: the facts a rule needs (does this turn
exist, is it deleted, where is it, which folds are live) are given to the
command, as the application reads them from the read side inside the write.
"""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from turnledger.domain.conversation import (
    Conversation,
    FoldFacts,
    TurnFacts,
    TurnStatus,
)
from turnledger.domain.errors import (
    FoldConflictError,
    TurnConflictError,
    TurnDeletedError,
    TurnNotFoundError,
    VersionConflictError,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)


def started() -> Conversation:
    conversation = Conversation(owner_id="alice", id=uuid4())
    conversation.collect_events()
    return conversation


def confirm(conversation: Conversation, turn_id: str, **kw: object) -> None:
    conversation.confirm_turn(
        turn_id=turn_id,
        sealed_question=b"q",
        sealed_answer=b"a",
        existing=kw.pop("existing", None),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def facts(turn_id: str, position: int, *, deleted: bool = False) -> TurnFacts:
    return TurnFacts(
        turn_id=turn_id,
        position=position,
        status=TurnStatus.CONFIRMED,
        version=position + 2,
        recorded_at=AT,
        deleted_version=99 if deleted else None,
    )


def test_confirming_records_one_event_without_sizes_or_text() -> None:
    conversation = started()
    confirm(conversation, "t1")
    (recorded,) = conversation.collect_events()
    assert isinstance(recorded, Conversation.TurnConfirmed)
    assert recorded.turn_id == "t1" and recorded.originator_version == 2
    assert not hasattr(recorded, "question_json_bytes")
    assert conversation.turn_count == 1


def test_the_state_is_constant_size() -> None:
    conversation = started()
    for index in range(500):
        confirm(conversation, f"t{index}")
    state = {k for k in vars(conversation) if k != "_pending_events"}
    assert state == {
        "_id",
        "_version",
        "_created_on",
        "_modified_on",
        "owner_id",
        "turn_count",
    }


def test_rejected_commands_record_no_event() -> None:
    conversation = started()
    confirm(conversation, "t1")
    conversation.collect_events()
    with pytest.raises(TurnConflictError):
        confirm(conversation, "t1", existing=facts("t1", 0))
    with pytest.raises(TurnDeletedError):
        confirm(conversation, "t1", existing=facts("t1", 0, deleted=True))
    with pytest.raises(VersionConflictError) as raised:
        confirm(conversation, "t2", expected_version=1)
    assert raised.value.current_version == 2
    with pytest.raises(TurnNotFoundError):
        conversation.delete_history(
            requested=["t1", "zz"],
            facts={"t1": facts("t1", 0)},
            live_folds=[],
            deleted_by="alice",
        )
    assert conversation.collect_events() == []
    assert (conversation.version, conversation.turn_count) == (2, 1)


def test_only_failed_or_stopped_turns_are_abandoned() -> None:
    conversation = started()
    conversation.abandon_turn(
        turn_id="t1",
        outcome=TurnStatus.STOPPED,
        sealed_question=b"q",
        sealed_answer=b"",
        existing=None,
    )
    (recorded,) = conversation.collect_events()
    assert isinstance(recorded, Conversation.TurnAbandoned)
    assert recorded.outcome == "stopped"
    with pytest.raises(ValueError, match="failed or stopped"):
        conversation.abandon_turn(
            turn_id="t2",
            outcome=TurnStatus.CONFIRMED,
            sealed_question=b"q",
            sealed_answer=b"",
            existing=None,
        )


def test_deletion_names_each_live_turn_once_and_withdraws_covering_folds() -> None:
    conversation = started()
    known = {
        "t1": facts("t1", 0),
        "t2": facts("t2", 1),
        "t3": facts("t3", 2),
        "t0": facts("t0", 3, deleted=True),
    }
    folds = [
        FoldFacts("f-old", covers_through_position=0, covered_turns=1),
        FoldFacts("f-new", covers_through_position=1, covered_turns=2),
    ]
    deleted = conversation.delete_history(
        requested=["t3", "t2", "t3", "t0"],
        facts=known,
        live_folds=folds,
        deleted_by="dev-1",
    )
    assert deleted == ["t3", "t2"]
    recorded, withdrawn = conversation.collect_events()
    assert isinstance(recorded, Conversation.HistoryDeleted)
    assert (recorded.turn_ids, recorded.whole_history, recorded.deleted_by) == (
        ["t3", "t2"],
        False,
        "dev-1",
    )
    # t2 is at position 1: the fold through position 1 covered it, the one
    # through position 0 did not.
    assert isinstance(withdrawn, Conversation.FoldWithdrawn)
    assert withdrawn.fold_ids == ["f-new"]
    # Nothing left to delete: no event.
    assert (
        conversation.delete_history(
            requested=None,
            facts={"t0": known["t0"]},
            live_folds=[],
            deleted_by="alice",
        )
        == []
    )
    assert conversation.collect_events() == []


def record_fold(conversation: Conversation, **kw: object) -> None:
    arguments: dict[str, object] = {
        "fold_id": "f1",
        "through": facts("t2", 1),
        "covers_through_turn_id": "t2",
        "covered_eligible": 2,
        "current_fold": None,
        "fold_exists": False,
        "deleted_since_summary": [],
        "sealed_summary": b"s",
        "summarized_version": None,
    }
    arguments.update(kw)
    conversation.record_fold(**arguments)  # type: ignore[arg-type]


def test_a_fold_covers_whole_turns_and_never_fewer_than_the_current_one() -> None:
    conversation = started()
    for turn_id in ("t1", "t2", "t3"):
        confirm(conversation, turn_id)
    conversation.collect_events()
    record_fold(conversation, summarized_version=4)
    (recorded,) = conversation.collect_events()
    assert isinstance(recorded, Conversation.FoldRecorded)
    assert (recorded.covered_turns, recorded.covered_eligible) == (2, 2)
    assert recorded.summarized_version == 4
    current = FoldFacts("f1", covers_through_position=1, covered_turns=2)
    refused: list[dict[str, object]] = [
        {"fold_exists": True},
        {"through": None},
        {"through": facts("t2", 1, deleted=True)},
        {"through": facts("t1", 0), "current_fold": current, "fold_id": "f2"},
        {"summarized_version": 99, "fold_id": "f2"},
        {"summarized_version": 2, "fold_id": "f2"},  # before t2 was recorded
        {"deleted_since_summary": ["t1"], "fold_id": "f2"},
    ]
    for change in refused:
        with pytest.raises((FoldConflictError, TurnNotFoundError, TurnDeletedError)):
            record_fold(conversation, **change)
    assert conversation.collect_events() == []


def test_first_release_states_upcast_to_the_lean_aggregate() -> None:
    old_snapshot = {
        "owner_id": "alice",
        "turns": {"t1": ["t1"], "t2": ["t2"]},
        "folds": {},
        "_eligible_count": 2,
    }
    Conversation.upcast_v1_v2(old_snapshot)
    assert old_snapshot == {"owner_id": "alice", "turn_count": 2}
    old_turn = {
        "turn_id": "t1",
        "sealed_question": b"q",
        "sealed_answer": b"a",
        "question_json_bytes": 3,
        "answer_json_bytes": 3,
        "question_chars": 1,
        "answer_chars": 1,
    }
    Conversation.TurnConfirmed.upcast_v1_v2(old_turn)
    assert set(old_turn) == {"turn_id", "sealed_question", "sealed_answer"}
