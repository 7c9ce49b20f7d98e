"""The change feed on every store: one user's changes, in log order, and never
the text of a deleted turn."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnledger.infra.service_layer.feed as feed_module
from turnledger.domain.errors import ConversationNotFoundError, InvalidInputError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import (
    ConversationFeed,
    ConversationStartedChange,
    HistoryDeletedChange,
    OtherChange,
    TurnRecordedChange,
)
from turnledger.infra.settings import Settings

SECRET = "the launch code is TANGERINE-42"


def read_all(feed: ConversationFeed, owner: str, position: int = 0, limit: int = 1000):
    changes = []
    while True:
        batch = feed.changes_since(owner, position, limit=limit)
        changes.extend(batch.changes)
        position = batch.position
        if batch.caught_up:
            return changes, position


def test_each_user_gets_only_their_changes_in_log_order(ledger: Conversations) -> None:
    feed = ConversationFeed(ledger)
    alices = ledger.start_conversation("alice")
    bobs = ledger.start_conversation("bob")
    ledger.confirm_turn("alice", alices, turn_id="a1", question="A?", answer="A.")
    ledger.confirm_turn("bob", bobs, turn_id="b1", question=SECRET, answer="B.")
    ledger.record_abandoned_turn(
        "alice",
        alices,
        turn_id="a2",
        question="More?",
        outcome="stopped",
        partial_answer="Mo",
    )

    alice_changes, _ = read_all(feed, "alice")
    assert [(type(c).__name__, c.version) for c in alice_changes] == [
        ("ConversationStartedChange", 1),
        ("TurnRecordedChange", 2),
        ("TurnRecordedChange", 3),
    ]
    assert {c.conversation_id for c in alice_changes} == {alices}
    assert SECRET not in repr(alice_changes)
    stopped = alice_changes[2]
    assert isinstance(stopped, TurnRecordedChange)
    assert (stopped.status.value, stopped.question, stopped.answer) == (
        "stopped",
        "More?",
        "Mo",
    )
    assert [s.conversation_id for s in feed.list_conversations("alice")] == [alices]
    assert [s.conversation_id for s in feed.list_conversations("bob")] == [bobs]
    assert feed.list_conversations("carol") == []


def test_a_position_resumes_exactly_where_the_last_read_stopped(
    ledger: Conversations,
) -> None:
    feed = ConversationFeed(ledger)
    conversation = ledger.start_conversation("alice")
    for n in range(7):
        ledger.confirm_turn(
            "alice", conversation, turn_id=f"t{n}", question="q", answer="a"
        )
    whole, head = read_all(feed, "alice")
    paged, paged_head = read_all(feed, "alice", limit=3)
    assert paged == whole and paged_head == head
    ledger.confirm_turn("alice", conversation, turn_id="late", question="q", answer="a")
    after, _ = read_all(feed, "alice", head)
    assert [c.version for c in after] == [9]


def test_a_deleted_turns_text_is_never_served_even_from_an_older_position(
    ledger: Conversations,
) -> None:
    feed = ConversationFeed(ledger)
    conversation = ledger.start_conversation("alice")
    ledger.confirm_turn(
        "alice", conversation, turn_id="t1", question=SECRET, answer="ok"
    )
    ledger.confirm_turn(
        "alice", conversation, turn_id="t2", question="keep", answer="me"
    )
    ledger.delete_history("alice", conversation, turn_ids=["t1"])

    changes, _ = read_all(feed, "alice")
    assert SECRET not in repr(changes)
    first, second, deletion = changes[1], changes[2], changes[3]
    assert isinstance(first, TurnRecordedChange) and first.deleted
    assert first.question is None and first.answer is None
    assert isinstance(second, TurnRecordedChange) and second.question == "keep"
    assert isinstance(deletion, HistoryDeletedChange)
    assert deletion.turn_ids == ("t1",) and not deletion.whole_history


def test_text_is_withheld_once_the_deletion_is_recorded_even_before_keys_go(
    ledger: Conversations,
) -> None:
    """Between recording a deletion and destroying its keys, text still decrypts:
    the feed checks the conversation's state after decrypting, so it is withheld."""
    feed = ConversationFeed(ledger)
    conversation = ledger.start_conversation("alice")
    ledger.confirm_turn(
        "alice", conversation, turn_id="t1", question=SECRET, answer="ok"
    )
    # Recorded, but the key is still there: as if the process stopped right
    # after the deletion's event, before its purge.
    purge = ledger.purge_deleted_history
    ledger.purge_deleted_history = lambda: None  # type: ignore[method-assign,assignment,return-value]
    ledger.delete_history("alice", conversation, turn_ids=["t1"])
    ledger.purge_deleted_history = purge  # type: ignore[method-assign]
    changes, _ = read_all(feed, "alice")
    assert SECRET not in repr(changes)
    recorded = changes[1]
    assert isinstance(recorded, TurnRecordedChange) and recorded.deleted


