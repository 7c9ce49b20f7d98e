"""The read side equals what the log alone gives, after any history, on every store.

A state machine drives the real ledger (confirmed, abandoned and retried
turns, deletions of some or all turns, folds, windows) and checks after
every step that the rows written with the events are exactly those a replay
of the log derives, and that history and counts match a plain model.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.postgres import PostgresApplicationRecorder
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from turnledger.domain.errors import TurnLedgerError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.postgres import PostgresReadSideRecorder
from turnledger.infra.read_side import compare_read_sides, live_rows, replay_log
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy

OWNERS = ("alice", "bob")
TEXTS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=30,
).filter(str.strip)


class ReadSideMachine(RuleBasedStateMachine):
    """Subclassed per store below; `open_settings` gives a fresh store."""

    def open_settings(self) -> Settings:
        raise NotImplementedError

    @initialize()
    def open(self) -> None:
        self.ledger: Conversations = open_conversations(self.open_settings())
        self.conversations: list[tuple[str, UUID]] = []
        # per conversation: [turn_id, status, deleted, question, answer]
        self.model: dict[UUID, list[list[object]]] = {}
        self.counter = 0

    def teardown(self) -> None:
        ledger = getattr(self, "ledger", None)
        if ledger is not None:
            ledger.close()

    @rule(owner=st.sampled_from(OWNERS))
    def start(self, owner: str) -> None:
        conversation_id = self.ledger.start_conversation(owner)
        self.conversations.append((owner, conversation_id))
        self.model[conversation_id] = []

    @precondition(lambda self: self.conversations)
    @rule(
        which=st.integers(min_value=0),
        question=TEXTS,
        answer=TEXTS,
        outcome=st.sampled_from(["confirmed", "confirmed", "failed", "stopped"]),
    )
    def turn(self, which: int, question: str, answer: str, outcome: str) -> None:
        owner, conversation_id = self.conversations[which % len(self.conversations)]
        self.counter += 1
        turn_id = f"t{self.counter}"
        if outcome == "confirmed":
            self.ledger.confirm_turn(
                owner,
                conversation_id,
                turn_id=turn_id,
                question=question,
                answer=answer,
            )
        else:
            self.ledger.record_abandoned_turn(
                owner,
                conversation_id,
                turn_id=turn_id,
                question=question,
                outcome=outcome,
                partial_answer=answer,
            )
        self.model[conversation_id].append([turn_id, outcome, False, question, answer])

    @precondition(lambda self: any(self.model.values()))
    @rule(which=st.integers(min_value=0))
    def retry_a_turn(self, which: int) -> None:
        """A device sends a recorded turn again: nothing changes."""
        candidates = [
            (owner, conversation_id, entry)
            for owner, conversation_id in self.conversations
            for entry in self.model[conversation_id]
            if entry[1] == "confirmed" and not entry[2]
        ]
        if not candidates:
            return
        owner, conversation_id, entry = candidates[which % len(candidates)]
        version = self.ledger.get_conversation(owner, conversation_id).version
        self.ledger.confirm_turn(
            owner,
            conversation_id,
            turn_id=str(entry[0]),
            question=str(entry[3]),
            answer=str(entry[4]),
        )
        assert self.ledger.get_conversation(owner, conversation_id).version == version

    @precondition(lambda self: any(self.model.values()))
    @rule(
        which=st.integers(min_value=0), picks=st.lists(st.integers(0, 50), max_size=4)
    )
    def delete_some(self, which: int, picks: list[int]) -> None:
        owner, conversation_id = self.conversations[which % len(self.conversations)]
        entries = self.model[conversation_id]
        if not entries:
            return
        chosen = [str(entries[p % len(entries)][0]) for p in picks] or None
        self.ledger.delete_history(owner, conversation_id, turn_ids=chosen)
        for entry in entries:
            if chosen is None or entry[0] in chosen:
                entry[2] = True

    @precondition(lambda self: any(self.model.values()))
    @rule(which=st.integers(min_value=0), through=st.integers(min_value=0))
    def fold(self, which: int, through: int) -> None:
        owner, conversation_id = self.conversations[which % len(self.conversations)]
        entries = self.model[conversation_id]
        if not entries:
            return
        turn_id = str(entries[through % len(entries)][0])
        version = self.ledger.get_conversation(owner, conversation_id).version
        # Refused whole when the turn is deleted or it covers fewer turns than
        # the current fold.
        with contextlib.suppress(TurnLedgerError):
            self.ledger.record_fold(
                owner,
                conversation_id,
                covers_through_turn_id=turn_id,
                summary=f"summary through {turn_id}",
                summarized_version=version,
            )

    @precondition(lambda self: self.conversations)
    @rule(which=st.integers(min_value=0), pairs=st.integers(1, 5))
    def window(self, which: int, pairs: int) -> None:
        owner, conversation_id = self.conversations[which % len(self.conversations)]
        projected = self.ledger.project_window(
            owner,
            conversation_id,
            question="next?",
            system="",
            model="m",
            policy=WindowPolicy.bytes_only(100_000).model_copy(
                update={"max_pairs": pairs}
            ),
        )
        kept = projected.window.kept_turn_ids
        live = [
            str(e[0])
            for e in self.model[conversation_id]
            if e[1] == "confirmed" and not e[2]
        ]
        # Whole turns, the newest first, never a deleted or abandoned one.
        assert set(kept) <= set(live)
        if not projected.window.fold_sent and projected.window.fold_id is None:
            assert list(kept) == live[len(live) - len(kept) :]

    @invariant()
    def read_side_equals_the_replay_of_the_log(self) -> None:
        if not hasattr(self, "ledger"):
            return
        differences = compare_read_sides(
            live_rows(self.ledger), replay_log(self.ledger).rows()
        )
        assert differences == []

    @invariant()
    def history_matches_the_model(self) -> None:
        if not hasattr(self, "ledger"):
            return
        for owner, conversation_id in self.conversations:
            page = self.ledger.get_history(owner, conversation_id, limit=500)
            seen = [
                [i.turn_id, i.status.value, i.deleted, i.question, i.answer]
                for i in page.items
            ]
            expected = [
                [e[0], e[1], e[2], None if e[2] else e[3], None if e[2] else e[4]]
                for e in self.model[conversation_id]
            ]
            assert seen == expected
            row = self.ledger.get_conversation(owner, conversation_id)
            assert row.turn_count == len(expected)
            assert row.eligible_count == sum(
                1 for e in expected if e[1] == "confirmed" and not e[2]
            )


class MemoryReadSide(ReadSideMachine):
    def open_settings(self) -> Settings:
        return Settings(_env_file=None, persistence="memory")


class SQLiteReadSide(ReadSideMachine):
    counter_dirs = 0
    base: Path

    def open_settings(self) -> Settings:
        SQLiteReadSide.counter_dirs += 1
        return Settings(
            _env_file=None,
            persistence="sqlite",
            data_dir=self.base / f"store-{SQLiteReadSide.counter_dirs}",
        )


STATEFUL = hypothesis_settings(max_examples=25, stateful_step_count=20, deadline=None)


def test_memory_read_side_follows_the_log() -> None:
    run_state_machine_as_test(MemoryReadSide, settings=STATEFUL)


def test_sqlite_read_side_follows_the_log(tmp_path: Path) -> None:
    SQLiteReadSide.base = tmp_path
    run_state_machine_as_test(SQLiteReadSide, settings=STATEFUL)


@pytest.mark.postgres
def test_postgres_read_side_follows_the_log(postgres_settings: Settings) -> None:
    class PostgresReadSide(ReadSideMachine):
        def open_settings(self) -> Settings:
            # One schema for the test; every example's conversations are new.
            return postgres_settings

    run_state_machine_as_test(
        PostgresReadSide,
        settings=hypothesis_settings(
            max_examples=10, stateful_step_count=15, deadline=None
        ),
    )


@pytest.mark.postgres
def test_postgres_batches_too_large_for_one_statement_take_the_librarys_insert(
    postgres_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Live batches are far below the limit; a lowered limit sends this import
    # through the library's pipelined insert, rows written table by table.
    monkeypatch.setattr(PostgresReadSideRecorder, "rows_per_statement", 2)
    library_inserts: list[int] = []
    library_insert = PostgresApplicationRecorder.insert_events

    def counted(self: PostgresApplicationRecorder, events: Any, **kwargs: Any) -> Any:
        library_inserts.append(len(events))
        return library_insert(self, events, **kwargs)

    monkeypatch.setattr(PostgresApplicationRecorder, "insert_events", counted)
    ledger = open_conversations(postgres_settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        turns = [(f"t{i}", f"question {i}", f"answer {i}") for i in range(7)]
        receipts = ledger.confirm_turns("alice", conversation_id, turns)
        assert [r.version for r in receipts] == list(range(2, 9))
        assert sum(library_inserts) >= 7  # the import went the library's way
        ledger.delete_history("alice", conversation_id, turn_ids=["t1", "t4"])
        page = ledger.get_history("alice", conversation_id, limit=50)
        assert [(i.turn_id, i.deleted, i.answer) for i in page.items] == [
            (f"t{i}", i in (1, 4), None if i in (1, 4) else f"answer {i}")
            for i in range(7)
        ]
        assert compare_read_sides(live_rows(ledger), replay_log(ledger).rows()) == []
    finally:
        ledger.close()
