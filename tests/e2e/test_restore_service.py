"""`turnledger serve` on a restored data directory: the first request already
finds the deleted turn deleted, and the service's log says the store was
restored from before the deletion."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from tests.e2e.conftest import start_server, stop_server
from turnledger.infra.devices import open_device_registry
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings


def test_a_restored_store_serves_the_deletion_from_the_first_request(
    tmp_path: Path,
) -> None:
    settings = Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
    )
    ledger = open_conversations(settings)
    conversation_id = ledger.start_conversation("alice")
    for turn_id, question in (("t1", "My PIN is 4711"), ("t2", "weather?")):
        ledger.confirm_turn(
            "alice", conversation_id, turn_id=turn_id, question=question, answer="ok"
        )
    ledger.close()
    token = _device_token(settings)
    shutil.copytree(settings.data_dir, tmp_path / "backup")
    ledger = open_conversations(settings)
    ledger.delete_history("alice", conversation_id, turn_ids=["t1"])
    ledger.close()
    shutil.rmtree(settings.data_dir)
    shutil.copytree(tmp_path / "backup", settings.data_dir)

    server = start_server(settings, tmp_path / "server.log")
    try:
        history = httpx.get(
            f"{server.base_url}/v1/conversations/{conversation_id}/turns",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
    finally:
        stop_server(server)
    assert history.status_code == 200, history.text
    turns = {turn["turn_id"]: turn for turn in history.json()["items"]}
    assert turns["t1"]["question"] is None and turns["t1"]["deleted"] is True
    assert turns["t2"]["question"] == "weather?"
    assert "4711" not in history.text
    log = server.log.read_text()
    assert "restored from before 1 deletion(s)" in log


def _device_token(settings: Settings) -> str:
    registry = open_device_registry(settings)
    try:
        return registry.add("alice", "phone").token
    finally:
        registry.close()
