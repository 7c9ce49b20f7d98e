"""PostgreSQL: a session holding a lock on the key table does not block deletion.

VACUUM FULL needs an exclusive lock on the partition it rewrites. A reader in
an open transaction holds a shared lock on it for as long as the transaction
lasts; waiting for it would also queue every key read and write of that
partition behind the VACUUM. So compaction waits at most its lock timeout,
gives up, and stays pending (saying why); the next run completes it.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres


def test_a_locked_key_partition_leaves_compaction_pending_not_the_caller_waiting(
    postgres_conninfo: str, postgres_settings: Settings
) -> None:
    settings = postgres_settings
    ledger = open_conversations(settings)
    view: Any = ledger.vault.purge_view
    try:
        conversation_id = ledger.start_conversation("alice")
        for turn_id in ("t1", "t2"):
            ledger.confirm_turn(
                "alice", conversation_id, turn_id=turn_id, question="q", answer="a"
            )
        with psycopg.connect(postgres_conninfo) as holder:
            row = holder.execute(
                sql.SQL(
                    "SELECT tableoid::regclass::text FROM {} WHERE conversation_id = %s"
                ).format(sql.Identifier(settings.postgres_schema, "turn_keys")),
                (conversation_id,),
            ).fetchone()
            assert row is not None
            # Read committed: the snapshot ends with the statement, the lock
            # (ACCESS SHARE on the partition) with the transaction.
            holder.execute(f"SELECT count(*) FROM {row[0]}").fetchone()
            started = time.monotonic()
            receipt = ledger.delete_history("alice", conversation_id, turn_ids=["t1"])
            elapsed = time.monotonic() - started
            assert receipt.purge is not None
            assert receipt.purge.keys_destroyed == 1
            assert receipt.purge.compaction_pending
            assert any(r.startswith("lock:") for r in receipt.purge.pending_reasons), (
                receipt.purge.pending_reasons
            )
            # Generous: the lock timeout is 200 ms; the holder keeps its lock.
            assert elapsed < 5.0
            assert view.needs_compaction(ledger.name)
            holder.rollback()
        view.checkpoint_wait_seconds = 30.0  # the shared server may be busy
        report = ledger.purge_deleted_history()
        assert not report.compaction_pending, report.pending_reasons
        assert ledger.get_history("alice", conversation_id).items[1].question == "q"
    finally:
        ledger.close()
