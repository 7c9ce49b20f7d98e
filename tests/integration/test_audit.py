"""Audits on real stores: clean runs, tampering with raw rows, deletions, receipts."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import UUID

import pytest

from tests.integration.tamper import RawEvents
from turnledger.domain.chain import (
    GENESIS,
    decode_envelope,
    encode_envelope,
    read_link,
)
from turnledger.infra.service_layer.application import Conversations, ProjectedWindow
from turnledger.infra.service_layer.audit import (
    ANCHOR_MISMATCH,
    BROKEN_LINK,
    CHANGED,
    MISSING,
    NOT_REDERIVABLE,
    READ_SIDE_MISMATCH,
    RECEIPT_MISMATCH,
    TEXT_MISSING,
    TRUNCATED,
    UNDECODABLE,
    UNSEALED,
    Auditor,
    AuditReport,
)
from turnledger.infra.settings import Settings
from turnledger.projections.receipt import WindowReceipt

SQL_STORES = pytest.mark.parametrize(
    "settings",
    ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)
SYSTEM = "You are concise. Reply in English."
OWNER = "alice"


def run_turns(
    ledger: Conversations, owner: str = OWNER, *, turns: int = 6, max_bytes: int = 600
) -> tuple[UUID, dict[str, ProjectedWindow]]:
    """A conversation whose every turn answered a projected window."""
    conversation_id = ledger.start_conversation(owner)
    windows: dict[str, ProjectedWindow] = {}
    for index in range(1, turns + 1):
        question = f"Question {index}: what about item {index * 7}? ✓"
        window = ledger.project_window(
            owner,
            conversation_id,
            question=question,
            system=SYSTEM,
            model="m-1",
            max_bytes=max_bytes,
        )
        ledger.confirm_turn(
            owner,
            conversation_id,
            turn_id=f"t{index}",
            question=question,
            answer=f"Answer {index}: " + "détail " * index,
            window=window,
        )
        windows[f"t{index}"] = window
    return conversation_id, windows


def failures_at(report: AuditReport) -> set[tuple[str, UUID, int | None]]:
    return {(f.kind, f.conversation_id, f.version) for f in report.failures}


@pytest.fixture
def raw(settings: Settings) -> Iterator[RawEvents]:
    events = RawEvents(settings)
    yield events
    events.close()


def test_turns_with_receipts_audit_clean(ledger: Conversations) -> None:
    first, windows = run_turns(ledger)
    second, _ = run_turns(ledger, "bob", turns=3)
    ledger.record_abandoned_turn(
        "bob", second, turn_id="x", question="Stop?", outcome="stopped"
    )
    report = Auditor(ledger).audit()
    assert report.ok, report.failures
    assert report.events_verified == 7 + 5
    audit = report.conversation(first)
    assert (audit.owner_id, audit.events, audit.head_version) == (OWNER, 7, 7)
    assert audit.receipts_verified == 6 and audit.receipts_failed == 0
    assert audit.chain_intact
    # Some early windows left turns out: receipts record exactly what was sent.
    assert windows["t6"].window.dropped_turn_ids


def test_every_stored_event_is_sealed_and_linked(ledger: Conversations) -> None:
    conversation_id, _ = run_turns(ledger, turns=3)
    ledger.record_abandoned_turn(
        OWNER, conversation_id, turn_id="t9", question="q", outcome="failed"
    )
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    previous = GENESIS
    rows = ledger.recorder.select_events(conversation_id)
    assert [row.topic.rsplit(".", 1)[-1] for row in rows] == [
        "Started",
        "TurnConfirmed",
        "TurnConfirmed",
        "TurnConfirmed",
        "TurnAbandoned",
        "HistoryDeleted",
    ]
    for row in rows:
        link = read_link(row)
        assert link.intact and link.previous_digest == previous
        previous = link.recorded_digest


def test_audit_of_one_conversation_reads_only_it(ledger: Conversations) -> None:
    first, _ = run_turns(ledger, turns=2)
    run_turns(ledger, "bob", turns=2)
    seen: list[int] = []
    report = Auditor(ledger, progress=seen.append).audit(first)
    assert [audit.conversation_id for audit in report.conversations] == [first]
    assert sum(seen) == 3 and report.ok


@SQL_STORES
@pytest.mark.parametrize("where", ["first", "middle", "head"])
def test_one_changed_byte_is_detected_and_located(
    ledger: Conversations, raw: RawEvents, where: str
) -> None:
    conversation_id, _ = run_turns(ledger, turns=4)
    other, _ = run_turns(ledger, "bob", turns=2)
    version = {"first": 1, "middle": 3, "head": 5}[where]
    state = raw.state(conversation_id, version)
    for offset in (len(state) // 2, len(state) - 10):
        raw.flip_byte(conversation_id, version, offset)
        report = Auditor(ledger).audit()
        assert not report.ok
        located = failures_at(report)
        assert (CHANGED, conversation_id, version) in located or (
            UNSEALED,
            conversation_id,
            version,
        ) in located
        assert {f.conversation_id for f in report.failures} == {conversation_id}
        assert report.conversation(other).ok
        raw.set_state(conversation_id, version, state)
        assert Auditor(ledger).audit().ok


@SQL_STORES
def test_a_changed_ciphertext_byte_is_located_even_though_it_still_decodes(
    ledger: Conversations, raw: RawEvents
) -> None:
    conversation_id, _ = run_turns(ledger, turns=3)
    state = raw.state(conversation_id, 3)
    offset = state.index(decode_envelope(state).blobs["sealed_answer"]) + 10
    raw.flip_byte(conversation_id, 3, offset)
    report = Auditor(ledger).audit(conversation_id)
    assert failures_at(report) >= {(CHANGED, conversation_id, 3)}
    assert (UNDECODABLE, conversation_id, 3) not in failures_at(report)


@SQL_STORES
def test_a_deleted_event_row_is_detected(ledger: Conversations, raw: RawEvents) -> None:
    conversation_id, _ = run_turns(ledger, turns=4)
    raw.delete(conversation_id, 3)
    report = Auditor(ledger).audit()
    assert failures_at(report) >= {
        (MISSING, conversation_id, 3),
        (BROKEN_LINK, conversation_id, 4),
    }


@SQL_STORES
def test_reordered_events_are_detected(ledger: Conversations, raw: RawEvents) -> None:
    conversation_id, _ = run_turns(ledger, turns=4)
    raw.swap(conversation_id, 2, 4)
    report = Auditor(ledger).audit()
    located = failures_at(report)
    assert (CHANGED, conversation_id, 2) in located
    assert (CHANGED, conversation_id, 4) in located


@SQL_STORES
def test_an_event_moved_between_conversations_is_detected(
    ledger: Conversations, raw: RawEvents
) -> None:
    first, _ = run_turns(ledger, turns=3)
    second, _ = run_turns(ledger, "bob", turns=3)
    raw.move(first, 3, second, 3)
    report = Auditor(ledger).audit()
    located = failures_at(report)
    assert (CHANGED, second, 3) in located
    assert (MISSING, first, 3) in located


@SQL_STORES
def test_receipt_is_rederived_byte_exactly_in_a_fresh_process(
    settings: Settings, ledger: Conversations, tmp_path: Path
) -> None:
    conversation_id, windows = run_turns(ledger, turns=4, max_bytes=450)
    ledger.close()
    script = tmp_path / "rederive.py"
    script.write_text(_REDERIVE)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("TURNLEDGER_") or key == "TURNLEDGER_DELETION_RECORD_DIR"
    }
    env.update(_environment(settings))
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = str(root)  # this checkout's code, however it is installed
    completed = subprocess.run(
        [sys.executable, str(script), str(conversation_id)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    bodies = json.loads(completed.stdout)
    assert set(bodies) == set(windows)
    for turn_id, window in windows.items():
        assert base64.b64decode(bodies[turn_id]["body"]) == window.window.body
        assert bodies[turn_id]["turn_ids"] == list(window.window.kept_turn_ids)
        assert bodies[turn_id]["audit_ok"] is True


_REDERIVE = """
import base64, json, sys
from uuid import UUID
from turnledger.infra.service_layer.audit import Auditor, _head_at
from turnledger.projections.receipt import WindowReceipt, receipt_key_ids
from turnledger.infra.persistence import open_conversations
from turnledger.infra.read_side import replay_log
from turnledger.infra.settings import Settings

