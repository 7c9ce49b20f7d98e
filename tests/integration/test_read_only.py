"""Audits and reads change nothing: no row, no table, no key, no purge.

Checked as a database administrator would: a full dump of the store before
and after `audit`, `history --at`, `window` and `export`, with a forged
deletion planted first (an audit that ran the purge would carry it out).
"""

from __future__ import annotations

import sqlite3
import subprocess
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.tamper import RawEvents
from tests.integration.test_audit import _environment, run_turns
from turnledger.domain.chain import encode_envelope, read_link_parts
from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

SQL_STORES = pytest.mark.parametrize(
    "settings",
    ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)


def dump(settings: Settings) -> str:
    """Every table's rows, as a DBA would compare them."""
    if settings.persistence == "sqlite":
        lines = []
        for path in sorted(settings.data_dir.glob("*.sqlite3")):
            uri = f"file:{path.resolve()}?mode=ro"
            with closing(sqlite3.connect(uri, uri=True)) as connection:
                lines.extend(connection.iterdump())
        return "\n".join(lines)
    dumped = subprocess.run(
        [
            "pg_dump",
            "--schema",
            settings.postgres_schema,
            "--no-owner",
            "--no-privileges",
            "-d",
            settings.postgres_conninfo(),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # pg_dump brackets its output with a random \restrict token: not data.
    return "\n".join(line for line in dumped.splitlines() if not line.startswith("\\"))


@SQL_STORES
def test_audit_and_reads_leave_the_store_exactly_as_they_found_it(
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ledger = open_conversations(settings)
    try:
        conversation_id, _ = run_turns(ledger, turns=3)
    finally:
        ledger.close()
    # A forged deletion of t1, appended with a valid seal: the purge, if
    # anything ran it, would destroy t1's key.
    raw = RawEvents(settings)
    try:
        head = raw.state(conversation_id, 4)
        previous = read_link_parts(
            originator_id=conversation_id,
            version=4,
            topic="domain.conversation:Conversation.TurnConfirmed",
            state=head,
        ).recorded_digest
        forged, _ = encode_envelope(
            originator_id=conversation_id,
            version=5,
            topic="domain.conversation:Conversation.HistoryDeleted",
            previous_digest=previous,
            timestamp=datetime.now(UTC),
            blobs={},
            json=b'{"turn_ids":["t1"],"whole_history":false,"deleted_by":"mallory"}',
        )
        raw.insert(
            conversation_id,
            5,
            "domain.conversation:Conversation.HistoryDeleted",
            forged,
        )
    finally:
        raw.close()
    for key, value in _environment(settings).items():
        monkeypatch.setenv(key, value)
    before = dump(settings)
    commands = [
        ["audit", "--json", str(tmp_path / "report.json")],
        ["history", str(conversation_id), "--owner", "alice", "--at", "2"],
        [
            "window",
            str(conversation_id),
            "--owner",
            "alice",
            "--question",
            "next?",
        ],
        ["export", "--owner", "alice", "--output", str(tmp_path / "export.jsonl")],
        ["rebuild", "--check"],
    ]
    for command in commands:
        assert main(command) in (0, 1), command  # 1: the audit's failure
        capsys.readouterr()
    assert dump(settings) == before
    # The audit did see the forgery: the read side never heard of it.
    assert "read-side-mismatch" in (tmp_path / "report.json").read_text()
