"""Readable text is always exactly the confirmed turns minus the deleted ones.

A stateful property, on SQLite and on the in-memory store: any sequence of
confirmations, partial and whole deletions, deletions whose purge fails (a
crash stand-in), late writes of deleted turns and reopenings keeps
the text the owner can read equal to the model, and, once the purge has run,
keeps a key for exactly the turns that are not deleted.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from turnledger.domain.errors import PurgeIncompleteError, TurnDeletedError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

OWNER = "owner-1"
TEXT = st.text(
    # Not NUL: the ledger refuses it (PostgreSQL cannot store it).
    alphabet=st.characters(
        codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"
    ),
    min_size=1,
    max_size=20,
).filter(lambda text: bool(text.strip()))


class PurgeMachine(RuleBasedStateMachine):
    store = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="turnledger-purge-"))
        self.settings = Settings(
            _env_file=None, persistence=self.store, data_dir=self.directory / "data"
        )
        self.ledger = open_conversations(self.settings)
        self.conversation_id = self.ledger.start_conversation(OWNER)
        self.confirmed: dict[str, tuple[str, str]] = {}
        self.deleted: set[str] = set()
        self.purge_pending = False
        self.counter = 0

    def teardown(self) -> None:
        self.ledger.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # Rules ---------------------------------------------------------------------

    @rule(question=TEXT, answer=TEXT)
    def confirm(self, question: str, answer: str) -> None:
        self.counter += 1
        turn_id = f"t{self.counter}"
        self.ledger.confirm_turn(
            OWNER,
            self.conversation_id,
            turn_id=turn_id,
            question=question,
            answer=answer,
        )
        self.confirmed[turn_id] = (question, answer)

    @precondition(lambda self: self.confirmed)
    @rule(data=st.data())
    def delete_some(self, data: st.DataObject) -> None:
        chosen = data.draw(
            st.lists(st.sampled_from(sorted(self.confirmed)), min_size=1, max_size=4)
        )
        receipt = self.ledger.delete_history(
            OWNER, self.conversation_id, turn_ids=chosen
        )
        assert set(receipt.deleted_turn_ids) == set(chosen) - self.deleted
        self.deleted |= set(chosen)
        self.purge_pending = False

    @rule()
    def delete_all(self) -> None:
        self.ledger.delete_history(OWNER, self.conversation_id)
        self.deleted |= set(self.confirmed)
        self.purge_pending = False

    @precondition(lambda self: set(self.confirmed) - self.deleted)
    @rule(data=st.data())
    def delete_with_failing_purge(self, data: st.DataObject) -> None:
        chosen = data.draw(st.sampled_from(sorted(set(self.confirmed) - self.deleted)))
        view: Any = self.ledger.vault.purge_view
        original = view.destroy_keys

        def fail(*args: object, **kwargs: object) -> int:
            raise OSError("key store went away")

        view.destroy_keys = fail
        try:
            with pytest.raises(PurgeIncompleteError):
                self.ledger.delete_history(
                    OWNER, self.conversation_id, turn_ids=[chosen]
                )
        finally:
            view.destroy_keys = original
        self.deleted.add(chosen)
        self.purge_pending = True

    @precondition(lambda self: self.deleted)
    @rule(data=st.data())
    def late_write_of_a_deleted_turn(self, data: st.DataObject) -> None:
        turn_id = data.draw(st.sampled_from(sorted(self.deleted)))
        question, answer = self.confirmed[turn_id]
        with pytest.raises(TurnDeletedError):
            self.ledger.confirm_turn(
                OWNER,
                self.conversation_id,
                turn_id=turn_id,
                question=question,
                answer=answer,
            )

    @rule()
    def reopen(self) -> None:
        if self.store == "memory":
            # The in-memory log dies with the process; what survives a restart
            # here is the start-up step itself.
            self.ledger.purge_deleted_history()
        else:
            self.ledger.close()
            self.ledger = open_conversations(self.settings)
        self.purge_pending = False

    # Invariants ----------------------------------------------------------------

    @invariant()
    def readable_text_is_confirmed_minus_deleted(self) -> None:
        page = self.ledger.get_history(OWNER, self.conversation_id, limit=500)
        readable = {
            item.turn_id: (item.question, item.answer)
            for item in page.items
            if not item.deleted
        }
        expected = {
            t: text for t, text in self.confirmed.items() if t not in self.deleted
        }
        assert readable == expected
        assert {i.turn_id for i in page.items if i.deleted} == self.deleted
        assert all(i.question is None for i in page.items if i.deleted)

    @invariant()
    def keys_exist_for_exactly_the_surviving_turns(self) -> None:
        view: Any = self.ledger.vault.purge_view
        held = set(view.get_many(self.conversation_id, list(self.confirmed)))
        surviving = set(self.confirmed) - self.deleted
        if self.purge_pending:
            assert surviving <= held
        else:
            assert held == surviving


class SQLitePurgeMachine(PurgeMachine):
    store = "sqlite"


_SETTINGS = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPurgeInMemory = PurgeMachine.TestCase
TestPurgeInMemory.settings = _SETTINGS
TestPurgeOnSQLite = SQLitePurgeMachine.TestCase
TestPurgeOnSQLite.settings = _SETTINGS
