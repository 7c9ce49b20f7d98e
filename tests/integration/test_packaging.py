"""The installed names can't collide with another distribution's packages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("name", ["domain", "projections", "infra"])
def test_a_foreign_top_level_package_of_the_same_name_does_not_break_turnledger(
    tmp_path: Path, name: str
) -> None:
    foreign = tmp_path / name
    foreign.mkdir()
    (foreign / "__init__.py").write_text("raise ImportError('not turnledger')\n")
    (foreign / "settings.py").write_text("raise ImportError('not turnledger')\n")
    env = {
        **os.environ,
        # The foreign folder first on the path, as another installed
        # distribution's top-level package would be.
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path), os.environ.get("PYTHONPATH", "")]
        ),
    }
    result = subprocess.run(
        [sys.executable, "-m", "turnledger.infra.cli", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "turnledger" in result.stdout
