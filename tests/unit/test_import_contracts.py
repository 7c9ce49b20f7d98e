"""The import-linter contracts that scripts/test runs break on a bad import.

Each case copies the three layers into a scratch `turnledger` package, adds
one import that a contract forbids, and runs `lint-imports` with the
project's own configuration on that copy. The untouched copy must pass, so a
contract that never fires (a typo in a module name, a layer left out) fails
here instead of keeping quiet.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "projections", "infra")

# Runs import-linter's own command line with the scratch copy first on the
# path and the installed (editable) turnledger removed, so that only the
# copy is analysed.
RUNNER = """
import sys
sys.path = [sys.argv[1]] + [p for p in sys.path if "__editable__" not in p]
from importlinter.cli import lint_imports
sys.exit(lint_imports(config_filename=sys.argv[2], no_cache=True))
"""

BAD_IMPORTS = {
    "the model imports the read side": (
        "domain/text.py",
        "import turnledger.projections.window",
        "one-way layers",
    ),
    "the model opens a connection": (
        "domain/conversation.py",
        "import sqlite3",
        "the model does no I/O",
    ),
    "the read side opens a connection": (
        "projections/window.py",
        "import psycopg",
        "the read side opens no connection",
    ),
    "the client imports the server": (
        "infra/client/calls.py",
        "import turnledger.infra.http.app",
        "the client imports the wire contract",
    ),
}


def _lint(
    tmp_path: Path, change: tuple[str, str] | None
) -> subprocess.CompletedProcess[str]:
    package = tmp_path / "src" / "turnledger"
    for layer in LAYERS:
        shutil.copytree(
            ROOT / layer,
            package / layer,
            ignore=shutil.ignore_patterns("__pycache__", "node_modules", "web"),
        )
    if change is not None:
        module, statement = change
        target = package / module
        target.write_text(target.read_text() + f"\n{statement}  # deliberate\n")
    config = tmp_path / "pyproject.toml"
    shutil.copy(ROOT / "pyproject.toml", config)
    return subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path / "src"), str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ),
        timeout=300,
    )


def test_the_untouched_layers_keep_every_contract(tmp_path: Path) -> None:
    done = _lint(tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("case", sorted(BAD_IMPORTS))
def test_a_deliberate_bad_import_breaks_its_contract(tmp_path: Path, case: str) -> None:
    module, statement, contract = BAD_IMPORTS[case]
    done = _lint(tmp_path, (module, statement))
    assert done.returncode != 0, done.stdout
    broken = [line for line in done.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), done.stdout
