"""GET /v1/audit/checkpoint and the proof route serve the whole signed
checkpoint, the deletion record's head included, exactly as it is in its
file; a block altered on the way no longer verifies."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from fastapi.testclient import TestClient
from pydantic import SecretStr

from turnledger.infra.checkpoint import (
    Checkpoint,
    SignedRecordHead,
    record_head_message,
    write_checkpoint,
)
from turnledger.infra.deletion_record import RecordHead
from turnledger.infra.http.app import create_app
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key

OWNER = "alice"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def audited(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    update = {
        "audit_signing_key": SecretStr(new_signing_key()),
        "audit_checkpoint_dir": tmp_path / "checkpoints",
        # Checkpoints are written by the test, not by the service's thread.
        "audit_checkpoint_interval_seconds": 3600.0,
    }
    if request.param == "postgres":
        postgres: Settings = request.getfixturevalue("postgres_settings")
        return postgres.model_copy(update=update)
    return Settings(
        _env_file=None, persistence="sqlite", data_dir=tmp_path / "data", **update
    )


@pytest.fixture
def http(
    audited: Settings,
) -> Iterator[tuple[TestClient, dict[str, str], Checkpoint, UUID]]:
    app = create_app(audited)
    with TestClient(app) as client:
        service = app.state.service
        token = service.registry.add(OWNER, "phone").token
        ledger = service.ledger
        conversation = ledger.start_conversation(OWNER)
        for turn_id in ("t1", "t2"):
            ledger.confirm_turn(
                OWNER, conversation, turn_id=turn_id, question="q", answer="a"
            )
        ledger.delete_history(OWNER, conversation, turn_ids=["t1"])
        checkpoint = write_checkpoint(None, audited, audited.audit_checkpoint_dir)  # type: ignore[arg-type]
        headers = {"Authorization": f"Bearer {token}"}
        yield client, headers, checkpoint, conversation


def _record_signature_holds(document: dict[str, object]) -> bool:
    """The check a verifier makes with the served document alone."""
    record = document["deletion_record"]
    assert isinstance(record, dict)
    checkpoint = Checkpoint(
        origin=str(document["origin"]),
        tree_size=int(str(document["tree_size"])),
        root_hash=bytes.fromhex(str(document["root_hash"])),
        timestamp=str(document["timestamp"]),
        public_key=base64.b64decode(str(document["public_key"])),
        signature=base64.b64decode(str(document["signature"])),
    )
    head = SignedRecordHead(
        RecordHead(
            str(record["record_id"]),
            int(record["entries"]),
            bytes.fromhex(record["head"]),
        ),
        base64.b64decode(record["signature"]),
    )
    key = Ed25519PublicKey.from_public_bytes(checkpoint.public_key)
    try:
        key.verify(
            head.signature, record_head_message(checkpoint.signed_bytes(), head.head)
        )
    except InvalidSignature:
        return False
    return True


def test_the_checkpoint_route_serves_the_deletion_record_block(
    http: tuple[TestClient, dict[str, str], Checkpoint, UUID],
) -> None:
    client, headers, checkpoint, _ = http
    answer = client.get("/v1/audit/checkpoint", headers=headers)
    assert answer.status_code == 200, answer.text
    served = answer.json()
    on_disk = json.loads(checkpoint.path.read_text())  # type: ignore[union-attr]
    assert served == on_disk
    assert served["deletion_record"]["entries"] == 1
    assert _record_signature_holds(served)
    for field, value in (
        ("entries", 0),
        ("head", "0" * 64),
        ("record_id", "f" * 32),
    ):
        tampered = {
            **served,
            "deletion_record": {**served["deletion_record"], field: value},
        }
        assert not _record_signature_holds(tampered), field


def test_the_proof_carries_the_same_checkpoint(
    http: tuple[TestClient, dict[str, str], Checkpoint, UUID],
) -> None:
    client, headers, checkpoint, conversation = http
    answer = client.get(
        f"/v1/conversations/{conversation}/events/2/proof", headers=headers
    )
    assert answer.status_code == 200, answer.text
    on_disk = json.loads(checkpoint.path.read_text())  # type: ignore[union-attr]
    assert answer.json()["checkpoint"] == on_disk