operations = st.lists(
    st.tuples(
        st.sampled_from(["alice", "bob"]), st.sampled_from(["start", "turn", "delete"])
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=25, deadline=None)
@given(script=operations, limit=st.integers(min_value=1, max_value=5))
def test_paged_reads_give_every_change_once_in_version_order(
    script: list[tuple[str, str]], limit: int
) -> None:
    memory_ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        check_script(memory_ledger, script, limit)
    finally:
        memory_ledger.close()


def check_script(
    memory_ledger: Conversations, script: list[tuple[str, str]], limit: int
) -> None:
    feed = ConversationFeed(memory_ledger)
    position = bob_position = 0
    conversations: dict[str, list[UUID]] = {"alice": [], "bob": []}
    turns = 0
    for owner, action in script:
        mine = conversations[owner]
        if action == "start" or not mine:
            mine.append(memory_ledger.start_conversation(owner))
        elif action == "turn":
            turns += 1
            memory_ledger.confirm_turn(
                owner,
                mine[-1],
                turn_id=f"t{turns}",
                question=f"{owner} asks {turns}",
                answer="ok",
            )
        else:
            memory_ledger.delete_history(owner, mine[-1])
    for owner, since in (("alice", position), ("bob", bob_position)):
        paged, _ = read_all(feed, owner, since, limit=limit)
        whole, _ = read_all(feed, owner, since)
        assert paged == whole
        assert {c.conversation_id for c in whole} == set(conversations[owner])
        last: dict[UUID, int] = {}
        for change in whole:
            assert change.version == last.get(change.conversation_id, 0) + 1
            last[change.conversation_id] = change.version
            if isinstance(change, ConversationStartedChange):
                assert change.version == 1
            if isinstance(change, TurnRecordedChange):
                assert change.deleted == (change.question is None)
                assert change.question is None or change.question.startswith(owner)
        for conversation in conversations[owner]:
            state = memory_ledger.get_conversation(owner, conversation)
            assert last[conversation] == state.version


def test_a_chosen_conversation_id_makes_starting_idempotent_for_its_owner_only(
    ledger: Conversations,
) -> None:
    chosen = uuid4()
    assert ledger.start_conversation("alice", conversation_id=chosen) == chosen
    head = ledger.recorder.max_notification_id()
    assert ledger.start_conversation("alice", conversation_id=chosen) == chosen
    assert ledger.recorder.max_notification_id() == head
    with pytest.raises(ConversationNotFoundError):
        ledger.start_conversation("bob", conversation_id=chosen)
    assert ledger.recorder.max_notification_id() == head
    assert ledger.get_conversation("alice", chosen).owner_id == "alice"


def test_a_read_stops_at_its_byte_budget_and_the_next_read_resumes(
    ledger: Conversations, monkeypatch: pytest.MonkeyPatch
) -> None:

    feed = ConversationFeed(ledger)
    conversation = ledger.start_conversation("alice")
    for n in range(5):
        ledger.confirm_turn(
            "alice", conversation, turn_id=f"t{n}", question="q" * 3000, answer="a"
        )
    whole, _ = read_all(feed, "alice")
    # Room for about two of these turns per read; a single larger one still fits.
    monkeypatch.setattr(feed_module, "_MAX_STORED_BYTES_PER_READ", 9_000)
    first = feed.changes_since("alice", 0)
    assert 1 <= len(first.changes) < len(whole) and not first.caught_up
    paged, _ = read_all(feed, "alice")
    assert paged == whole
    monkeypatch.setattr(feed_module, "_MAX_STORED_BYTES_PER_READ", 1)
    one_by_one, _ = read_all(feed, "alice")
    assert one_by_one == whole


def test_a_position_past_the_end_of_the_log_is_refused(ledger: Conversations) -> None:
    feed = ConversationFeed(ledger)
    ledger.start_conversation("alice")
    _, head = read_all(feed, "alice")
    assert feed.changes_since("alice", head).changes == ()
    with pytest.raises(InvalidInputError, match="past the end of the log"):
        feed.changes_since("alice", head + 1)


def test_folds_arrive_as_other_changes_without_their_text(
    ledger: Conversations,
) -> None:
    feed = ConversationFeed(ledger)
    conversation = ledger.start_conversation("alice")
    ledger.confirm_turn("alice", conversation, turn_id="t1", question="q", answer="a")
    ledger.record_fold(
        "alice",
        conversation,
        covers_through_turn_id="t1",
        summary=SECRET,
        summarized_version=ledger.get_conversation("alice", conversation).version,
    )
    ledger.delete_history("alice", conversation, turn_ids=["t1"])
    changes, _ = read_all(feed, "alice")
    assert SECRET not in repr(changes)
    kinds = [
        c.event_type if isinstance(c, OtherChange) else type(c).__name__
        for c in changes
    ]
    assert kinds[:3] == [
        "ConversationStartedChange",
        "TurnRecordedChange",
        "FoldRecorded",
    ]
    assert "HistoryDeletedChange" in kinds
    assert [c.version for c in changes] == list(range(1, len(changes) + 1))


def test_a_batch_after_a_later_position_is_what_a_read_from_there_returns(
    ledger: Conversations,
) -> None:
    """A long-poll whose cursor is ahead of a shared read keeps only the
    changes after its own cursor (sync_routes._shared_read)."""
    feed = ConversationFeed(ledger)
    conversation = ledger.start_conversation("alice")
    for n in range(4):
        ledger.confirm_turn(
            "alice", conversation, turn_id=f"t{n}", question="q", answer="a"
        )
    whole = feed.changes_since("alice", 0, limit=100)
    assert len(whole.positions) == len(whole.changes) == 5
    assert whole.after(0) is whole
    for position in (*whole.positions, whole.positions[0] + 1):
        later = feed.changes_since("alice", position, limit=100)
        assert whole.after(position) == later
