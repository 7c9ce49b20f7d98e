"""After a deletion, nothing stored lets anyone confirm a guess of the deleted text.

The attacker has every byte of the store (events, read side, old-format
tables) but not the master key, and knows everything about the conversation
except a 4-digit PIN the owner deleted: the other texts, the system
instructions, the model and the window policy. For each of the 10,000
candidates they rebuild the exact request body a receipt described and look
for anything in the files that would single it out.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.window import WindowTurn, select_window

OWNER = "alice"
SYSTEM = "You are a careful assistant."
MODEL = "gpt-4o-mini"
POLICY = WindowPolicy.bytes_only(10_000)
SECRET_PIN = "4821"


def question_with(pin: str) -> str:
    return f"Remember my door PIN: {pin}. Don't tell anyone."


ANSWER_ONE = "Noted, I will keep it private."
QUESTION_TWO = "What should I do if I forget it?"


def test_a_deleted_pin_cannot_be_confirmed_from_any_stored_byte(
    tmp_path: Path,
) -> None:
    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path)
    ledger = open_conversations(settings)
    try:
        conversation_id = ledger.start_conversation(OWNER)
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id="t1",
            question=question_with(SECRET_PIN),
            answer=ANSWER_ONE,
        )
        window = ledger.project_window(
            OWNER,
            conversation_id,
            question=QUESTION_TWO,
            system=SYSTEM,
            model=MODEL,
            policy=POLICY,
        )
        assert window.window.kept_turn_ids == ("t1",)
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id="t2",
            question=QUESTION_TWO,
            answer="Reset it at the keypad.",
            window=window,
        )
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
        assert Auditor(ledger).audit().ok
    finally:
        ledger.close()

    stored = b"".join(
        path.read_bytes() for path in sorted(tmp_path.iterdir()) if path.is_file()
    )
    assert stored and SECRET_PIN.encode() not in stored
    confirmations = []
    for candidate in (f"{n:04d}" for n in range(10_000)):
        body = select_window(
            model=MODEL,
            system=SYSTEM,
            turns=[WindowTurn("t1", question_with(candidate), ANSWER_ONE)],
            question=QUESTION_TWO,
            policy=POLICY,
        ).body
        digest = hashlib.sha256(body)
        question = question_with(candidate).encode()
        if (
            digest.hexdigest().encode() in stored
            or digest.digest() in stored
            or hashlib.sha256(question).hexdigest().encode() in stored
        ):
            confirmations.append(candidate)
    assert confirmations == []
    # Lengths single out nothing either: every candidate gives a body and a
    # question of the same length, and the turn's sizes are gone from its row.
    assert len({len(question_with(f"{n:04d}")) for n in range(10_000)}) == 1
    ledger = open_conversations(settings)
    try:
        (row,) = ledger.read_side.turns_by_id(conversation_id, ["t1"]).values()
        assert row.deleted and row.sizes is None
    finally:
        ledger.close()
