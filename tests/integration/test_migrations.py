"""Versioned schema steps (infra/migrations/): every older store reaches the
newest version, a fresh one gets every step, one newer than the code is
refused with nothing changed, and processes starting at once migrate once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.integration.restore_paths import child_env
from tests.integration.test_upgrade_from_0_1 import old_store  # noqa: F401
from turnledger.infra.exit_codes import EXIT_CANNOT_RUN
from turnledger.infra.migrations import MIGRATIONS_TABLE, SchemaTooNewError
from turnledger.infra.migrations import ledger as ledger_steps
from turnledger.infra.migrations.stores import POSTGRES_KEY_STEPS, SQLITE_KEY_STEPS
from turnledger.infra.owner_feed import postgres_owner_feed_ddl
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

ROOT = Path(__file__).resolve().parents[2]
OWNERS = ("ann", "ben")
NEWEST = len(ledger_steps.SQLITE_STEPS)
assert len(ledger_steps.POSTGRES_STEPS) == NEWEST
# "previous": the release before versioned steps: every table, no record of them.
STARTS = ["previous", *range(NEWEST)]


@pytest.fixture(params=["sqlite", "postgres"])
def store_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "postgres":
        postgres: Settings = request.getfixturevalue("postgres_settings")
        return postgres
    return Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path / "data")


def _write_some(ledger: Conversations) -> None:
    for owner in OWNERS:
        conversation = ledger.start_conversation(owner)
        ledger.confirm_turns(
            owner, conversation, [(f"t{n}", f"{owner} q{n}", f"a{n}") for n in range(3)]
        )


def _what_a_reader_sees(ledger: Conversations) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for owner in OWNERS:
        feed = ledger.recorder.select_owner_notifications(owner, 0, 100)  # type: ignore[attr-defined]
        seen[owner] = [(n.id, n.topic) for n in feed]
        for row in ledger.read_side.conversations_of(owner):
            page = ledger.get_history(owner, row.conversation_id, limit=50)
            seen[f"{owner} {row.conversation_id}"] = [
                (item.turn_id, item.question, item.answer) for item in page.items
            ]
    return seen


# What a store looks like -------------------------------------------------------


def _execute(settings: Settings, statements: list[Any]) -> list[Any]:
    """Run statements on the store's event database; the last one's rows."""
    rows: list[Any] = []
    if settings.persistence == "sqlite":
        with sqlite3.connect(settings.sqlite_events_path) as connection:
            for statement in statements:
                rows = connection.execute(statement).fetchall()
        return rows
    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as connection:
        for statement in statements:
            cursor = connection.execute(statement)
            rows = cursor.fetchall() if cursor.description else []
    return rows


def _schema(settings: Settings) -> list[Any]:
    """Tables, columns, indexes, triggers and functions of the event database."""
    if settings.persistence == "sqlite":
        tables = _execute(
            settings,
            ["SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"],
        )
        shape: list[Any] = []
        for (table,) in tables:
            columns = _execute(settings, [f"PRAGMA table_info({table})"])
            shape.append((table, sorted((c[1], c[2], c[3], c[5]) for c in columns)))
        shape.extend(
            _execute(
                settings,
                [
                    "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' "
                    "ORDER BY name"
                ],
            )
        )
        return shape
    schema = settings.postgres_schema
    return [
        _execute(
            settings,
            [
                sql.SQL(
                    "SELECT table_name, column_name, data_type, is_nullable "
                    "FROM information_schema.columns WHERE table_schema = {} "
                    "ORDER BY 1, 2"
                ).format(sql.Literal(schema))
            ],
        ),
        _execute(
            settings,
            [
                sql.SQL(
                    "SELECT tablename, indexname, indexdef FROM pg_indexes "
                    "WHERE schemaname = {} ORDER BY 1, 2"
                ).format(sql.Literal(schema))
            ],
        ),
        _execute(
            settings,
            [
                sql.SQL(
                    "SELECT t.tgname, c.relname FROM pg_trigger t "
                    "JOIN pg_class c ON c.oid = t.tgrelid "
                    "WHERE NOT t.tgisinternal AND c.relnamespace = {}::regnamespace "
                    "ORDER BY 1"
                ).format(sql.Literal(schema))
            ],
        ),
        _execute(
            settings,
            [
                sql.SQL(
                    "SELECT proname FROM pg_proc WHERE pronamespace = "
                    "{}::regnamespace ORDER BY 1"
                ).format(sql.Literal(schema))
            ],
        ),
    ]


def _newest_keys(settings: Settings) -> int:
    """The key store's newest version (PostgreSQL's has the compaction state)."""
    if settings.persistence == "sqlite":
        return len(SQLITE_KEY_STEPS)
    return len(POSTGRES_KEY_STEPS)


def _versions(settings: Settings, component: str = "ledger") -> list[int]:
    query = f"SELECT version FROM {{}} WHERE component = '{component}' ORDER BY version"
    if settings.persistence == "sqlite" and component == "keys":
        with sqlite3.connect(settings.sqlite_keys_path) as connection:
            rows = connection.execute(query.format(MIGRATIONS_TABLE)).fetchall()
        return [int(version) for (version,) in rows]
    table = (
        MIGRATIONS_TABLE
        if settings.persistence == "sqlite"
        else sql.Identifier(settings.postgres_schema, MIGRATIONS_TABLE).as_string(None)
    )
    rows = _execute(
        settings,
        [query.format(table)],
    )
    return [int(version) for (version,) in rows]


def _as_version(settings: Settings, start: int | str) -> None:
    """Make the store look as the code of schema version `start` left it
    ("previous": every table, and no record of versions)."""
    sqlite = settings.persistence == "sqlite"
    name: Callable[[str], str] = (
        (lambda table: table)
        if sqlite
        else (
            lambda table: sql.Identifier(settings.postgres_schema, table).as_string(
                None
            )
        )
    )
    statements = []
    if start == "previous":
        statements.append(f"DROP TABLE {name(MIGRATIONS_TABLE)}")
        _execute(settings, statements)
        return
    assert isinstance(start, int)
    if start < 6 and not sqlite:
        # Steps 3 to 5 left one index row per event, written by the first
        # trigger function.
        statements.append(
            f"DROP TRIGGER turnledger_owner_feed ON {name('conversations_events')}"
        )
        statements.append(f"DROP FUNCTION {name('turnledger_owner_feed_v2')}")
        statements.append(f"DROP TABLE {name('owner_feed')}")
        if start >= 3:
            statements.extend(
                postgres_owner_feed_ddl(
                    settings.postgres_schema, "conversations_events"
                )
            )
    if start < 3 and sqlite:
        statements.append(f"DROP TABLE {name('owner_feed')}")
    if start < 2:
        statements.append(
            f"ALTER TABLE {name('conversation_turns')} DROP COLUMN parts_sizes"
        )
    if start < 1:
        for table in ("conversation_heads", "conversation_turns", "conversation_folds"):
            statements.append(f"DROP TABLE {name(table)}")
    statements.append(
        f"DELETE FROM {name(MIGRATIONS_TABLE)} "
        f"WHERE component = 'ledger' AND version > {start}"
    )
    _execute(settings, statements)


# Tests ---------------------------------------------------------------------------


def test_a_fresh_store_gets_every_step(store_settings: Settings) -> None:
    ledger = open_conversations(store_settings)
    ledger.close()
    assert _versions(store_settings) == list(range(1, NEWEST + 1))


@pytest.mark.parametrize("start", STARTS)
def test_a_store_at_any_older_version_upgrades_to_the_newest(
    store_settings: Settings, start: int | str
) -> None:
    ledger = open_conversations(store_settings)
    try:
        _write_some(ledger)
        seen = _what_a_reader_sees(ledger)
    finally:
        ledger.close()
    newest_schema = _schema(store_settings)
    _as_version(store_settings, start)
    if start != "previous":
        assert _versions(store_settings) == list(range(1, int(start) + 1))
    ledger = open_conversations(store_settings)
    try:
        assert _what_a_reader_sees(ledger) == seen
        _write_some(ledger)  # and it takes new turns
    finally:
        ledger.close()
    assert _versions(store_settings) == list(range(1, NEWEST + 1))
    assert _schema(store_settings) == newest_schema


# What the releases before the key store's step 3 ran at a compaction.
_OLD_COMPACTION_TABLE = (
    "CREATE TABLE IF NOT EXISTS {} ("
    " application_name text PRIMARY KEY,"
    " rewritten_id bigint NOT NULL,"
    " wal_segment text,"
    " holds text[] NOT NULL DEFAULT '{{}}',"
    " checked_at timestamptz)"
)


@pytest.mark.postgres
@pytest.mark.parametrize("compacted", [True, False], ids=["compacted", "never"])
def test_a_key_store_from_before_the_compaction_step_upgrades(
    postgres_settings: Settings, compacted: bool
) -> None:
    """A store at key version 2 has the compaction's table if that release
    ever compacted (it made the table then), with its rows; without one if not.
    Either way it reaches version 3, rows kept, shaped as a fresh store."""
    ledger = open_conversations(postgres_settings)
    try:
        _write_some(ledger)
    finally:
        ledger.close()
    newest_schema = _schema(postgres_settings)
    schema = postgres_settings.postgres_schema
    table = sql.Identifier(schema, "key_compaction")
    _execute(
        postgres_settings,
        [
            sql.SQL("DROP TABLE {}").format(table),
            sql.SQL("DELETE FROM {} WHERE component = 'keys' AND version > 2").format(
                sql.Identifier(schema, MIGRATIONS_TABLE)
            ),
        ],
    )
    if compacted:
        _execute(
            postgres_settings,
            [
                sql.SQL(_OLD_COMPACTION_TABLE).format(table),
                sql.SQL(
                    "INSERT INTO {} VALUES ('conversations', 7, "
                    "'000000010000000000000003', '{{\"a held lock\"}}', now())"
                ).format(table),
            ],
        )
    assert _versions(postgres_settings, "keys") == [1, 2]
    open_conversations(postgres_settings).close()
    assert _versions(postgres_settings, "keys") == [1, 2, 3]
    assert _schema(postgres_settings) == newest_schema
    rows = _execute(
        postgres_settings,
        [sql.SQL("SELECT application_name, rewritten_id, holds FROM {}").format(table)],
    )
    assert rows == ([("conversations", 7, ["a held lock"])] if compacted else [])


@pytest.mark.parametrize("component", ["ledger", "keys"])
def test_a_store_newer_than_the_code_is_refused_and_left_unchanged(
    store_settings: Settings, component: str
) -> None:
    ledger = open_conversations(store_settings)
    try:
        _write_some(ledger)
    finally:
        ledger.close()
    newest = NEWEST if component == "ledger" else _newest_keys(store_settings)
    future = (
        f"INSERT INTO {{}} (component, version, description, applied_at) "
        f"VALUES ('{component}', {newest + 1}, 'from a later release', "
        "'2030-01-01T00:00:00+00:00')"
    )
    if store_settings.persistence == "sqlite":
        path = (
            store_settings.sqlite_events_path
            if component == "ledger"
            else store_settings.sqlite_keys_path
        )
        with sqlite3.connect(path) as connection:
            connection.execute(future.format(MIGRATIONS_TABLE))
    else:
        table = sql.Identifier(store_settings.postgres_schema, MIGRATIONS_TABLE)
        _execute(store_settings, [future.format(table.as_string(None))])
    before = (_schema(store_settings), _versions(store_settings), _dump(store_settings))
    with pytest.raises(SchemaTooNewError) as raised:
        open_conversations(store_settings)
    assert raised.value.component == component
    assert raised.value.found == newest + 1 and raised.value.newest == newest
    assert "newer than this release" in str(raised.value)
    after = (_schema(store_settings), _versions(store_settings), _dump(store_settings))
    assert after == before


def test_a_read_only_opening_refuses_a_newer_store_too(
    store_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    open_conversations(store_settings).close()
    table = (
        MIGRATIONS_TABLE
        if store_settings.persistence == "sqlite"
        else sql.Identifier(store_settings.postgres_schema, MIGRATIONS_TABLE).as_string(
            None
        )
    )
    _execute(
        store_settings,
        [
            f"INSERT INTO {table} (component, version, description, applied_at) "
            f"VALUES ('ledger', {NEWEST + 1}, 'from a later release', "
            "'2030-01-01T00:00:00+00:00')"
        ],
    )
    with pytest.raises(SchemaTooNewError):
        open_conversations(store_settings, read_only=True)
    # The audit (read-only) says so in one line and cannot run.
    code = subprocess.run(
        [sys.executable, "-m", "turnledger.infra.cli", "audit"],
        env=child_env(store_settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert code.returncode == EXIT_CANNOT_RUN, code.stderr
    assert "newer than this release's newest" in code.stderr


def _dump(settings: Settings) -> list[Any]:
    """Every row of the store's tables (on SQLite, the event and key files)."""
    if settings.persistence == "sqlite":
        dumped = []
        for path in (settings.sqlite_events_path, settings.sqlite_keys_path):
            with sqlite3.connect(path) as connection:
                dumped.extend(connection.iterdump())
        return dumped
    rows: list[Any] = []
    tables = _execute(
        settings,
        [
            sql.SQL(
                "SELECT tablename FROM pg_tables WHERE schemaname = {} ORDER BY 1"
            ).format(sql.Literal(settings.postgres_schema))
        ],
    )
    for (table,) in tables:
        rows.append(
            (
                table,
                sorted(
                    map(
                        repr,
                        _execute(
                            settings,
                            [
                                sql.SQL("SELECT * FROM {}").format(
                                    sql.Identifier(settings.postgres_schema, table)
                                )
                            ],
                        ),
                    )
                ),
            )
        )
    return rows


