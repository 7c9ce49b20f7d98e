"""Deleted turns leave nothing readable in any byte the database holds.

Turn text is sealed before it reaches a database, so the marker written in
deleted turns must never be on disk at all; what a deletion must remove is the
turns' keys. These tests capture the wrapped keys and the raw data keys of
the turns to delete, show that the scan does find the wrapped keys on disk
before the deletion (so a clean scan afterwards means something), delete,
purge, and then search every file of the database (PostgreSQL: the test
database's directory after CHECKPOINT, plus a pg_dump; SQLite: every file of
the data directory, WAL included) for the marker and for every key's bytes in
raw, hex and base64 form. The WAL of the shared server is checked on a private
cluster, with the whole data directory: tests/integration/test_forensic_postgres.py.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from unittest.mock import ANY
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from turnledger.domain.conversation import Conversation
from turnledger.infra.persistence import open_conversations
from turnledger.infra.read_side import replay_log
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import KeyVault

OWNER = "owner-1"


def _forms(secret: bytes) -> list[bytes]:
    """The ways a secret could be written: raw, hex (pg_dump) and base64 (JSON)."""
    return [
        secret,
        secret.hex().encode(),
        base64.b64encode(secret),
        base64.urlsafe_b64encode(secret),
    ]


def _files_under(directory: Path) -> Iterator[Path]:
    for root, _, names in os.walk(directory):
        for name in names:
            yield Path(root) / name


def _hits(paths: Iterable[Path], needles: dict[str, bytes]) -> dict[str, list[str]]:
    """Which needles occur in which files (files that vanish mid-scan are skipped)."""
    found: dict[str, list[str]] = {}
    for path in paths:
        try:
            content = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue
        for label, needle in needles.items():
            if needle in content:
                found.setdefault(label, []).append(str(path))
    return found


def _needles(marker: str, secrets: dict[str, bytes]) -> dict[str, bytes]:
    needles = {"marker": marker.encode("utf-8")}
    for label, secret in secrets.items():
        for index, form in enumerate(_forms(secret)):
            needles[f"{label}/form{index}"] = form
    return needles


def _write_conversation(
    ledger: Conversations, marker: str, *, turns: int = 12, deleted: int = 6
) -> tuple[UUID, list[str], list[str]]:
    conversation_id = ledger.start_conversation(OWNER)
    doomed, kept = [], []
    for index in range(turns):
        turn_id = f"turn-{index}"
        if index < deleted:
            question = f"Secret {marker} number {index}, please remember it."
            answer = f"Remembered {marker}/{index}."
            doomed.append(turn_id)
        else:
            question, answer = f"Harmless question {index}", f"Harmless answer {index}"
            kept.append(turn_id)
        ledger.confirm_turn(
            OWNER, conversation_id, turn_id=turn_id, question=question, answer=answer
        )
    return conversation_id, doomed, kept


def _capture_keys(
    ledger: Conversations, conversation_id: UUID, turn_ids: list[str]
) -> dict[str, bytes]:
    vault = ledger.vault
    assert isinstance(vault, KeyVault)
    wrapped = vault.purge_view.get_many(conversation_id, turn_ids)  # type: ignore[attr-defined]
    assert sorted(wrapped) == sorted(turn_ids)
    secrets: dict[str, bytes] = {}
    for turn_id, blob in wrapped.items():
        secrets[f"wrapped:{turn_id}"] = blob
        secrets[f"data-key:{turn_id}"] = vault._unwrap(conversation_id, turn_id, blob)
    return secrets


def _delete_and_purge(
    ledger: Conversations, conversation_id: UUID, doomed: list[str]
) -> None:
    receipt = ledger.delete_history(OWNER, conversation_id, turn_ids=doomed)
    assert receipt.deleted_turn_ids == tuple(doomed)
    assert receipt.purge is not None
    assert receipt.purge.keys_destroyed == len(doomed)
    # Compaction waits for older transactions of other sessions; on a busy
    # shared server it may be deferred, and a later run completes it.
    report = receipt.purge
    for _ in range(10):
        if not report.compaction_pending:
            break
        report = ledger.purge_deleted_history()
    assert not report.compaction_pending


def _check_survivors_and_replay(
    ledger: Conversations, conversation_id: UUID, doomed: list[str], kept: list[str]
) -> None:
    page = ledger.get_history(OWNER, conversation_id, limit=100)
    by_id = {item.turn_id: item for item in page.items}
    for turn_id in doomed:
        item = by_id[turn_id]
        assert item.deleted and item.question is None and item.answer is None
    for turn_id in kept:
        index = turn_id.split("-")[1]
        assert by_id[turn_id].question == f"Harmless question {index}"
        assert by_id[turn_id].answer == f"Harmless answer {index}"
    # The whole application log still decodes, every event of every aggregate.
    notifications = ledger.recorder.select_notifications(start=None, limit=10_000)
    assert notifications
    decoded = [ledger.mapper.to_domain_event(n) for n in notifications]
    assert sum(isinstance(e, Conversation.HistoryDeleted) for e in decoded) == 1
    # Replay the whole log into a read side of its own: the same turns, the
    # same deletions, as the live read side.
    _, turns, _ = replay_log(ledger).rows()
    mine = [turn for turn in turns if turn.conversation_id == conversation_id]
    assert [turn.turn_id for turn in mine] == doomed + kept
    assert {turn.turn_id for turn in mine if turn.deleted} == set(doomed)
    deletions = [
        e
        for e in ledger.events.get(conversation_id)
        if isinstance(e, Conversation.HistoryDeleted)
    ]
    assert [(d.turn_ids, d.deleted_by) for d in deletions] == [(doomed, OWNER)]
    # The sealed text of the deleted turns is still in the log, and unreadable.
    sealed = [
        (e.turn_id, "question", e.sealed_question)
        for e in ledger.events.get(conversation_id)
        if isinstance(e, Conversation.TurnConfirmed)
    ]
    opened = ledger.vault.open_many(conversation_id, sealed, OWNER)
    assert [text is None for text in opened] == [t in doomed for t, _, _ in sealed]


# SQLite -----------------------------------------------------------------------


def test_sqlite_files_hold_no_marker_and_no_destroyed_key(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
    )
    marker = f"MARKER-{uuid.uuid4().hex}"
    ledger = open_conversations(settings)
    try:
        conversation_id, doomed, kept = _write_conversation(ledger, marker)
        secrets = _capture_keys(ledger, conversation_id, doomed)
        survivor_key = _capture_keys(ledger, conversation_id, kept[:1])[
            f"wrapped:{kept[0]}"
        ]
        needles = _needles(marker, secrets)
        before = _hits(_files_under(settings.data_dir), needles)
        # The scan finds the wrapped keys while they exist: it reads the right bytes.
        assert all(f"wrapped:{t}/form0" in before for t in doomed), before.keys()
        assert "marker" not in before  # sealed text: never on disk in the clear
        _delete_and_purge(ledger, conversation_id, doomed)
        _check_survivors_and_replay(ledger, conversation_id, doomed, kept)
        # While the store is open (its WAL in use) ...
        assert _hits(_files_under(settings.data_dir), needles) == {}
    finally:
        ledger.close()
    # ... and at rest.
    files = list(_files_under(settings.data_dir))
    assert settings.sqlite_keys_path in files and settings.sqlite_events_path in files
    assert _hits(files, {"kept": survivor_key}) == {"kept": ANY}  # positive control
    assert _hits(files, needles) == {}
    wal = settings.sqlite_keys_path.with_name(settings.sqlite_keys_path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0


# PostgreSQL -------------------------------------------------------------------


def _database_directory(conninfo: str) -> Path:
    with psycopg.connect(conninfo, autocommit=True) as connection:
        row = connection.execute(
            "SELECT current_setting('data_directory'), oid FROM pg_database "
            "WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    directory = Path(row[0]) / "base" / str(row[1])
    if not os.access(directory, os.R_OK | os.X_OK):
        message = (
            f"cannot read {directory}: this test reads PostgreSQL's files and must "
            "run as root (or the postgres user) on the database host"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return directory


def _checkpoint(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute("CHECKPOINT")


def _schema_files(conninfo: str, schema: str) -> list[Path]:
    """The files of every relation in the schema, with TOAST tables and indexes."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        data_directory = connection.execute("SHOW data_directory").fetchone()
        rows = connection.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND pg_relation_filepath(c.oid) IS NOT NULL "
            "UNION SELECT pg_relation_filepath(c.reltoastrelid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.reltoastrelid <> 0 "
            "UNION SELECT pg_relation_filepath(i.indexrelid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_index i ON i.indrelid = c.reltoastrelid WHERE n.nspname = %s",
            (schema, schema, schema),
        ).fetchall()
    assert data_directory is not None
    base = Path(data_directory[0])
    files: list[Path] = []
    for (relative,) in rows:
        main = base / relative
        files.extend(p for p in main.parent.glob(main.name + "*") if p.is_file())
    return files


