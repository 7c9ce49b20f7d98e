"""The aggregate's rules, checked on the events it records."""

from __future__ import annotations

import pytest

from turnledger.domain.conversation import Conversation, TurnSizes, TurnStatus
from turnledger.domain.errors import (
    TurnConflictError,
    TurnDeletedError,
    TurnNotFoundError,
    VersionConflictError,
)

SIZES = TurnSizes(
    question_json_bytes=3, answer_json_bytes=3, question_chars=1, answer_chars=1
)


def started() -> Conversation:
    conversation = Conversation(owner_id="alice")
    conversation.collect_events()
    return conversation


def confirm(conversation: Conversation, turn_id: str, **kw: object) -> None:
    conversation.confirm_turn(
        turn_id=turn_id,
        sealed_question=b"q",
        sealed_answer=b"a",
        sizes=SIZES,
        **kw,  # type: ignore[arg-type]
    )


def test_confirming_records_one_event_with_sizes_and_no_text() -> None:
    conversation = started()
    confirm(conversation, "t1")
    (recorded,) = conversation.collect_events()
    assert isinstance(recorded, Conversation.TurnConfirmed)
    assert (recorded.turn_id, recorded.question_json_bytes) == ("t1", 3)
    entry = conversation.turns["t1"]
    assert entry.version == recorded.originator_version == 2
    assert entry.eligible and not hasattr(entry, "question")


def test_rejected_commands_record_no_event() -> None:
    conversation = started()
    confirm(conversation, "t1")
    conversation.collect_events()
    with pytest.raises(TurnConflictError):
        confirm(conversation, "t1")
    with pytest.raises(VersionConflictError) as raised:
        confirm(conversation, "t2", expected_version=1)
    assert raised.value.current_version == 2
    with pytest.raises(TurnNotFoundError):
        conversation.delete_history(turn_ids=["t1", "zz"], deleted_by="alice")
    assert conversation.collect_events() == []
    assert list(conversation.turns) == ["t1"]


def test_abandoned_turns_are_not_eligible() -> None:
    conversation = started()
    conversation.abandon_turn(
        turn_id="t1",
        outcome=TurnStatus.STOPPED,
        sealed_question=b"q",
        sealed_answer=b"",
        sizes=SIZES,
    )
    confirm(conversation, "t2")
    assert [e.turn_id for e in conversation.eligible_turns_newest_first()] == ["t2"]
    with pytest.raises(ValueError, match="failed or stopped"):
        conversation.abandon_turn(
            turn_id="t3",
            outcome=TurnStatus.CONFIRMED,
            sealed_question=b"q",
            sealed_answer=b"",
            sizes=SIZES,
        )


def test_deletion_marks_turns_and_refuses_later_writes_for_them() -> None:
    conversation = started()
    for turn_id in ("t1", "t2", "t3"):
        confirm(conversation, turn_id)
    conversation.collect_events()
    assert conversation.delete_history(
        turn_ids=["t3", "t1", "t3"], deleted_by="dev-1"
    ) == ["t3", "t1"]
    (recorded,) = conversation.collect_events()
    assert isinstance(recorded, Conversation.HistoryDeleted)
    assert (recorded.turn_ids, recorded.whole_history, recorded.deleted_by) == (
        ["t3", "t1"],
        False,
        "dev-1",
    )
    assert conversation.turns["t1"].deleted_at == recorded.timestamp
    assert [e.turn_id for e in conversation.eligible_turns_newest_first()] == ["t2"]
    with pytest.raises(TurnDeletedError):
        confirm(conversation, "t1")
    assert conversation.delete_history(turn_ids=None, deleted_by="alice") == ["t2"]
    assert conversation.delete_history(turn_ids=None, deleted_by="alice") == []


def test_snapshots_are_spaced_so_their_total_size_stays_linear() -> None:
    from turnledger.domain.application import snapshot_due

    interval = 200
    due = [v for v in range(1, 200_001) if snapshot_due(v, interval)]
    # Young conversations: every interval, as before.
    assert due[:16] == [interval * n for n in range(1, 17)]
    # Never more than an eighth of the events to replay after the last snapshot.
    for earlier, later in zip(due, due[1:], strict=False):
        assert later - earlier <= max(interval, later // 8)
    # Total turn-index entries written by all snapshots: a small multiple of
    # the length, where fixed spacing would write length**2 / (2 * interval).
    assert sum(due) <= 20 * 200_000
    assert len(due) < 100
