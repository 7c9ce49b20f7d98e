"""The audit, history and rebuild commands, run as a user runs them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest

from tests.integration.tamper import RawEvents
from tests.integration.test_audit import _environment, run_turns
from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings

SQL_STORES = pytest.mark.parametrize(
    "settings",
    ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)


@pytest.fixture
def configured(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Point the CLI's environment at the test's store."""
    for key, value in _environment(settings).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(
        settings.data_dir.parent if settings.persistence == "sqlite" else Path.cwd()
    )
    return settings


def _seed(settings: Settings) -> UUID:
    ledger: Conversations = open_conversations(settings)
    try:
        conversation_id, _ = run_turns(ledger, turns=3)
        ledger.delete_history("alice", conversation_id, turn_ids=["t3"])
    finally:
        ledger.close()
    return conversation_id


@SQL_STORES
def test_audit_passes_writes_json_then_fails_after_tampering(
    configured: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation_id = _seed(configured)
    report_path = tmp_path / "audit.json"
    assert main(["audit", "--json", str(report_path)]) == 0
    out = capsys.readouterr().out
    assert "audit passed" in out and "events verified" in out
    report = json.loads(report_path.read_text())
    assert report["ok"] is True and report["events_verified"] == 5
    assert report["receipts"] == {"verified": 2, "not_rederivable": 1, "failed": 0}
    assert report["deleted_turns"] == 1

    raw = RawEvents(configured)
    try:
        raw.flip_byte(conversation_id, 2, 40)
    finally:
        raw.close()
    assert main(["audit", "--json", str(report_path)]) == 1
    out = capsys.readouterr().out
    assert "audit FAILED" in out and "changed" in out
    failures = json.loads(report_path.read_text())["failures"]
    assert {
        "kind": "changed",
        "conversation_id": str(conversation_id),
        "version": 2,
    }.items() <= failures[0].items()
    assert main(["audit", "--conversation", str(conversation_id), "--no-receipts"]) == 1


@SQL_STORES
def test_history_prints_a_past_version_with_later_deletions_kept(
    configured: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation_id = _seed(configured)
    assert main(["history", str(conversation_id), "--owner", "alice", "--at", "4"]) == 0
    out = capsys.readouterr().out
    assert "at version 4" in out and "Question 1" in out and "Question 3" not in out
    assert "t3" in out and "deleted" in out
    history = ["history", str(conversation_id), "--owner", "alice", "--at"]
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert main([*history, tomorrow]) == 0
    assert "at version 5" in capsys.readouterr().out
    assert main([*history, datetime.now().isoformat()]) == 2
    assert "needs a zone" in capsys.readouterr().err
    assert main([*history, "99"]) == 2
    assert "invalid version" in capsys.readouterr().err
    assert (
        main(["history", str(conversation_id), "--owner", "alice", "--at", "soon"]) == 2
    )
    assert main(["history", str(conversation_id), "--owner", "bob", "--at", "2"]) == 2
    assert "not found" in capsys.readouterr().err


@SQL_STORES
def test_rebuild_finds_a_tampered_read_side_and_replaces_it_from_the_log(
    configured: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    conversation_id = _seed(configured)
    assert main(["rebuild", "--check"]) == 0
    assert "read side matches the log" in capsys.readouterr().out
    raw = RawEvents(configured)
    try:
        raw.edit_read_side(
            "UPDATE HEADS SET owner_id = %s WHERE conversation_id = %s",
            (
                "mallory",
                conversation_id.hex if raw.kind == "sqlite" else conversation_id,
            ),
        )
        raw.edit_read_side("DELETE FROM TURNS WHERE turn_id = %s", ("t1",))
    finally:
        raw.close()
    assert main(["rebuild", "--check"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "mallory" in out and "2 rows differ from the log" in out
    assert main(["rebuild"]) == 0
    assert "2 rows had differed" in " ".join(capsys.readouterr().out.split())
    assert main(["rebuild", "--check"]) == 0
    ledger = open_conversations(configured)
    try:
        page = ledger.get_history("alice", conversation_id)
        assert [item.turn_id for item in page.items][:1] == ["t1"]
    finally:
        ledger.close()


@SQL_STORES
def test_audit_checks_heads_against_the_index_and_an_earlier_report(
    configured: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = open_conversations(configured)
    try:
        conversation_id, _ = run_turns(ledger, turns=3)
    finally:
        ledger.close()
    earlier = tmp_path / "earlier.json"
    assert main(["audit", "--json", str(earlier)]) == 0
    assert main(["rebuild"]) == 0
    raw = RawEvents(configured)
    try:
        raw.delete(conversation_id, 4)  # the newest event
    finally:
        raw.close()
    capsys.readouterr()
    assert main(["audit", "--no-index"]) == 0  # the chain alone cannot see it
    assert main(["audit"]) == 1  # the index recorded version 4
    assert "truncated" in capsys.readouterr().out
    assert main(["audit", "--no-index", "--against", str(earlier)]) == 1
    (tmp_path / "bad.json").write_text("{}")
    # Could not run: not an integrity failure.
    assert main(["audit", "--against", str(tmp_path / "bad.json")]) == 2
    assert "not a turnledger audit report" in capsys.readouterr().err


@SQL_STORES
def test_the_cli_verifies_receipts_made_with_a_real_tokenizer(
    configured: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A receipt names its token counter; the audit loads it by that name."""
    from turnledger.infra.tokenizers import token_counter
    from turnledger.projections.policy import WindowPolicy

    ledger = open_conversations(configured)
    try:
        conversation_id = ledger.start_conversation("alice")
        for index in range(3):
            question = f"Question {index}: 我们下周迁移 orders? " * 20
            window = ledger.project_window(
                "alice",
                conversation_id,
                question=question,
                system="Be brief.",
                model="gpt-4o-mini",
                policy=WindowPolicy(max_tokens=4_000, max_message_tokens=50),
                token_counter=token_counter("o200k_base"),
            )
            ledger.confirm_turn(
                "alice",
                conversation_id,
                turn_id=f"t{index}",
                question=question,
                answer="Done " * 80,
                window=window,
            )
    finally:
        ledger.close()
    report = tmp_path / "report.json"
    assert main(["audit", "--json", str(report)]) == 0
    (detail,) = json.loads(report.read_text())["conversation_details"]
    assert detail["receipts"]["verified"] == 3


@SQL_STORES
def test_history_names_each_turns_steps(
    configured: Settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from turnledger.domain.parts import ToolCall, ToolResult, TurnParts

    monkeypatch.setenv("COLUMNS", "200")
    ledger = open_conversations(configured)
    try:
        conversation_id = ledger.start_conversation("alice")
        turn = TurnParts(
            question="Weather?",
            steps=(
                ToolCall("call_1", "get_weather", "{}"),
                ToolResult("call_1", "18C"),
            ),
            answer="18C.",
        )
        ledger.confirm_turn("alice", conversation_id, turn_id="t1", parts=turn)
    finally:
        ledger.close()
    assert main(["history", str(conversation_id), "--owner", "alice", "--at", "2"]) == 0
    out = capsys.readouterr().out
    assert "call get_weather call_1; result call_1" in out
