"""PostgreSQL: compaction checks the horizon, then trusts VACUUM's own report.

The service runs as a role with just the privileges the purge needs (no
superuser, no pg_read_all_stats), and another role holds an xid in another
database. The horizon check still sees it (pg_stat_activity shows every
session's backend_xid and backend_xmin to every role: measured here) and
names it. Should the check ever miss such a transaction, VACUUM FULL keeps
the dead rows and says so: with the check switched off, the purge stays
pending on that report alone. Once the transaction ends, the next run
completes, and neither the files nor pg_wal hold the keys.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.forensic import (
    DOOMED,
    OWNER,
    attack,
    files_under,
    hits,
    needles,
    read_all,
    write_scenario,
)
from tests.integration.private_cluster import private_cluster
from tests.integration.test_forensic_postgres import _key_table, _settings
from turnledger.infra import compaction
from turnledger.infra.persistence import master_key, open_conversations

pytestmark = pytest.mark.postgres

SETUP = [
    "CREATE ROLE app LOGIN",
    "CREATE ROLE other LOGIN",
    "GRANT CREATE ON DATABASE postgres TO app",
    "CREATE DATABASE elsewhere",
    # What the purge needs for the WAL, and no more (no pg_read_all_stats).
    "GRANT EXECUTE ON FUNCTION pg_ls_waldir() TO app",
    "GRANT EXECUTE ON FUNCTION pg_switch_wal() TO app",
    "GRANT pg_checkpoint TO app",
]


@pytest.mark.parametrize("horizon_check", ["on", "switched off"])
def test_an_older_xid_of_another_role_keeps_the_purge_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, horizon_check: str
) -> None:
    if horizon_check == "switched off":
        monkeypatch.setattr(compaction, "wait_for_horizon", lambda *a, **k: [])
    with private_cluster() as cluster:
        with cluster.connect() as connection:
            for statement in SETUP:
                connection.execute(statement)
        settings = _settings(cluster).model_copy(update={"postgres_user": "app"})
        master = master_key(settings)
        ledger = open_conversations(settings)
        view: Any = ledger.vault.purge_view
        view.horizon_wait_seconds = 0.2
        view.checkpoint_wait_seconds = 30.0
        try:
            scenario = write_scenario(ledger)
            recorded = _key_table(cluster, scenario.conversation_id)
            other = f"host=127.0.0.1 port={cluster.port} user=other dbname=elsewhere"
            with psycopg.connect(other) as elsewhere:
                elsewhere.execute("SELECT pg_current_xact_id()")
                receipt = ledger.delete_history(
                    OWNER, scenario.conversation_id, turn_ids=list(DOOMED)
                )
                assert receipt.purge is not None and receipt.purge.compaction_pending
                state = receipt.purge.state
                if horizon_check == "on":
                    assert "in database elsewhere" in state, state
                else:
                    assert "VACUUM FULL kept" in state, state
                with cluster.connect() as connection:
                    connection.execute("CHECKPOINT")  # pages to disk
                held = read_all(files_under(cluster.data_dir / "base"))
                destroyed = {k: recorded[k] for k in DOOMED}
                assert attack(scenario, held, destroyed, master) != {}
                elsewhere.rollback()
            report = ledger.purge_deleted_history()
            assert not report.compaction_pending, report.state
            with cluster.connect() as connection:
                connection.execute("CHECKPOINT")
            shutil.copytree(cluster.data_dir, tmp_path / "copy")
            copy = read_all(files_under(tmp_path / "copy"))
            assert attack(scenario, copy, destroyed, master) == {}
            assert hits(copy, needles(scenario, destroyed, master)) == []
        finally:
            ledger.close()
