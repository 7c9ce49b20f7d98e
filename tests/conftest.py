"""Fixtures shared by every test: settings and ledgers on each store.

PostgreSQL tests use a fresh schema per test in the database named by the
TURNLEDGER_POSTGRES_* variables (defaults: postgres@127.0.0.1:5432/postgres).
Locally they are skipped with a hint when the server is unreachable; under
CI=true they fail instead, so nothing is silently skipped there.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

STORES = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
DURABLE_STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
durable_stores = pytest.mark.parametrize("settings", DURABLE_STORES, indirect=True)
"""Marks a test that needs a store which outlives the process."""


def _base_postgres_settings() -> Settings:
    return Settings(_env_file=None, persistence="postgres", master_key=new_master_key())


@pytest.fixture(scope="session")
def postgres_conninfo() -> str:
    conninfo = _base_postgres_settings().postgres_conninfo()
    try:
        with psycopg.connect(conninfo, connect_timeout=5) as connection:
            connection.execute("SELECT 1")
    except psycopg.OperationalError as error:
        message = (
            f"PostgreSQL is unreachable ({error}). Start it (see README: Tests) "
            "or point TURNLEDGER_POSTGRES_* at a server."
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return conninfo


@pytest.fixture
def postgres_schema(postgres_conninfo: str) -> Iterator[str]:
    schema = f"test_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(postgres_conninfo, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@pytest.fixture
def postgres_settings(postgres_schema: str) -> Settings:
    """PostgreSQL settings on this test's own schema, with a fresh master key."""
    return Settings(
        _env_file=None,
        persistence="postgres",
        postgres_schema=postgres_schema,
        master_key=new_master_key(),
    )


@pytest.fixture(autouse=True)
def _deletion_record_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test keeps its deletion records apart (never in the real home);
    child processes inherit the variable with the other TURNLEDGER_* ones."""
    directory = tmp_path_factory.mktemp("deletion-records")
    monkeypatch.setenv("TURNLEDGER_DELETION_RECORD_DIR", str(directory))


@pytest.fixture(params=STORES)
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings for one store; the same settings reopen the same data."""
    store = request.param
    if store == "postgres":
        postgres: Settings = request.getfixturevalue("postgres_settings")
        return postgres
    return Settings(_env_file=None, persistence=store, data_dir=tmp_path / "data")


@pytest.fixture
def open_ledger(settings: Settings) -> Iterator[Callable[[], Conversations]]:
    """Opens ledgers on the test's store and closes them all afterwards."""
    opened: list[Conversations] = []

    def _open() -> Conversations:
        app = open_conversations(settings)
        opened.append(app)
        return app

    yield _open
    for app in opened:
        app.close()


@pytest.fixture
def ledger(open_ledger: Callable[[], Conversations]) -> Conversations:
    return open_ledger()


@pytest.fixture
def memory_ledger() -> Iterator[Conversations]:
    app = open_conversations(Settings(_env_file=None, persistence="memory"))
    yield app
    app.close()
