"""The auditor's blind spots: a DBA who edits the tree cache as well as the log.

The tree tables (`merkle_*`) are a cache the attacker controls. A checkpoint
must cover every stored row up to its size, checked against the log itself;
the audit must locate a change from what the checkpoint directory holds; a
cache node the attacker zeroed stops the next checkpoint; a row given a
notification id below the log's is an integrity failure for `prove`, too.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.integration import test_transparency_attacks as attacks
from tests.integration.forger import Forger
from tests.integration.test_audit import run_turns
from tests.integration.test_transparency_attacks import SQL_STORES, cli_audit, located
from turnledger.domain.findings import LOG_REMOVED
from turnledger.infra.checkpoint import checkpoint_files
from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

signed = attacks.signed  # the fixtures: a signed store with a checkpoint
store = attacks.store


def cache_sql(settings: Settings, statement: str, params: tuple[Any, ...] = ()) -> Any:
    """Run SQL on the tree cache as the DBA: `{nodes}`, `{leaves}`, `{tracking}`."""
    names = {n: f"merkle_{n}" for n in ("nodes", "leaves", "tracking")}
    if settings.persistence == "sqlite":
        with sqlite3.connect(settings.data_dir / "merkle.sqlite3") as connection:
            rows = connection.execute(
                statement.format(**names).replace("%s", "?"), params
            ).fetchall()
        connection.close()
        return rows
    tables = {n: sql.Identifier(settings.postgres_schema, t) for n, t in names.items()}
    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as connection:
        cursor = connection.execute(sql.SQL(statement).format(**tables), params)
        return cursor.fetchall() if cursor.description else []


@SQL_STORES
def test_a_checkpoint_covers_every_row_whatever_the_tracking_row_says(
    store: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The attacker moves `merkle_tracking` past three new events, so a
    checkpoint would never cover them and their later deletion would pass."""
    settings: Settings = store["settings"]
    ledger = open_conversations(settings)
    try:
        run_turns(ledger, "dave", turns=2)  # three events after the checkpoint
    finally:
        ledger.close()
    newest = max(store["forger"].ids())
    cache_sql(settings, "UPDATE {tracking} SET notification_id = %s", (newest,))
    before = checkpoint_files(store["out"])
    assert main(["checkpoint", "--out", str(store["out"])]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "14 rows" in err and "11" in err
    assert checkpoint_files(store["out"]) == before  # nothing signed


@SQL_STORES
def test_the_audit_locates_from_the_checkpoint_directory_not_the_cache(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Alice's conversation is deleted and the cache's leaf inputs of her
    events are overwritten with bob's: the findings name alice's events, and
    no innocent one."""
    settings: Settings = store["settings"]
    forger: Forger = store["forger"]
    alice_ids = [row[0] for row in forger.events(store["alice"])]
    bob_first = cache_sql(
        settings,
        "SELECT leaf_input FROM {leaves} WHERE notification_id = %s",
        (forger.events(store["bob"])[0][0],),
    )[0][0]
    forger.delete_conversation(store["alice"])
    for notification_id in alice_ids:
        cache_sql(
            settings,
            "UPDATE {leaves} SET leaf_input = %s WHERE notification_id = %s",
            (bytes(bob_first), notification_id),
        )
    code, _, document = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 1
    found = located(document)
    alice = str(store["alice"])
    assert {(LOG_REMOVED, alice, version) for version in range(1, 5)} <= found, found
    assert not {f for f in found if f[1] not in (alice, None)}, found


@SQL_STORES
def test_a_zeroed_cache_node_stops_the_next_checkpoint(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings: Settings = store["settings"]
    cache_sql(
        settings,
        "UPDATE {nodes} SET hash = %s WHERE level = 1 AND idx = 0",
        (bytes(32),),
    )
    code, _, _ = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 0  # the rows still hash to the signed root
    assert main(["checkpoint", "--out", str(store["out"])]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "level 1" in err
    # A leaf hash altered in the cache is refused the same way.
    cache_sql(settings, "DELETE FROM {nodes}")
    cache_sql(settings, "DELETE FROM {leaves}")
    cache_sql(settings, "UPDATE {tracking} SET size = 0, notification_id = NULL")
    assert main(["checkpoint", "--out", str(store["out"])]) == 0
    cache_sql(
        settings, "UPDATE {leaves} SET leaf_hash = %s WHERE position = 3", (bytes(32),)
    )
    assert main(["checkpoint", "--out", str(store["out"])]) == 1
    assert "level 1 index 1 (over leaves 2..3)" in capsys.readouterr().err


@SQL_STORES
def test_prove_event_on_a_row_inserted_below_the_log_is_an_integrity_failure(
    store: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    forger: Forger = store["forger"]
    version = forger.append(store["bob"], b'{"forged":true}', notification_id=-5)
    code = main(
        [
            "prove",
            "event",
            str(store["bob"]),
            str(version),
            "--checkpoint",
            str(store["out"]),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err and "integrity failure" in err
