"""`turnledger purge` completes a deletion whose purge did not run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnledger.domain.errors import PurgeIncompleteError
from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings


def test_purge_command_completes_a_pending_deletion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TURNLEDGER_PERSISTENCE", "sqlite")
    monkeypatch.setenv("TURNLEDGER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    settings = Settings(_env_file=None)
    ledger = open_conversations(settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        for turn_id in ("t1", "t2"):
            ledger.confirm_turn(
                "alice", conversation_id, turn_id=turn_id, question="q", answer="a"
            )
        view: Any = ledger.vault.purge_view
        with monkeypatch.context() as patch:
            patch.setattr(view, "destroy_keys", _unreachable)
            with pytest.raises(PurgeIncompleteError):
                ledger.delete_history("alice", conversation_id, turn_ids=["t1"])
        assert set(view.get_many(conversation_id, ["t1", "t2"])) == {"t1", "t2"}
    finally:
        ledger.close()

    assert main(["purge"]) == 0
    assert "compaction complete" in capsys.readouterr().out

    ledger = open_conversations(settings)
    try:
        view = ledger.vault.purge_view
        assert set(view.get_many(conversation_id, ["t1", "t2"])) == {"t2"}
    finally:
        ledger.close()


def _unreachable(*args: object, **kwargs: object) -> int:
    raise OSError("key store unreachable")
