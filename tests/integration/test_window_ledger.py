"""The window of stored conversations, on every store: eligibility, the fold,
deletion, what gets decrypted, and the log record."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest

from turnledger.domain.conversation import fold_key_id
from turnledger.domain.errors import (
    FoldConflictError,
    InvalidInputError,
    TurnDeletedError,
    TurnNotFoundError,
)
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.projections.formats import FOLD_LABEL
from turnledger.projections.policy import WindowPolicy

OWNER = "owner-1"
LOOSE = WindowPolicy(
    max_tokens=None, max_messages=None, floor_messages=0, fold_threshold_tokens=10
)


def confirm(
    ledger: Conversations, conversation_id: UUID, turn_id: str, text: str = ""
) -> None:
    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id=turn_id,
        question=f"question {turn_id} {text}",
        answer=f"answer {turn_id}",
    )


def project(
    ledger: Conversations, conversation_id: UUID, policy: WindowPolicy = LOOSE
) -> Any:
    return ledger.project_window(
        OWNER,
        conversation_id,
        question="Now?",
        system="Be brief.",
        model="m",
        policy=policy,
    ).window


def test_failed_and_stopped_turns_are_never_sent_and_use_no_pair_allowance(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "c1")
    confirm(ledger, conversation_id, "c2")
    ledger.record_abandoned_turn(
        OWNER, conversation_id, turn_id="f1", question="boom?", outcome="failed"
    )
    ledger.record_abandoned_turn(
        OWNER,
        conversation_id,
        turn_id="s1",
        question="stop?",
        outcome="stopped",
        partial_answer="half an ans",
    )
    confirm(ledger, conversation_id, "c3")
    window = project(ledger, conversation_id, LOOSE.model_copy(update={"max_pairs": 2}))
    assert window.kept_turn_ids == ("c2", "c3")
    assert [(d.turn_id, d.reason) for d in window.dropped] == [("c1", "count")]
    assert b"boom?" not in window.body and b"half an ans" not in window.body


def test_deleted_turns_do_not_exist_for_the_window(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("c1", "c2", "c3"):
        confirm(ledger, conversation_id, turn_id)
    ledger.delete_history(OWNER, conversation_id, turn_ids=["c2"])
    window = project(ledger, conversation_id)
    assert window.kept_turn_ids == ("c1", "c3")
    assert not window.omitted
    limited = project(
        ledger, conversation_id, LOOSE.model_copy(update={"max_pairs": 1})
    )
    assert limited.dropped_turn_ids == ("c1",)


def test_the_fold_replaces_the_turns_it_covers(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("c1", "c2", "c3"):
        confirm(
            ledger, conversation_id, turn_id, "ORCHID-17" if turn_id == "c1" else ""
        )
    receipt = ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c2",
        summary="The code is ORCHID-17; 项目 🙂",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    window = project(ledger, conversation_id)
    assert window.kept_turn_ids == ("c3",)
    assert window.fold_id == receipt.fold_id and window.fold_sent
    messages = json.loads(window.body)["messages"]
    assert messages[1]["content"] == FOLD_LABEL + "The code is ORCHID-17; 项目 🙂"
    assert b"question c1" not in window.body
    assert [(d.turn_id, d.reason) for d in window.dropped] == [
        ("c1", "fold"),
        ("c2", "fold"),
    ]
    assert (
        ledger.get_fold_summary(OWNER, conversation_id)
        == "The code is ORCHID-17; 项目 🙂"
    )


def reopen(
    ledger: Conversations, open_ledger: Callable[[], Conversations], settings: Settings
) -> Conversations:
    """A fresh application on the same data (the memory store has no other)."""
    return ledger if settings.persistence == "memory" else open_ledger()


def test_deleting_a_covered_turn_destroys_the_fold(
    open_ledger: Callable[[], Conversations], settings: Settings
) -> None:
    ledger = open_ledger()
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("c1", "c2", "c3"):
        confirm(ledger, conversation_id, turn_id)
    first = ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c1",
        summary="first summary",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    second = ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c2",
        summary="second summary",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    ledger.delete_history(OWNER, conversation_id, turn_ids=["c1"])

    reopened = reopen(ledger, open_ledger, settings)
    assert reopened.get_fold_summary(OWNER, conversation_id) is None
    window = project(reopened, conversation_id)
    assert window.fold_id is None and b"summary" not in window.body
    assert window.kept_turn_ids == ("c2", "c3")
    # Every copy of both summaries is unreadable: their keys are gone.
    folds = {f.fold_id: f for f in reopened.read_side.folds(conversation_id)}
    for receipt in (first, second):
        fold = folds[receipt.fold_id]
        assert fold.withdrawn_version is not None
        (event,) = reopened.events.get(
            conversation_id, gt=fold.version - 1, lte=fold.version
        )
        opened = reopened.vault.open_many(
            conversation_id,
            [(fold_key_id(fold.fold_id), "summary", event.sealed_summary)],
        )
        assert opened == [None]


def test_deleting_a_turn_after_the_fold_keeps_it(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("c1", "c2", "c3"):
        confirm(ledger, conversation_id, turn_id)
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c1",
        summary="s1",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    ledger.delete_history(OWNER, conversation_id, turn_ids=["c3"])
    assert ledger.get_fold_summary(OWNER, conversation_id) == "s1"
    assert project(ledger, conversation_id).kept_turn_ids == ("c2",)


def test_deleting_the_whole_history_destroys_the_fold(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "c1")
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c1",
        summary="s",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    ledger.delete_history(OWNER, conversation_id)
    assert ledger.get_fold_summary(OWNER, conversation_id) is None


def test_bad_folds_are_refused_and_change_nothing(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("c1", "c2"):
        confirm(ledger, conversation_id, turn_id)
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c2",
        summary="s",
        fold_id="fold-a",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    version = ledger.get_conversation(OWNER, conversation_id).version
    with pytest.raises(TurnNotFoundError):
        ledger.record_fold(
            OWNER,
            conversation_id,
            covers_through_turn_id="nope",
            summary="s",
            summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
        )
    with pytest.raises(FoldConflictError, match="fewer turns"):
        ledger.record_fold(
            OWNER,
            conversation_id,
            covers_through_turn_id="c1",
            summary="s",
            summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
        )
    with pytest.raises(FoldConflictError, match="already recorded"):
        ledger.record_fold(
            OWNER,
            conversation_id,
            covers_through_turn_id="c2",
            summary="s",
            fold_id="fold-a",
            summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
        )
    with pytest.raises(InvalidInputError):
        ledger.record_fold(
            OWNER,
            conversation_id,
            covers_through_turn_id="c2",
            summary="  ",
            summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
        )
    ledger.delete_history(OWNER, conversation_id, turn_ids=["c2"])
    version = ledger.get_conversation(OWNER, conversation_id).version
    with pytest.raises(TurnDeletedError):
        ledger.record_fold(
            OWNER,
            conversation_id,
            covers_through_turn_id="c2",
            summary="s",
            summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
        )
    assert ledger.get_conversation(OWNER, conversation_id).version == version


def test_the_store_reports_when_a_new_fold_is_due(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    confirm(ledger, conversation_id, "c1", "x" * 400)  # ~110 tokens by char/4
    status = ledger.get_fold_status(OWNER, conversation_id, threshold_tokens=200)
    assert not status.due and status.fold_id is None
    confirm(ledger, conversation_id, "c2", "x" * 400)
    status = ledger.get_fold_status(OWNER, conversation_id, threshold_tokens=200)
    assert status.due and status.unfolded_tokens > 200
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c2",
        summary="s",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    status = ledger.get_fold_status(OWNER, conversation_id, threshold_tokens=200)
    assert not status.due and status.unfolded_tokens == 0
    assert status.covers_through_turn_id == "c2"
    window = project(ledger, conversation_id, WindowPolicy(fold_threshold_tokens=2_000))
    assert not window.fold_due


class CountingVault:
    """Wraps the ledger's vault and records which turns are opened."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.opened: list[str] = []

    def open_many(
        self, conversation_id: UUID, items: Any, owner_id: str | None = None
    ) -> list[str | None]:
        self.opened.extend(turn_id for turn_id, _, _ in items)
        return self.inner.open_many(conversation_id, items, owner_id)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_only_the_turns_sent_are_decrypted(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(30):
        confirm(ledger, conversation_id, f"c{index}")
    counting = CountingVault(ledger.vault)
    ledger.vault = counting  # type: ignore[assignment]
    window = project(ledger, conversation_id, WindowPolicy())  # 12 pairs at most
    assert len(window.kept_turn_ids) == 12
    assert set(counting.opened) == set(window.kept_turn_ids)


def test_with_trimming_at_most_one_unsent_turn_is_decrypted(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(6):
        confirm(ledger, conversation_id, f"c{index}", "p" * 5_000)  # all trimmed
    counting = CountingVault(ledger.vault)
    ledger.vault = counting  # type: ignore[assignment]
    window = project(ledger, conversation_id, WindowPolicy(floor_messages=0))
    assert len(window.kept_turn_ids) == 4  # ~1,000 tokens a pair, 4,000 budget
    assert len(window.trimmed) == 4
    assert set(counting.opened) - set(window.kept_turn_ids) == {"c1"}


def test_one_structured_log_record_without_text_when_turns_are_dropped(
    ledger: Conversations, caplog: pytest.LogCaptureFixture
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(3):
        confirm(ledger, conversation_id, f"c{index}", "SECRET-TEXT")
    caplog.set_level(logging.INFO, logger="turnledger.window")
    project(ledger, conversation_id)  # everything fits: no record
    assert not [r for r in caplog.records if r.name == "turnledger.window"]
    window = project(ledger, conversation_id, LOOSE.model_copy(update={"max_pairs": 1}))
    records = [r for r in caplog.records if r.name == "turnledger.window"]
    assert len(records) == 1
    record = records[0]
    assert record.dropped == 2 and record.kept == 1  # type: ignore[attr-defined]
    assert record.estimated_tokens == window.estimated_tokens  # type: ignore[attr-defined]
    assert record.dropped_by_reason == {"count": 2}  # type: ignore[attr-defined]
    assert "SECRET" not in json.dumps(record.__dict__, default=str)


def test_folds_survive_snapshots_and_reopening(
    open_ledger: Callable[[], Conversations], settings: Settings
) -> None:
    ledger = open_ledger()
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(150):
        confirm(ledger, conversation_id, f"c{index}")
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c139",
        summary="the first 140 turns",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    for index in range(150, 205):  # past version 200: a snapshot holds the fold
        confirm(ledger, conversation_id, f"c{index}")
    before = project(ledger, conversation_id, WindowPolicy())
    after = project(
        reopen(ledger, open_ledger, settings), conversation_id, WindowPolicy()
    )
    assert after.body == before.body and after.fold_sent
    assert after.dropped.counts() == before.dropped.counts()
    assert after.dropped.counts()["fold"] == 140
    assert len(after.dropped_turn_ids) == len(after.dropped)


def test_a_second_application_sees_every_later_write(
    open_ledger: Callable[[], Conversations], settings: Settings
) -> None:
    """Queries read the rows written with the events, whoever wrote them."""
    reader = open_conversations(settings)
    try:
        # On a shared store another application writes; in memory, the same one.
        writer = reader if settings.persistence == "memory" else open_ledger()
        conversation_id = writer.start_conversation(OWNER)
        confirm(writer, conversation_id, "c1")
        assert project(reader, conversation_id).kept_turn_ids == ("c1",)
        confirm(writer, conversation_id, "c2")
        assert project(reader, conversation_id).kept_turn_ids == ("c1", "c2")
        writer.record_fold(
            OWNER,
            conversation_id,
            covers_through_turn_id="c1",
            summary="s",
            summarized_version=writer.get_conversation(OWNER, conversation_id).version,
        )
        assert project(reader, conversation_id).kept_turn_ids == ("c2",)
        writer.delete_history(OWNER, conversation_id, turn_ids=["c1"])
        window = project(reader, conversation_id)
        assert window.kept_turn_ids == ("c2",) and window.fold_id is None
        assert not window.omitted
    finally:
        reader.close()


def test_a_fold_made_before_a_deletion_of_a_turn_it_covers_is_refused(
    ledger: Conversations,
) -> None:
    """The race: a summariser reads the history, the owner deletes t2, then the
    summary (which may hold t2's text) arrives."""
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("c1", "c2", "c3", "c4"):
        confirm(ledger, conversation_id, turn_id)
    read_at = ledger.get_conversation(OWNER, conversation_id).version
    ledger.delete_history(OWNER, conversation_id, turn_ids=["c2"])
    with pytest.raises(FoldConflictError, match="c2"):
        ledger.record_fold(
            OWNER,
            conversation_id,
            covers_through_turn_id="c4",
            summary="c1..c4, c2's secret included",
            summarized_version=read_at,
        )
    assert ledger.get_fold_summary(OWNER, conversation_id) is None
    # Summarized again after the deletion, it is kept.
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="c4",
        summary="c1, c3, c4",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    assert ledger.get_fold_summary(OWNER, conversation_id) == "c1, c3, c4"
    with pytest.raises(InvalidInputError, match="summarized_version"):
        ledger.record_fold(
            OWNER,
            conversation_id,
            covers_through_turn_id="c4",
            summary="s",
            summarized_version=True,  # type: ignore[arg-type]
        )
