"""The main job as a newcomer runs it: `turnledger demo` with no configuration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_demo(home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    env["TURNLEDGER_DELETION_RECORD_DIR"] = os.environ["TURNLEDGER_DELETION_RECORD_DIR"]
    env.update(XDG_DATA_HOME=str(home), COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "turnledger.infra.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_demo_runs_the_seed_scenario_on_embedded_sqlite(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"SQLite ({tmp_path / 'turnledger'})" in out
    assert (tmp_path / "turnledger" / "events.sqlite3").is_file()
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
