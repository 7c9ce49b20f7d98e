from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from turnledger.infra.persistence import eventsourcing_env
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key


def test_defaults_are_the_embedded_sqlite_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    settings = Settings(_env_file=None)
    assert settings.persistence == "sqlite"
    assert settings.data_dir == tmp_path / "turnledger"
    env = eventsourcing_env(settings)
    assert env["PERSISTENCE_MODULE"] == "turnledger.infra.sqlite:SQLiteReadSideFactory"
    assert env["SQLITE_DBNAME"] == str(tmp_path / "turnledger" / "events.sqlite3")


def test_environment_variables_use_the_turnledger_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = new_master_key()
    monkeypatch.setenv("TURNLEDGER_PERSISTENCE", "postgres")
    monkeypatch.setenv("TURNLEDGER_POSTGRES_SCHEMA", "tenant_a")
    monkeypatch.setenv("TURNLEDGER_MASTER_KEY", key)
    monkeypatch.setenv("POSTGRES_SCHEMA", "leaked_from_the_shell")
    settings = Settings(_env_file=None)
    env = eventsourcing_env(settings)
    assert env["POSTGRES_SCHEMA"] == "tenant_a"
    assert (
        settings.master_key is not None
        and settings.master_key.get_secret_value() == key
    )


def test_postgres_without_a_master_key_is_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="must not\\s+live beside the data"):
        Settings(_env_file=None, persistence="postgres")


@pytest.mark.parametrize(
    "overrides",
    [
        {"persistence": "oracle"},
        {"max_turn_bytes": 0},
        {"postgres_schema": "Robert'); DROP TABLE"},
        {"master_key": new_master_key(), "master_key_file": "/tmp/k"},
    ],
)
def test_invalid_settings_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(_env_file=None, **overrides)  # type: ignore[arg-type]
