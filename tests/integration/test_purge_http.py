"""GET /v1/purge: whether deletions are complete, for any device; nobody else."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

from fastapi.testclient import TestClient

from turnledger.infra.http.app import create_app
from turnledger.infra.settings import Settings


def test_the_purge_state_is_reported_to_devices_only(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data"
    )
    app = create_app(settings)
    with TestClient(app) as client:
        assert client.get("/v1/purge").status_code == 401
        token = app.state.service.registry.add("alice", "phone").token
        headers = {"Authorization": f"Bearer {token}"}
        created = client.post("/v1/conversations", headers=headers, json={})
        conversation_id = created.json()["conversation_id"]
        client.put(
            f"/v1/conversations/{conversation_id}/turns/t1",
            headers=headers,
            json={"question": "q", "answer": "a"},
        ).raise_for_status()
        before = client.get("/v1/purge", headers=headers).json()
        app.state.service.ledger.delete_history("alice", UUID(conversation_id))
        after = client.get("/v1/purge", headers=headers).json()
    assert before["state"] == "complete" and before["pending_reasons"] == []
    assert after["state"] == "complete"
    assert after["position"] is not None and after["position"] > (
        before["position"] or 0
    )
    assert after["server_findings"] == []  # SQLite: nothing to configure
