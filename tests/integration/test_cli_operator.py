"""The operator's first hour: every command fails in one line, with the table's status.

A database that is down, a misspelled variable, a port out of range: each is
one line on stderr, exit status 2 (README, "Exit codes"), no traceback, and
nothing written.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from turnledger.infra.cli import build_parser, main
from turnledger.infra.exit_codes import EXIT_CANNOT_RUN
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.signing import new_signing_key
from turnledger.infra.vault import new_master_key

ANY_ID = "00000000-0000-0000-0000-000000000001"
# Each command with arguments that get it as far as the database. A command
# added to the CLI without a line here fails test_every_command_is_covered.
COMMANDS: dict[str, list[str]] = {
    "demo": ["demo", "--configured-store"],
    "conversations": ["conversations", "--owner", "alice"],
    "delete": ["delete", ANY_ID, "--owner", "alice", "--all"],
    "window": ["window", ANY_ID, "--owner", "alice", "--question", "q"],
    "export": ["export", "--owner", "alice"],
    "purge": ["purge"],
    "device add": ["device", "add", "--user", "alice", "--name", "phone"],
    "device list": ["device", "list"],
    "device revoke": ["device", "revoke", "some-device"],
    "serve": ["serve", "--port", "8999"],
    "audit": ["audit"],
    "history": ["history", ANY_ID, "--owner", "alice", "--at", "1"],
    "rebuild": ["rebuild"],
    "rebuild --check": ["rebuild", "--check"],
    "checkpoint": ["checkpoint", "--out", "{tmp}/checkpoints"],
    "prove event": ["prove", "event", ANY_ID, "1", "--checkpoint", "{checkpoint}"],
    "prove consistency": ["prove", "consistency", "{checkpoint}", "{checkpoint}"],
    "restore-check": ["restore-check"],
    "rotate-master-key": [
        *("rotate-master-key", "--new-key-file", "{tmp}/new.key", "--generate")
    ],
}
# Commands that never open the store.
OFFLINE = {"checkpoint --new-key"}


def leaf_commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    """Every runnable command of the parser, e.g. 'device add'."""
    found: list[str] = []
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        for name, child in action.choices.items():
            found.extend(leaf_commands(child, f"{prefix}{name} "))
    return found or [prefix.strip()]


def clear_turnledger_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No TURNLEDGER_ variable but the test's own deletion record (conftest)."""
    for name in list(os.environ):
        if name.startswith("TURNLEDGER_") and name != "TURNLEDGER_DELETION_RECORD_DIR":
            monkeypatch.delenv(name)


@pytest.fixture
def checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    """A real checkpoint, written from an SQLite store, for the prove commands."""
    clear_turnledger_environment(monkeypatch)
    monkeypatch.setenv("TURNLEDGER_DATA_DIR", str(tmp_path / "sqlite"))
    monkeypatch.setenv("TURNLEDGER_AUDIT_SIGNING_KEY", new_signing_key())
    ledger = open_conversations(Settings(_env_file=None))
    ledger.confirm_turn(
        "alice",
        ledger.start_conversation("alice"),
        turn_id="t1",
        question="q",
        answer="a",
    )
    ledger.close()
    assert main(["checkpoint", "--out", str(tmp_path / "sqlite-checkpoints")]) == 0
    capsys.readouterr()
    return next((tmp_path / "sqlite-checkpoints").glob("*.json"))


