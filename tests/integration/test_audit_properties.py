"""Invariants of the audit over random histories, on the in-memory store."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings

OWNER = "alice"

# Any text the ledger accepts: NUL is refused (PostgreSQL cannot store it).
text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
step = st.one_of(
    st.tuples(st.just("confirm"), st.integers(60, 2_000), text),
    st.tuples(st.just("abandon"), st.just(0), text.filter(bool)),
    st.tuples(st.just("delete"), st.integers(0, 9), st.just("")),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(step, min_size=1, max_size=12))
def test_any_history_audits_clean_and_accounts_for_every_receipt(
    steps: list[tuple[str, int, str]],
) -> None:
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        conversation_id = ledger.start_conversation(OWNER)
        receipts: dict[str, tuple[str, ...]] = {}  # turn id -> turns its window held
        turn_ids: list[str] = []
        for index, (kind, number, text) in enumerate(steps):
            turn_id = f"t{index}"
            question = f"q{index} {text}".strip()
            if kind == "confirm":
                window = ledger.project_window(
                    OWNER,
                    conversation_id,
                    question=question,
                    system=text,
                    model="m",
                    # Room for any system text and question (up to 6 bytes a char).
                    max_bytes=max(number, 100 + 6 * (len(question) + len(text))),
                )
                ledger.confirm_turn(
                    OWNER,
                    conversation_id,
                    turn_id=turn_id,
                    question=question,
                    answer=f"a{index} {text}",
                    window=window,
                )
                receipts[turn_id] = window.window.kept_turn_ids
                turn_ids.append(turn_id)
            elif kind == "abandon":
                ledger.record_abandoned_turn(
                    OWNER,
                    conversation_id,
                    turn_id=turn_id,
                    question=question,
                    outcome="failed",
                )
                turn_ids.append(turn_id)
            elif turn_ids:
                ledger.delete_history(
                    OWNER, conversation_id, turn_ids=[turn_ids[number % len(turn_ids)]]
                )
        report = Auditor(ledger).audit()
        assert report.ok, report.failures
        audit = report.conversation(conversation_id)
        deleted = set(audit.deleted_turn_ids)
        surely_gone = sum(
            1 for turn_id, held in receipts.items() if {turn_id, *held} & deleted
        )
        # A window whose walk stopped at a turn deleted since cannot be redone
        # either: the deletion erased the size that stopped it. Every receipt is
        # either verified or not re-derivable because of a named deleted turn.
        assert audit.receipts_not_rederivable >= surely_gone
        assert audit.receipts_verified + audit.receipts_not_rederivable == len(receipts)
        for finding in audit.findings:
            named = finding.detail.split("(")[-1].rstrip(")").split(", ")
            assert set(named) <= deleted | {""}, finding
        assert audit.events == ledger.get_conversation(OWNER, conversation_id).version
    finally:
        ledger.close()