# A start-up's schema work: the schema, the key store, the event store and its
# read side. (The rest of open_conversations, the deletion record's check,
# is not a schema step.)
_START_ONE = """
from turnledger.infra.persistence import eventsourcing_env, key_store, master_key
from turnledger.infra.postgres import ensure_schema
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import KeyVault

settings = Settings()
if settings.persistence == "postgres":
    ensure_schema(settings.postgres_conninfo(), settings.postgres_schema)
else:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
vault = KeyVault(key_store(settings), master_key(settings))
Conversations(eventsourcing_env(settings), vault=vault).close()
"""


@pytest.fixture
def start_at_once() -> Callable[[Settings], None]:
    """Run a start-up's schema work in four processes at once on one store;
    every one must succeed."""

    def start(settings: Settings) -> None:
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _START_ONE],
                env=child_env(settings),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        outcomes = [child.communicate(timeout=120) for child in children]
        failures = [err.strip().splitlines()[-1:] for _, err in outcomes if err.strip()]
        assert [child.returncode for child in children] == [0] * 4, failures

    return start


@pytest.mark.postgres
def test_processes_starting_at_once_on_one_schema_migrate_once(
    postgres_settings: Settings, start_at_once: Callable[[Settings], None]
) -> None:
    # Not even the schema exists: the processes race to create it too.
    _execute(
        postgres_settings,
        [
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(postgres_settings.postgres_schema)
            )
        ],
    )
    start_at_once(postgres_settings)
    table = sql.Identifier(postgres_settings.postgres_schema, MIGRATIONS_TABLE)
    rows = _execute(
        postgres_settings,
        [
            sql.SQL(
                "SELECT component, version, applied_by FROM {} ORDER BY 1, 2"
            ).format(table)
        ],
    )
    for component, newest in (("ledger", NEWEST), ("keys", len(POSTGRES_KEY_STEPS))):
        applied = [row for row in rows if row[0] == component]
        assert [row[1] for row in applied] == list(range(1, newest + 1))
        # Every step of a component by one process, in one transaction.
        assert len({row[2] for row in applied}) == 1


