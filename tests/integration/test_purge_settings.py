"""scripts/postgres-up and docker-compose.yml apply the WAL settings a purge needs.

The settings live once in code (`WAL_SETTINGS`), which the private clusters of
the forensic tests use; the script and the compose file repeat them for
servers this code does not start. A drift would leave purges pending (or,
worse, a test cluster configured unlike a real one) without a word.
"""

from __future__ import annotations

import re
from pathlib import Path

from turnledger.infra.wal import WAL_SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def _normalise(value: str) -> str:
    return value.strip().strip("'\"")


def test_postgres_up_applies_every_wal_setting_without_a_restart() -> None:
    script = (ROOT / "scripts" / "postgres-up").read_text()
    applied = {
        name: _normalise(value)
        for name, value in re.findall(r"ALTER SYSTEM SET (\w+) = ([^;]+);", script)
    }
    assert applied == WAL_SETTINGS
    assert "pg_reload_conf()" in script
    assert "restart" not in script.replace("never a restart", "")


def test_docker_compose_starts_the_server_with_every_wal_setting() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    db_service = compose.split("\n  api:")[0]
    command = db_service.split("command:")[1].split("environment:")[0]
    items = re.findall(r"^\s+- (\S+)$", command, re.MULTILINE)
    assert items[0] == "postgres"
    assert items[1::2] == ["-c"] * (len(items) // 2)
    options = dict(item.split("=", 1) for item in items[2::2])
    assert options == WAL_SETTINGS
