"""`turnledger export`: the owner's readable text, placeholders for deletions."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from turnledger.domain.errors import InvalidInputError
from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.export import EXPORT_SCHEMA, export_records
from turnledger.infra.settings import Settings

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _populate(ledger: Conversations) -> tuple[str, str]:
    first = ledger.start_conversation("alice")
    ledger.start_conversation("bob")  # somebody else's: never exported
    second = ledger.start_conversation("alice")
    for turn_id, question, answer in [
        ("t1", "Project code ORCHID-17", "Noted."),
        ("t2", "We use Java 8 — “please” 谢谢", "Java 8 it is. 👍"),
        ("t3", "Deadline?", ""),
    ]:
        if answer:
            ledger.confirm_turn(
                "alice", first, turn_id=turn_id, question=question, answer=answer
            )
        else:
            ledger.record_abandoned_turn(
                "alice", first, turn_id=turn_id, question=question, outcome="stopped"
            )
    ledger.confirm_turn("alice", second, turn_id="only", question="Hi", answer="Hello")
    ledger.delete_history("alice", first, turn_ids=["t1"], deleted_by="support-7")
    return str(first), str(second)


def test_export_holds_readable_text_and_placeholders(ledger: Conversations) -> None:
    first, second = _populate(ledger)
    records = list(export_records(ledger, "alice", exported_at=NOW))
    assert records[0] == {
        "record": "export",
        "schema": EXPORT_SCHEMA,
        "owner_id": "alice",
        "exported_at": NOW.isoformat(),
    }
    assert records[-1] == {
        "record": "end",
        "conversations": 2,
        "turns": 4,
        "deleted_turns": 1,
    }
    conversations = [r for r in records if r["record"] == "conversation"]
    assert [c["conversation_id"] for c in conversations] == [first, second]
    assert [c["turn_count"] for c in conversations] == [3, 1]
    turns = [
        (
            r["conversation_id"],
            r["turn_id"],
            r["status"],
            r["deleted"],
            r["question"],
            r["answer"],
        )
        for r in records
        if r["record"] == "turn"
    ]
    assert turns == [
        (first, "t1", "confirmed", True, None, None),
        (
            first,
            "t2",
            "confirmed",
            False,
            "We use Java 8 — “please” 谢谢",
            "Java 8 it is. 👍",
        ),
        (first, "t3", "stopped", False, "Deadline?", ""),
        (second, "only", "confirmed", False, "Hi", "Hello"),
    ]
    deletions = [r for r in records if r["record"] == "deletion"]
    assert len(deletions) == 1
    assert deletions[0]["turn_ids"] == ["t1"]
    assert deletions[0]["deleted_by"] == "support-7"
    assert deletions[0]["whole_history"] is False
    deleted_turn = next(r for r in records if r.get("turn_id") == "t1")
    assert deleted_turn["deleted_at"] == deletions[0]["deleted_at"]
    # Every record survives a JSON round trip unchanged.
    assert [json.loads(json.dumps(r)) for r in records] == records


def test_export_of_an_owner_without_conversations_is_header_and_trailer(
    ledger: Conversations,
) -> None:
    _populate(ledger)
    records = list(export_records(ledger, "carol", exported_at=NOW))
    assert [r["record"] for r in records] == ["export", "end"]
    assert records[-1]["conversations"] == 0


def test_export_rejects_a_malformed_owner(ledger: Conversations) -> None:
    with pytest.raises(InvalidInputError):
        list(export_records(ledger, "", exported_at=NOW))


def test_cli_writes_a_private_json_lines_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    monkeypatch.setenv("TURNLEDGER_PERSISTENCE", "sqlite")
    monkeypatch.setenv("TURNLEDGER_DATA_DIR", str(data_dir))
    monkeypatch.chdir(tmp_path)  # no stray .env
    ledger = open_conversations(Settings(_env_file=None))
    try:
        first, _ = _populate(ledger)
    finally:
        ledger.close()
    output = tmp_path / "alice.jsonl"
    assert main(["export", "--owner", "alice", "--output", str(output)]) == 0
    assert stat.S_IMODE(output.stat().st_mode) == 0o600
    lines = output.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert records[0]["schema"] == EXPORT_SCHEMA
    assert "谢谢" in lines[3]  # UTF-8 as is, not \\u escapes
    assert [r["turn_id"] for r in records if r["record"] == "turn"][:3] == [
        "t1",
        "t2",
        "t3",
    ]
    assert not list(tmp_path.glob("*.partial"))

    assert main(["export", "--owner", "alice"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == lines[1:]

    assert main(["export", "--owner", "bad id with spaces"]) == 2
    assert "invalid owner_id" in capsys.readouterr().err
