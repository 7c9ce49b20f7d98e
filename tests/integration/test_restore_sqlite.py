"""SQLite: a plain copy of the data directory, restored after a deletion,
brings no deleted turn back, and a lost deletion record is never silent."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from uuid import UUID

import pytest

from tests.integration.forensic import (
    DOOMED,
    OWNER,
    files_under,
    hits,
    needles,
    read_all,
    write_scenario,
)
from tests.integration.restore_paths import assert_nothing_deleted_is_readable, cli
from turnledger.domain.conversation import fold_key_id
from turnledger.domain.errors import PurgeIncompleteError
from turnledger.infra.deletion_record import DeletionRecordLostError
from turnledger.infra.exit_codes import EXIT_CANNOT_RUN
from turnledger.infra.persistence import master_key, open_conversations
from turnledger.infra.settings import Settings


def _key_table(path: Path, conversation_id: UUID) -> dict[str, bytes]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        rows = connection.execute(
            "SELECT turn_id, wrapped_key FROM turn_keys WHERE conversation_id = ?",
            (conversation_id.hex,),
        ).fetchall()
    return {str(turn_id): bytes(blob) for turn_id, blob in rows}


def _restore(backup: Path, data_dir: Path) -> None:
    shutil.rmtree(data_dir)
    shutil.copytree(backup, data_dir)


@pytest.fixture
def sqlite_settings(tmp_path: Path) -> Settings:
    return Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path / "data")


def test_a_restored_copy_serves_no_deleted_turn_anywhere(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    settings = sqlite_settings
    ledger = open_conversations(settings)
    scenario = write_scenario(ledger)
    conversation_id = scenario.conversation_id
    version = ledger.get_conversation(OWNER, conversation_id).version
    ledger.close()
    backup = tmp_path / "backup"
    shutil.copytree(settings.data_dir, backup)  # the plain copy of the issue
    doomed = [*DOOMED, fold_key_id(scenario.fold_id)]
    recorded = _key_table(backup / "keys.sqlite3", conversation_id)
    wrapped = {key_id: recorded[key_id] for key_id in doomed}
    master = master_key(settings)

    ledger = open_conversations(settings)
    ledger.delete_history(OWNER, conversation_id, turn_ids=list(DOOMED))
    ledger.close()
    _restore(backup, settings.data_dir)
    # The restored files hold the destroyed keys again: the check has work to do.
    restored = read_all(files_under(settings.data_dir))
    assert hits(restored, needles(scenario, wrapped, master)) != []

    ledger = open_conversations(settings)
    report = ledger.restore_report
    history = ledger.get_history(OWNER, conversation_id, limit=50)
    ledger.close()
    assert report is not None
    assert report.deletions_behind == 2  # the turns' deletion, the fold's
    assert report.keys_behind == len(doomed)
    assert report.turns_deleted_again == len(DOOMED)
    assert report.keys_destroyed_again == len(doomed)
    assert not report.compaction_pending
    deleted = {item.turn_id for item in history.items if item.deleted_at is not None}
    assert deleted == set(DOOMED)
    assert_nothing_deleted_is_readable(
        settings,
        scenario,
        version=version,
        wrapped=wrapped,
        master_key=master,
        files=read_all(files_under(settings.data_dir)),
    )


def test_restore_check_reports_the_deletions_a_restore_undid(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    settings = sqlite_settings
    ledger = open_conversations(settings)
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("t1", "t2", "t3"):
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id=turn_id,
            question="My PIN is 4711",
            answer="ok",
        )
    ledger.close()
    shutil.copytree(settings.data_dir, tmp_path / "backup")
    ledger = open_conversations(settings)
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t2"])
    ledger.close()
    _restore(tmp_path / "backup", settings.data_dir)

    checked = cli(settings, "restore-check")
    assert checked.returncode == 0, checked.stderr
    assert "restored from before 2 deletion(s)" in checked.stdout
    again = cli(settings, "restore-check")
    assert again.returncode == 0, again.stderr
    assert "agrees with the deletion record" in again.stdout

    # Deletions after the restore work as before, and are remembered too.
    ledger = open_conversations(settings)
    receipt = ledger.delete_history(OWNER, conversation_id, turn_ids=["t3"])
    ledger.close()
    assert receipt.purge is not None and receipt.purge.keys_destroyed == 1
    _restore(tmp_path / "backup", settings.data_dir)
    ledger = open_conversations(settings)
    report = ledger.restore_report
    texts = [item.question for item in ledger.get_history(OWNER, conversation_id).items]
    ledger.close()
    assert report is not None and report.deletions_behind == 3
    assert texts == [None, None, None]


def _one_deletion_then_lose_the_record(settings: Settings, tmp_path: Path) -> Path:
    ledger = open_conversations(settings)
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in ("t1", "t2"):
        ledger.confirm_turn(
            OWNER, conversation_id, turn_id=turn_id, question="secret", answer="ok"
        )
    record = ledger.restore_report.record_path if ledger.restore_report else None
    assert record is not None
    kept = tmp_path / "record-before"
    shutil.copy2(record, kept)
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    ledger.close()
    return record


def test_a_lost_record_refuses_every_opening_that_writes(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    record = _one_deletion_then_lose_the_record(sqlite_settings, tmp_path)
    record.unlink()
    with pytest.raises(DeletionRecordLostError, match="is missing"):
        open_conversations(sqlite_settings)
    for command in (["serve", "--port", "8765"], ["restore-check"], ["purge"]):
        result = cli(sqlite_settings, *command)
        assert result.returncode == EXIT_CANNOT_RUN, (command, result.stderr)
        assert "is missing" in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    # Reading changes nothing, so it warns loudly and goes on (an auditor on
    # another host may not hold the record).
    read = cli(sqlite_settings, "export", "--owner", OWNER)
    assert read.returncode == 0, read.stderr
    assert "WARNING" in read.stderr and "is missing" in read.stderr

    rebuilt = cli(sqlite_settings, "restore-check", "--rebuild-record")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "1 key id(s)" in rebuilt.stdout
    open_conversations(sqlite_settings).close()


def test_a_record_rolled_back_is_refused(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    record = _one_deletion_then_lose_the_record(sqlite_settings, tmp_path)
    shutil.copy2(tmp_path / "record-before", record)  # the record's own backup
    with pytest.raises(DeletionRecordLostError, match="rolled back"):
        open_conversations(sqlite_settings)
    lines = record.read_text().splitlines()
    assert len(lines) == 1  # the header only: the deletion is gone from it


def test_an_altered_record_is_refused(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    record = _one_deletion_then_lose_the_record(sqlite_settings, tmp_path)
    ledger = open_conversations(sqlite_settings)
    conversation_id = ledger.read_side.conversations_of(OWNER)[0].conversation_id
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t2"])
    ledger.close()
    lines = record.read_text().splitlines()
    lines[1] = lines[1].replace('"t1"', '"t9"')  # hide a deletion
    record.write_text("\n".join(lines) + "\n")
    with pytest.raises(DeletionRecordLostError, match="altered at entry 1"):
        open_conversations(sqlite_settings)


def test_the_record_holds_ids_only(sqlite_settings: Settings, tmp_path: Path) -> None:
    record = _one_deletion_then_lose_the_record(sqlite_settings, tmp_path)
    lines = record.read_text().splitlines()
    assert "secret" not in "".join(lines)
    entry = json.loads(lines[1].partition(" ")[2])
    assert set(entry) == {"n", "c", "k", "p", "at"} and entry["k"] == ["t1"]
    assert record.stat().st_mode & 0o077 == 0
    assert not record.is_relative_to(sqlite_settings.data_dir)


class _FailingRecord:
    def remember(
        self, conversation_id: UUID, key_ids: object, *, position: int
    ) -> None:
        raise OSError("the record's disk is full")


def test_no_key_is_destroyed_before_the_record_holds_it(
    sqlite_settings: Settings,
) -> None:
    ledger = open_conversations(sqlite_settings)
    conversation_id = ledger.start_conversation(OWNER)
    ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", question="q", answer="a")
    store = ledger.vault.purge_view
    recording = store.deletion_record  # type: ignore[attr-defined]
    store.deletion_record = _FailingRecord()  # type: ignore[attr-defined]
    with pytest.raises(PurgeIncompleteError):
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    assert set(store.get_many(conversation_id, ["t1"])) == {"t1"}  # type: ignore[attr-defined]
    store.deletion_record = recording  # type: ignore[attr-defined]
    assert ledger.purge_deleted_history().keys_destroyed == 1
    ledger.close()
    ledger = open_conversations(sqlite_settings)
    report = ledger.restore_report
    ledger.close()
    assert report is not None and report.deletions_behind == 0


def test_the_record_lives_beside_a_configured_key_file(tmp_path: Path) -> None:
    key_file = tmp_path / "secrets" / "master.key"
    settings = Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "d",
        master_key_file=key_file,
        deletion_record_dir=None,
    )
    assert settings.deletion_record_directory == key_file.parent
    default = Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "d",
        deletion_record_dir=None,
    )
    assert not default.deletion_record_directory.is_relative_to(default.data_dir)
