"""The memory store is the SQLite back end on in-memory databases (issue 24,
"One house"; docs/architecture.md, "Two storage back ends"): no third
implementation of any storage rule, nothing written to disk, nothing shared
between two ledgers of one process."""

from __future__ import annotations

import ast
import os
import threading
import time
from pathlib import Path
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from turnledger.infra.devices import open_device_registry
from turnledger.infra.http.app import create_app
from turnledger.infra.merkle_sqlite import SQLiteLeafStore
from turnledger.infra.merkle_store import follow_checked, open_leaf_store
from turnledger.infra.persistence import key_store, open_conversations
from turnledger.infra.raw_log import open_raw_log
from turnledger.infra.read_side import rebuild_read_side
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings
from turnledger.infra.sqlite import SQLiteReadSideRecorder
from turnledger.infra.sqlite_keys import SQLiteKeyStore

ROOT = Path(__file__).resolve().parents[2]
# Held in memory by design, and no store: the long-polls' position
# (infra/log_follow.py, shared with SQLite) and the client's cursors.
NOT_STORES = {"MemoryPosition", "MemoryCursorStore"}


def _modules() -> list[Path]:
    return [
        path
        for folder in ("domain", "projections", "infra")
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]


def test_no_memory_back_end_comes_back() -> None:
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if (
                isinstance(node, ast.ClassDef)
                and node.name.startswith("Memory")
                and node.name not in NOT_STORES
            ):
                found.append(f"{where} class {node.name}")
            # The library's in-memory store (POPO recorders).
            if isinstance(node, ast.ImportFrom) and node.module == "eventsourcing.popo":
                found.append(f"{where} imports eventsourcing.popo")
    assert found == [], "a store of its own for memory: " + ", ".join(found)
    assert not (ROOT / "infra" / "memory.py").exists()


def test_memory_opens_the_sqlite_stores(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, persistence="memory", data_dir=tmp_path)
    ledger = open_conversations(settings)
    registry = open_device_registry(settings)
    try:
        assert isinstance(ledger.recorder, SQLiteReadSideRecorder)
        assert isinstance(ledger.vault.purge_view, SQLiteKeyStore)
        assert isinstance(open_leaf_store(settings, ledger), SQLiteLeafStore)
        assert type(registry._store).__name__ == "SQLiteDeviceStore"
        keys = key_store(settings)
        assert isinstance(keys, SQLiteKeyStore)
        keys.close()
    finally:
        registry.close()
        ledger.close()


def test_two_ledgers_of_one_process_share_nothing_and_nothing_outlives_one(
    tmp_path: Path,
) -> None:
    settings = Settings(_env_file=None, persistence="memory", data_dir=tmp_path)
    first, second = open_conversations(settings), open_conversations(settings)
    try:
        conversation = first.start_conversation("ann")
        first.confirm_turn("ann", conversation, turn_id="t1", question="q", answer="a")
        assert [c.conversation_id for c in first.read_side.conversations_of("ann")] == [
            conversation
        ]
        assert second.read_side.conversations_of("ann") == []
        assert second.recorder.max_notification_id() in (None, 0)
    finally:
        first.close()
        second.close()
    again = open_conversations(settings)
    try:
        assert again.read_side.conversations_of("ann") == []
    finally:
        again.close()


def test_a_session_on_memory_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes, a long-poll woken, devices added and revoked, a deletion purged,
    the tree followed, an audit and a rebuild: the data directory, the working
    directory and the deletion records' directory stay empty."""
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # a URI taken for a file name would land here
    records = Path(os.environ["TURNLEDGER_DELETION_RECORD_DIR"])
    data_dir = tmp_path / "data"
    settings = Settings(_env_file=None, persistence="memory", data_dir=data_dir)
    app = create_app(settings)
    with TestClient(app) as http:
        service = app.state.service
        auth = {"Authorization": f"Bearer {service.registry.add('al', 'x').token}"}
        conversation = http.post("/v1/conversations", headers=auth).json()[
            "conversation_id"
        ]
        url = f"/v1/conversations/{conversation}"
        for turn_id in ("t1", "t2", "t3"):
            put = http.put(
                f"{url}/turns/{turn_id}",
                headers=auth,
                json={"question": f"q {turn_id}", "answer": f"a {turn_id}"},
            )
            assert put.status_code == 200
        cursor = http.get("/v1/sync", headers=auth).json()["next_cursor"]
        ledger = service.ledger
        writer = threading.Thread(
            target=lambda: (
                time.sleep(0.2),
                ledger.confirm_turn(
                    "al", UUID(conversation), turn_id="t4", question="q", answer="a"
                ),
            )
        )
        writer.start()
        woken = http.get(
            "/v1/sync", headers=auth, params={"since": cursor, "timeout": 10}
        )
        writer.join()
        assert [c["turn_id"] for c in woken.json()["changes"]] == ["t4"]
        added = http.post("/v1/devices", headers=auth, json={"name": "laptop"})
        assert added.status_code == 201
        laptop = added.json()["device"]["device_id"]
        assert http.delete(f"/v1/devices/{laptop}", headers=auth).status_code == 200
        deleted = http.post(f"{url}/deletions", headers=auth, json={"turn_ids": ["t2"]})
        assert deleted.status_code == 200
        window = http.post(
            f"{url}/window",
            headers=auth,
            json={"question": "Next?", "model": "m", "max_bytes": 500},
        )
        assert window.status_code == 200
        ledger.purge_deleted_history()
        assert not ledger.vault.purge_view.needs_compaction(ledger.name)
        history = http.get(f"{url}/turns", headers=auth).json()
        assert [t["turn_id"] for t in history["items"] if not t["deleted"]] == [
            "t1",
            "t3",
            "t4",
        ]
        tree = open_leaf_store(settings, ledger)
        log = open_raw_log(settings, ledger)
        follow_checked(log, tree)
        assert tree.size() == ledger.recorder.max_notification_id()
        assert Auditor(ledger).audit().ok
        rebuild_read_side(ledger)
        assert Auditor(ledger).audit().ok
    written = [
        str(path)
        for folder in (data_dir, workdir, records)
        if folder.exists()
        for path in folder.rglob("*")
    ]
    assert written == []
