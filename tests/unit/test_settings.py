from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from turnledger.infra.persistence import batches_in_flight, eventsourcing_env
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
        {"postgres_batches_in_flight": 0},
        {"postgres_batches_in_flight": 5},
    ],
)
def test_invalid_settings_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(_env_file=None, **overrides)  # type: ignore[arg-type]


def test_a_replica_is_configured_like_the_primary_and_reads_its_schema() -> None:
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        master_key=new_master_key(),
        postgres_schema="ledger",
        postgres_replica_host="10.0.0.2",
        postgres_replica_port=5433,
        postgres_replica_user="reader",
        postgres_replica_password="s3cret",
        postgres_replica_pool_size=7,
    )
    replica = settings.replica_settings()
    assert replica is not None
    assert (replica.postgres_host, replica.postgres_port) == ("10.0.0.2", 5433)
    assert replica.postgres_user == "reader"
    assert replica.postgres_password.get_secret_value() == "s3cret"
    assert replica.postgres_pool_size == 7
    assert replica.postgres_schema == "ledger"
    assert replica.master_key == settings.master_key
    assert replica.replica_settings() is None  # a replica of the replica: none
    assert Settings(_env_file=None).replica_settings() is None


def test_a_replica_needs_postgres() -> None:
    with pytest.raises(ValidationError, match="replica"):
        Settings(_env_file=None, persistence="sqlite", postgres_replica_host="db2")
    with pytest.raises(ValidationError):
        Settings(
            _env_file=None,
            persistence="postgres",
            master_key=new_master_key(),
            postgres_replica_host="db2",
            postgres_replica_reads="eventual",
        )


def test_only_postgres_keeps_more_than_one_batch_in_flight(tmp_path: Path) -> None:
    postgres = Settings(
        _env_file=None,
        persistence="postgres",
        master_key=new_master_key(),
        postgres_batches_in_flight=2,
    )
    sqlite = Settings(_env_file=None, data_dir=tmp_path, postgres_batches_in_flight=2)
    assert batches_in_flight(postgres) == 2
    assert batches_in_flight(sqlite) == 1
