"""SQLite: a copy of every file of the data directory opens no deleted turn.

The attacker of tests/integration/forensic.py copies the whole data directory
(event log, key file, their -wal and -shm, the master key file beside them)
while the store is open and again after it is closed, records every wrapped
key of the conversation from the key file before the deletion, and tries to
open every deleted turn from the copies: none opens, and no marker or key of
a destroyed item is in any byte; the surviving turns open from the same copy.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from uuid import UUID

from tests.integration.forensic import (
    DOOMED,
    OWNER,
    attack,
    files_under,
    hits,
    needles,
    read_all,
    write_scenario,
)
from turnledger.domain.conversation import fold_key_id
from turnledger.infra.persistence import master_key, open_conversations
from turnledger.infra.settings import Settings


def _key_table(path: Path, conversation_id: UUID) -> dict[str, bytes]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        rows = connection.execute(
            "SELECT turn_id, wrapped_key FROM turn_keys "
            "WHERE conversation_id IN (?, ?)",  # stored as hex today
            (conversation_id.hex, str(conversation_id)),
        ).fetchall()
    return {str(turn_id): bytes(blob) for turn_id, blob in rows}


def _copy(directory: Path, destination: Path) -> dict[str, bytes]:
    shutil.copytree(directory, destination)
    return read_all(files_under(destination))


def test_a_copy_of_the_data_directory_opens_no_deleted_turn(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
    )
    ledger = open_conversations(settings)
    master = master_key(settings)
    try:
        scenario = write_scenario(ledger)
        recorded = _key_table(settings.sqlite_keys_path, scenario.conversation_id)
        fold_key = fold_key_id(scenario.fold_id)
        assert set(DOOMED) | set(scenario.kept) | {fold_key} <= set(recorded)
        before = _copy(settings.data_dir, tmp_path / "before")
        doomed_keys = {key_id: recorded[key_id] for key_id in DOOMED}
        assert set(attack(scenario, before, doomed_keys, master)) == set(DOOMED)

        receipt = ledger.delete_history(
            OWNER, scenario.conversation_id, turn_ids=list(DOOMED)
        )
        assert receipt.purge is not None and not receipt.purge.compaction_pending
        remaining = _key_table(settings.sqlite_keys_path, scenario.conversation_id)
        destroyed = {k: v for k, v in recorded.items() if k not in remaining}
        assert set(destroyed) == set(DOOMED) | {fold_key}
        open_copy = _copy(settings.data_dir, tmp_path / "open")
    finally:
        ledger.close()
    closed_copy = _copy(settings.data_dir, tmp_path / "closed")
    for copy in (open_copy, closed_copy):
        assert any(name.endswith("keys.sqlite3") for name in copy)
        assert attack(scenario, copy, destroyed, master) == {}
        assert hits(copy, needles(scenario, destroyed, master)) == []
        survivors = {key_id: recorded[key_id] for key_id in scenario.kept}
        assert set(attack(scenario, copy, survivors, master)) == set(scenario.kept)
