"""A store written by the first release loads, audits and purges after the upgrade.

tests/fixtures/store-0.1 was written by turnledger 0.1 (top-level packages,
JSON events with base64 text and per-turn sizes, snapshots holding the turn
index, no read side): a SQLite data directory and a pg_dump of a PostgreSQL
schema, plus what 0.1 itself read back from them (manifest.json).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from turnledger.domain.chain import ENVELOPE_MAGIC
from turnledger.infra.persistence import open_conversations
from turnledger.infra.read_side import compare_read_sides, live_rows, replay_log
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings

FIXTURE = Path(__file__).parent.parent / "fixtures" / "store-0.1"
MANIFEST = json.loads((FIXTURE / "manifest.json").read_text())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def old_store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Settings, Any]:
    """A copy of the 0.1 store, and what 0.1 read from it."""
    key = MANIFEST["master_key"]
    if request.param == "sqlite":
        data_dir = tmp_path / "data"
        shutil.copytree(FIXTURE / "sqlite", data_dir)
        settings = Settings(
            _env_file=None, persistence="sqlite", data_dir=data_dir, master_key=key
        )
        return settings, MANIFEST["sqlite"]
    schema: str = request.getfixturevalue("postgres_schema")
    settings = Settings(
        _env_file=None, persistence="postgres", postgres_schema=schema, master_key=key
    )
    dump = (FIXTURE / "postgres.sql").read_text().replace(MANIFEST["schema"], schema)
    subprocess.run(
        [
            "psql",
            "--no-psqlrc",
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-d",
            settings.postgres_conninfo(),
        ],
        input=dump,
        text=True,
        check=True,
        capture_output=True,
    )
    return settings, MANIFEST["postgres"]


def test_an_old_store_reads_as_it_did(old_store: tuple[Settings, Any]) -> None:
    settings, expected = old_store
    ledger = open_conversations(settings)  # builds the read side from the log
    try:
        alice = UUID(expected["alice_conversation"])
        page = ledger.get_history("alice", alice, limit=500)
        assert page.version == expected["alice_version"]
        assert [
            [i.turn_id, i.status.value, i.deleted, i.question, i.answer]
            for i in page.items
        ] == expected["history"]
        bob = UUID(expected["bob_conversation"])
        assert ledger.get_history("bob", bob).items[0].question == "bob's question"
        assert ledger.get_fold_summary("alice", alice) == "Summary of t1..t3: ORCHID"
        assert not compare_read_sides(live_rows(ledger), replay_log(ledger).rows())
        # Every check of the audit passes: chains, old snapshots (upcast to the
        # lean state), the read side, and t9's receipt (not re-derivable: its
        # window sent t5, deleted since).
        report = Auditor(ledger).audit()
        assert report.ok, report.failures
        audit = report.conversation(alice)
        assert (audit.receipts_verified, audit.receipts_not_rederivable) == (0, 1)
    finally:
        ledger.close()


def test_an_old_store_takes_new_turns_deletions_and_purges(
    old_store: tuple[Settings, Any],
) -> None:
    settings, expected = old_store
    alice = UUID(expected["alice_conversation"])
    ledger = open_conversations(settings)
    try:
        receipt = ledger.confirm_turn(
            "alice", alice, turn_id="t14", question="New 14", answer="Reply 14"
        )
        assert receipt.version == expected["alice_version"] + 1
        # The new event is in the new format, chained to the old ones.
        newest = ledger.recorder.select_events(alice, desc=True, limit=1)[0]
        assert newest.state.startswith(ENVELOPE_MAGIC)
        deletion = ledger.delete_history("alice", alice, turn_ids=["t6", "t14"])
        assert deletion.purge is not None and deletion.purge.keys_destroyed == 2
        window = ledger.project_window(
            "alice", alice, question="q", system="s", model="m", max_bytes=100_000
        )
        assert "t6" not in window.window.kept_turn_ids
        assert b"ORCHID-6" not in window.window.body
        assert b"Later 13" in window.window.body
        # The fold covers t1..t3 only: it stands, and is sent.
        assert ledger.get_fold_summary("alice", alice) == "Summary of t1..t3: ORCHID"
        assert window.window.fold_sent
        report = Auditor(ledger).audit()
        assert report.ok, report.failures
    finally:
        ledger.close()
    reopened = open_conversations(settings)
    try:
        items = reopened.get_history("alice", alice, limit=500).items
        by_id = {item.turn_id: item for item in items}
        assert by_id["t6"].deleted and by_id["t6"].question is None
        assert by_id["t7"].question == "Question 7: ORCHID-7 你好"
        assert not compare_read_sides(live_rows(reopened), replay_log(reopened).rows())
    finally:
        reopened.close()
