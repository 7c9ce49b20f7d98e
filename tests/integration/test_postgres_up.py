"""scripts/postgres-up says loudly that it alters the server, and can be told not to."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_postgres_up(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    # psql on PATH records its input instead of reaching any server;
    # pg_isready answers "ready" so the script goes straight to the settings.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "psql").write_text(f'#!/bin/sh\ncat >> "{tmp_path}/psql-input"\n')
    (bin_dir / "pg_isready").write_text("#!/bin/sh\nexit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("POSTGRES_UP_NO_ALTER_SYSTEM", None)
    env.update(extra)
    return subprocess.run(
        [str(ROOT / "scripts" / "postgres-up")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_it_says_which_server_it_alters(tmp_path: Path) -> None:
    result = run_postgres_up(tmp_path, TURNLEDGER_POSTGRES_PORT="5999")
    assert result.returncode == 0, result.stderr
    assert "ALTER SYSTEM on 127.0.0.1:5999" in result.stderr
    assert "ALTER SYSTEM SET wal_recycle = off" in (tmp_path / "psql-input").read_text()


def test_it_leaves_a_shared_server_alone_when_asked(tmp_path: Path) -> None:
    result = run_postgres_up(tmp_path, POSTGRES_UP_NO_ALTER_SYSTEM="1")
    assert result.returncode == 0, result.stderr
    assert "left as it is" in result.stderr
    assert not (tmp_path / "psql-input").exists()
