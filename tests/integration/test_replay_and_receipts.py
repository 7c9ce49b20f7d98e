"""History at a past version or time, and keeping a window's receipt with its turn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from turnledger.domain.errors import (
    ConversationNotFoundError,
    InvalidInputError,
    WindowMismatchError,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.replay import history_at, version_at
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.receipt import (
    RECEIPT_FORMAT,
    WindowReceipt,
    receipt_key_ids,
)

OWNER = "alice"


def three_turns(ledger: Conversations):  # type: ignore[no-untyped-def]
    conversation_id = ledger.start_conversation(OWNER)
    for index in (1, 2, 3):
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id=f"t{index}",
            question=f"q{index}",
            answer=f"a{index}",
        )
    return conversation_id


def test_history_at_a_version_shows_the_turns_of_that_version(
    ledger: Conversations,
) -> None:
    conversation_id = three_turns(ledger)
    page = history_at(ledger, OWNER, conversation_id, version=3)
    assert page.version == 3
    assert [(i.turn_id, i.question, i.answer) for i in page.items] == [
        ("t1", "q1", "a1"),
        ("t2", "q2", "a2"),
    ]
    assert history_at(ledger, OWNER, conversation_id, version=1).items == ()


def test_a_later_deletion_stays_deleted_in_the_past(ledger: Conversations) -> None:
    conversation_id = three_turns(ledger)
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    page = history_at(ledger, OWNER, conversation_id, version=3)
    first, second = page.items
    assert first.turn_id == "t1" and first.deleted and first.question is None
    assert first.answer is None
    assert (second.question, second.answer) == ("q2", "a2")


def test_history_at_a_time_uses_the_last_event_by_then(ledger: Conversations) -> None:
    conversation_id = three_turns(ledger)
    events = list(ledger.events.get(conversation_id))
    at = events[2].timestamp  # the moment t2 was confirmed
    assert version_at(ledger, conversation_id, at) == 3
    page = history_at(ledger, OWNER, conversation_id, at=at)
    assert [item.turn_id for item in page.items] == ["t1", "t2"]
    later = datetime.now(UTC) + timedelta(days=1)
    assert history_at(ledger, OWNER, conversation_id, at=later).version == 4


@pytest.mark.parametrize("version", [0, 5, -1, True, "2"])
def test_a_version_outside_the_conversation_is_refused(
    ledger: Conversations, version: object
) -> None:
    conversation_id = three_turns(ledger)
    with pytest.raises(InvalidInputError):
        history_at(ledger, OWNER, conversation_id, version=version)  # type: ignore[arg-type]


def test_a_time_before_the_conversation_or_without_zone_is_refused(
    ledger: Conversations,
) -> None:
    conversation_id = three_turns(ledger)
    with pytest.raises(InvalidInputError):
        history_at(ledger, OWNER, conversation_id, at=datetime(2000, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidInputError):
        history_at(ledger, OWNER, conversation_id, at=datetime(2000, 1, 1))
    with pytest.raises(InvalidInputError):
        history_at(ledger, OWNER, conversation_id)


def test_somebody_elses_past_is_not_found(ledger: Conversations) -> None:
    conversation_id = three_turns(ledger)
    with pytest.raises(ConversationNotFoundError):
        history_at(ledger, "mallory", conversation_id, version=2)
    with pytest.raises(ConversationNotFoundError):
        history_at(ledger, OWNER, uuid4(), version=2)


def test_a_confirmed_turn_keeps_its_windows_receipt(ledger: Conversations) -> None:
    conversation_id = three_turns(ledger)
    window = ledger.project_window(
        OWNER,
        conversation_id,
        question="q4",
        system="be brief",
        model="m",
        max_bytes=180,
    )
    ledger.confirm_turn(
        OWNER, conversation_id, turn_id="t4", question="q4", answer="a4", window=window
    )
    stored = list(ledger.events.get(conversation_id))[-1]
    receipt = WindowReceipt.from_document(stored.window_receipt)
    assert stored.window_receipt["receipt_format"] == RECEIPT_FORMAT
    mac_key = ledger.vault.receipt_key(
        conversation_id, receipt_key_ids("t4", window.window.kept_turn_ids, None)
    )
    assert mac_key is not None
    assert receipt == window.receipt(mac_key)
    assert receipt.ledger_version == 4
    assert receipt.turn_ids == window.window.kept_turn_ids
    assert receipt.policy == {
        "format": "window-policy",
        "model": "m",
        "token_counter": "char/4",
        "policy": WindowPolicy.bytes_only(180).model_dump(mode="json"),
    }
    assert receipt.matches(
        window.window.body, window.window.kept_turn_ids, mac_key=mac_key
    )
    # Without the keys of the turns in it, the body cannot be confirmed.
    assert not receipt.matches(window.window.body, window.window.kept_turn_ids)
    assert not receipt.matches(
        window.window.body, window.window.kept_turn_ids, mac_key=bytes(32)
    )
    # Content-free: no text of the conversation or the instructions in it.
    # (The MAC is random hex, which may spell "a1" by chance: left out.)
    flat = repr({k: v for k, v in stored.window_receipt.items() if k != "body_mac"})
    assert all(text not in flat for text in ("q1", "a1", "q4", "be brief"))
    opened = ledger.vault.open_many(
        conversation_id, [("t4", "system", stored.sealed_system)], OWNER
    )
    assert opened == ["be brief"]


def test_a_window_for_another_question_or_conversation_is_refused(
    ledger: Conversations,
) -> None:
    conversation_id = three_turns(ledger)
    other = ledger.start_conversation(OWNER)
    window = ledger.project_window(
        OWNER, conversation_id, question="q4", system="", model="m", max_bytes=500
    )
    with pytest.raises(WindowMismatchError):
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id="t4",
            question="other",
            answer="a",
            window=window,
        )
    with pytest.raises(WindowMismatchError):
        ledger.confirm_turn(
            OWNER, other, turn_id="t4", question="q4", answer="a", window=window
        )
    with pytest.raises(InvalidInputError):
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id="t4",
            question="q4",
            answer="a",
            window="not a window",  # type: ignore[arg-type]
        )
    assert ledger.get_conversation(OWNER, conversation_id).version == 4
    assert ledger.get_conversation(OWNER, other).version == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.pop("body_mac"), "missing"),
        (lambda d: d.update(receipt_format=RECEIPT_FORMAT + 1), "receipt_format"),
        (lambda d: d.update(policy={}), "policy"),
        (lambda d: d.update(ledger_version=0), "ledger_version"),
        (lambda d: d.update(turn_ids=[1]), "turn_ids"),
        (lambda d: d.update(body_mac="zz"), "body_mac"),
        (lambda d: d.update(receipt_format=1), "missing body_bytes, body_sha256"),
    ],
)
def test_malformed_receipt_documents_are_named(change, reason: str) -> None:  # type: ignore[no-untyped-def]
    document = WindowReceipt.of_body(
        policy={"format": "openai-chat", "model": "m", "max_bytes": 10},
        ledger_version=1,
        turn_ids=("t1",),
        body=b"{}",
        mac_key=bytes(32),
    ).to_document()
    assert WindowReceipt.from_document(document).matches(
        b"{}", ("t1",), mac_key=bytes(32)
    )
    change(document)
    with pytest.raises(InvalidInputError, match=reason):
        WindowReceipt.from_document(document)
