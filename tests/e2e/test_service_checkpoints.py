"""`turnledger serve` writes signed checkpoints when a directory is configured."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import SecretStr

from tests.e2e.conftest import client, start_server, stop_server
from turnledger.infra.checkpoint import newest_checkpoint
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key, trusted_public_key


@pytest.mark.parametrize("configured", [True, False], ids=["dir", "key-only"])
def test_the_service_checkpoints_the_log_as_it_grows(
    service_settings: Settings, tmp_path: Path, configured: bool
) -> None:
    """With a directory, there; with only a signing key, by default in
    data_dir/checkpoints."""
    out = tmp_path / "checkpoints" if configured else None
    settings = service_settings.model_copy(
        update={
            "audit_signing_key": SecretStr(new_signing_key()),
            "audit_checkpoint_dir": out,
            "audit_checkpoint_interval_seconds": 0.2,
        }
    )
    if out is None:  # never the user's own data directory
        settings = settings.model_copy(update={"data_dir": tmp_path / "data"})
        out = settings.data_dir / "checkpoints"
    registry = open_device_registry(settings)
    token = registry.add("alice", "laptop").token
    registry.close()
    server = start_server(settings, tmp_path / "server.log")
    try:
        with client(server, token) as http:
            started = http.post("/v1/conversations", json={})
            assert started.status_code == 201, started.text
            conversation = started.json()["conversation_id"]
            for index in range(3):
                response = http.put(
                    f"/v1/conversations/{conversation}/turns/t{index}",
                    json={"question": f"q{index}", "answer": f"a{index}"},
                )
                assert response.status_code in (200, 201), response.text
        key = trusted_public_key(settings)
        deadline = time.monotonic() + 20
        size = 0
        while time.monotonic() < deadline:
            if out.exists() and any(out.iterdir()):
                size = newest_checkpoint(out, key).tree_size
                if size >= 4:  # started + 3 turns
                    break
            time.sleep(0.2)
        assert size >= 4
    finally:
        stop_server(server)
    assert "Traceback" not in server.log.read_text(errors="replace")
