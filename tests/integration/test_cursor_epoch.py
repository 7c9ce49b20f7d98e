"""After a restore from an older backup, a device's cursor from before it is
refused with `cursor_expired` however far the log grows past it, and the
device that syncs again from the beginning holds exactly what the store holds:
nothing lost, nothing twice. The SQLite data directory copied and restored,
and a `pg_dump` of the store's schema restored over it."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from tests.integration.restore_paths import cli
from turnledger.domain.errors import CursorExpiredError
from turnledger.infra.client.errors import Context, error_from_body, parse_error_body
from turnledger.infra.http.app import create_app
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

OWNER = "alice"


@dataclass
class Backups:
    settings: Settings
    take: Callable[[], None]
    restore: Callable[[], None]


def _sqlite(tmp_path: Path) -> Backups:
    settings = Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
    )
    backup = tmp_path / "backup"

    def take() -> None:
        shutil.rmtree(backup, ignore_errors=True)
        shutil.copytree(settings.data_dir, backup)

    def restore() -> None:
        shutil.rmtree(settings.data_dir)
        shutil.copytree(backup, settings.data_dir)

    return Backups(settings, take, restore)


def _postgres(settings: Settings, tmp_path: Path) -> Backups:
    dump = tmp_path / "schema.sql"
    conninfo = settings.postgres_conninfo()
    schema = settings.postgres_schema

    def take() -> None:
        subprocess.run(
            ["pg_dump", "-d", conninfo, "-n", schema, "-f", str(dump)],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def restore() -> None:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema))
            )
        subprocess.run(
            ["psql", "-d", conninfo, "-v", "ON_ERROR_STOP=1", "-q", "-f", str(dump)],
            check=True,
            capture_output=True,
            timeout=120,
        )

    return Backups(settings, take, restore)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backups(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backups]:
    if request.param == "sqlite":
        yield _sqlite(tmp_path)
    else:
        yield _postgres(request.getfixturevalue("postgres_settings"), tmp_path)


def _turns(settings: Settings, conversation_id: UUID, ids: list[str]) -> None:
    ledger = open_conversations(settings)
    try:
        for turn_id in ids:
            ledger.confirm_turn(
                OWNER,
                conversation_id,
                turn_id=turn_id,
                question=f"question {turn_id}",
                answer=f"answer {turn_id}",
            )
    finally:
        ledger.close()


def _delete(settings: Settings, conversation_id: UUID, ids: list[str]) -> None:
    ledger = open_conversations(settings)
    try:
        ledger.delete_history(OWNER, conversation_id, turn_ids=ids)
    finally:
        ledger.close()


def _conversation(settings: Settings) -> UUID:
    """A new conversation of OWNER's in the store `settings` name."""
    ledger = open_conversations(settings)
    try:
        return ledger.start_conversation(OWNER)
    finally:
        ledger.close()


def _devices(app: Any, *names: str) -> list[Device]:
    """A device of OWNER's per name, registered with the running service."""
    registry = app.state.service.registry
    return [
        Device({"Authorization": f"Bearer {registry.add(OWNER, name).token}"})
        for name in names
    ]


def _started(settings: Settings, *names: str) -> tuple[UUID, list[Device]]:
    """A new conversation, and a device per name that has not synced yet."""
    conversation_id = _conversation(settings)
    app = create_app(settings)
    with TestClient(app):
        return conversation_id, _devices(app, *names)


class Device:
    """A device's local copy, built from the feed alone."""

    def __init__(self, auth: dict[str, str]) -> None:
        self.auth = auth
        self.cursor: str | None = None
        self.seen: list[tuple[str, int]] = []
        self.turns: dict[str, str | None] = {}  # turn id -> question (None: deleted)

    def pull(self, http: TestClient) -> Any:
        """Sync to the end; the error response if the service refuses."""
        while True:
            params = {"since": self.cursor} if self.cursor else {}
            answer = http.get("/v1/sync", headers=self.auth, params=params)
            if answer.status_code != 200:
                return answer
            page = answer.json()
            for change in page["changes"]:
                self.seen.append((change["conversation_id"], change["version"]))
                if change["kind"] == "turn_recorded":
                    self.turns[change["turn_id"]] = (
                        None if change["deleted"] else change["question"]
                    )
                elif change["kind"] == "history_deleted":
                    for turn_id in change["turn_ids"]:
                        self.turns[turn_id] = None
            self.cursor = page["next_cursor"]
            if not page["has_more"]:
                return answer

    def resync(self, http: TestClient) -> Any:
        """What a device does on cursor_expired: drop its copy, start over."""
        self.cursor, self.seen, self.turns = None, [], {}
        return self.pull(http)


