"""PostgreSQL: a purge is complete only when pg_wal holds no destroyed key.

On a private cluster with `wal_recycle = on` (PostgreSQL's default), segments
that held the keys are renamed for reuse with their contents: the purge must
say "pending: WAL retention" and why, `turnledger purge` must exit with the
pending status, and the start-up check must name the setting. Once the
operator turns it off (a reload, as scripts/postgres-up does), the next run
moves the insert position past every segment that existed at the rewrite,
recycled ones included, and the copy of pg_wal no longer opens the turns.
"""

from __future__ import annotations

import shutil
from pathlib import Path

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
from tests.integration.private_cluster import PrivateCluster, private_cluster
from tests.integration.test_forensic_postgres import _key_table, _settings
from turnledger.infra.cli import main
from turnledger.infra.persistence import master_key, open_conversations
from turnledger.infra.purge import EXIT_PENDING
from turnledger.infra.purge_retry import server_findings
from turnledger.infra.wal import WAL_SETTINGS

pytestmark = pytest.mark.postgres


def _current_segment(cluster: PrivateCluster) -> str:
    with cluster.connect() as connection:
        row = connection.execute(
            "SELECT pg_walfile_name(pg_current_wal_insert_lsn() + 1)"
        ).fetchone()
    assert row is not None
    return str(row[0])


def _fill_segment_start(cluster: PrivateCluster) -> str:
    with cluster.connect() as connection:
        connection.execute("SELECT pg_current_xact_id()")
        connection.execute("SELECT pg_switch_wal()")
        segment = _current_segment(cluster)
        connection.execute("CREATE TABLE filler (x text)")
        while True:
            row = connection.execute(
                "SELECT file_offset FROM "
                "pg_walfile_name_offset(pg_current_wal_insert_lsn())"
            ).fetchone()
            assert row is not None and _current_segment(cluster) == segment
            if row[0] > 10 * 1024 * 1024:
                return segment
            connection.execute(
                "INSERT INTO filler SELECT repeat('x', 1000) "
                "FROM generate_series(1, 500)"
            )


def test_recycled_wal_keeps_the_purge_pending_until_the_operator_turns_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with private_cluster({"wal_recycle": "on", "min_wal_size": "80MB"}) as cluster:
        settings = _settings(cluster)
        assert any("wal_recycle=on" in f for f in server_findings(settings))
        master = master_key(settings)
        ledger = open_conversations(settings)
        try:
            # Start a segment and fill ~10 MB of it first, so the keys land
            # late in it: a recycled copy keeps them even after new records
            # overwrite its beginning.
            segment = _fill_segment_start(cluster)
            scenario = write_scenario(ledger)
            recorded = _key_table(cluster, scenario.conversation_id)
            assert _current_segment(cluster) == segment  # keys in its tail
            with cluster.connect() as connection:
                # The segment holding the keys is recycled: renamed to a name
                # beyond the one being written, contents and all.
                connection.execute("SELECT pg_current_xact_id()")
                connection.execute("SELECT pg_switch_wal()")
                connection.execute("CHECKPOINT")
            current = _current_segment(cluster)
            wal = read_all(files_under(cluster.data_dir / "pg_wal"))
            recycled = [
                name
                for name, content in wal.items()
                if Path(name).name > current and recorded["t1"] in content
            ]
            assert recycled, "no recycled segment holds a key: the setup is wrong"
            receipt = ledger.delete_history(
                OWNER, scenario.conversation_id, turn_ids=list(DOOMED)
            )
            assert receipt.purge is not None and receipt.purge.compaction_pending
            assert any(
                reason.startswith("WAL retention: wal_recycle=on")
                for reason in receipt.purge.pending_reasons
            ), receipt.purge.pending_reasons
            destroyed = {
                k: v
                for k, v in recorded.items()
                if k not in _key_table(cluster, scenario.conversation_id)
            }
            wal = read_all(files_under(cluster.data_dir / "pg_wal"))
            # Pending is the truth: renamed segments still hold the keys.
            assert attack(scenario, wal, destroyed, master) != {}

            for name, value in {
                "TURNLEDGER_PERSISTENCE": "postgres",
                "TURNLEDGER_POSTGRES_HOST": settings.postgres_host,
                "TURNLEDGER_POSTGRES_PORT": str(settings.postgres_port),
                "TURNLEDGER_POSTGRES_SCHEMA": settings.postgres_schema,
                "TURNLEDGER_MASTER_KEY": settings.master_key.get_secret_value(),  # type: ignore[union-attr]
            }.items():
                monkeypatch.setenv(name, value)
            monkeypatch.chdir(tmp_path)
            assert main(["purge"]) == EXIT_PENDING
            out = capsys.readouterr().out
            assert "compaction pending" in out and "wal_recycle=on" in out

            with cluster.connect() as connection:
                for name, value in WAL_SETTINGS.items():
                    connection.execute(f"ALTER SYSTEM SET {name} = '{value}'")
                connection.execute("SELECT pg_reload_conf()")
            assert server_findings(settings) == []
            assert main(["purge"]) == 0
            assert "compaction complete" in capsys.readouterr().out

            with cluster.connect() as connection:
                connection.execute("CHECKPOINT")
            shutil.copytree(cluster.data_dir, tmp_path / "copy")
            copy = read_all(files_under(tmp_path / "copy"))
            assert attack(scenario, copy, destroyed, master) == {}
            assert hits(copy, needles(scenario, destroyed, master)) == []
            survivors = {key_id: recorded[key_id] for key_id in scenario.kept}
            assert set(attack(scenario, copy, survivors, master)) == set(scenario.kept)
        finally:
            ledger.close()
