"""Openings that race on a fresh store attach it to one deletion record.

Every opening that writes names the record it follows from the key store's
metadata, or makes up a new one when there is none. Several processes opening
a fresh store at once (a service with several workers, a CLI beside it) used
to each make up their own: the last to write the metadata won, and another
opening then found the store following a record that was not its own and
refused to start (`DeletionRecordLostError`). The first to attach must win,
and every other opening must follow its record.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.restore_paths import child_env
from turnledger.infra.keystore import KeyStore
from turnledger.infra.persistence import eventsourcing_env, key_store, master_key
from turnledger.infra.postgres import ensure_schema
from turnledger.infra.restore import RECORD_META, check_restore, deletion_record
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import KeyVault, new_master_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgres"])
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "postgres":
        postgres: Settings = request.getfixturevalue("postgres_settings")
        return postgres
    return Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "data",
        master_key=new_master_key(),
    )


def _open_parts(settings: Settings) -> tuple[Conversations, KeyStore]:
    """A ledger and its key store, opened as a start-up does, before the
    restore check (infra/persistence.py)."""
    if settings.persistence == "postgres":
        ensure_schema(settings.postgres_conninfo(), settings.postgres_schema)
    else:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    keys = key_store(settings)
    vault = KeyVault(keys, master_key(settings))
    return Conversations(eventsourcing_env(settings), vault=vault), keys


def _record_files(settings: Settings) -> list[Path]:
    return sorted(settings.deletion_record_directory.glob("deletions-*.log"))


def test_an_opening_named_before_another_attached_follows_the_first(
    fresh: Settings,
) -> None:
    ledger, keys = _open_parts(fresh)
    try:
        # Both read "no record yet" before either attached the store.
        first = deletion_record(fresh.deletion_record_directory, keys)
        second = deletion_record(fresh.deletion_record_directory, keys)
        assert first.record_id != second.record_id
        check_restore(ledger, keys, first, apply=True)
        check_restore(ledger, keys, second, apply=True)
        assert keys.read_meta(RECORD_META) == first.record_id
        assert _record_files(fresh) == [first.path]
        # Deletions from then on go to the record the store follows.
        owner = "ann"
        conversation = ledger.start_conversation(owner)
        ledger.confirm_turns(owner, conversation, [("t1", "q", "a")])
        ledger.delete_history(owner, conversation)
        assert first.load().entries == 1
    finally:
        ledger.close()


class _AttachedMeanwhile:
    """The key store as an opening sees it when another opening attaches the
    store between this one's creating its record and claiming the store."""

    def __init__(self, store: KeyStore, attach_first: Any) -> None:
        self._store = store
        self._attach_first = attach_first

    def claim_meta(self, name: str, value: str) -> str:
        if self._attach_first is not None:
            attach, self._attach_first = self._attach_first, None
            attach()
        return self._store.claim_meta(name, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_an_opening_that_loses_the_race_to_attach_follows_the_winner(
    fresh: Settings,
) -> None:
    ledger, keys = _open_parts(fresh)
    try:
        winner = deletion_record(fresh.deletion_record_directory, keys)
        loser = deletion_record(fresh.deletion_record_directory, keys)
        racing = _AttachedMeanwhile(
            keys, lambda: check_restore(ledger, keys, winner, apply=True)
        )
        report = check_restore(ledger, racing, loser, apply=True)  # type: ignore[arg-type]
        assert report.record_path == winner.path
        assert keys.read_meta(RECORD_META) == winner.record_id
        # The loser's own record was never anyone's: it is not left behind.
        assert _record_files(fresh) == [winner.path]
    finally:
        ledger.close()


_OPEN_WHEN_TOLD = """
import sys, time
from pathlib import Path
go = Path(sys.argv[1])
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
settings = Settings()
while not go.exists():
    time.sleep(0.001)
open_conversations(settings).close()
"""


@pytest.mark.parametrize("round_", range(3))
def test_processes_opening_a_fresh_store_at_once_all_start(
    fresh: Settings, tmp_path: Path, round_: int
) -> None:
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_WHEN_TOLD, str(go)],
            env=child_env(fresh),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    time.sleep(2.0)  # every child imported and waiting
    go.touch()
    outcomes = [child.communicate(timeout=120) for child in children]
    failures = [err.strip().splitlines()[-1:] for _, err in outcomes if err.strip()]
    assert [child.returncode for child in children] == [0] * 4, failures
    files = _record_files(fresh)
    keys = key_store(fresh)
    try:
        attached = keys.read_meta(RECORD_META)
    finally:
        keys.close()
    assert [path.name for path in files] == [f"deletions-{attached}.log"]