@pytest.fixture
def unreachable_database(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL settings naming a port nothing listens on (refused at once)."""
    monkeypatch.setenv("TURNLEDGER_PERSISTENCE", "postgres")
    monkeypatch.setenv("TURNLEDGER_POSTGRES_HOST", "127.0.0.1")
    monkeypatch.setenv("TURNLEDGER_POSTGRES_PORT", "1")
    monkeypatch.setenv("TURNLEDGER_POSTGRES_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("TURNLEDGER_MASTER_KEY", new_master_key())
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_every_command_is_covered() -> None:
    assert set(leaf_commands(build_parser())) == {
        *(name.removesuffix(" --check") for name in COMMANDS),
        *(name.removesuffix(" --new-key") for name in OFFLINE),
    }


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.usefixtures("unreachable_database")
def test_every_command_with_the_database_down_says_so_in_one_line(
    command: str,
    checkpoint: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        part.format(tmp=tmp_path, checkpoint=checkpoint) for part in COMMANDS[command]
    ]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_CANNOT_RUN, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("turnledger: ") and "Traceback" not in err
    assert "unavailable" in lines[0] and "127.0.0.1:1" in lines[0], err


def test_audit_with_the_database_down_is_not_an_integrity_failure(
    tmp_path: Path,
) -> None:
    """In a child process, as a monitoring job runs it: exit 2, never 1."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    env.update(
        TURNLEDGER_DELETION_RECORD_DIR=os.environ["TURNLEDGER_DELETION_RECORD_DIR"],
        TURNLEDGER_PERSISTENCE="postgres",
        TURNLEDGER_POSTGRES_PORT="1",
        TURNLEDGER_POSTGRES_CONNECT_TIMEOUT="1",
        TURNLEDGER_MASTER_KEY=new_master_key(),
    )
    result = subprocess.run(
        [sys.executable, "-m", "turnledger.infra.cli", "audit"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == EXIT_CANNOT_RUN, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No TURNLEDGER_ variable, and the default data directory under tmp_path."""
    clear_turnledger_environment(monkeypatch)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def one_line_refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run argv; assert exit 2 and a single line; return that line."""
    try:
        code = main(argv)
    except SystemExit as usage_error:  # argparse's usage errors
        code = int(usage_error.code or 0)
    err = capsys.readouterr().err
    assert code == EXIT_CANNOT_RUN, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    if lines and lines[0].startswith("usage:"):  # argparse: the usage, then one line
        assert lines[-1].startswith("turnledger") and " error: " in lines[-1], err
        return lines[-1]
    assert len(lines) == 1 and lines[0].startswith("turnledger: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["serve", "--port", "99999"], "must be a port from 1 to 65535, got 99999"),
        (["serve", "--port", "0"], "must be a port from 1 to 65535, got 0"),
        (["serve", "--port", "-1"], "must be a port from 1 to 65535, got -1"),
        (["serve", "--workers", "0"], "must be a positive integer, got 0"),
        (
            ["window", ANY_ID, "--owner", "a", "--question", "q", "--max-bytes", "-5"],
            "argument --max-bytes: must be a positive integer, got -5",
        ),
        (["export", "--owner", "a", "--output", "{tmp}"], "is a directory"),
        (
            ["export", "--owner", "a", "--output", "{tmp}/missing/a.jsonl"],
            "the directory {tmp}/missing does not exist",
        ),
        (
            ["window", "not-a-uuid", "--owner", "a", "--question", "q"],
            "expected a UUID",
        ),
        (["delete", ANY_ID, "--owner", "a"], "one of the arguments --turn --all"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_and_write_nothing(
    argv: list[str],
    expected: str,
    fresh_home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [part.format(tmp=tmp_path) for part in argv]
    line = one_line_refusal(capsys, argv)
    assert expected.format(tmp=tmp_path) in line
    assert not fresh_home.exists()  # no store was created


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "TURNLEDGER_PERSISTANCE",
            "postgres",
            "TURNLEDGER_PERSISTANCE: no such setting; did you mean "
            "TURNLEDGER_PERSISTENCE?",
        ),
        (
            "TURNLEDGER_WINDOW_MAX_BYTE",
            "10",
            "did you mean TURNLEDGER_WINDOW_MAX_BYTES",
        ),
        ("TURNLEDGER_MASTER_KEY", "", "TURNLEDGER_MASTER_KEY: is empty"),
        ("TURNLEDGER_MASTER_KEY", "c2hvcnQ=", "TURNLEDGER_MASTER_KEY: must be base64"),
        ("TURNLEDGER_WINDOW_MAX_BYTES", "-5", "TURNLEDGER_WINDOW_MAX_BYTES='-5'"),
        ("TURNLEDGER_HTTP_PORT", "99999", "TURNLEDGER_HTTP_PORT='99999'"),
        ("TURNLEDGER_PERSISTENCE", "oracle", "TURNLEDGER_PERSISTENCE='oracle'"),
        (
            "TURNLEDGER_FOLD_THRESHOLD_TOKENS",
            "2001",
            "TURNLEDGER_WINDOW_MAX_TOKENS / TURNLEDGER_FOLD_THRESHOLD_TOKENS",
        ),
        (
            "TURNLEDGER_WINDOW_FLOOR_MESSAGES",
            "100",
            "TURNLEDGER_WINDOW_* settings: floor_messages (100)",
        ),
    ],
)
@pytest.mark.parametrize("command", [["conversations", "--owner", "a"], ["purge"]])
def test_bad_settings_name_the_variable_in_one_line(
    variable: str,
    value: str,
    expected: str,
    command: list[str],
    fresh_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    line = one_line_refusal(capsys, command)
    assert expected in line and "pydantic" not in line and "errors.pydantic" not in line
    if variable == "TURNLEDGER_MASTER_KEY":
        assert value == "" or value not in line  # the secret is never echoed
    assert not fresh_home.exists()


def test_version_prints_the_installed_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"turnledger {version('turnledger')}"


def test_the_readme_s_exit_code_table_is_the_one_the_commands_keep() -> None:
    from turnledger.infra.exit_codes import EXIT_CODES

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    documented = [int(row.split("|")[1]) for row in rows]
    assert documented == sorted(EXIT_CODES)
    assert "1 the command ran and found a problem" in build_parser().epilog


README_TEXT = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def documented_settings(readme: str) -> set[str]:
    """TURNLEDGER_ names in the README's tables; `_PORT` after a name is short for
    that name with its last part(s) replaced, as `TURNLEDGER_HTTP_HOST` / `_PORT`."""
    from turnledger.infra.settings import setting_names

    known = set(setting_names())
    found: set[str] = set()
    for line in readme.splitlines():
        if not line.startswith("| `TURNLEDGER_"):
            continue
        first, *short = re.findall(r"`([A-Z0-9_]+)`", line.split("|")[1])
        found.add(first)
        for suffix in short:
            stems = [first[:i] for i, char in enumerate(first) if char == "_"]
            found.update(stem + suffix for stem in stems if stem + suffix in known)
    return found


def test_the_configuration_tables_list_every_setting_and_no_other() -> None:
    from turnledger.infra.settings import setting_names

    documented = documented_settings(README_TEXT)
    assert set(setting_names()) - documented == set(), "undocumented settings"
    assert documented - set(setting_names()) == set(), "documented, but no setting"


def test_a_misspelled_name_in_the_env_file_is_refused_too(
    fresh_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("TURNLEDGER_PERSISTANCE=postgres\n")
    line = one_line_refusal(capsys, ["conversations", "--owner", "a"])
    assert "did you mean TURNLEDGER_PERSISTENCE?" in line


def test_the_data_directory_holds_the_files_the_readme_names(
    fresh_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("TURNLEDGER_DATA_DIR", str(data))
    monkeypatch.setenv("TURNLEDGER_AUDIT_SIGNING_KEY", new_signing_key())
    assert main(["demo", "--configured-store"]) == 0
    assert main(["device", "add", "--user", "alice", "--name", "phone"]) == 0
    assert main(["checkpoint", "--out", str(tmp_path / "checkpoints")]) == 0
    row = next(
        line for line in README_TEXT.splitlines() if "`TURNLEDGER_DATA_DIR`" in line
    )
    named = set(re.findall(r"`([a-z]+\.[a-z0-9]+)`", row))
    present = {
        path.name.removesuffix("-wal").removesuffix("-shm") for path in data.iterdir()
    }
    assert present == named


def run_with_stderr_on_a_terminal(
    argv: list[str], env: dict[str, str]
) -> tuple[int, bytes, str]:
    """Run the CLI with stderr on a pseudo-terminal, as a person at a shell sees it."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "turnledger.infra.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    out, _ = process.communicate(timeout=120)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the child
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    return process.returncode, out, seen.decode("utf-8", "replace")


def test_long_waits_report_progress_on_a_terminal_and_keep_stdout_clean(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    env.update(
        TURNLEDGER_DELETION_RECORD_DIR=os.environ["TURNLEDGER_DELETION_RECORD_DIR"],
        TURNLEDGER_DATA_DIR=str(tmp_path / "data"),
        TURNLEDGER_AUDIT_SIGNING_KEY=new_signing_key(),
    )
    ledger = open_conversations(Settings(_env_file=None, data_dir=tmp_path / "data"))
    ledger.confirm_turn(
        "alice",
        ledger.start_conversation("alice"),
        turn_id="t1",
        question="q",
        answer="a",
    )
    ledger.close()
    code, out, progress = run_with_stderr_on_a_terminal(
        ["export", "--owner", "alice"], env
    )
    assert code == 0
    assert "exporting the conversations of alice" in progress
    assert "exported 1 conversations, 1 turns" in progress
    assert b"exporting" not in out and out.count(b"\n") == 4  # the export only
    code, _, progress = run_with_stderr_on_a_terminal(
        ["checkpoint", "--out", str(tmp_path / "checkpoints")], env
    )
    assert code == 0 and "hashing the log into its Merkle tree" in progress
    code, _, progress = run_with_stderr_on_a_terminal(["purge"], env)
    assert code == 0 and "purging: destroying deleted turns' keys" in progress
    # Not on a terminal (a script, a pipe): not a word on stderr.
    piped = subprocess.run(
        [sys.executable, "-m", "turnledger.infra.cli", "export", "--owner", "alice"],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert piped.returncode == 0 and piped.stderr == b""