ledger = open_conversations(Settings())
conversation_id = UUID(sys.argv[1])
report = Auditor(ledger).audit(conversation_id)
out = {}
for event in ledger.events.get(conversation_id):
    document = getattr(event, "window_receipt", None)
    if document is None:
        continue
    receipt = WindowReceipt.from_document(document)
    question, system = ledger.vault.open_many(conversation_id, [
        (event.turn_id, "question", event.sealed_question),
        (event.turn_id, "system", event.sealed_system),
    ], "alice")
    model, policy, counter = Auditor(ledger)._policy_of(receipt)
    head = ledger.get_conversation("alice", conversation_id)
    past = _head_at(replay_log(ledger), head, receipt.ledger_version)
    window = ledger.queries.window_at(
        past, question=question, system=system, model=model, policy=policy,
        counter=counter,
    )
    out[event.turn_id] = {
        "body": base64.b64encode(window.body).decode(),
        "turn_ids": list(window.kept_turn_ids),
        "audit_ok": report.ok and receipt.matches(
            window.body, window.kept_turn_ids, mac_key=ledger.vault.receipt_key(
                conversation_id, receipt_key_ids(event.turn_id, receipt.turn_ids, None)
            )
        ),
    }
ledger.close()
print(json.dumps(out))
"""


def _environment(settings: Settings) -> dict[str, str]:
    env = {"TURNLEDGER_PERSISTENCE": settings.persistence}
    if settings.persistence == "sqlite":
        env["TURNLEDGER_DATA_DIR"] = str(settings.data_dir)
    else:
        assert settings.master_key is not None
        env["TURNLEDGER_POSTGRES_SCHEMA"] = settings.postgres_schema
        env["TURNLEDGER_MASTER_KEY"] = settings.master_key.get_secret_value()
    return env


def test_after_a_deletion_the_audit_passes_and_reports_what_was_deleted(
    ledger: Conversations,
) -> None:
    conversation_id, windows = run_turns(ledger, turns=5, max_bytes=10_000)
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t2"])
    report = Auditor(ledger).audit()
    assert report.ok, report.failures
    audit = report.conversation(conversation_id)
    assert audit.deleted_turn_ids == ["t2"]
    # t2's own receipt and every later window that carried t2 cannot be redone;
    # t1's window held no deleted turn and still verifies byte for byte.
    assert (audit.receipts_verified, audit.receipts_not_rederivable) == (1, 4)
    noted = {(f.kind, f.version) for f in audit.findings}
    assert noted == {(NOT_REDERIVABLE, version) for version in (3, 4, 5, 6)}
    assert all("t2" in f.detail for f in audit.findings)

    ledger.delete_history(OWNER, conversation_id)
    report = Auditor(ledger).audit()
    assert report.ok
    audit = report.conversation(conversation_id)
    assert sorted(audit.deleted_turn_ids) == ["t1", "t2", "t3", "t4", "t5"]
    assert (audit.receipts_verified, audit.receipts_not_rederivable) == (0, 5)


def test_a_receipt_that_does_not_match_its_window_is_a_failure(
    memory_ledger: Conversations,
) -> None:
    ledger = memory_ledger
    conversation_id, _ = run_turns(ledger, turns=2)
    window = ledger.project_window(
        OWNER,
        conversation_id,
        question="Third?",
        system=SYSTEM,
        model="m-1",
        max_bytes=600,
    )
    # The application's own path, with a receipt bound to another body.
    original = ProjectedWindow.receipt

    def forged(self: ProjectedWindow, mac_key: bytes) -> WindowReceipt:
        return WindowReceipt.of_body(
            policy=self.policy,
            ledger_version=self.ledger_version,
            turn_ids=self.window.kept_turn_ids,
            body=self.window.body + b" ",
            mac_key=mac_key,
        )

    ProjectedWindow.receipt = forged  # type: ignore[method-assign]
    try:
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id="t3",
            question="Third?",
            answer="Yes.",
            window=window,
        )
    finally:
        ProjectedWindow.receipt = original  # type: ignore[method-assign]
    report = Auditor(ledger).audit()
    assert [(f.kind, f.version) for f in report.failures] == [(RECEIPT_MISMATCH, 4)]
    assert report.conversation(conversation_id).receipts_failed == 1


def test_audit_without_receipts_checks_only_the_chain(ledger: Conversations) -> None:
    run_turns(ledger, turns=2)
    report = Auditor(ledger).audit(receipts=False)
    assert report.ok
    assert sum(a.receipts_verified for a in report.conversations) == 0


def test_auditing_an_unknown_conversation_is_a_typed_error(
    ledger: Conversations,
) -> None:
    from uuid import uuid4

    from turnledger.domain.errors import ConversationNotFoundError

    with pytest.raises(ConversationNotFoundError):
        Auditor(ledger).audit(uuid4())


@SQL_STORES
def test_removing_the_newest_events_is_caught_by_the_read_side_or_an_anchor(
    ledger: Conversations, raw: RawEvents
) -> None:
    conversation_id, _ = run_turns(ledger, turns=3)
    earlier = Auditor(ledger).audit()
    raw.delete(conversation_id, 4)
    # Nothing in the log commits to the newest event: the chain alone still holds.
    assert Auditor(ledger).audit(read_side=False).ok
    # The read side's row, written with the event, still names version 4.
    report = Auditor(ledger).audit()
    assert failures_at(report) == {(READ_SIDE_MISMATCH, conversation_id, 4)}
    report = Auditor(ledger).audit(anchors=earlier.anchors(), read_side=False)
    assert failures_at(report) == {(TRUNCATED, conversation_id, 4)}


@SQL_STORES
def test_a_resealed_forgery_breaks_the_chain_or_an_anchor(
    ledger: Conversations, raw: RawEvents
) -> None:
    """An attacker who knows the scheme rewrites an event and recomputes its seal."""
    conversation_id, _ = run_turns(ledger, turns=3)
    earlier = Auditor(ledger).audit()
    topic = ledger.recorder.select_events(conversation_id)[1].topic

    def forge(version: int) -> None:
        envelope = decode_envelope(raw.state(conversation_id, version))
        document = json.loads(envelope.json)
        document["forged"] = True
        forged, _ = encode_envelope(
            originator_id=conversation_id,
            version=version,
            topic=topic,
            previous_digest=envelope.previous_digest,
            timestamp=envelope.timestamp,
            blobs=envelope.blobs,
            json=json.dumps(document, separators=(",", ":")).encode(),
        )
        raw.set_state(conversation_id, version, forged)

    forge(2)  # a middle event: the next event's link no longer matches
    assert failures_at(Auditor(ledger).audit()) == {(BROKEN_LINK, conversation_id, 3)}
    raw_state = raw.state(conversation_id, 2)
    forge(4)  # the head: the read side's head digest, or an earlier anchor, shows it
    assert (READ_SIDE_MISMATCH, conversation_id, 4) in failures_at(
        Auditor(ledger).audit()
    )
    report = Auditor(ledger).audit(anchors=earlier.anchors(), read_side=False)
    assert (ANCHOR_MISMATCH, conversation_id, 4) in failures_at(report)
    assert raw_state == raw.state(conversation_id, 2)


@SQL_STORES
def test_a_conversation_that_vanished_entirely_is_caught_by_an_anchor(
    ledger: Conversations, raw: RawEvents
) -> None:
    conversation_id, _ = run_turns(ledger, turns=1)
    kept, _ = run_turns(ledger, "bob", turns=1)
    earlier = Auditor(ledger).audit()
    raw.delete(conversation_id, 2)
    raw.delete(conversation_id, 1)
    report = Auditor(ledger).audit(anchors=earlier.anchors())
    assert failures_at(report) == {(TRUNCATED, conversation_id, 2)}
    assert report.conversation(kept).ok


@SQL_STORES
def test_removing_a_deletion_event_is_caught_by_the_missing_keys(
    ledger: Conversations, raw: RawEvents
) -> None:
    conversation_id, _ = run_turns(ledger, turns=3)
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t3"])
    raw.delete(conversation_id, 5)  # the newest event, so the chain cannot tell
    report = Auditor(ledger).audit(read_side=False)
    assert failures_at(report) == {(TEXT_MISSING, conversation_id, 4)}
    # The read side, written with the deletion, names its version still.
    assert (READ_SIDE_MISMATCH, conversation_id, 5) in failures_at(
        Auditor(ledger).audit()
    )


def test_the_chain_holds_across_reopening(tmp_path: Path) -> None:
    from turnledger.infra.persistence import open_conversations

    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path)
    ledger = open_conversations(settings)
    try:
        conversation_id, _ = run_turns(ledger, turns=4)
    finally:
        ledger.close()
    ledger = open_conversations(settings)  # later writes load from the read side
    try:
        for index in (5, 6, 7):
            ledger.confirm_turn(
                OWNER, conversation_id, turn_id=f"t{index}", question="q", answer="a"
            )
        report = Auditor(ledger).audit()
        assert report.ok, report.failures
        assert report.conversation(conversation_id).head_version == 8
    finally:
        ledger.close()


@pytest.mark.parametrize(
    "settings",
    ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)
def test_racing_writers_keep_one_unbroken_chain(
    open_ledger: Callable[[], Conversations],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    first, second = open_ledger(), open_ledger()
    conversation_id = first.start_conversation(OWNER)

    def write(ledger: Conversations, prefix: str) -> None:
        for index in range(8):
            ledger.confirm_turn(
                OWNER,
                conversation_id,
                turn_id=f"{prefix}{index}",
                question="q",
                answer="a",
            )

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(write, first, "a"), pool.submit(write, second, "b")]:
            future.result()
    report = Auditor(first).audit()
    assert report.ok, report.failures
    assert report.conversation(conversation_id).events == 17


@SQL_STORES
def test_an_edited_read_side_row_is_detected(
    ledger: Conversations, raw: RawEvents
) -> None:
    """Queries trust the read side (who owns a conversation, what is deleted):
    a row edited in the database, however plausible, is a located failure."""
    conversation_id, _ = run_turns(ledger, turns=4)
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t2"])
    assert Auditor(ledger).audit().ok
    key = conversation_id.hex if raw.kind == "sqlite" else conversation_id
    raw.edit_read_side(
        "UPDATE HEADS SET owner_id = %s WHERE conversation_id = %s", ("malory", key)
    )
    report = Auditor(ledger).audit()
    assert failures_at(report) == {(READ_SIDE_MISMATCH, conversation_id, 6)}
    assert "malory" in report.failures[0].detail
    raw.edit_read_side(
        "UPDATE HEADS SET owner_id = %s WHERE conversation_id = %s", (OWNER, key)
    )
    raw.edit_read_side(
        "UPDATE TURNS SET deleted_version = NULL WHERE turn_id = %s", ("t2",)
    )
    report = Auditor(ledger).audit()
    assert failures_at(report) == {(READ_SIDE_MISMATCH, conversation_id, 6)}
    assert "t2" in report.failures[0].detail


@SQL_STORES
def test_a_write_refuses_a_read_side_row_that_contradicts_the_log(
    ledger: Conversations, settings: Settings, raw: RawEvents
) -> None:
    """The conversation's row is the aggregate's snapshot: a row whose head
    digest is not the stored event's is refused, not built on."""
    from turnledger.domain.errors import ReadSideMismatchError
    from turnledger.infra.persistence import open_conversations
    from turnledger.infra.read_side import rebuild_read_side

    conversation_id, _ = run_turns(ledger, turns=2)
    key = conversation_id.hex if raw.kind == "sqlite" else conversation_id
    raw.edit_read_side(
        "UPDATE HEADS SET head_digest = %s WHERE conversation_id = %s",
        ("0" * 64, key),
    )
    fresh = open_conversations(settings)  # nothing kept from earlier writes
    try:
        with pytest.raises(ReadSideMismatchError):
            fresh.confirm_turn(
                OWNER, conversation_id, turn_id="t9", question="q", answer="a"
            )
        assert fresh.get_conversation(OWNER, conversation_id).version == 3
        rebuild_read_side(fresh)
        receipt = fresh.confirm_turn(
            OWNER, conversation_id, turn_id="t9", question="q", answer="a"
        )
        assert receipt.version == 4
    finally:
        fresh.close()
