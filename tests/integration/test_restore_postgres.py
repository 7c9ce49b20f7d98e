"""PostgreSQL: a `pg_dump` restored into a fresh database, and a file-level base
backup restored as a server of its own, bring no deleted turn back.

Both run on a private cluster (tests/integration/private_cluster.py), never the
shared server. The backup is taken after the turns were written and before
they were deleted; after the restore, every read path serves none of the
deleted text (tests/integration/restore_paths.py), and no byte of a destroyed
key is left in the restored server's files, WAL included.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from tests.integration.forensic import (
    DOOMED,
    OWNER,
    Scenario,
    files_under,
    hits,
    needles,
    read_all,
    write_scenario,
)
from tests.integration.private_cluster import (
    BIN,
    PORTS,
    PrivateCluster,
    _as_postgres,
    private_cluster,
)
from tests.integration.restore_paths import assert_nothing_deleted_is_readable
from turnledger.domain.conversation import fold_key_id
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import decode_master_key, new_master_key

pytestmark = pytest.mark.postgres

SCHEMA = "turnledger"


def _settings(port: int, dbname: str, key: str) -> Settings:
    return Settings(
        _env_file=None,
        persistence="postgres",
        postgres_host="127.0.0.1",
        postgres_port=port,
        postgres_dbname=dbname,
        postgres_user="postgres",
        postgres_schema=SCHEMA,
        master_key=key,
    )


def _wrapped_keys(settings: Settings, conversation_id: UUID) -> dict[str, bytes]:
    with psycopg.connect(settings.postgres_conninfo()) as connection:
        rows = connection.execute(
            sql.SQL(
                "SELECT turn_id, wrapped_key FROM {} WHERE conversation_id = %s"
            ).format(sql.Identifier(SCHEMA, "turn_keys")),
            (conversation_id,),
        ).fetchall()
    return {str(turn_id): bytes(blob) for turn_id, blob in rows}


def _write(settings: Settings) -> tuple[Scenario, int, dict[str, bytes]]:
    ledger = open_conversations(settings)
    try:
        scenario = write_scenario(ledger)
        version = ledger.get_conversation(OWNER, scenario.conversation_id).version
    finally:
        ledger.close()
    recorded = _wrapped_keys(settings, scenario.conversation_id)
    doomed = [*DOOMED, fold_key_id(scenario.fold_id)]
    return scenario, version, {key_id: recorded[key_id] for key_id in doomed}


def _delete(settings: Settings, scenario: Scenario) -> None:
    ledger = open_conversations(settings)
    try:
        ledger.delete_history(OWNER, scenario.conversation_id, turn_ids=list(DOOMED))
        _wait_for_compaction(ledger)
    finally:
        ledger.close()


def _wait_for_compaction(ledger: Conversations) -> None:
    # The CHECKPOINT that clears the WAL runs beside the deletion.
    deadline = time.monotonic() + 60
    while ledger.vault.purge_view.needs_compaction(ledger.name):
        assert time.monotonic() < deadline, ledger.purge_deleted_history()
        time.sleep(0.2)
        ledger.purge_deleted_history()


def _open_restored(settings: Settings, scenario: Scenario) -> None:
    ledger = open_conversations(settings)
    try:
        report = ledger.restore_report
        _wait_for_compaction(ledger)
        page = ledger.get_history(OWNER, scenario.conversation_id, limit=50)
    finally:
        ledger.close()
    assert report is not None
    assert report.deletions_behind == 2  # the turns' deletion, the fold's
    assert report.turns_deleted_again == len(DOOMED)
    deleted = {item.turn_id for item in page.items if item.deleted_at is not None}
    assert deleted == set(DOOMED)


def _assert_keys_are_back(
    directory: Path, scenario: Scenario, wrapped: dict[str, bytes], key: str
) -> None:
    """The restored files hold the destroyed keys: the check has work to do."""
    found = hits(
        read_all(files_under(directory)),
        needles(scenario, wrapped, decode_master_key(key)),
    )
    assert found != []


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=300)


def test_a_pg_dump_restored_into_a_fresh_database_serves_no_deleted_turn(
    tmp_path: Path,
) -> None:
    key = new_master_key()
    with private_cluster() as cluster:
        with cluster.connect() as admin:
            admin.execute("CREATE DATABASE source")
        source = _settings(cluster.port, "source", key)
        scenario, version, wrapped = _write(source)
        dump = tmp_path / "source.sql"
        _run(
            str(BIN / "pg_dump"),
            *("-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres"),
            *("-d", "source", "-f", str(dump)),
        )
        _delete(source, scenario)
        with cluster.connect() as admin:
            admin.execute("CREATE DATABASE restored")
        _run(
            str(BIN / "psql"),
            *("-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres"),
            *("-d", "restored", "-v", "ON_ERROR_STOP=1", "-q", "-f", str(dump)),
        )
        restored = _settings(cluster.port, "restored", key)
        _assert_keys_are_back(cluster.data_dir, scenario, wrapped, key)
        _open_restored(restored, scenario)
        assert_nothing_deleted_is_readable(
            restored,
            scenario,
            version=version,
            wrapped=wrapped,
            master_key=decode_master_key(key),
            files=read_all(files_under(cluster.data_dir)),
        )


@contextmanager
def _server_from(backup: Path, cluster: PrivateCluster) -> Iterator[int]:
    """A second server started on the restored base backup."""
    port = next(port for port in PORTS if port != cluster.port)
    log = backup.parent / "restored.log"
    pg_ctl = [str(BIN / "pg_ctl"), "-D", str(backup), "-l", str(log), "-w"]
    subprocess.run(
        _as_postgres([*pg_ctl, "-o", f"-p {port}", "start"]),
        check=True,
        capture_output=True,
    )
    try:
        yield port
    finally:
        subprocess.run(
            _as_postgres([*pg_ctl, "stop", "-m", "immediate"]), capture_output=True
        )


def test_a_base_backup_restored_serves_no_deleted_turn() -> None:
    key = new_master_key()
    with private_cluster() as cluster:
        live = _settings(cluster.port, "postgres", key)
        scenario, version, wrapped = _write(live)
        backup = cluster.data_dir.parent / "backup"
        subprocess.run(
            _as_postgres(
                [
                    str(BIN / "pg_basebackup"),
                    *("-h", "127.0.0.1", "-p", str(cluster.port), "-U", "postgres"),
                    *("-D", str(backup), "-X", "stream", "-c", "fast"),
                ]
            ),
            check=True,
            capture_output=True,
            timeout=300,
        )
        _delete(live, scenario)
        with _server_from(backup, cluster) as port:
            restored = _settings(port, "postgres", key)
            _assert_keys_are_back(backup, scenario, wrapped, key)
            _open_restored(restored, scenario)
            assert_nothing_deleted_is_readable(
                restored,
                scenario,
                version=version,
                wrapped=wrapped,
                master_key=decode_master_key(key),
                files=read_all(files_under(backup)),
            )
