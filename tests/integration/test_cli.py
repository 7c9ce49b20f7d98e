"""The main job as a newcomer runs it: `turnledger demo`, then the command it prints."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from turnledger.infra.cli import main
from turnledger.infra.exit_codes import EXIT_CANNOT_RUN
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings


def run_turnledger(
    home: Path, *argv: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    env["TURNLEDGER_DELETION_RECORD_DIR"] = os.environ["TURNLEDGER_DELETION_RECORD_DIR"]
    env.update(XDG_DATA_HOME=str(home), COLUMNS="120", **(extra_env or {}))
    return subprocess.run(
        [sys.executable, "-m", "turnledger.infra.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def run_demo(home: Path) -> subprocess.CompletedProcess[str]:
    return run_turnledger(home, "demo")


def test_demo_runs_the_seed_scenario_on_a_store_of_its_own(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"SQLite ({tmp_path / 'turnledger-demo'})" in out
    assert (tmp_path / "turnledger-demo" / "events.sqlite3").is_file()
    # The configured (default) store is not touched.
    assert not (tmp_path / "turnledger").exists()
    assert "FAILED" not in out
    for line in (
        "ok  narrow window keeps only the newest turn",
        "ok  narrow window omits the project code",
        "ok  wide window brings the project code back",
        "ok  oversized question is rejected",
        "ok  stored history unchanged after the rejection",
    ):
        assert line in out
    # Running it again uses the same store and still passes.
    assert run_demo(tmp_path).returncode == 0


def test_the_command_the_demo_prints_works_as_printed(tmp_path: Path) -> None:
    out = run_demo(tmp_path).stdout.splitlines()
    assert "owner demo-user" in out[-2]
    words = shlex.split(out[-1])
    assigned = dict(word.split("=", 1) for word in words if "=" in word[:30])
    command = [
        word for word in words if word not in {f"{k}={v}" for k, v in assigned.items()}
    ]
    assert command[:2] == ["turnledger", "window"]
    result = run_turnledger(tmp_path, *command[1:], extra_env=assigned)
    assert result.returncode == 0, result.stderr
    assert "kept turns" in result.stdout and "3" in result.stdout


def test_demo_never_writes_the_configured_store_unless_asked(tmp_path: Path) -> None:
    configured = tmp_path / "production"
    env = {"TURNLEDGER_DATA_DIR": str(configured)}
    assert run_turnledger(tmp_path, "demo", extra_env=env).returncode == 0
    assert not configured.exists()
    result = run_turnledger(tmp_path, "demo", "--configured-store", extra_env=env)
    assert result.returncode == 0, result.stderr
    assert (configured / "events.sqlite3").is_file()


def test_conversations_lists_and_delete_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("TURNLEDGER_")]:
        if name != "TURNLEDGER_DELETION_RECORD_DIR":
            monkeypatch.delenv(name)
    monkeypatch.setenv("TURNLEDGER_DATA_DIR", str(tmp_path / "data"))
    ledger = open_conversations(Settings(_env_file=None))
    first = ledger.start_conversation("alice")
    for turn in ("t1", "t2"):
        ledger.confirm_turn("alice", first, turn_id=turn, question="q", answer="a")
    second = ledger.start_conversation("alice")
    ledger.start_conversation("bob")
    ledger.close()

    assert main(["conversations", "--owner", "alice"]) == 0
    out = capsys.readouterr().out
    assert str(first) in out and str(second) in out
    assert out.index(str(first)) < out.index(str(second))  # oldest first
    assert main(["conversations", "--owner", "carol"]) == 0
    assert str(first) not in capsys.readouterr().out

    assert main(["delete", str(first), "--owner", "alice", "--turn", "t1"]) == 0
    out = capsys.readouterr().out
    assert f"deleted from conversation {first} at version 4: t1; purge complete" in out
    # Another owner's conversation is refused, and nothing is deleted.
    assert main(["delete", str(first), "--owner", "bob", "--all"]) == EXIT_CANNOT_RUN
    assert "not found" in capsys.readouterr().err
    ledger = open_conversations(Settings(_env_file=None))
    items = ledger.get_history("alice", first).items
    assert [(item.turn_id, item.deleted) for item in items] == [
        ("t1", True),
        ("t2", False),
    ]
    ledger.close()
    assert main(["delete", str(first), "--owner", "alice", "--all"]) == 0
    assert "t2; purge complete" in capsys.readouterr().out
