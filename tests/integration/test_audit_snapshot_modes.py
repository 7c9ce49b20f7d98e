"""Issue 26 item 5: a 0.1 snapshot beyond the head is compared in every mode.

tests/integration/test_audit_snapshots.py shows the audit's default reports
a snapshot the DBA copied past the conversation's head; here `turnledger
audit` runs as an operator runs it, in each of its modes (receipts or not,
one conversation, without the index, against a signed checkpoint), and each
exits 1 naming `snapshot-mismatch` at that version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.integration import test_upgrade_from_0_1 as upgrade
from tests.integration.test_audit import _environment
from tests.integration.test_audit_snapshots import copy_snapshot
from turnledger.domain.findings import SNAPSHOT_MISMATCH
from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key

old_store = upgrade.old_store  # the fixture: a copy of the 0.1 store


@pytest.mark.parametrize(
    "mode",
    [[], ["--no-receipts"], ["--no-index"], ["--conversation"], ["--checkpoint"]],
)
def test_every_audit_mode_compares_a_snapshot_beyond_the_head(
    old_store: tuple[Settings, Any],
    mode: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, expected = old_store
    open_conversations(settings).close()  # upgraded as any opening does
    alice = UUID(expected["alice_conversation"])
    head = expected["alice_version"]
    copy_snapshot(settings, alice, head, head + 4)
    for name, value in _environment(settings).items():
        monkeypatch.setenv(name, value)
    assert settings.master_key is not None
    monkeypatch.setenv("TURNLEDGER_MASTER_KEY", settings.master_key.get_secret_value())
    if mode == ["--conversation"]:
        mode = ["--conversation", str(alice)]
    elif mode == ["--checkpoint"]:
        monkeypatch.setenv("TURNLEDGER_AUDIT_SIGNING_KEY", new_signing_key())
        assert main(["checkpoint", "--out", str(tmp_path / "cp")]) == 0
        mode = ["--checkpoint", str(tmp_path / "cp")]
    capsys.readouterr()
    report = tmp_path / "report.json"
    code = main(["audit", *mode, "--json", str(report)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert code == 1, captured.out + captured.err
    failures = {
        (f["kind"], f["conversation_id"], f["version"])
        for f in json.loads(report.read_text())["failures"]
    }
    assert (SNAPSHOT_MISMATCH, str(alice), head + 4) in failures, failures
