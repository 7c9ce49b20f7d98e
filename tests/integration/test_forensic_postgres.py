"""PostgreSQL: a copy of the whole cluster opens no deleted turn.

On a private cluster configured like scripts/postgres-up, the attacker of
tests/integration/forensic.py gets the whole data directory (pg_wal included)
after purge and CHECKPOINT, plus a pg_dump, and the master key. Before the
deletion the same attack opens the doomed turns (it works); after it, it opens
none, and no marker, wrapped key or data key of a destroyed item is in any
copied byte, while the surviving turns still open from the same copy.

The second test holds an xid open in another database of the cluster during
the purge: the purge reports pending (naming it), the keys are still on disk
(pending is the truth), and once that transaction ends the service's
background retry completes the purge without anyone calling it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

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
from tests.integration.private_cluster import BIN, PrivateCluster, private_cluster
from turnledger.domain.conversation import fold_key_id
from turnledger.infra.http.app import create_app
from turnledger.infra.persistence import master_key, open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

pytestmark = pytest.mark.postgres

SCHEMA = "turnledger"


def _settings(cluster: PrivateCluster) -> Settings:
    return Settings(
        _env_file=None,
        persistence="postgres",
        postgres_host="127.0.0.1",
        postgres_port=cluster.port,
        postgres_schema=SCHEMA,
        master_key=new_master_key(),
    )


def _key_table(cluster: PrivateCluster, conversation_id: UUID) -> dict[str, bytes]:
    """The conversation's wrapped keys, read from the key table itself."""
    with cluster.connect() as connection:
        rows = connection.execute(
            sql.SQL(
                "SELECT turn_id, wrapped_key FROM {} WHERE conversation_id = %s"
            ).format(sql.Identifier(SCHEMA, "turn_keys")),
            (conversation_id,),
        ).fetchall()
    return {str(turn_id): bytes(blob) for turn_id, blob in rows}


def _copy_everything(cluster: PrivateCluster, destination: Path) -> dict[str, bytes]:
    """CHECKPOINT, then the whole data directory (pg_wal included) and a pg_dump."""
    with cluster.connect() as connection:
        connection.execute("CHECKPOINT")
    shutil.copytree(cluster.data_dir, destination)
    dump = subprocess.run(
        [
            str(BIN / "pg_dump"),
            "--host=127.0.0.1",
            f"--port={cluster.port}",
            "--username=postgres",
            "postgres",
        ],
        check=True,
        capture_output=True,
    ).stdout
    contents = read_all(files_under(destination))
    assert any("/pg_wal/" in name for name in contents)
    contents["pg_dump"] = dump
    return contents


def test_a_copy_of_the_whole_cluster_opens_no_deleted_turn(tmp_path: Path) -> None:
    with private_cluster() as cluster:
        settings = _settings(cluster)
        master = master_key(settings)
        ledger = open_conversations(settings)
        view: Any = ledger.vault.purge_view
        view.checkpoint_wait_seconds = 30.0  # complete before returning
        try:
            scenario = write_scenario(ledger)
            recorded = _key_table(cluster, scenario.conversation_id)
            fold_key = fold_key_id(scenario.fold_id)
            assert set(DOOMED) | set(scenario.kept) | {fold_key} <= set(recorded)

            # The attack works: before the deletion it opens the doomed turns.
            before = _copy_everything(cluster, tmp_path / "before")
            doomed_keys = {key_id: recorded[key_id] for key_id in DOOMED}
            assert set(attack(scenario, before, doomed_keys, master)) == set(DOOMED)
            shutil.rmtree(tmp_path / "before")

            receipt = ledger.delete_history(
                OWNER, scenario.conversation_id, turn_ids=list(DOOMED)
            )
            assert receipt.purge is not None
            assert not receipt.purge.compaction_pending, receipt.purge.pending_reasons
            remaining = _key_table(cluster, scenario.conversation_id)
            destroyed = {k: v for k, v in recorded.items() if k not in remaining}
            # The fold covered t1 and t2: its key went with theirs.
            assert set(destroyed) == set(DOOMED) | {fold_key}

            copy = _copy_everything(cluster, tmp_path / "after")
            assert attack(scenario, copy, destroyed, master) == {}
            assert hits(copy, needles(scenario, destroyed, master)) == []
            # Text is sealed: not even the surviving turns' markers are in clear.
            kept_markers = {
                marker: marker.encode()
                for key_id in scenario.kept
                for marker in scenario.markers[key_id]
            }
            assert hits(copy, kept_markers) == []
            # Positive control: the same copy and attack open every survivor.
            survivors = {key_id: recorded[key_id] for key_id in scenario.kept}
            opened = attack(scenario, copy, survivors, master)
            assert set(opened) == set(scenario.kept)
            assert scenario.markers["t0"][0] in " ".join(opened["t0"])
        finally:
            ledger.close()


def _purge_state(client: TestClient, token: str) -> dict[str, Any]:
    response = client.get("/v1/purge", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_an_xid_held_in_another_database_keeps_the_purge_pending_until_it_ends(
    tmp_path: Path,
) -> None:
    with private_cluster() as cluster:
        with cluster.connect() as connection:
            connection.execute("CREATE DATABASE elsewhere")
        settings = _settings(cluster)
        master = master_key(settings)
        ledger = open_conversations(settings)
        view: Any = ledger.vault.purge_view
        view.horizon_wait_seconds = 0.5
        app = create_app(settings, ledger=ledger)
        try:
            scenario = write_scenario(ledger)
            recorded = _key_table(cluster, scenario.conversation_id)
            with TestClient(app) as client:  # the lifespan starts the retry
                token = app.state.service.registry.add("ops", "console").token
                with psycopg.connect(
                    cluster.conninfo.replace("dbname=postgres", "dbname=elsewhere")
                ) as elsewhere:
                    elsewhere.execute("SELECT pg_current_xact_id()")  # holds an xid
                    receipt = ledger.delete_history(
                        OWNER, scenario.conversation_id, turn_ids=list(DOOMED)
                    )
                    assert receipt.purge is not None
                    assert receipt.purge.compaction_pending
                    reasons = " ".join(receipt.purge.pending_reasons)
                    assert "database elsewhere" in reasons, reasons
                    state = _purge_state(client, token)
                    assert state["state"] == "pending"
                    assert "database elsewhere" in " ".join(state["pending_reasons"])
                    destroyed = {
                        k: v
                        for k, v in recorded.items()
                        if k not in _key_table(cluster, scenario.conversation_id)
                    }
                    assert set(DOOMED) <= set(destroyed)
                    # Pending is the truth: the keys are still in the files.
                    held = _copy_everything(cluster, tmp_path / "held")
                    assert attack(scenario, held, destroyed, master) != {}
                    shutil.rmtree(tmp_path / "held")
                    elsewhere.rollback()
                # Nobody calls the purge: the service's retry completes it.
                deadline = time.monotonic() + 60
                while _purge_state(client, token)["state"] != "complete":
                    assert time.monotonic() < deadline, _purge_state(client, token)
                    time.sleep(0.2)
            copy = _copy_everything(cluster, tmp_path / "after")
            assert attack(scenario, copy, destroyed, master) == {}
            assert hits(copy, needles(scenario, destroyed, master)) == []
            survivors = {key_id: recorded[key_id] for key_id in scenario.kept}
            assert set(attack(scenario, copy, survivors, master)) == set(scenario.kept)
        finally:
            ledger.close()
