"""The deletion record rewritten underneath a running service: the writer,
which reads only what was appended since, first checks that the record is
still the one it read. A rewritten record is refused loudly by the next
deletion's purge (the deletion itself stands and its text is not served), by
the checkpoint writer (nothing is signed over it), and by the next opening."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_record_checkpoint import signed_settings
from tests.unit.test_deletion_record import _rewritten
from turnledger.domain.errors import PurgeIncompleteError
from turnledger.infra.checkpoint import CheckpointWriter, checkpoint_files
from turnledger.infra.deletion_record import DeletionRecordLostError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

OWNER = "alice"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def signed(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    return signed_settings(request, tmp_path)


def test_a_record_rewritten_under_a_running_service_is_refused_loudly(
    signed: Settings, tmp_path: Path
) -> None:
    ledger = open_conversations(signed)
    checkpoints = tmp_path / "checkpoints"
    writer = CheckpointWriter(ledger, signed, checkpoints)
    try:
        conversation_id = ledger.start_conversation(OWNER)
        for turn_id in ("t1", "t2", "t3"):
            ledger.confirm_turn(
                OWNER, conversation_id, turn_id=turn_id, question="q", answer="a"
            )
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
        ledger.delete_history(OWNER, conversation_id, turn_ids=["t2"])
        writer.write()
        (path,) = signed.deletion_record_directory.glob("deletions-*.log")
        # t2's entry replaced, every hash recomputed, the file exactly as long
        # as it was: appends alone would not show it.
        forged = _same_length(path)
        path.write_bytes(forged)

        with pytest.raises(PurgeIncompleteError):
            ledger.delete_history(OWNER, conversation_id, turn_ids=["t3"])
        assert path.read_bytes() == forged  # nothing chained onto it
        items = ledger.get_history(OWNER, conversation_id).items
        assert [(i.turn_id, i.answer) for i in items] == [
            ("t1", None),
            ("t2", None),
            ("t3", None),
        ]
        signed_before = checkpoint_files(checkpoints)
        with pytest.raises(DeletionRecordLostError):
            writer.write()
        assert checkpoint_files(checkpoints) == signed_before
    finally:
        writer.close()
        ledger.close()
    with pytest.raises(DeletionRecordLostError, match="rolled back or replaced"):
        open_conversations(signed)


def _same_length(path: Path) -> bytes:
    size = len(path.read_bytes())
    for pad in range(400):
        body = b'{"n":2,"c":"%s","k":["%s"],"p":1,"at":"2026-12-06T00:00:00+00:00"}' % (
            b"0" * 32,
            b"x" * pad,
        )
        forged = _rewritten(path, 1, [body])
        if len(forged) == size:
            return forged
    raise AssertionError("no forgery of the same length")
