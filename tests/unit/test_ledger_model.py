"""The ledger behaves like a plain list of turns, whatever the order of commands."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from turnledger.domain.errors import (
    TurnConflictError,
    TurnDeletedError,
    VersionConflictError,
)
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

OWNER = "alice"
turn_ids = st.sampled_from([f"t{n}" for n in range(8)])
words = st.text(alphabet='ab中😀"\\\n ', min_size=1, max_size=6).filter(str.strip)


@dataclass
class ModelTurn:
    turn_id: str
    status: str
    question: str
    answer: str
    deleted: bool = False


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
        self.conversation_id = self.ledger.start_conversation(OWNER)
        self.turns: list[ModelTurn] = []
        self.version = 1

    def teardown(self) -> None:
        self.ledger.close()

    def _find(self, turn_id: str) -> ModelTurn | None:
        return next((t for t in self.turns if t.turn_id == turn_id), None)

    @rule(turn_id=turn_ids, question=words, answer=words, stale=st.booleans())
    def confirm(self, turn_id: str, question: str, answer: str, stale: bool) -> None:
        expected = self.version - 1 if stale and self.version > 1 else None
        existing = self._find(turn_id)
        try:
            receipt = self.ledger.confirm_turn(
                OWNER,
                self.conversation_id,
                turn_id=turn_id,
                question=question,
                answer=answer,
                expected_version=expected,
            )
        except TurnDeletedError:
            assert existing is not None and existing.deleted
        except TurnConflictError:
            assert existing is not None and (
                existing.status != "confirmed"
                or (existing.question, existing.answer) != (question, answer)
            )
        except VersionConflictError as error:
            assert existing is None and expected is not None
            assert error.current_version == self.version
        else:
            if existing is None:
                assert expected is None
                self.turns.append(ModelTurn(turn_id, "confirmed", question, answer))
                self.version += 1
            assert receipt.version <= self.version

    @rule(
        turn_id=turn_ids, question=words, outcome=st.sampled_from(["failed", "stopped"])
    )
    def abandon(self, turn_id: str, question: str, outcome: str) -> None:
        existing = self._find(turn_id)
        try:
            self.ledger.record_abandoned_turn(
                OWNER,
                self.conversation_id,
                turn_id=turn_id,
                question=question,
                outcome=outcome,
            )
        except TurnConflictError:
            assert existing is not None
        else:
            if existing is None:
                self.turns.append(ModelTurn(turn_id, outcome, question, ""))
                self.version += 1

    @precondition(lambda self: self.turns)
    @rule(data=st.data())
    def delete_some(self, data: st.DataObject) -> None:
        chosen = data.draw(
            st.lists(st.sampled_from(self.turns), min_size=1, max_size=3)
        )
        receipt = self.ledger.delete_history(
            OWNER, self.conversation_id, turn_ids=[t.turn_id for t in chosen]
        )
        fresh = list(dict.fromkeys(t.turn_id for t in chosen if not t.deleted))
        assert list(receipt.deleted_turn_ids) == fresh
        for turn in chosen:
            turn.deleted = True
        self.version += bool(fresh)

    @rule()
    def delete_all(self) -> None:
        receipt = self.ledger.delete_history(OWNER, self.conversation_id)
        assert list(receipt.deleted_turn_ids) == [
            t.turn_id for t in self.turns if not t.deleted
        ]
        for turn in self.turns:
            turn.deleted = True
        self.version += bool(receipt.deleted_turn_ids)

    @invariant()
    def history_matches_the_model(self) -> None:
        page = self.ledger.get_history(OWNER, self.conversation_id, limit=500)
        assert page.version == self.version
        assert [
            (i.turn_id, i.status.value, i.deleted, i.question, i.answer)
            for i in page.items
        ] == [
            (
                t.turn_id,
                t.status,
                t.deleted,
                None if t.deleted else t.question,
                None if t.deleted else t.answer,
            )
            for t in self.turns
        ]

    @invariant()
    def the_widest_window_sends_exactly_the_live_confirmed_turns(self) -> None:
        window = self.ledger.project_window(
            OWNER,
            self.conversation_id,
            question="now",
            system="",
            model="m",
            max_bytes=1_000_000,
        ).window
        assert window.kept_turn_ids == tuple(
            t.turn_id for t in self.turns if t.status == "confirmed" and not t.deleted
        )


LedgerMachine.TestCase.settings = settings(
    max_examples=25, stateful_step_count=20, deadline=None
)
TestLedgerMachine = LedgerMachine.TestCase
