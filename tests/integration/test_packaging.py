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


ROOT = Path(__file__).resolve().parents[2]


def test_the_build_requirement_supports_the_license_expression() -> None:
    """`license = "MIT"` (an SPDX expression) needs setuptools 77 or later."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    (setuptools,) = [
        Requirement(text)
        for text in project["build-system"]["requires"]
        if Requirement(text).name == "setuptools"
    ]
    assert not setuptools.specifier.contains("76.9")
    assert setuptools.specifier.contains("77.0")
    from importlib.metadata import version

    assert Version(version("setuptools")) in setuptools.specifier


def test_a_wheel_builds_without_build_isolation(tmp_path: Path) -> None:
    """With the build requirements installed, as distributions build packages."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = tmp_path.glob("turnledger-*.whl")
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith("/METADATA"))
        assert "License-Expression: MIT" in archive.read(metadata).decode()
