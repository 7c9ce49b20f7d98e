"""The tree cache follows the log on every store, and proofs come from it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import SecretStr

from tests.conftest import durable_stores
from tests.integration.test_audit import run_turns
from turnledger.domain.merkle import (
    MerkleTree,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from turnledger.domain.transparency import pages, row_leaf
from turnledger.infra.checkpoint import (
    CheckpointWriter,
    read_checkpoint,
    read_leaves_file,
)
from turnledger.infra.merkle_store import follow, open_leaf_store
from turnledger.infra.persistence import open_conversations
from turnledger.infra.proofs import prove_consistency, prove_event
from turnledger.infra.raw_log import open_raw_log
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key
from turnledger.infra.transparency_audit import audit_against_checkpoint


def _signed(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"audit_signing_key": SecretStr(new_signing_key())}
    )


def test_followed_in_small_pages_the_tree_equals_one_built_from_the_rows(
    settings: Settings, open_ledger: Callable[[], Conversations]
) -> None:
    ledger = open_ledger()
    log = open_raw_log(settings, ledger)
    store = open_leaf_store(settings, ledger)
    try:
        run_turns(ledger, "alice", turns=2)
        assert follow(log, store, page_size=2).frontier.size == 3
        run_turns(ledger, "bob", turns=4)
        followed = follow(log, store, page_size=3)
        rows = [row for page in pages(log, 100) for row in page]
        expected = MerkleTree([row_leaf(row) for row in rows])
        assert followed.frontier.size == store.size() == len(rows) == 8
        assert followed.frontier.root() == expected.root()
        assert follow(log, store).frontier.size == 8  # nothing new: no change
        for size in range(1, 9):
            assert MerkleTree(
                [leaf_hash(d) for d in store.leaf_inputs(0, size)]
            ).root() == expected.root(size)
    finally:
        log.close()
        if settings.persistence != "memory":
            store.close()


class _FailingOnPage:
    """A leaf store whose `fail_at`-th page fails after writing its leaves,
    before its position is recorded (a crash inside the page's transaction)."""

    def __init__(self, store: Any, fail_at: int) -> None:
        self._store = store
        self._fail_at = fail_at
        self._pages = 0

    @contextmanager
    def writing(self) -> Iterator[Any]:
        with self._store.writing() as writer:
            outer = self

            class Writer:
                def __getattr__(self, name: str) -> Any:
                    return getattr(writer, name)

                def track(self, size: int, last_id: int) -> None:
                    outer._pages += 1
                    if outer._pages == outer._fail_at:
                        raise RuntimeError("crash before the page's position")
                    writer.track(size, last_id)

            yield Writer()


@durable_stores
def test_a_follow_that_fails_in_a_page_leaves_the_tree_at_the_page_before(
    settings: Settings, open_ledger: Callable[[], Conversations]
) -> None:
    ledger = open_ledger()
    log = open_raw_log(settings, ledger)
    store = open_leaf_store(settings, ledger)
    try:
        run_turns(ledger, "alice", turns=4)
        with pytest.raises(RuntimeError):
            follow(log, _FailingOnPage(store, fail_at=2), page_size=2)  # type: ignore[arg-type]
        assert store.size() == 2  # the second page's leaves were rolled back
        assert len(store.leaf_inputs(0, 10)) == 2
        followed = follow(log, store, page_size=2)
        rows = [row for page in pages(log, 100) for row in page]
        assert followed.frontier.size == store.size() == len(rows) == 5
        assert (
            followed.frontier.root() == MerkleTree([row_leaf(r) for r in rows]).root()
        )
    finally:
        log.close()
        store.close()


def test_proofs_from_the_python_api_verify(
    settings: Settings, open_ledger: Callable[[], Conversations], tmp_path: Path
) -> None:
    settings = _signed(settings)
    ledger = open_ledger()
    conversation_id, _ = run_turns(ledger, "alice", turns=3)
    writer = CheckpointWriter(ledger, settings, tmp_path / "cp")
    try:
        old = writer.write()
        run_turns(ledger, "bob", turns=2)
        new = writer.write()
    finally:
        writer.close()
    assert (old.tree_size, new.tree_size) == (4, 7)
    assert old.path is not None and new.path is not None
    assert read_checkpoint(new.path).root_hash == new.root_hash
    assert len(read_leaves_file(tmp_path / "cp")) == 7
    proof = prove_event(ledger, settings, conversation_id, 2, new)
    assert verify_inclusion(
        bytes.fromhex(proof["leaf_hash"]),
        proof["leaf_index"],
        new.tree_size,
        [bytes.fromhex(h) for h in proof["audit_path"]],
        new.root_hash,
    )
    consistency = prove_consistency(ledger, settings, old, new)
    assert verify_consistency(
        old.tree_size,
        new.tree_size,
        [bytes.fromhex(h) for h in consistency["proof"]],
        old.root_hash,
        new.root_hash,
    )
    report = audit_against_checkpoint(ledger, settings, tmp_path / "cp")
    assert report.ok, report.failures
    assert report.checkpoint is not None and report.checkpoint["tree_size"] == 7


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_prove_names_what_it_cannot_prove(
    settings: Settings,
    open_ledger: Callable[[], Conversations],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.integration.test_audit import _environment
    from turnledger.infra.cli import main

    settings = _signed(settings)
    assert settings.audit_signing_key is not None
    for name, value in _environment(settings).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(
        "TURNLEDGER_AUDIT_SIGNING_KEY", settings.audit_signing_key.get_secret_value()
    )
    ledger = open_ledger()
    conversation_id, _ = run_turns(ledger, "alice", turns=1)
    out = tmp_path / "cp"
    assert main(["checkpoint", "--out", str(out)]) == 0
    run_turns(ledger, "bob", turns=1)
    later, _ = run_turns(ledger, "carol", turns=1)
    prove = ["prove", "event"]
    assert main([*prove, str(conversation_id), "9", "--checkpoint", str(out)]) == 2
    assert main([*prove, str(later), "1", "--checkpoint", str(out)]) == 2
    assert main([*prove, str(conversation_id), "2", "--checkpoint", str(out)]) == 0
    captured = capsys.readouterr()
    assert "no stored event at version 9" in captured.err
    assert "newer than the checkpoint" in captured.err
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
def test_the_service_loop_writes_checkpoints_until_stopped(
    settings: Settings, open_ledger: Callable[[], Conversations], tmp_path: Path
) -> None:
    import threading

    from turnledger.infra.checkpoint import checkpoint_files, checkpoint_periodically

    settings = _signed(settings).model_copy(
        update={
            "audit_checkpoint_dir": tmp_path / "cp",
            "audit_checkpoint_interval_seconds": 0.05,
        }
    )
    ledger = open_ledger()
    run_turns(ledger, "alice", turns=1)
    stop = threading.Event()
    loop = threading.Thread(
        target=checkpoint_periodically, args=(None, settings, stop), daemon=True
    )
    loop.start()
    try:
        for _ in range(200):
            if len(checkpoint_files(tmp_path / "cp")) >= 1:
                break
            threading.Event().wait(0.05)
        run_turns(ledger, "bob", turns=1)
        for _ in range(200):
            sizes = {
                read_checkpoint(p).tree_size for p in checkpoint_files(tmp_path / "cp")
            }
            if 4 in sizes:
                break
            threading.Event().wait(0.05)
    finally:
        stop.set()
        loop.join(timeout=10)
    assert not loop.is_alive()
    assert {2, 4} <= sizes
    # Idle rounds write nothing: one checkpoint per size seen.
    files = checkpoint_files(tmp_path / "cp")
    assert len(files) == len({read_checkpoint(p).tree_size for p in files})


def test_crypto_shredding_after_a_checkpoint_is_no_tampering(
    settings: Settings, open_ledger: Callable[[], Conversations], tmp_path: Path
) -> None:
    """Deletion destroys keys and appends an event; the stored rows the
    checkpoint covers keep their bytes, so the log still extends it."""
    settings = _signed(settings)
    ledger = open_ledger()
    conversation_id, _ = run_turns(ledger, "alice", turns=3)
    writer = CheckpointWriter(ledger, settings, tmp_path / "cp")
    try:
        writer.write()
        ledger.delete_history("alice", conversation_id, turn_ids=["t1", "t2"])
        ledger.purge_deleted_history()
        report = audit_against_checkpoint(ledger, settings, tmp_path / "cp")
        assert report.ok, report.failures
        assert writer.write().tree_size == 5
    finally:
        writer.close()


@pytest.mark.postgres
def test_a_checkpoint_writer_on_postgres_connects_once_and_follows_every_row(
    postgres_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = _signed(postgres_settings)
    ledger = open_conversations(settings)
    try:
        run_turns(ledger, "alice", turns=3)
        connects: list[str] = []
        real_connect = psycopg.connect

        def counted(*args: Any, **kwargs: Any) -> Any:
            connects.append("connect")
            return real_connect(*args, **kwargs)

        monkeypatch.setattr(psycopg, "connect", counted)
        writer = CheckpointWriter(None, settings, tmp_path / "checkpoints")
        try:
            first = writer.write()
            run_turns(ledger, "bob", turns=2)
            second = writer.write()
        finally:
            writer.close()
        monkeypatch.undo()
        assert connects == ["connect"]  # the raw log reads on the tree's connection
        log = open_raw_log(settings, ledger)
        try:
            rows = [row for page in pages(log, 100) for row in page]
        finally:
            log.close()
        assert (first.tree_size, second.tree_size) == (4, len(rows)) == (4, 7)
        assert second.root_hash == MerkleTree([row_leaf(r) for r in rows]).root()
        report = audit_against_checkpoint(ledger, settings, tmp_path / "checkpoints")
        assert report.ok, report.failures
    finally:
        ledger.close()
