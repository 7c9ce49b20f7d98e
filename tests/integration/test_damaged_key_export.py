"""A damaged key in an export and a rebuild: that turn marked, nothing stopped.

As in tests/integration/test_damaged_key.py, one byte of one turn's wrapped key
is flipped in the key table. The export marks that turn `unreadable:
"key-damaged"` (as history does) and carries every other turn's text;
`turnledger rebuild` replays the log around it instead of stopping, says
which turn it could not measure, and the rebuilt read side still serves the
others; `rebuild --check` does not count the turn whose sizes only its key
could give as a difference of the read side (the audit reports the key).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.test_audit_cli import SQL_STORES, configured
from tests.integration.test_damaged_key import damage_key
from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.export import export_records
from turnledger.infra.settings import Settings

OWNER = "owner-1"
__all__ = ["configured"]  # the fixture, used by name


def _conversation(ledger: Conversations) -> uuid.UUID:
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("t1", "t2", "t3"):
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id=turn_id,
            question=f"question {turn_id}",
            answer=f"answer {turn_id}",
        )
    return conversation_id


def test_an_export_marks_the_turn_whose_key_is_damaged(
    ledger: Conversations, settings: Settings
) -> None:
    conversation_id = _conversation(ledger)
    damage_key(ledger, settings, conversation_id, "t2")
    records = list(export_records(ledger, OWNER, exported_at=datetime.now(UTC)))
    turns = [r for r in records if r["record"] == "turn"]
    assert [(t["turn_id"], t["question"], t["unreadable"]) for t in turns] == [
        ("t1", "question t1", None),
        ("t2", None, "key-damaged"),
        ("t3", "question t3", None),
    ]
    assert not turns[1]["deleted"] and turns[1]["parts"] is None
    assert records[-1] == {
        "record": "end",
        "conversations": 1,
        "turns": 3,
        "deleted_turns": 0,
    }


@SQL_STORES
def test_rebuild_goes_around_a_damaged_key(
    configured: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = open_conversations(configured)
    try:
        conversation_id = _conversation(ledger)
        damage_key(ledger, configured, conversation_id, "t2")
    finally:
        ledger.close()

    assert main(["rebuild", "--check"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "read side matches the log" in out, out
    assert f"damaged key: conversation {conversation_id} t2" in out, out

    assert main(["rebuild"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "read side rebuilt" in out and "Traceback" not in out, out
    assert f"damaged key: conversation {conversation_id} t2" in out, out
    assert main(["rebuild", "--check"]) == 0

    ledger = open_conversations(configured)
    try:
        items = ledger.get_history(OWNER, conversation_id).items
        assert [(i.turn_id, i.question, i.unreadable) for i in items] == [
            ("t1", "question t1", None),
            ("t2", None, "key-damaged"),
            ("t3", "question t3", None),
        ]
        window = ledger.project_window(
            OWNER,
            conversation_id,
            question="next",
            system="s",
            model="m",
            max_bytes=100_000,
        ).window
        assert window.kept_turn_ids == ("t1", "t3")
        assert window.report()["dropped_counts"] == {"key-damaged": 1}
    finally:
        ledger.close()

    output = tmp_path / "export.jsonl"
    assert main(["export", "--owner", OWNER, "--output", str(output)]) == 0
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r.get("unreadable") for r in lines if r["record"] == "turn"] == [
        None,
        "key-damaged",
        None,
    ]
