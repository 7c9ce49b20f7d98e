"""PostgreSQL statement logging must not copy wrapped keys into the server log.

With `log_min_duration_statement = 0` or `log_statement = all`, the server logs
every statement with its parameter values: the key store's INSERT carries the
wrapped key. The key store's sessions set `log_parameter_max_length = 0`
where the role may (superuser, or GRANT SET ON PARAMETER); a role that may
not leaves the server's settings in force, and the key is logged: the bound
docs/deletion.md states. The positive control shows logging was on.
"""

from __future__ import annotations

import os

import psycopg
import pytest

from tests.integration.private_cluster import PrivateCluster, private_cluster
from tests.integration.test_forensic_postgres import _key_table, _settings
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.purge import PurgeReport
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres

LOGGING = {"log_min_duration_statement": "0", "log_statement": "all"}


def _server_log(cluster: PrivateCluster) -> bytes:
    return (cluster.data_dir.parent / "log").read_bytes()


def _write_and_delete(
    cluster: PrivateCluster, settings: Settings
) -> tuple[bytes, PurgeReport]:
    ledger = open_conversations(settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        for turn_id in ("t1", "t2"):
            ledger.confirm_turn(
                "alice", conversation_id, turn_id=turn_id, question="q", answer="a"
            )
        wrapped = _key_table(cluster, conversation_id)["t1"]
        receipt = ledger.delete_history("alice", conversation_id, turn_ids=["t1"])
        assert receipt.purge is not None
    finally:
        ledger.close()
    return wrapped, receipt.purge


def test_the_key_store_logs_no_key_bytes_under_statement_logging() -> None:
    with private_cluster(LOGGING) as cluster:
        control = os.urandom(16)
        with cluster.connect() as connection:
            connection.execute("SELECT %s::bytea", (control,))
        wrapped, _ = _write_and_delete(cluster, _settings(cluster))
        log = _server_log(cluster)
        assert control.hex().encode() in log  # statement logging is on
        assert wrapped.hex().encode() not in log
        assert wrapped not in log


def test_a_role_that_may_not_change_logging_leaves_the_key_in_the_log() -> None:
    with private_cluster(LOGGING) as cluster:
        with cluster.connect() as connection:
            connection.execute("CREATE ROLE app LOGIN")
            connection.execute("GRANT CREATE ON DATABASE postgres TO app")
        settings = _settings(cluster).model_copy(update={"postgres_user": "app"})
        with psycopg.connect(settings.postgres_conninfo()) as connection:
            assert connection.execute("SELECT current_user").fetchone() == ("app",)
        wrapped, report = _write_and_delete(cluster, settings)
        assert wrapped.hex().encode() in _server_log(cluster)
        # Nor may it list pg_wal: the purge says so rather than claim success.
        assert report.compaction_pending
        assert "grant pg_monitor" in report.state, report.state
