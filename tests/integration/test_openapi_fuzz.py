"""schemathesis, driven by the service's own OpenAPI document, finds no server
error and no response that breaks the document (SQLite store, in process)."""

from __future__ import annotations

import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from turnledger.infra.devices import open_device_registry
from turnledger.infra.http.app import create_app
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

# schemathesis builds its tests from the schema when this module is collected,
# so the service exists from then on; the fixture below removes its files.
_DATA_DIR = Path(tempfile.mkdtemp(prefix="turnledger-fuzz-"))
_SETTINGS = Settings(
    _env_file=None,
    persistence="sqlite",
    data_dir=_DATA_DIR,
    sync_max_wait_seconds=0.1,
    http_max_body_bytes=64_000,
)
# Stores handed in stay open across the lifespans schemathesis runs per call.
_LEDGER = open_conversations(_SETTINGS)
_REGISTRY = open_device_registry(_SETTINGS)
app = create_app(_SETTINGS, ledger=_LEDGER, registry=_REGISTRY)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.fixture(scope="module")
def seeded() -> Iterator[dict[str, Any]]:
    """A device token and a conversation with turns, so cases reach real data."""
    token = app.state.service.registry.add("alice", "fuzzer").token
    headers = {"Authorization": f"Bearer {token}"}
    http = TestClient(app)
    conversation_id = http.post("/v1/conversations", headers=headers).json()[
        "conversation_id"
    ]
    for n in range(3):
        http.put(
            f"/v1/conversations/{conversation_id}/turns/t{n}",
            headers=headers,
            json={"question": f"question {n}", "answer": f"answer {n}"},
        )
    yield {"headers": headers, "conversation_id": conversation_id}
    _LEDGER.close()
    _REGISTRY.close()
    shutil.rmtree(_DATA_DIR, ignore_errors=True)


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_service_never_answers_with_a_server_error(
    case: Any, seeded: dict[str, Any]
) -> None:
    # Half the cases name the real conversation, so they get past the lookup.
    path = case.path_parameters or {}
    if "conversation_id" in path and zlib.crc32(repr(case.body).encode()) % 2 == 0:
        path["conversation_id"] = seeded["conversation_id"]
    case.call_and_validate(
        headers=seeded["headers"],
        checks=[
            not_a_server_error,
            response_schema_conformance,
            content_type_conformance,
            status_code_conformance,
        ],
    )
