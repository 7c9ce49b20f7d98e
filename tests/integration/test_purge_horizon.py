"""PostgreSQL: compaction waits for transactions that could still see the keys.

VACUUM FULL copies rows that an open, older transaction may still see, so a
purge that compacted regardless would leave destroyed keys in the rewritten
file and believe it had not. Here a session holds a snapshot taken before the
deletion: compaction is reported pending and the key is still on disk; once
the session ends, the next purge run compacts and the key is gone.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.integration.test_purge_bytes import _checkpoint, _hits, _schema_files
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres


def test_compaction_waits_for_older_snapshots(
    postgres_conninfo: str, postgres_settings: Settings
) -> None:
    settings = postgres_settings
    ledger = open_conversations(settings)
    view: Any = ledger.vault.purge_view
    view.horizon_wait_seconds = 0.3
    try:
        conversation_id = ledger.start_conversation("alice")
        for turn_id in ("t1", "t2"):
            ledger.confirm_turn(
                "alice", conversation_id, turn_id=turn_id, question="q", answer="a"
            )
        wrapped = view.get_many(conversation_id, ["t1"])["t1"]
        with psycopg.connect(postgres_conninfo) as blocker:
            blocker.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            blocker.execute("SELECT count(*) FROM pg_class").fetchone()  # snapshot
            receipt = ledger.delete_history("alice", conversation_id, turn_ids=["t1"])
            assert receipt.purge is not None
            assert receipt.purge.keys_destroyed == 1
            assert receipt.purge.compaction_pending
            assert view.needs_compaction(ledger.name)
            _checkpoint(postgres_conninfo)
            files = _schema_files(postgres_conninfo, settings.postgres_schema)
            assert _hits(files, {"destroyed": wrapped}) != {}  # still on disk
            blocker.rollback()
        view.checkpoint_wait_seconds = 30.0  # the shared server may be busy
        report = ledger.purge_deleted_history()
        assert report.compacted and not report.compaction_pending
        _checkpoint(postgres_conninfo)
        files = _schema_files(postgres_conninfo, settings.postgres_schema)
        assert _hits(files, {"destroyed": wrapped}) == {}
        assert ledger.get_history("alice", conversation_id).items[1].question == "q"
    finally:
        ledger.close()
