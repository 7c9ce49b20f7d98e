"""The master key: never silently replaced, never readable by others.

A lost `master.key` next to existing SQLite data used to be replaced by a new
key, after which every old turn failed to open; a key file readable by group
or others was accepted without a word. Both now refuse to start, with a
typed error the CLI prints without a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import MasterKeyError, new_master_key


def _sqlite(tmp_path: Path, **overrides: object) -> Settings:
    return Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data", **overrides
    )


def _write_a_turn(settings: Settings) -> None:
    ledger = open_conversations(settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        ledger.confirm_turn(
            "alice", conversation_id, turn_id="t1", question="q", answer="a"
        )
    finally:
        ledger.close()


def test_a_missing_key_file_beside_existing_data_is_refused(tmp_path: Path) -> None:
    settings = _sqlite(tmp_path)
    _write_a_turn(settings)
    settings.default_master_key_path.unlink()
    with pytest.raises(MasterKeyError, match="missing but data sealed under it"):
        open_conversations(settings)
    assert not settings.default_master_key_path.exists()  # nothing created


def test_a_fresh_data_directory_still_gets_its_key(tmp_path: Path) -> None:
    settings = _sqlite(tmp_path)
    _write_a_turn(settings)
    key_file = settings.default_master_key_path
    assert key_file.stat().st_mode & 0o777 == 0o600
    _write_a_turn(settings)  # and opens with it again


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_a_key_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    settings = _sqlite(tmp_path)
    _write_a_turn(settings)
    settings.default_master_key_path.chmod(mode)
    with pytest.raises(MasterKeyError, match="chmod 600"):
        open_conversations(settings)


@pytest.mark.parametrize("mode", [0o644, 0o600])
def test_a_configured_key_file_must_be_private_too(tmp_path: Path, mode: int) -> None:
    key_file = tmp_path / "turnledger.key"
    key_file.write_text(new_master_key() + "\n")
    key_file.chmod(mode)
    settings = _sqlite(tmp_path, master_key_file=key_file)
    if mode == 0o600:
        _write_a_turn(settings)
        return
    with pytest.raises(MasterKeyError, match="group or others"):
        open_conversations(settings)


def test_a_configured_key_file_that_is_missing_is_not_created(tmp_path: Path) -> None:
    key_file = tmp_path / "absent.key"
    with pytest.raises(MasterKeyError, match="not a file"):
        open_conversations(_sqlite(tmp_path, master_key_file=key_file))
    assert not key_file.exists()


def test_the_cli_reports_a_lost_key_without_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = _sqlite(tmp_path)
    _write_a_turn(settings)
    settings.default_master_key_path.unlink()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TURNLEDGER_PERSISTENCE", "sqlite")
    monkeypatch.setenv("TURNLEDGER_DATA_DIR", str(settings.data_dir))
    assert main(["purge"]) == 2  # could not run (README, "Exit codes")
    captured = capsys.readouterr()
    assert "master.key is missing" in captured.err
    assert "Traceback" not in captured.err