def _store_view(settings: Settings, conversation_id: UUID) -> dict[str, str | None]:
    ledger = open_conversations(settings)
    try:
        page = ledger.get_history(OWNER, conversation_id, limit=100)
    finally:
        ledger.close()
    return {
        item.turn_id: None if item.deleted_at is not None else item.question
        for item in page.items
    }


def _assert_converged(
    device: Device, settings: Settings, conversation_id: UUID
) -> None:
    assert device.turns == _store_view(settings, conversation_id)
    assert len(device.seen) == len(set(device.seen))  # nothing twice
    ledger = open_conversations(settings)
    try:
        version = ledger.get_conversation(OWNER, conversation_id).version
    finally:
        ledger.close()
    versions = sorted(v for c, v in device.seen if c == str(conversation_id))
    assert versions == list(range(1, version + 1))  # nothing lost


def _assert_expired(answer: Any) -> None:
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "cursor_expired"
    assert "sync again from the beginning" in answer.json()["error"]["message"]
    error = error_from_body(parse_error_body(422, answer.json()), Context())
    assert isinstance(error, CursorExpiredError)


def _assert_after_restore(
    settings: Settings, conversation_id: UUID, *, ahead: Device, behind: Device
) -> None:
    """`ahead`, which synced past the backup, is refused and converges once it
    syncs again; `behind`, which had seen only what the backup holds, goes on
    where it was."""
    with TestClient(create_app(settings)) as http:
        _assert_expired(ahead.pull(http))
        assert behind.pull(http).status_code == 200
        _assert_converged(behind, settings, conversation_id)
        assert ahead.resync(http).status_code == 200
    _assert_converged(ahead, settings, conversation_id)


def _assert_new_epoch_holds(
    settings: Settings, conversation_id: UUID, device: Device, *, stale: str | None
) -> None:
    """After a turn "m1" and a new opening, the device's cursor of the new
    epoch goes on working and the `stale` one stays refused."""
    _turns(settings, conversation_id, ["m1"])
    with TestClient(create_app(settings)) as http:
        assert device.pull(http).status_code == 200
        device.cursor, current = stale, device.cursor
        _assert_expired(device.pull(http))
        device.cursor = current
    _assert_converged(device, settings, conversation_id)


def test_a_cursor_from_before_a_restore_stays_refused_and_a_resync_converges(
    backups: Backups,
) -> None:
    settings = backups.settings
    conversation_id, (ahead, behind) = _started(settings, "a", "b")
    _turns(settings, conversation_id, ["t1", "t2", "t3"])
    with TestClient(create_app(settings)) as http:
        assert behind.pull(http).status_code == 200  # synced up to the backup
    backups.take()

    _turns(settings, conversation_id, ["t4", "t5", "t6"])
    _delete(settings, conversation_id, ["t1"])
    with TestClient(create_app(settings)) as http:
        assert ahead.pull(http).status_code == 200  # past the backup's head
    stale = ahead.cursor
    backups.restore()

    # The opening finds the restore; the log then grows well past the
    # position the stale cursor names.
    _turns(settings, conversation_id, [f"n{i}" for i in range(12)])
    _assert_after_restore(settings, conversation_id, ahead=ahead, behind=behind)
    assert ahead.turns["t1"] is None and "t4" not in ahead.turns

    # The epoch outlives the process: the cursors issued now go on working,
    # and the old one stays refused.
    _assert_new_epoch_holds(settings, conversation_id, ahead, stale=stale)
    assert ahead.turns["m1"] == "question m1"

    # The same backup restored again: cursors of the first restore's epoch
    # name positions this log reuses, and are refused too.
    backups.restore()
    _turns(settings, conversation_id, [f"r{i}" for i in range(20)])
    with TestClient(create_app(settings)) as http:
        _assert_expired(ahead.pull(http))
        assert ahead.resync(http).status_code == 200
    _assert_converged(ahead, settings, conversation_id)
    assert "m1" not in ahead.turns


