"""Every example in README.md and docs/*.md runs as written.

Each fenced block must say what it is. ```python blocks are executed, each in
a fresh namespace; ```sh blocks are run by bash (-euo pipefail) in an empty
directory, with the installed `turnledger` on PATH, no TURNLEDGER_ variable
of the caller, and XDG_DATA_HOME and XDG_STATE_HOME in that directory. Data,
formats and diagrams are ```text, ```json or ```toml and are not run, but a
block of those that holds a command is refused: commands go in ```sh. A block
that cannot run here is preceded by `<!-- not run: REASON -->`, and the
reason is required.

The one change made to any block: a block that serves HTTP on port 8000 is run
on a free port instead, so that it cannot collide with another server.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "sh"}
NOT_RUN_LANGUAGES = {"text", "json", "toml"}
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>[^>]*\S[^>]*) -->\s*$")
FENCE = re.compile(r"^```(?P<language>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
COMMAND = re.compile(
    r"^\s*(\$ |turnledger |curl |\.venv/|pip |python3? |export )", re.M
)
SH_TIMEOUT_SECONDS = 300


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    body: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        found.append(
            Block(
                path=path,
                line=text[: match.start()].count("\n") + 1,
                language=match.group("language").strip(),
                body=match.group("body"),
                not_run=marker.group("reason") if marker else None,
            )
        )
    return found


ALL_BLOCKS = [block for path in DOCUMENTS for block in blocks(path)]
TO_RUN = [block for block in ALL_BLOCKS if block.language in RUN and not block.not_run]


def test_every_block_says_what_it_is() -> None:
    unlabelled = [
        b.name for b in ALL_BLOCKS if b.language not in RUN | NOT_RUN_LANGUAGES
    ]
    assert not unlabelled, (
        f"label these blocks (python, sh, text, json, toml): {unlabelled}"
    )
    commands = [
        b.name
        for b in ALL_BLOCKS
        if b.language in NOT_RUN_LANGUAGES and COMMAND.search(b.body)
    ]
    assert not commands, f"commands belong in ```sh blocks, which run: {commands}"


# The only reasons a block may give for not running: each makes running it
# impossible in the suite. A new one is added here, where a reviewer sees it.
REASONS_NOT_TO_RUN = {
    "the first installs into .venv on a fresh machine and the second is this "
    "test suite itself; CI runs both",
    "a benchmark takes minutes on a quiet machine; its figures are recorded "
    "here, measured, not asserted",
}


def test_blocks_not_run_give_a_known_reason() -> None:
    reasons = {b.name: b.not_run for b in ALL_BLOCKS if b.not_run}
    unknown = {
        name: why for name, why in reasons.items() if why not in REASONS_NOT_TO_RUN
    }
    assert not unknown, unknown
    not_run = [b.name for b in ALL_BLOCKS if b.not_run]
    assert all(
        name.startswith(("README.md:", "docs/benchmarks.md:")) for name in not_run
    )


@pytest.mark.parametrize(
    "block", [b for b in TO_RUN if b.language == "python"], ids=lambda b: b.name
)
def test_python_example_runs(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("TURNLEDGER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    source = "\n" * (block.line) + block.body  # tracebacks point at the document
    exec(compile(source, str(block.path), "exec"), {"__name__": "__example__"})  # noqa: S102


@pytest.mark.parametrize(
    "block", [b for b in TO_RUN if b.language == "sh"], ids=lambda b: b.name
)
def test_shell_example_runs(block: Block, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        XDG_DATA_HOME=str(tmp_path / "xdg"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        COLUMNS="120",
    )
    script = re.sub(r"(localhost:|--port )8000\b", rf"\g<1>{_free_port()}", block.body)
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # whatever the block starts is stopped with it
    )
    try:
        out, err = process.communicate(timeout=SH_TIMEOUT_SECONDS)
    finally:
        _stop_group(process)
    assert process.returncode == 0, (
        f"{block.name} failed:\n{out[-3000:]}\n{err[-3000:]}"
    )


def test_readme_starts_with_the_two_commands() -> None:
    first = blocks(README)[0]
    demo = "python3 -m venv .venv && .venv/bin/pip install -e . && "
    assert first.body.splitlines() == [
        demo + ".venv/bin/turnledger demo",
        "scripts/test",
    ]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _stop_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
