"""A private PostgreSQL 15 cluster for tests that read its files or change its
settings: never the shared server.

The cluster is initialised in a temporary directory, listens on 127.0.0.1 at a
port of its own and on a unix socket in that directory, and is configured the
way `scripts/postgres-up` configures a server for turnledger (the WAL settings
in `turnledger.infra.wal.WAL_SETTINGS`). Running as root, its programs
run as the `postgres` OS user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from turnledger.infra.wal import WAL_SETTINGS

BIN = Path("/usr/lib/postgresql/15/bin")
# The range of ports these tests may use (one cluster at a time per test).
PORTS = range(55450, 55460)


@dataclass(frozen=True)
class PrivateCluster:
    data_dir: Path
    port: int

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def connect(
        self, dbname: str = "postgres"
    ) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}",
            autocommit=True,
        )


def _fail_or_skip(message: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def _as_postgres(command: Sequence[str]) -> list[str]:
    if os.geteuid() != 0:
        return list(command)
    return ["runuser", "-u", "postgres", "--", *command]


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS}")


@contextmanager
def private_cluster(
    settings: Mapping[str, str] | None = None,
) -> Iterator[PrivateCluster]:
    """Start a cluster configured like scripts/postgres-up (plus `settings`)."""
    if not (BIN / "initdb").exists():
        _fail_or_skip(f"PostgreSQL 15 server programs not found in {BIN}")
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            _fail_or_skip("running as root needs a `postgres` OS user")
    root = Path(tempfile.mkdtemp(prefix="turnledger-pg-"))
    if os.geteuid() == 0:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data_dir = root / "data"
    port = _free_port()
    subprocess.run(
        _as_postgres(
            [
                str(BIN / "initdb"),
                "-D",
                str(data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ]
        ),
        check=True,
        capture_output=True,
    )
    options = {
        "listen_addresses": "'127.0.0.1'",
        "port": str(port),
        "unix_socket_directories": f"'{root}'",
        "fsync": "off",
        "autovacuum": "off",
        **{name: f"'{value}'" for name, value in WAL_SETTINGS.items()},
        **{name: f"'{value}'" for name, value in (settings or {}).items()},
    }
    with open(data_dir / "postgresql.auto.conf", "a") as conf:
        for name, value in options.items():
            conf.write(f"{name} = {value}\n")
    pg_ctl = [str(BIN / "pg_ctl"), "-D", str(data_dir), "-l", str(root / "log"), "-w"]
    try:
        subprocess.run(
            _as_postgres([*pg_ctl, "start"]), check=True, capture_output=True
        )
        yield PrivateCluster(data_dir=data_dir, port=port)
    finally:
        subprocess.run(
            _as_postgres([*pg_ctl, "stop", "-m", "immediate"]), capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)
