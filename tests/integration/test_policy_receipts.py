"""Receipts of windows built under a full WindowPolicy: folds, tokens, trimming."""

from __future__ import annotations

from uuid import UUID

import pytest

from turnledger.domain.errors import InvalidInputError
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import (
    NOT_REDERIVABLE,
    RECEIPT_INVALID,
    Auditor,
)
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.receipt import WindowReceipt, parse_receipt_policy
from turnledger.projections.tokens import CHAR_ESTIMATE, CharEstimate

OWNER = "alice"
SYSTEM = "Answer briefly."
# Tokens, message limits and trimming all in play, and a byte limit that bites.
TIGHT = WindowPolicy(
    max_bytes=3_000,
    max_tokens=300,
    max_messages=6,
    floor_messages=2,
    max_message_tokens=60,
    fold_max_tokens=80,
    fold_threshold_tokens=100,
)


def ask(
    ledger: Conversations, conversation_id: UUID, turn_id: str, question: str
) -> None:
    window = ledger.project_window(
        OWNER,
        conversation_id,
        question=question,
        system=SYSTEM,
        model="m-2",
        policy=TIGHT,
    )
    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id=turn_id,
        question=question,
        answer=f"Answer to {turn_id}: " + "long detail " * 40,
        window=window,
    )


def test_receipts_under_a_full_policy_and_a_fold_rederive(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    for index in range(1, 5):
        ask(ledger, conversation_id, f"t{index}", f"Question {index}? " * 5)
    fold = ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="t2",
        summary="Earlier: questions 1 and 2 were answered.",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    for index in range(5, 8):
        ask(ledger, conversation_id, f"t{index}", f"Question {index}?")
    stored = [
        WindowReceipt.from_document(event.window_receipt)
        for event in ledger.events.get(conversation_id)
        if getattr(event, "window_receipt", None) is not None
    ]
    assert [r.fold_id for r in stored[-3:]] == [fold.fold_id] * 3
    assert stored[0].policy["policy"] == TIGHT.model_dump(mode="json")

    report = Auditor(ledger).audit()
    assert report.ok, report.failures
    assert report.conversation(conversation_id).receipts_verified == 7

    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])  # withdraws the fold
    report = Auditor(ledger).audit()
    assert report.ok, report.failures
    audit = report.conversation(conversation_id)
    # Not re-derivable: t1's own receipt, every window that held t1, and every
    # window that sent the fold (it covered t1); the others still verify.
    gone = [
        index == 0 or "t1" in receipt.turn_ids or receipt.fold_id == fold.fold_id
        for index, receipt in enumerate(stored)
    ]
    assert audit.receipts_not_rederivable == sum(gone)
    assert audit.receipts_verified == len(gone) - sum(gone)
    details = [f.detail for f in audit.findings if f.kind == NOT_REDERIVABLE]
    assert sum(fold.fold_id in detail for detail in details) == 3


def test_a_receipt_naming_an_unknown_token_counter_is_invalid_until_supplied(
    memory_ledger: Conversations,
) -> None:
    ledger = memory_ledger
    conversation_id = ledger.start_conversation(OWNER)

    class Words(CharEstimate):
        """An application's own counter: here the estimate under another name."""

        name = "words"

    window = ledger.project_window(
        OWNER,
        conversation_id,
        question="q?",
        system=SYSTEM,
        model="m",
        policy=TIGHT,
        token_counter=Words(),
    )
    ledger.confirm_turn(
        OWNER, conversation_id, turn_id="t1", question="q?", answer="a", window=window
    )
    report = Auditor(ledger).audit()
    assert [f.kind for f in report.failures] == [RECEIPT_INVALID]
    assert "words" in report.failures[0].detail
    supplied = Auditor(ledger, token_counters={"words": Words()}).audit()
    assert supplied.ok and supplied.conversation(conversation_id).receipts_verified == 1


def test_the_first_receipts_policy_documents_still_apply() -> None:
    model, policy, counter = parse_receipt_policy(
        {"format": "openai-chat", "model": "m", "max_bytes": 900}
    )
    assert (model, policy, counter) == (
        "m",
        WindowPolicy.bytes_only(900),
        CHAR_ESTIMATE.name,
    )
    with pytest.raises(InvalidInputError, match="unknown window policy"):
        parse_receipt_policy({"format": "mystery"})
    with pytest.raises(InvalidInputError, match="not a valid window policy"):
        parse_receipt_policy(
            {
                "format": "window-policy",
                "model": "m",
                "token_counter": "char/4",
                "policy": {"max_bytes": -1},
            }
        )