def test_processes_starting_at_once_on_one_sqlite_store_migrate_once(
    tmp_path: Path, start_at_once: Callable[[Settings], None]
) -> None:
    settings = Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "data",
        master_key=new_master_key(),
    )
    start_at_once(settings)
    # Each step once (the table's key is component and version).
    for path, component, newest in (
        (settings.sqlite_events_path, "ledger", NEWEST),
        (settings.sqlite_keys_path, "keys", len(SQLITE_KEY_STEPS)),
    ):
        with sqlite3.connect(path) as connection:
            versions = connection.execute(
                f"SELECT version FROM {MIGRATIONS_TABLE} WHERE component = ? "
                "ORDER BY version",
                (component,),
            ).fetchall()
        assert [version for (version,) in versions] == list(range(1, newest + 1))


def test_a_sqlite_start_up_waits_for_a_commit_made_while_it_starts(
    tmp_path: Path,
) -> None:
    """Another process writing the event file while a start-up migrates it:
    the start-up waits for that write's lock and goes on after its commit. It
    must not fail at once with "database is locked", as it did when its
    migration transaction read the version before writing: SQLite turns a
    read into a write only if no other connection holds the write lock and
    none has committed since the read, and it does not wait for either."""
    settings = Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "data",
        master_key=new_master_key(),
    )
    open_conversations(settings).close()
    _as_version(settings, NEWEST - 1)  # so the start-up has a step to write
    writer = sqlite3.connect(settings.sqlite_events_path, isolation_level=None)
    writer.execute("CREATE TABLE other_process (n INTEGER)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO other_process VALUES (1)")
    outcome: list[BaseException | None] = []

    def start() -> None:
        try:
            open_conversations(settings).close()
        except BaseException as error:  # reported below, not swallowed
            outcome.append(error)
        else:
            outcome.append(None)

    starting = threading.Thread(target=start)
    starting.start()
    # Still starting after a second: waiting for the writer's lock, with
    # whatever it read before (the race this test is about).
    starting.join(timeout=1.0)
    assert starting.is_alive(), outcome
    writer.execute("COMMIT")
    writer.close()
    starting.join(timeout=60)
    assert outcome == [None]
    assert _versions(settings) == list(range(1, NEWEST + 1))


def test_a_store_written_by_0_1_reaches_the_newest_schema(
    old_store: tuple[Settings, Any],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    settings, _ = old_store
    open_conversations(settings).close()
    assert _versions(settings) == list(range(1, NEWEST + 1))
    assert _versions(settings, "keys") == list(range(1, _newest_keys(settings) + 1))
    if settings.persistence == "sqlite":
        fresh = Settings(
            _env_file=None, persistence="sqlite", data_dir=tmp_path / "fresh"
        )
    else:
        fresh = settings.model_copy(
            update={"postgres_schema": f"{settings.postgres_schema}_fresh"}
        )
    try:
        open_conversations(fresh).close()
        assert _shape(settings) == _shape(fresh)
    finally:
        if fresh.persistence == "postgres":
            _execute(
                fresh,
                [
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(fresh.postgres_schema)
                    )
                ],
            )


def _shape(settings: Settings) -> str:
    """The schema, with the PostgreSQL schema's own name left out."""
    shape = repr(_schema(settings))
    if settings.persistence == "postgres":
        shape = shape.replace(settings.postgres_schema, "<schema>")
    return shape
