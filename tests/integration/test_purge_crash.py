"""A process killed between recording a deletion and purging it.

A child process writes turns, then deletes some with the purge sabotaged so
that the process exits on the spot (os._exit: no cleanup, no finally) at one
of three points. The parent then inspects the stores as the crash left them,
reopens the ledger the normal way, and checks that start-up completed the
purge: every deleted turn's key gone, every surviving turn's key intact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from turnledger.infra.persistence import (
    eventsourcing_env,
    key_store,
    master_key,
    open_conversations,
)
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import KeyVault, new_master_key

CRASH_EXIT = 17

CHILD = textwrap.dedent(
    """
    import json, os, sys
    from uuid import UUID
    from turnledger.infra.persistence import open_conversations
    from turnledger.infra.settings import Settings

    crash_point = sys.argv[1]
    ledger = open_conversations(Settings(_env_file=None))
    conversations = {}
    for name in ("first", "second"):
        cid = ledger.start_conversation("owner")
        for index in range(6):
            ledger.confirm_turn(
                "owner", cid, turn_id=f"t{index}",
                question=f"question {index}", answer=f"answer {index}",
            )
        conversations[name] = str(cid)
    print(json.dumps(conversations), flush=True)

    def crash(*args, **kwargs):
        os._exit(%(exit)d)

    store = type(ledger.vault.purge_view)
    if crash_point == "before-purge":
        type(ledger).purge_deleted_history = crash
    elif crash_point == "before-compaction":
        store.compact = crash
    elif crash_point == "between-deletions":
        # Let the first conversation's deletion purge; die in the second's.
        original = store.destroy_keys
        calls = []
        def destroy_then_crash(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                os._exit(%(exit)d)
            return original(self, *args, **kwargs)
        store.destroy_keys = destroy_then_crash
        ledger.delete_history(
            "owner", UUID(conversations["first"]), turn_ids=["t0", "t1", "t2"]
        )
    ledger.delete_history(
        "owner", UUID(conversations["second"]), turn_ids=["t0", "t1", "t2"]
    )
    print("no crash", flush=True)
    """
) % {"exit": CRASH_EXIT}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def crash_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "postgres":
        schema = request.getfixturevalue("postgres_schema")
        return Settings(
            _env_file=None,
            persistence="postgres",
            postgres_schema=schema,
            master_key=new_master_key(),
        )
    return Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path / "data")


def _child_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    env["TURNLEDGER_DELETION_RECORD_DIR"] = os.environ["TURNLEDGER_DELETION_RECORD_DIR"]
    env.update(
        TURNLEDGER_PERSISTENCE=settings.persistence,
        TURNLEDGER_DATA_DIR=str(settings.data_dir),
        TURNLEDGER_POSTGRES_SCHEMA=settings.postgres_schema,
    )
    if settings.master_key is not None:
        env["TURNLEDGER_MASTER_KEY"] = settings.master_key.get_secret_value()
    return env


def _run_child(settings: Settings, crash_point: str) -> dict[str, UUID]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, crash_point],
        env=_child_env(settings),
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == CRASH_EXIT, (result.stdout, result.stderr)
    assert "no crash" not in result.stdout
    ids = json.loads(result.stdout.splitlines()[0])
    return {name: UUID(value) for name, value in ids.items()}


def _without_purge(settings: Settings) -> Conversations:
    """The ledger as the crash left it: opened without running the purge."""
    return Conversations(
        eventsourcing_env(settings),
        vault=KeyVault(key_store(settings), master_key(settings)),
    )


def _keys(ledger: Conversations, conversation_id: UUID) -> set[str]:
    view: Any = ledger.vault.purge_view
    return set(view.get_many(conversation_id, [f"t{i}" for i in range(6)]))


ALL = {f"t{i}" for i in range(6)}
DELETED = {"t0", "t1", "t2"}


def _assert_recovers(
    settings: Settings,
    ids: dict[str, UUID],
    check_crashed_state: Callable[[Conversations], None],
    *,
    first_deleted: set[str],
) -> None:
    crashed = _without_purge(settings)
    try:
        # The deletion itself is recorded: the turns are placeholders already.
        page = crashed.get_history("owner", ids["second"])
        assert {i.turn_id for i in page.items if i.deleted} == DELETED
        check_crashed_state(crashed)
    finally:
        crashed.close()

    reopened = open_conversations(settings)  # start-up runs the purge
    try:
        assert _keys(reopened, ids["first"]) == ALL - first_deleted
        assert _keys(reopened, ids["second"]) == ALL - DELETED
        # On PostgreSQL the CHECKPOINT that clears the WAL may still be running
        # (or a test elsewhere on the shared server holds the horizon): the
        # purge completes once it is done.
        deadline = time.monotonic() + 60
        while reopened.vault.purge_view.needs_compaction(reopened.name):
            assert time.monotonic() < deadline, reopened.purge_deleted_history()
            time.sleep(0.1)
            reopened.purge_deleted_history()
        page = reopened.get_history("owner", ids["second"])
        texts = {i.turn_id: i.question for i in page.items}
        assert texts == {
            "t0": None,
            "t1": None,
            "t2": None,
            "t3": "question 3",
            "t4": "question 4",
            "t5": "question 5",
        }
        # Running the purge again changes nothing.
        report = reopened.purge_deleted_history()
        assert (report.deletions_processed, report.keys_destroyed) == (0, 0)
    finally:
        reopened.close()


def test_crash_after_the_event_before_the_purge(crash_settings: Settings) -> None:
    ids = _run_child(crash_settings, "before-purge")

    def crashed_state(ledger: Conversations) -> None:
        assert _keys(ledger, ids["second"]) == ALL  # nothing destroyed yet
        assert _keys(ledger, ids["first"]) == ALL

    _assert_recovers(crash_settings, ids, crashed_state, first_deleted=set())


def test_crash_after_destroying_keys_before_compaction(
    crash_settings: Settings,
) -> None:
    ids = _run_child(crash_settings, "before-compaction")

    def crashed_state(ledger: Conversations) -> None:
        assert _keys(ledger, ids["second"]) == ALL - DELETED
        assert ledger.vault.purge_view.needs_compaction(ledger.name)

    _assert_recovers(crash_settings, ids, crashed_state, first_deleted=set())


def test_crash_between_two_pending_deletions(crash_settings: Settings) -> None:
    ids = _run_child(crash_settings, "between-deletions")

    def crashed_state(ledger: Conversations) -> None:
        assert _keys(ledger, ids["first"]) == ALL - DELETED
        assert _keys(ledger, ids["second"]) == ALL

    _assert_recovers(crash_settings, ids, crashed_state, first_deleted=DELETED)
