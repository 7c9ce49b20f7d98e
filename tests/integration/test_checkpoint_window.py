"""The window after the newest checkpoint is small and visible, and a witness
holds what the database administrator cannot roll back.

Events appended after the newest checkpoint, with the read side fixed up,
are caught by nothing until a checkpoint covers them: so the service
checkpoints by default once it has a signing key, `audit` says how old the
newest checkpoint is, and checkpoints published to a witness show a
rolled-back checkpoint directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tests.integration import test_transparency_attacks as attacks
from tests.integration.forger import Forger
from tests.integration.test_audit import run_turns
from tests.integration.test_transparency_attacks import SQL_STORES, cli_audit, located
from turnledger.domain.findings import LOG_TRUNCATED
from turnledger.infra.checkpoint import (
    LEAF_INPUT_RECORD,
    LEAF_INPUTS_FILE,
    LEAVES_FILE,
    checkpoint_files,
    write_checkpoint,
)
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key

signed = attacks.signed  # the fixtures: a signed store with a checkpoint
store = attacks.store


def test_a_signing_key_alone_turns_periodic_checkpoints_on(tmp_path: Path) -> None:
    plain = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path)
    assert plain.checkpoint_dir_in_effect is None
    keyed = plain.model_copy(update={"audit_signing_key": SecretStr(new_signing_key())})
    assert keyed.checkpoint_dir_in_effect == tmp_path / "checkpoints"
    chosen = keyed.model_copy(update={"audit_checkpoint_dir": tmp_path / "worm"})
    assert chosen.checkpoint_dir_in_effect == tmp_path / "worm"


@SQL_STORES
def test_audit_says_how_old_the_newest_checkpoint_is(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, document = cli_audit(store["out"], tmp_path / "r.json", capsys)
    assert code == 0
    assert "old" in out and "newest checkpoint" in out
    age = document["checkpoint"]["age_seconds"]
    assert 0 <= age < 600
    assert document["checkpoint"]["events_after"] == 0


def _publish(directory: Path, witness: Path) -> None:
    """What docs/transparency.md shows: new files only, never a rewrite."""
    witness.mkdir(exist_ok=True)
    for path in directory.iterdir():
        if path.name.startswith("checkpoint-") and not (witness / path.name).exists():
            shutil.copy2(path, witness / path.name)
    for name in (LEAVES_FILE, LEAF_INPUTS_FILE):
        shutil.copy2(directory / name, witness / name)


@SQL_STORES
def test_a_rolled_back_checkpoint_directory_is_caught_by_the_witness(
    store: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings: Settings = store["settings"]
    out: Path = store["out"]
    witness = tmp_path / "witness"
    _publish(out, witness)
    kept = {path.name for path in checkpoint_files(out)}
    ledger = open_conversations(settings)
    try:
        dave, _ = run_turns(ledger, "dave", turns=2)
    finally:
        ledger.close()
    write_checkpoint(None, settings, out)
    _publish(out, witness)
    # The DBA removes dave's conversation and rolls the directory back to the
    # checkpoint before it (files and leaves trimmed to its size).
    forger: Forger = store["forger"]
    forger.delete_conversation(dave)
    for path in checkpoint_files(out):
        if path.name not in kept:
            path.unlink()
    size = store["checkpoint"].tree_size
    for name, record in ((LEAVES_FILE, 32), (LEAF_INPUTS_FILE, LEAF_INPUT_RECORD)):
        with (out / name).open("r+b") as handle:
            handle.truncate(size * record)
    code, _, _ = cli_audit(out, tmp_path / "r.json", capsys)
    assert code == 0  # the rolled-back directory alone sees nothing
    code, out_text, document = cli_audit(witness, tmp_path / "w.json", capsys)
    assert code == 1, out_text
    assert {(kind, conversation) for kind, conversation, _ in located(document)} >= {
        (LOG_TRUNCATED, str(dave))
    }
