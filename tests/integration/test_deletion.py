"""Deletion through the application API, on every store."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from turnledger.domain.errors import PurgeIncompleteError, TurnDeletedError
from turnledger.infra.service_layer.application import Conversations

OWNER = "owner-1"


def _turn(ledger: Conversations, conversation_id: uuid.UUID, turn_id: str) -> None:
    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id=turn_id,
        question=f"question {turn_id}",
        answer=f"answer {turn_id}",
    )


def _keys(
    ledger: Conversations, conversation_id: uuid.UUID, *turn_ids: str
) -> set[str]:
    view: Any = ledger.vault.purge_view
    return set(view.get_many(conversation_id, list(turn_ids)))


def test_offline_device_cannot_resurrect_a_deleted_turn(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    _turn(ledger, conversation_id, "t1")
    _turn(ledger, conversation_id, "t2")
    # Another device deletes t1 while this one is offline...
    receipt = ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    assert receipt.purge is not None and receipt.purge.keys_destroyed == 1
    version = ledger.get_conversation(OWNER, conversation_id).version
    # ...then this device comes back and replays its queued write of t1.
    with pytest.raises(TurnDeletedError):
        _turn(ledger, conversation_id, "t1")
    with pytest.raises(TurnDeletedError):
        ledger.confirm_turn(
            OWNER, conversation_id, turn_id="t1", question="edited", answer="edited"
        )
    with pytest.raises(TurnDeletedError):
        ledger.record_abandoned_turn(
            OWNER, conversation_id, turn_id="t1", question="q", outcome="failed"
        )
    # Refused, not resurrected: no event, no new key, still a placeholder.
    assert ledger.get_conversation(OWNER, conversation_id).version == version
    assert _keys(ledger, conversation_id, "t1", "t2") == {"t2"}
    items = ledger.get_history(OWNER, conversation_id).items
    assert [(i.turn_id, i.deleted, i.question) for i in items] == [
        ("t1", True, None),
        ("t2", False, "question t2"),
    ]


def test_delete_all_destroys_every_key_and_later_turns_are_kept(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    other_id = ledger.start_conversation(OWNER)
    for turn_id in ("t1", "t2", "t3"):
        _turn(ledger, conversation_id, turn_id)
        _turn(ledger, other_id, turn_id)
    receipt = ledger.delete_history(OWNER, conversation_id)
    assert receipt.deleted_turn_ids == ("t1", "t2", "t3")
    assert _keys(ledger, conversation_id, "t1", "t2", "t3") == set()
    assert _keys(ledger, other_id, "t1", "t2", "t3") == {"t1", "t2", "t3"}
    _turn(ledger, conversation_id, "t4")
    items = ledger.get_history(OWNER, conversation_id).items
    assert [(i.turn_id, i.question) for i in items] == [
        ("t1", None),
        ("t2", None),
        ("t3", None),
        ("t4", "question t4"),
    ]


def test_a_failed_purge_is_reported_and_completed_by_the_next_run(
    ledger: Conversations, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("t1", "t2"):
        _turn(ledger, conversation_id, turn_id)
    view = ledger.vault.purge_view

    def unavailable(*args: object, **kwargs: object) -> int:
        raise ConnectionError("key store unreachable")

    monkeypatch.setattr(view, "destroy_keys", unavailable)
    with pytest.raises(PurgeIncompleteError) as raised:
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    assert raised.value.conversation_id == conversation_id
    # The deletion stands (recorded, no text served); the key is not gone yet.
    assert ledger.get_history(OWNER, conversation_id).items[0].question is None
    assert _keys(ledger, conversation_id, "t1", "t2") == {"t1", "t2"}
    monkeypatch.undo()
    # Retrying the deletion records nothing new but completes the purge.
    retry = ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    assert retry.deleted_turn_ids == ()
    assert retry.purge is not None and retry.purge.keys_destroyed == 1
    assert _keys(ledger, conversation_id, "t1", "t2") == {"t2"}


def test_start_up_does_not_rescan_a_log_without_deletions(
    open_ledger: Callable[[], Conversations],
) -> None:
    ledger = open_ledger()
    conversation_id = ledger.start_conversation(OWNER)
    _turn(ledger, conversation_id, "t1")
    report = ledger.purge_deleted_history()
    head = ledger.recorder.max_notification_id()
    assert report.position == head
    assert ledger.vault.purge_view.max_tracking_id(ledger.name) == head
    assert not report.compaction_pending and not report.compacted


def test_events_and_read_side_hold_no_text(ledger: Conversations) -> None:
    marker = f"MARKER-{uuid.uuid4().hex}"
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(3):
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id=f"t{index}",
            question=f"{marker} q{index}",
            answer=f"{marker} a{index}",
        )
    stored_events = ledger.recorder.select_events(conversation_id)
    assert stored_events and all(marker.encode() not in e.state for e in stored_events)
    rows = ledger.recorder.read_side_rows()  # type: ignore[attr-defined]
    assert rows[1] and marker not in repr(rows)
    assert not ledger.legacy_snapshots.recorder.select_events(conversation_id)
    # The text is there, sealed: the owner reads it back.
    page = ledger.get_history(OWNER, conversation_id)
    assert page.items[2].question == f"{marker} q2"


def test_a_write_racing_the_deletion_does_not_recreate_the_key(
    ledger: Conversations, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    _turn(ledger, conversation_id, "t0")
    # A writer loads the conversation before t1 exists...
    stale = ledger.get_conversation(OWNER, conversation_id)
    # ...meanwhile another device records t1 and deletes it, and the purge runs.
    _turn(ledger, conversation_id, "t1")
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    assert _keys(ledger, conversation_id, "t0", "t1") == {"t0"}
    original = ledger.get_conversation
    loads: list[int] = []

    def stale_first(owner_id: str, conversation_id: uuid.UUID) -> Any:
        loads.append(1)
        return stale if len(loads) == 1 else original(owner_id, conversation_id)

    monkeypatch.setattr(ledger, "get_conversation", stale_first)
    # The writer, still seeing no t1, now seals and records its own t1.
    with pytest.raises(TurnDeletedError):
        _turn(ledger, conversation_id, "t1")
    # The key store refused a new key for the deleted turn.
    assert _keys(ledger, conversation_id, "t0", "t1") == {"t0"}
    monkeypatch.undo()
    items = ledger.get_history(OWNER, conversation_id).items
    assert [(i.turn_id, i.deleted) for i in items] == [("t0", False), ("t1", True)]
