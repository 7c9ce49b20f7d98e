"""After a real restore, the other copies of the truth are not fooled: a device
whose cursor is past the restored log is told to sync again, `audit
--checkpoint` reports the rollback against the newest signed checkpoint, and
the transparency log refuses to be signed again from the rewound state."""

from __future__ import annotations

import shutil
from pathlib import Path

from fastapi.testclient import TestClient

from tests.integration.restore_paths import cli
from turnledger.infra.http.app import create_app
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key


def _turns(settings: Settings, conversation_id: object, ids: list[str]) -> None:
    ledger = open_conversations(settings)
    try:
        for turn_id in ids:
            ledger.confirm_turn(
                "alice",
                conversation_id,  # type: ignore[arg-type]
                turn_id=turn_id,
                question=f"question {turn_id}",
                answer="answer",
            )
    finally:
        ledger.close()


def test_devices_audits_and_checkpoints_see_the_restore(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"  # off the data directory's host, ideally
    settings = Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "data",
        audit_signing_key=new_signing_key(),
    )
    ledger = open_conversations(settings)
    conversation_id = ledger.start_conversation("alice")
    ledger.close()
    app = create_app(settings)
    with TestClient(app) as http:
        token = app.state.service.registry.add("alice", "phone").token
    _turns(settings, conversation_id, ["t1", "t2", "t3"])
    shutil.copytree(settings.data_dir, tmp_path / "backup")

    _turns(settings, conversation_id, ["t4", "t5", "t6"])
    ledger = open_conversations(settings)
    ledger.delete_history("alice", conversation_id, turn_ids=["t1"])
    ledger.close()
    signed = cli(settings, "checkpoint", "--out", str(checkpoints))
    assert signed.returncode == 0, signed.stderr
    auth = {"Authorization": f"Bearer {token}"}
    app = create_app(settings)
    with TestClient(app) as http:
        cursor = None
        while True:
            page = http.get(
                "/v1/sync", headers=auth, params={"since": cursor} if cursor else {}
            ).json()
            cursor = page["next_cursor"]
            if not page["has_more"]:
                break

    shutil.rmtree(settings.data_dir)
    shutil.copytree(tmp_path / "backup", settings.data_dir)

    # Before anything deletes t1 again, an audit refuses to read the store
    # (2: it could not run, as when the database is down).
    early = cli(settings, "audit", "--checkpoint", str(checkpoints))
    assert early.returncode == 2
    assert "restored from before 1 deletion(s)" in early.stderr

    app = create_app(settings)  # the service's start: t1 is deleted again
    with TestClient(app) as http:
        stale = http.get("/v1/sync", headers=auth, params={"since": cursor})
        fresh = http.get("/v1/sync", headers=auth).json()
    assert stale.status_code == 422
    assert "sync again from the beginning" in stale.text
    deleted = [c for c in fresh["changes"] if c.get("kind") == "history_deleted"]
    assert [c["turn_ids"] for c in deleted] == [["t1"]]

    audit = cli(settings, "audit", "--checkpoint", str(checkpoints))
    assert audit.returncode == 1, audit.stdout + audit.stderr
    assert "log-" in audit.stdout + audit.stderr  # log-truncated / log-removed

    again = cli(settings, "checkpoint", "--out", str(checkpoints))
    assert again.returncode != 0
    assert len(list(checkpoints.glob("checkpoint-*.json"))) == 1
