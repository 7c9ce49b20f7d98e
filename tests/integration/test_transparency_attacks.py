"""Attacks by someone who can write the database and recomputes every seal.

A checkpoint is taken first; then one plain SQL edit; then `turnledger audit
--checkpoint DIR` must exit 1, print a report (never a traceback) and name
the event. The hash chain alone misses the re-sealed edits (checked too).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from pydantic import SecretStr

from tests.integration.forger import Forger
from tests.integration.test_audit import _environment, run_turns
from turnledger.domain.findings import (
    CHECKPOINT_MISMATCH,
    LOG_CHANGED,
    LOG_INSERTED,
    LOG_REMOVED,
    LOG_TRUNCATED,
    MALFORMED,
)
from turnledger.infra.checkpoint import write_checkpoint
from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.raw_log import open_raw_log
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key
from turnledger.infra.transparency_audit import audit_against_checkpoint

SQL_STORES = pytest.mark.parametrize(
    "settings",
    ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)


@pytest.fixture
def signed(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The test's store with a signing key, also set for the CLI."""
    key = new_signing_key()
    for name, value in _environment(settings).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TURNLEDGER_AUDIT_SIGNING_KEY", key)
    return settings.model_copy(update={"audit_signing_key": SecretStr(key)})


@pytest.fixture
def store(signed: Settings, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Three conversations and a checkpoint of them in a directory of its own."""
    ledger = open_conversations(signed)
    try:
        alice, _ = run_turns(ledger, "alice", turns=3)
        bob, _ = run_turns(ledger, "bob", turns=3)
        carol, _ = run_turns(ledger, "carol", turns=2)
    finally:
        ledger.close()
    out = tmp_path / "checkpoints"
    checkpoint = write_checkpoint(None, signed, out)
    forger = Forger(signed)
    yield {
        "settings": signed,
        "alice": alice,
        "bob": bob,
        "carol": carol,
        "out": out,
        "checkpoint": checkpoint,
        "forger": forger,
    }
    forger.close()


def cli_audit(out: Path, report: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    code = main(
        ["audit", "--checkpoint", str(out), "--no-index", "--json", str(report)]
    )
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert code in (0, 1), captured.err
    return code, captured.out, json.loads(report.read_text())


def located(document: dict[str, Any]) -> set[tuple[str, str | None, int | None]]:
    return {
        (f["kind"], f["conversation_id"], f["version"]) for f in document["failures"]
    }


def chain_only_ok(settings: Settings) -> bool:
    """What the audit said before checkpoints: chains and versions alone."""
    ledger = open_conversations(settings)
    log = open_raw_log(settings, ledger)
    try:
        return Auditor(ledger, raw_log=log).audit(receipts=False, read_side=False).ok
    finally:
        log.close()
        ledger.close()


@SQL_STORES
def test_untouched_and_extended_logs_pass(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, document = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 0 and "audit passed" in out
    assert document["checkpoint"]["tree_size"] == 11
    ledger = open_conversations(store["settings"])
    try:
        run_turns(ledger, "dave", turns=1)  # legitimate writes after the checkpoint
    finally:
        ledger.close()
    code, _, document = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 0
    assert document["checkpoint"]["log_events"] == 13


ATTACKS: dict[str, Callable[[dict[str, Any]], set[tuple[str, str | None, Any]]]] = {}


def attack(
    function: Callable[[dict[str, Any]], Any],
) -> Callable[[dict[str, Any]], Any]:
    ATTACKS[function.__name__] = function
    return function


@attack
def rewrite_a_conversation(s: dict[str, Any]) -> set[tuple[str, str | None, Any]]:
    version = s["forger"].rewrite(s["bob"], b'"owner_id":"bob"', b'"owner_id":"eve"')
    return {(LOG_CHANGED, str(s["bob"]), version)}


@attack
def truncate_a_conversation(s: dict[str, Any]) -> set[tuple[str, str | None, Any]]:
    s["forger"].truncate(s["bob"], keep=2)
    return {(LOG_REMOVED, str(s["bob"]), 3), (LOG_REMOVED, str(s["bob"]), 4)}


@attack
def truncate_the_newest(s: dict[str, Any]) -> set[tuple[str, str | None, Any]]:
    s["forger"].truncate(s["carol"], keep=1)
    return {(LOG_TRUNCATED, str(s["carol"]), 2)}


@attack
def delete_a_conversation(s: dict[str, Any]) -> set[tuple[str, str | None, Any]]:
    s["forger"].delete_conversation(s["alice"])
    return {(LOG_REMOVED, str(s["alice"]), version) for version in range(1, 5)}


@attack
def forge_an_append_inside_the_range(
    s: dict[str, Any],
) -> set[tuple[str, str | None, Any]]:
    forger: Forger = s["forger"]
    bob_head = forger.events(s["bob"])[-1][0]
    forger.make_room(bob_head)  # carol's events move up one
    version = forger.append(s["bob"], b'{"forged":true}', notification_id=bob_head + 1)
    return {(LOG_CHANGED, str(s["bob"]), version)}


@attack
def append_at_notification_id_minus_one(
    s: dict[str, Any],
) -> set[tuple[str, str | None, Any]]:
    version = s["forger"].append(s["bob"], b'{"forged":true}', notification_id=-1)
    return {(LOG_INSERTED, str(s["bob"]), version), (MALFORMED, str(s["bob"]), version)}


@attack
def swap_notification_ids(s: dict[str, Any]) -> set[tuple[str, str | None, Any]]:
    forger: Forger = s["forger"]
    first = forger.events(s["alice"])[1][0]
    second = forger.events(s["carol"])[1][0]
    forger.swap_ids(first, second)
    return {(LOG_CHANGED, str(s["carol"]), 2), (LOG_CHANGED, str(s["alice"]), 2)}


@attack
def null_state(s: dict[str, Any]) -> set[tuple[str, str | None, Any]]:
    notification_id = s["forger"].events(s["bob"])[1][0]
    s["forger"].set_cell(notification_id, "state", None)
    return {(LOG_CHANGED, str(s["bob"]), 2), (MALFORMED, str(s["bob"]), 2)}


@attack
def null_topic(s: dict[str, Any]) -> set[tuple[str, str | None, Any]]:
    notification_id = s["forger"].events(s["bob"])[2][0]
    s["forger"].set_cell(notification_id, "topic", None)
    return {(LOG_CHANGED, str(s["bob"]), 3), (MALFORMED, str(s["bob"]), 3)}


@SQL_STORES
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_every_attack_is_detected_and_located(
    name: str,
    store: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = ATTACKS[name](store)
    code, out, document = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 1, out
    assert "audit FAILED" in out and CHECKPOINT_MISMATCH in out
    found = located(document)
    assert expected <= found, found
    # The same through the Python API.
    ledger = open_conversations(store["settings"])
    try:
        report = audit_against_checkpoint(ledger, store["settings"], store["out"])
    finally:
        ledger.close()
    assert not report.ok
    assert expected <= {
        (f.kind, str(f.conversation_id) if f.conversation_id else None, f.version)
        for f in report.failures
    }


@SQL_STORES
def test_resealed_rewrite_passes_the_chain_alone(store: dict[str, Any]) -> None:
    """Why checkpoints exist: the forger's chain verifies."""
    store["forger"].rewrite(store["bob"], b'"owner_id":"bob"', b'"owner_id":"eve"')
    assert chain_only_ok(store["settings"])


SQLITE_ONLY = pytest.mark.parametrize("settings", ["sqlite"], indirect=True)


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("column", "value", "expect_conversation"),
    [
        ("state", 42, True),
        ("topic", b"\xff\xfe not utf-8", True),
        ("originator_id", "not-a-uuid", False),
        ("originator_version", "seven", True),
    ],
)
def test_wrong_typed_sqlite_cells_are_located_not_a_traceback(
    column: str,
    value: Any,
    expect_conversation: bool,
    store: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    forger: Forger = store["forger"]
    notification_id = forger.events(store["bob"])[1][0]
    if isinstance(value, bytes):  # invalid UTF-8 stored as TEXT, as a DBA can
        forger.execute(
            f"UPDATE EVENTS SET {column} = CAST(%s AS TEXT) WHERE ID = %s",
            (value, notification_id),
        )
    else:
        forger.set_cell(notification_id, column, value)
    code, out, document = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 1, out
    malformed = [f for f in document["failures"] if f["kind"] == MALFORMED]
    assert malformed and malformed[0]["notification_id"] == notification_id
    if expect_conversation:
        assert malformed[0]["conversation_id"] == str(store["bob"])
    changed = [f for f in document["failures"] if f["kind"] == LOG_CHANGED]
    assert changed and changed[0]["notification_id"] == notification_id


@SQL_STORES
def test_location_survives_a_rewritten_tree_cache(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The DBA also rebuilds the tree tables from the edited rows: leaves.bin,
    outside the database, still names the event; without it the change is
    still detected, only not located."""
    settings: Settings = store["settings"]
    version = store["forger"].rewrite(
        store["bob"], b'"owner_id":"bob"', b'"owner_id":"eve"'
    )
    _drop_tree_cache(settings)
    write_checkpoint(None, settings, tmp_path / "forged")  # rebuilds the cache
    code, _, document = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 1
    assert (LOG_CHANGED, str(store["bob"]), version) in located(document)
    (store["out"] / "leaves.bin").unlink()
    code, out, document = cli_audit(store["out"], tmp_path / "r.json", capsys)
    # The report says so; the console may wrap the sentence.
    details = " ".join(f["detail"] for f in document["failures"])
    assert code == 1 and "cannot be located" in details
    assert {f["kind"] for f in document["failures"]} >= {CHECKPOINT_MISMATCH}


def _drop_tree_cache(settings: Settings) -> None:
    if settings.persistence == "sqlite":
        (settings.data_dir / "merkle.sqlite3").unlink()
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as connection:
        for name in ("merkle_nodes", "merkle_leaves", "merkle_tracking"):
            connection.execute(
                sql.SQL("DROP TABLE {}").format(
                    sql.Identifier(settings.postgres_schema, name)
                )
            )


@SQL_STORES
def test_a_checkpoint_writer_refuses_a_log_that_no_longer_extends_it(
    store: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    store["forger"].rewrite(store["bob"], b'"owner_id":"bob"', b'"owner_id":"eve"')
    _drop_tree_cache(store["settings"])
    assert main(["checkpoint", "--out", str(store["out"])]) == 1
    assert "does not extend checkpoint" in capsys.readouterr().err


@SQL_STORES
def test_bad_checkpoint_or_key_cannot_run_exit_2(
    store: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["audit", "--checkpoint", str(bad)]) == 2
    assert main(["audit", "--checkpoint", str(tmp_path / "missing")]) == 2
    assert main(["audit", "--against", str(bad)]) == 2
    forged = json.loads(next(store["out"].glob("checkpoint-*.json")).read_text())
    forged["tree_size"] = 3
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    assert main(["audit", "--checkpoint", str(tmp_path / "forged.json")]) == 2
    monkeypatch.setenv("TURNLEDGER_AUDIT_SIGNING_KEY", "not base64!")
    assert main(["checkpoint", "--out", str(tmp_path / "c")]) == 2
    monkeypatch.setenv("TURNLEDGER_AUDIT_SIGNING_KEY", new_signing_key())
    assert main(["audit", "--checkpoint", str(store["out"])]) == 2  # another key
    err = capsys.readouterr().err
    assert "Traceback" not in err and "could not run" in err


def _ids(values: list[UUID]) -> list[str]:
    return [str(v) for v in values]


@SQL_STORES
def test_an_auditor_pins_the_public_key_or_is_told_it_did_not(
    store: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from turnledger.infra.signing import signing_key

    public = store["checkpoint"].to_json()["public_key"]
    assert (
        public
        == base64.b64encode(
            signing_key(store["settings"]).public_key().public_bytes_raw()
        ).decode()
    )
    monkeypatch.delenv("TURNLEDGER_AUDIT_SIGNING_KEY")
    code, out, _ = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 0 and "no audit key configured" in out
    monkeypatch.setenv("TURNLEDGER_AUDIT_PUBLIC_KEY", public)
    code, out, _ = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 0 and "no audit key configured" not in out
    other = base64.b64encode(
        signing_key(
            store["settings"].model_copy(
                update={"audit_signing_key": SecretStr(new_signing_key())}
            )
        )
        .public_key()
        .public_bytes_raw()
    ).decode()
    monkeypatch.setenv("TURNLEDGER_AUDIT_PUBLIC_KEY", other)
    assert main(["audit", "--checkpoint", str(store["out"])]) == 2
    assert "not by the configured audit key" in capsys.readouterr().err


@SQL_STORES
def test_the_audit_creates_no_tree_cache_and_proofs_refuse_a_changed_event(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings: Settings = store["settings"]
    _drop_tree_cache(settings)
    code, _, _ = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 0  # leaves.bin and the rows suffice
    if settings.persistence == "sqlite":
        assert not (settings.data_dir / "merkle.sqlite3").exists()
    else:
        import psycopg

        with psycopg.connect(settings.postgres_conninfo()) as connection:
            found = connection.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s "
                "AND tablename LIKE 'merkle%%'",
                (settings.postgres_schema,),
            ).fetchone()
        assert found == (0,)
    store["forger"].rewrite(store["bob"], b'"owner_id":"bob"', b'"owner_id":"eve"')
    prove = [
        "prove",
        "event",
        str(store["bob"]),
        "1",
        "--checkpoint",
        str(store["out"]),
    ]
    assert main(prove) == 1
    assert "integrity failure" in capsys.readouterr().err


@SQL_STORES
def test_an_altered_tree_cache_alone_stops_checkpoints_until_it_is_rebuilt(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings: Settings = store["settings"]
    if settings.persistence == "sqlite":
        import sqlite3

        with sqlite3.connect(settings.data_dir / "merkle.sqlite3") as connection:
            connection.execute("UPDATE merkle_nodes SET hash = zeroblob(32)")
    else:
        import psycopg
        from psycopg import sql

        with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as c:
            c.execute(
                sql.SQL("UPDATE {} SET hash = %s").format(
                    sql.Identifier(settings.postgres_schema, "merkle_nodes")
                ),
                (bytes(32),),
            )
    code, _, _ = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 0  # the rows are what the checkpoint signed
    assert main(["checkpoint", "--out", str(store["out"])]) == 1
    assert "only the cache was altered" in capsys.readouterr().err
    _drop_tree_cache(settings)
    assert main(["checkpoint", "--out", str(store["out"])]) == 0
