"""A store knows its master key's id: a different key is refused at start, and
`turnledger rotate-master-key` is the way to change it."""

from __future__ import annotations

import base64
from pathlib import Path
from uuid import UUID

import pytest

from tests.conftest import durable_stores
from tests.integration.restore_paths import cli
from turnledger.infra.exit_codes import EXIT_CANNOT_RUN
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import MasterKeyError, master_key_id, new_master_key


def _with_key(settings: Settings, key_file: Path) -> Settings:
    return settings.model_copy(update={"master_key": None, "master_key_file": key_file})


def _key_file(path: Path, key: str) -> Path:
    path.write_text(key + "\n")
    path.chmod(0o600)
    return path


def _write_turn(settings: Settings) -> tuple[str, UUID]:
    ledger = open_conversations(settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        ledger.confirm_turn(
            "alice",
            conversation_id,
            turn_id="t1",
            question="My PIN is 4711",
            answer="ok",
        )
    finally:
        ledger.close()
    return "alice", conversation_id


@durable_stores
def test_a_different_master_key_is_refused_before_anything_is_sealed(
    settings: Settings, tmp_path: Path
) -> None:
    first = _with_key(settings, _key_file(tmp_path / "first.key", new_master_key()))
    _write_turn(first)
    other_key = new_master_key()
    other = _with_key(settings, _key_file(tmp_path / "other.key", other_key))
    with pytest.raises(MasterKeyError, match="is not the key of this store"):
        open_conversations(other)
    with pytest.raises(MasterKeyError, match="rotate-master-key"):
        open_conversations(other, read_only=True)
    for command in (["restore-check"], ["export", "--owner", "alice"]):
        result = cli(other, *command)
        assert result.returncode == EXIT_CANNOT_RUN, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert "is not the key of this store" in result.stderr
    # Nothing was sealed under the refused key: the right one reads everything.
    ledger = open_conversations(first)
    conversation_id = ledger.read_side.conversations_of("alice")[0].conversation_id
    page = ledger.get_history("alice", conversation_id)
    ledger.close()
    assert [item.question for item in page.items] == ["My PIN is 4711"]


@durable_stores
def test_rotating_the_master_key_rewraps_every_key(
    settings: Settings, tmp_path: Path
) -> None:
    old = _with_key(settings, _key_file(tmp_path / "old.key", new_master_key()))
    owner, conversation_id = _write_turn(old)
    new_file = tmp_path / "new.key"
    rotated = cli(
        old, "rotate-master-key", "--new-key-file", str(new_file), "--generate"
    )
    assert rotated.returncode == 0, rotated.stderr
    new_key = new_file.read_text().strip()
    assert "1 turn key(s) rewrapped" in rotated.stdout
    with pytest.raises(MasterKeyError, match="is not the key of this store"):
        open_conversations(old)
    new = _with_key(settings, new_file)
    ledger = open_conversations(new)
    try:
        page = ledger.get_history(owner, conversation_id)
        ledger.confirm_turn(
            owner, conversation_id, turn_id="t2", question="later", answer="ok"
        )
    finally:
        ledger.close()
    assert [item.question for item in page.items] == ["My PIN is 4711"]
    assert master_key_id(base64.b64decode(new_key)) in rotated.stdout


def test_rotation_replaces_the_default_key_file(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path / "d")
    owner, conversation_id = _write_turn(settings)
    before = settings.default_master_key_path.read_text()
    result = cli(
        settings,
        "rotate-master-key",
        "--new-key-file",
        str(tmp_path / "k"),
        "--generate",
    )
    assert result.returncode == 0, result.stderr
    assert settings.default_master_key_path.read_text() != before
    assert settings.default_master_key_path.stat().st_mode & 0o077 == 0
    ledger = open_conversations(settings)
    page = ledger.get_history(owner, conversation_id)
    ledger.close()
    assert [item.question for item in page.items] == ["My PIN is 4711"]