def _pg_dump(settings: Settings) -> bytes:
    executable = shutil.which("pg_dump")
    if executable is None:
        message = "pg_dump is not installed (Debian: postgresql-client)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return subprocess.run(
        [
            executable,
            "--schema",
            settings.postgres_schema,
            "--host",
            settings.postgres_host,
            "--port",
            str(settings.postgres_port),
            "--username",
            settings.postgres_user,
            "--no-password",
            settings.postgres_dbname,
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PGPASSWORD": settings.postgres_password.get_secret_value()},
    ).stdout


@pytest.mark.postgres
def test_postgres_files_and_dump_hold_no_marker_and_no_destroyed_key(
    postgres_conninfo: str, postgres_settings: Settings
) -> None:
    settings = postgres_settings
    database_directory = _database_directory(postgres_conninfo)
    marker = f"MARKER-{uuid.uuid4().hex}"
    ledger = open_conversations(settings)
    try:
        conversation_id, doomed, kept = _write_conversation(ledger, marker)
        secrets = _capture_keys(ledger, conversation_id, doomed)
        survivor_key = _capture_keys(ledger, conversation_id, kept[:1])[
            f"wrapped:{kept[0]}"
        ]
        needles = _needles(marker, secrets)
        _checkpoint(postgres_conninfo)
        schema_files = _schema_files(postgres_conninfo, settings.postgres_schema)
        before = _hits(schema_files, needles)
        assert all(f"wrapped:{t}/form0" in before for t in doomed), before.keys()
        assert "marker" not in before
        dump_before = _pg_dump(settings)
        assert secrets[f"wrapped:{doomed[0]}"].hex().encode() in dump_before
        # As autovacuum would: ANALYZE samples column values into pg_statistic.
        with psycopg.connect(postgres_conninfo, autocommit=True) as connection:
            connection.execute(
                sql.SQL("ANALYZE {}").format(
                    sql.Identifier(settings.postgres_schema, "turn_keys")
                )
            )

        _delete_and_purge(ledger, conversation_id, doomed)
        _check_survivors_and_replay(ledger, conversation_id, doomed, kept)

        _checkpoint(postgres_conninfo)
        schema_files = _schema_files(postgres_conninfo, settings.postgres_schema)
        # Positive control: the surviving turns' keys are still found on disk.
        assert _hits(schema_files, {"kept": survivor_key}) == {"kept": ANY}
        assert _hits(schema_files, needles) == {}
        assert _hits(_files_under(database_directory), needles) == {}
        dump_after = _pg_dump(settings)
        assert survivor_key.hex().encode() in dump_after
        leaked = [label for label, needle in needles.items() if needle in dump_after]
        assert leaked == []
    finally:
        ledger.close()
