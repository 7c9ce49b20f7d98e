"""uvicorn's access log: off unless TURNLEDGER_HTTP_ACCESS_LOG=true."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import start_server, stop_server
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres


def served_log(settings: Settings, log: Path) -> str:
    server = start_server(settings, log)
    try:
        assert httpx.get(f"{server.base_url}/v1/ready", timeout=10).status_code == 200
        missing = httpx.get(f"{server.base_url}/v1/conversations", timeout=10)
        assert missing.status_code == 401
    finally:
        stop_server(server)
    return log.read_text(errors="replace")


def test_requests_are_not_logged_by_default(
    service_settings: Settings, tmp_path: Path
) -> None:
    assert service_settings.http_access_log is False
    log = served_log(service_settings, tmp_path / "server.log")
    assert "Application startup complete" in log  # the log itself is written
    assert "/v1/ready" not in log
    assert "/v1/conversations" not in log


def test_each_request_is_logged_with_its_status_when_asked(
    service_settings: Settings, tmp_path: Path
) -> None:
    settings = service_settings.model_copy(update={"http_access_log": True})
    log = served_log(settings, tmp_path / "server.log")
    assert '"GET /v1/ready HTTP/1.1" 200' in log
    assert '"GET /v1/conversations HTTP/1.1" 401' in log
