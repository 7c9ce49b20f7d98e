"""`turnledger serve` writes no core file and is not dumpable, by default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import start_server, stop_server
from turnledger.infra.settings import Settings


def test_the_served_process_has_core_dumps_off(
    service_settings: Settings, tmp_path: Path
) -> None:
    server = start_server(service_settings, tmp_path / "server.log")
    try:
        limits = Path(f"/proc/{server.process.pid}/limits").read_text()
    finally:
        stop_server(server)
    line = next(row for row in limits.splitlines() if row.startswith("Max core"))
    assert line.split()[4:6] == ["0", "0"], line


def test_hardening_marks_the_process_not_dumpable() -> None:
    code = (
        "import resource\n"
        "from turnledger.infra.process_hardening import disable_core_dumps, "
        "is_dumpable\n"
        "assert is_dumpable()\n"
        "disable_core_dumps()\n"
        "print(resource.getrlimit(resource.RLIMIT_CORE), is_dumpable())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "(0, 0) False"
