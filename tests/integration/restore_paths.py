"""A backup restored from before a deletion, read every way a user can read.

The scenario is the forensic one (tests/integration/forensic.py): ten turns
with unique markers, window receipts and a fold; t1, t2, t4 and t7 deleted
(the fold with them). The caller takes a backup between writing and deleting,
restores it, and then calls `assert_nothing_deleted_is_readable`: the Python
API, the CLI (as a child process with every TURNLEDGER_* variable), HTTP,
export and the replay of past versions must serve no marker of a deleted item
and still serve every kept turn, and no byte of a destroyed key may remain in
the files the caller names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from fastapi.testclient import TestClient
from pydantic import SecretStr

from tests.integration.forensic import DOOMED, OWNER, Scenario, hits, needles
from turnledger.domain.conversation import fold_key_id
from turnledger.infra.http.app import create_app
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.export import export_records
from turnledger.infra.service_layer.replay import history_at
from turnledger.infra.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def doomed_markers(scenario: Scenario) -> list[str]:
    ids = [*DOOMED, fold_key_id(scenario.fold_id)]
    return [marker for key_id in ids for marker in scenario.markers[key_id]]


def kept_markers(scenario: Scenario) -> list[str]:
    return [scenario.markers[turn_id][0] for turn_id in scenario.kept]


def child_env(settings: Settings) -> dict[str, str]:
    """Every setting as a TURNLEDGER_* variable, plus the parent's others."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    env["TURNLEDGER_DELETION_RECORD_DIR"] = str(settings.deletion_record_directory)
    for name, value in settings:
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[f"TURNLEDGER_{name.upper()}"] = str(value)
    return env


def cli(settings: Settings, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnledger.infra.cli", *arguments],
        env=child_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _python_reads(ledger: Conversations, conversation_id: UUID, version: int) -> str:
    page = ledger.get_history(OWNER, conversation_id, limit=50)
    window = ledger.project_window(
        OWNER,
        conversation_id,
        question="and now?",
        system="s",
        model="m",
        max_bytes=100_000,
    )
    exported = list(export_records(ledger, OWNER, exported_at=datetime.now(UTC)))
    past = history_at(ledger, OWNER, conversation_id, version=version)
    summary = ledger.get_fold_summary(OWNER, conversation_id)
    return "\n".join(
        [
            repr(page),
            window.window.body.decode("utf-8"),
            json.dumps(exported, ensure_ascii=False),
            repr(past),
            repr(summary),
        ]
    )


def _cli_reads(settings: Settings, conversation_id: UUID, version: int) -> str:
    outputs = []
    for arguments in (
        ["history", str(conversation_id), "--owner", OWNER, "--at", str(version)],
        ["export", "--owner", OWNER],
        ["window", str(conversation_id), "--owner", OWNER, "--question", "now?"],
    ):
        result = cli(settings, *arguments)
        assert result.returncode == 0, (arguments, result.stderr)
        outputs.append(result.stdout)
    return "\n".join(outputs)


def _http_reads(settings: Settings, conversation_id: UUID) -> str:
    app = create_app(settings)
    with TestClient(app) as http:
        token = app.state.service.registry.add(OWNER, "restored-phone").token
        auth = {"Authorization": f"Bearer {token}"}
        responses = [
            http.get(
                f"/v1/conversations/{conversation_id}/turns?limit=50", headers=auth
            ),
            http.get("/v1/export", headers=auth),
            http.get("/v1/sync", headers=auth),
            http.post(
                f"/v1/conversations/{conversation_id}/window",
                headers=auth,
                json={"question": "now?", "model": "m"},
            ),
        ]
    for response in responses:
        assert response.status_code == 200, (response.request.url, response.text)
    return "\n".join(response.text for response in responses)


def assert_nothing_deleted_is_readable(
    settings: Settings,
    scenario: Scenario,
    *,
    version: int,
    wrapped: Mapping[str, bytes],
    master_key: bytes,
    files: Mapping[str, bytes] | None = None,
) -> None:
    """`version`: a version at which every turn stood (replayed by history);
    `wrapped`: the doomed items' wrapped keys as the backup held them;
    `files`: the store's files read after the reads (None: not on disk here)."""
    ledger = open_conversations(settings)
    try:
        python = _python_reads(ledger, scenario.conversation_id, version)
    finally:
        ledger.close()
    readings: dict[str, Any] = {
        "python": python,
        "cli": _cli_reads(settings, scenario.conversation_id, version),
        "http": _http_reads(settings, scenario.conversation_id),
    }
    for path, text in readings.items():
        served = [marker for marker in doomed_markers(scenario) if marker in text]
        assert served == [], f"{path} served deleted text: {served}"
        missing = [marker for marker in kept_markers(scenario) if marker not in text]
        assert missing == [], f"{path} lost kept turns: {missing}"
    if files is not None:
        assert hits(files, needles(scenario, wrapped, master_key)) == []