def test_cursors_of_a_store_never_restored_keep_working_across_openings(
    tmp_path: Path,
) -> None:
    settings = _sqlite(tmp_path).settings
    conversation_id, (device,) = _started(settings, "a")
    _turns(settings, conversation_id, ["t1"])
    _delete(settings, conversation_id, ["t1"])  # a deletion, no restore
    with TestClient(create_app(settings)) as http:
        assert device.pull(http).status_code == 200
    _turns(settings, conversation_id, ["t2"])
    with TestClient(create_app(settings)) as http:
        assert device.pull(http).status_code == 200
    _assert_converged(device, settings, conversation_id)


def test_a_restore_with_no_deletion_since_the_backup_is_found_by_the_served_mark(
    backups: Backups, caplog: pytest.LogCaptureFixture
) -> None:
    """The deletion record has nothing the restored store lacks; the log
    position kept beside it (restore_seen.py) is what finds the restore."""
    settings = backups.settings
    conversation_id, (ahead, behind) = _started(settings, "a", "b")
    _turns(settings, conversation_id, ["t1", "t2"])
    with TestClient(create_app(settings)) as http:
        assert behind.pull(http).status_code == 200
    backups.take()

    _turns(settings, conversation_id, ["t3", "t4", "t5"])  # no deletion
    with TestClient(create_app(settings)) as http:
        assert ahead.pull(http).status_code == 200  # past the backup's head
    stale = ahead.cursor
    backups.restore()

    caplog.set_level("WARNING", logger="turnledger")
    # A read-only opening warns and changes nothing; the next opening that
    # writes begins the epoch.
    reader = open_conversations(settings, read_only=True)
    reader.close()
    warned = [r.getMessage() for r in caplog.records]
    assert any("WARNING" in m and "rolled back" in m for m in warned), warned
    caplog.clear()
    reopened = open_conversations(settings)
    try:
        report = reopened.restore_report
    finally:
        reopened.close()
    assert report is not None and report.deletions_behind == 0
    assert report.rolled_back and report.log_rewound
    assert report.seen_position > report.log_head
    assert "restored from an older backup or rolled back" in report.describe()
    assert any("rolled back" in r.getMessage() for r in caplog.records)

    _turns(settings, conversation_id, [f"n{i}" for i in range(12)])
    _assert_after_restore(settings, conversation_id, ahead=ahead, behind=behind)
    assert "t3" not in ahead.turns and ahead.turns["n11"] == "question n11"

    # Found once: the next openings keep the new epoch, so the cursors issued
    # since go on working and the stale one stays refused.
    again = open_conversations(settings)
    try:
        assert again.restore_report is not None
        assert not again.restore_report.restored
    finally:
        again.close()
    _assert_new_epoch_holds(settings, conversation_id, ahead, stale=stale)


def test_a_mark_that_cannot_be_written_is_logged_and_sync_still_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _sqlite(tmp_path).settings
    conversation_id = _conversation(settings)
    app = create_app(settings)
    with TestClient(app) as http:
        (device,) = _devices(app, "a")
        (record,) = settings.deletion_record_directory.glob("deletions-*.log")
        saved = record.read_bytes()
        record.unlink()  # the record's directory lost under the service
        _turns_through(app, conversation_id, ["t1"])
        caplog.set_level("ERROR", logger="turnledger")
        assert device.pull(http).status_code == 200
        assert any(
            "cannot keep the served log position" in r.getMessage()
            for r in caplog.records
        )
        record.write_bytes(saved)


def _turns_through(app: Any, conversation_id: UUID, ids: list[str]) -> None:
    for turn_id in ids:
        app.state.service.ledger.confirm_turn(
            OWNER, conversation_id, turn_id=turn_id, question="q", answer="a"
        )


def test_restore_check_reports_a_rollback_with_no_deletion_since(
    tmp_path: Path,
) -> None:
    backups = _sqlite(tmp_path)
    settings = backups.settings
    conversation_id = _conversation(settings)
    backups.take()
    _turns(settings, conversation_id, ["t1", "t2"])
    open_conversations(settings).close()  # an opening marks the log's head
    backups.restore()
    done = cli(settings, "restore-check")
    assert done.returncode == 0, done.stderr
    assert "restored from an older backup or rolled back" in done.stdout
    assert "a new cursor epoch began" in done.stdout
    again = cli(settings, "restore-check")
    assert "agrees with the deletion record" in again.stdout
