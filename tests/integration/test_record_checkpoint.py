"""The deletion record's head is in every signed checkpoint: a record rolled
back, rewritten with every hash recomputed, or removed is reported by
`audit --checkpoint` and stops the next checkpoint; checkpoints signed before
the record's head was are still verified as they were."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from uuid import UUID

import orjson
import pytest
from pydantic import SecretStr

from tests.integration.restore_paths import cli
from turnledger.domain.errors import CheckpointError
from turnledger.domain.findings import RECORD_ALTERED, RECORD_LOST, RECORD_ROLLED_BACK
from turnledger.infra.checkpoint import (
    CheckpointWriter,
    LogInconsistentError,
    newest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key
from turnledger.infra.transparency_audit import audit_against_checkpoint

OWNER = "alice"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    return signed_settings(request, tmp_path)


def signed_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """A fresh store of the fixture's kind whose service signs checkpoints."""
    if request.param == "postgres":
        postgres: Settings = request.getfixturevalue("postgres_settings")
        return postgres.model_copy(
            update={"audit_signing_key": SecretStr(new_signing_key())}
        )
    return Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "data",
        audit_signing_key=new_signing_key(),
    )


def _store_with_deletions(settings: Settings) -> UUID:
    ledger = open_conversations(settings)
    try:
        conversation_id = ledger.start_conversation(OWNER)
        for turn_id in ("t1", "t2", "t3"):
            ledger.confirm_turn(
                OWNER, conversation_id, turn_id=turn_id, question="q", answer="a"
            )
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t2"])
    finally:
        ledger.close()
    return conversation_id


def _record(settings: Settings) -> Path:
    (path,) = settings.deletion_record_directory.glob("deletions-*.log")
    return path


def _rewrite(path: Path, bodies: list[bytes]) -> None:
    """What an attacker who read infra/deletion_record.py writes: the header
    kept, the entries given, every hash recomputed."""
    header = path.read_bytes().split(b"\n", 1)[0]
    head = hashlib.sha256(header).digest()
    lines = [header]
    for body in bodies:
        head = hashlib.sha256(head + body).digest()
        lines.append(head.hex().encode() + b" " + body)
    path.write_bytes(b"\n".join(lines) + b"\n")


def _bodies(path: Path) -> list[bytes]:
    lines = path.read_bytes().splitlines()[1:]
    return [line.partition(b" ")[2] for line in lines]


def _audit_kinds(settings: Settings, checkpoints: Path) -> list[str]:
    ledger = open_conversations(settings, read_only=True)
    try:
        report = audit_against_checkpoint(ledger, settings, checkpoints)
    finally:
        ledger.close()
    return [finding.kind for finding in report.failures]


def test_a_checkpoint_signs_the_record_head_and_an_intact_record_audits_clean(
    settings: Settings, tmp_path: Path
) -> None:
    conversation_id = _store_with_deletions(settings)
    checkpoints = tmp_path / "checkpoints"
    checkpoint = write_checkpoint(None, settings, checkpoints)
    assert checkpoint.record is not None
    assert checkpoint.record.head.entries == 2
    document = json.loads(checkpoint.path.read_text())  # type: ignore[union-attr]
    assert set(document["deletion_record"]) == {
        "format",
        "record_id",
        "entries",
        "head",
        "signature",
    }
    assert read_checkpoint(checkpoint.path).record == checkpoint.record  # type: ignore[arg-type]
    assert _audit_kinds(settings, checkpoints) == []
    # Deletions after the checkpoint only extend the record: still clean, and
    # the next checkpoint signs the longer record.
    ledger = open_conversations(settings)
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t3"])
    ledger.close()
    assert _audit_kinds(settings, checkpoints) == []
    newer = write_checkpoint(None, settings, checkpoints)
    assert newer.record is not None and newer.record.head.entries == 3


@pytest.mark.parametrize(
    ("attack", "kind"),
    [
        ("roll back, hashes recomputed", RECORD_ROLLED_BACK),
        ("rewrite, hashes recomputed", RECORD_ALTERED),
        ("rewrite and pad, hashes recomputed", RECORD_ALTERED),
        ("remove", RECORD_LOST),
    ],
)
def test_a_record_rolled_back_or_rewritten_is_reported_and_refused(
    settings: Settings, tmp_path: Path, attack: str, kind: str
) -> None:
    _store_with_deletions(settings)
    checkpoints = tmp_path / "checkpoints"
    write_checkpoint(None, settings, checkpoints)
    path = _record(settings)
    bodies = _bodies(path)
    match attack:
        case "roll back, hashes recomputed":
            _rewrite(path, bodies[:1])
        case "rewrite, hashes recomputed":
            entry = orjson.loads(bodies[0])
            entry["k"] = ["t9"]  # hides the deletion of t1
            _rewrite(path, [orjson.dumps(entry), bodies[1]])
        case "rewrite and pad, hashes recomputed":
            later = orjson.loads(bodies[1])
            later["n"] = 3
            _rewrite(path, [bodies[1], orjson.dumps(later)])
        case "remove":
            path.unlink()

    assert kind in _audit_kinds(settings, checkpoints)
    audited = cli(settings, "audit", "--checkpoint", str(checkpoints))
    assert audited.returncode == 1, audited.stdout + audited.stderr
    assert kind in audited.stdout
    with pytest.raises(LogInconsistentError, match="deletion record"):
        write_checkpoint(None, settings, checkpoints)
    refused = cli(settings, "checkpoint", "--out", str(checkpoints))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert len(list(checkpoints.glob("checkpoint-*.json"))) == 1


def test_checkpoints_without_a_record_head_still_verify_and_a_moved_head_does_not(
    settings: Settings, tmp_path: Path
) -> None:
    _store_with_deletions(settings)
    checkpoints = tmp_path / "checkpoints"
    first = write_checkpoint(None, settings, checkpoints)
    ledger = open_conversations(settings)
    conversation_id = ledger.read_side.conversations_of(OWNER)[0].conversation_id
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t3"])
    ledger.close()
    second = write_checkpoint(None, settings, checkpoints)
    assert first.path is not None and second.path is not None

    # As the release before wrote it: the tree head only. Its signature
    # covers the same bytes, so it verifies, and the audit checks the log.
    old = json.loads(first.path.read_text())
    del old["deletion_record"]
    legacy = tmp_path / "legacy" / first.path.name
    legacy.parent.mkdir()
    legacy.write_text(json.dumps(old))
    assert read_checkpoint(legacy).record is None
    assert _audit_kinds(settings, legacy.parent) == []

    # A record head is bound to its tree head: the older one moved into the
    # newer checkpoint, or its count changed, no longer verifies.
    for change in ("moved", "count"):
        document = json.loads(second.path.read_text())
        if change == "moved":
            document["deletion_record"] = json.loads(first.path.read_text())[
                "deletion_record"
            ]
        else:
            document["deletion_record"]["entries"] -= 1
        forged = tmp_path / change / second.path.name
        forged.parent.mkdir()
        forged.write_text(json.dumps(document))
        with pytest.raises(CheckpointError, match="deletion record head"):
            read_checkpoint(forged)
    shutil.rmtree(tmp_path / "moved")
    assert newest_checkpoint(checkpoints).record == second.record


def test_a_kept_writer_refuses_once_the_record_is_gone(
    settings: Settings, tmp_path: Path
) -> None:
    _store_with_deletions(settings)
    writer = CheckpointWriter(None, settings, tmp_path / "checkpoints")
    try:
        assert writer.write().record is not None
        _record(settings).unlink()
        with pytest.raises(LogInconsistentError, match="is missing"):
            writer.write()
    finally:
        writer.close()
