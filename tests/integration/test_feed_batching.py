"""A sync read spanning many conversations opens their keys in one read and
checks their turn rows in one round trip (on PostgreSQL both come with the
events, in one statement), and still withholds deleted turns, marks damaged
keys and refuses texts sealed for another owner."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from tests.integration.test_damaged_key import damage_key
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import ConversationFeed, TurnRecordedChange
from turnledger.infra.settings import Settings

OWNER = "alice"


def _conversations(ledger: Conversations, count: int) -> list[UUID]:
    made = []
    for number in range(count):
        conversation_id = ledger.start_conversation(OWNER)
        for turn in ("t1", "t2"):
            ledger.confirm_turn(
                OWNER,
                conversation_id,
                turn_id=turn,
                question=f"question {number} {turn}",
                answer=f"answer {number} {turn}",
            )
        made.append(conversation_id)
    return made


def _turns(ledger: Conversations) -> dict[tuple[UUID, str], TurnRecordedChange]:
    batch = ConversationFeed(ledger).changes_since(OWNER, 0, limit=100)
    assert batch.caught_up
    return {
        (change.conversation_id, change.turn_id): change
        for change in batch.changes
        if isinstance(change, TurnRecordedChange)
    }


def test_one_key_read_serves_every_conversation_of_a_read(
    ledger: Conversations, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, damaged, deleted = _conversations(ledger, 3)
    ledger.delete_history(OWNER, deleted, turn_ids=["t2"])
    damage_key(ledger, settings, damaged, "t1")
    store: Any = ledger.vault.purge_view
    calls: list[str] = []
    get_across, get_many = store.get_across, store.get_many

    def counting_across(*args: Any, **kwargs: Any) -> Any:
        calls.append("get_across")
        return get_across(*args, **kwargs)

    def counting_many(*args: Any, **kwargs: Any) -> Any:
        calls.append("get_many")
        return get_many(*args, **kwargs)

    monkeypatch.setattr(store, "get_across", counting_across)
    monkeypatch.setattr(store, "get_many", counting_many)

    turns = _turns(ledger)

    # One read of the vault's keys; SQLite's store (a local file, or memory)
    # answers it conversation by conversation. On PostgreSQL the keys come
    # with the events, in the read's one statement (next test).
    if settings.persistence == "postgres":
        assert calls == []
    else:
        assert calls.count("get_across") == 1
    assert turns[(plain, "t1")].question == "question 0 t1"
    assert turns[(plain, "t2")].answer == "answer 0 t2"
    assert turns[(damaged, "t1")].unreadable == "key-damaged"
    assert turns[(damaged, "t1")].question is None
    assert not turns[(damaged, "t1")].deleted
    assert turns[(damaged, "t2")].question == "question 1 t2"
    assert turns[(deleted, "t1")].question == "question 2 t1"
    assert turns[(deleted, "t2")].deleted and turns[(deleted, "t2")].question is None
    assert turns[(deleted, "t2")].unreadable is None


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_a_read_across_conversations_is_one_statement_on_postgres(
    ledger: Conversations, statements: list[str]
) -> None:
    # The owner index, the events, the turns' keys and their deletion flags
    # in one statement: one round trip, and one snapshot for keys and flags.
    conversations = _conversations(ledger, 4)
    statements.clear()

    turns = _turns(ledger)

    assert len(turns) == 8
    assert all(change.question for change in turns.values())
    assert len(statements) == 1, statements
    (read,) = statements
    assert all(t in read for t in ("owner_feed", "turn_keys", "conversation_turns"))
    assert {c for c, _ in turns} == set(conversations)


@pytest.mark.postgres
@pytest.mark.parametrize("settings", ["postgres"], indirect=True)
def test_a_turn_row_found_after_folds_and_deletions_still_opens_the_right_turn(
    ledger: Conversations,
) -> None:
    # The statement finds a turn's row by its event's version: versions and
    # positions drift apart with every event that is not a turn.
    conversation_id = ledger.start_conversation(OWNER)
    for number in range(6):
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id=f"t{number}",
            question=f"q{number}",
            answer=f"a{number}",
        )
        if number in (1, 3):
            ledger.delete_history(OWNER, conversation_id, turn_ids=[f"t{number - 1}"])

    turns = _turns(ledger)

    assert {
        t: turns[(conversation_id, t)].question for t in (f"t{n}" for n in range(6))
    } == {"t0": None, "t1": "q1", "t2": None, "t3": "q3", "t4": "q4", "t5": "q5"}
    assert turns[(conversation_id, "t0")].deleted
    assert not turns[(conversation_id, "t5")].deleted


def test_the_deletion_check_names_exactly_the_deleted_turns_asked_for(
    ledger: Conversations,
) -> None:
    kept, partly, whole, not_asked = _conversations(ledger, 4)
    ledger.delete_history(OWNER, partly, turn_ids=["t2"])
    ledger.delete_history(OWNER, whole)
    ledger.delete_history(OWNER, not_asked)

    found = ledger.read_side.deleted_turns(
        {
            kept: {"t1", "t2"},
            partly: {"t1", "t2", "never-written"},
            whole: {"t1", "t2"},
        }
    )

    assert found == {(partly, "t2"), (whole, "t1"), (whole, "t2")}
    assert ledger.read_side.deleted_turns({}) == set()


def test_every_spelling_of_a_turn_id_is_found_by_the_key_read_and_the_deletion_check(
    ledger: Conversations,
) -> None:
    # The PostgreSQL statements take the pairs as one JSON parameter.
    odd = ["NULL", "null", "a.b:c@d-e_f", "9" * 128]
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in odd:
        ledger.confirm_turn(
            OWNER, conversation_id, turn_id=turn_id, question=turn_id, answer="a"
        )
    ledger.delete_history(OWNER, conversation_id, turn_ids=["NULL", "a.b:c@d-e_f"])

    turns = _turns(ledger)

    assert {t: turns[(conversation_id, t)].question for t in odd} == {
        "NULL": None,
        "null": "null",
        "a.b:c@d-e_f": None,
        "9" * 128: "9" * 128,
    }
    assert ledger.read_side.deleted_turns({conversation_id: odd}) == {
        (conversation_id, "NULL"),
        (conversation_id, "a.b:c@d-e_f"),
    }
