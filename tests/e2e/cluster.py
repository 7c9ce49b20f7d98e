"""A private PostgreSQL 15 cluster for tests that must stop or crash the database.

The shared server on 5432 is never touched: the cluster lives in a temporary
directory, listens on loopback at a port of its own and on a unix socket in
that directory, and is torn down by the test that started it. initdb refuses
to run as root, so as root every command runs as the `postgres` OS user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

BIN = Path("/usr/lib/postgresql/15/bin")
PORTS = range(55440, 55450)


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@dataclass
class PrivateCluster:
    directory: Path
    port: int
    # Server settings passed on its command line (`-c name=value`).
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _ctl(self, *arguments: str) -> None:
        done = subprocess.run(
            _as_postgres([str(BIN / "pg_ctl"), "-D", str(self.data), *arguments]),
            capture_output=True,
            timeout=60,
        )
        if done.returncode:
            log = self.directory / "postgres.log"
            raise RuntimeError(
                f"pg_ctl {' '.join(arguments)}: {done.stderr.decode()}\n"
                + (log.read_text() if log.exists() else "")
            )

    def start(self) -> None:
        self._ctl(
            "-w",
            "-l",
            str(self.directory / "postgres.log"),
            "-o",
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
            + "".join(f" -c {name}={value}" for name, value in self.options.items()),
            "start",
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.conninfo, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "immediate") -> None:
        self._ctl("-w", "-m", mode, "stop")

    def promote(self) -> None:
        """End recovery: this standby becomes a primary on a new timeline."""
        self._ctl("-w", "promote")

    def follow(self, primary: PrivateCluster) -> None:
        """Restart as a standby of `primary` (standby.signal, primary_conninfo),
        with no rewind: a cluster that wrote WAL after `primary` left its
        timeline replays that WAL and never streams from `primary`."""
        conninfo = f"host=127.0.0.1 port={primary.port} user=postgres"
        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            connection.execute(
                sql.SQL("ALTER SYSTEM SET primary_conninfo = {}").format(
                    sql.Literal(conninfo)
                )
            )
        self.stop("fast")
        subprocess.run(
            _as_postgres(["touch", str(self.data / "standby.signal")]),
            check=True,
            timeout=10,
        )
        self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


def _free_port(ports: range = PORTS) -> int:
    import socket

    for port in ports:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")


def _private_directory() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="turnledger-pg-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    return directory


@contextmanager
def private_cluster(
    ports: range = PORTS, options: Mapping[str, str] | None = None
) -> Iterator[PrivateCluster]:
    """An initialised, running cluster; stopped and deleted afterwards.

    It lives in a directory of its own under the system temp dir, not under
    pytest's (which pytest keeps private to its user, out of the postgres
    user's reach).
    """
    directory = _private_directory()
    cluster = PrivateCluster(directory, _free_port(ports), dict(options or {}))
    try:
        subprocess.run(
            _as_postgres(
                [
                    str(BIN / "initdb"),
                    "-D",
                    str(cluster.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
        cluster.start()
        yield cluster
    finally:
        if cluster.running():
            cluster.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def streaming_replica(
    primary: PrivateCluster,
    ports: range,
    options: Mapping[str, str] | None = None,
) -> Iterator[PrivateCluster]:
    """A hot standby of `primary`: `pg_basebackup -R` over loopback, started on
    a port of its own, streaming from the primary; stopped and deleted after."""
    directory = _private_directory()
    replica = PrivateCluster(directory, _free_port(ports), dict(options or {}))
    try:
        subprocess.run(
            _as_postgres(
                [
                    str(BIN / "pg_basebackup"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(primary.port),
                    "-U",
                    "postgres",
                    "-D",
                    str(replica.data),
                    "-R",  # standby.signal + primary_conninfo
                    "-X",
                    "stream",
                    "--checkpoint=fast",
                    "--no-sync",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        replica.start()
        with psycopg.connect(replica.conninfo) as connection:
            row = connection.execute("SELECT pg_is_in_recovery()").fetchone()
        assert row is not None and row[0], "the copy is not a standby"
        yield replica
    finally:
        if replica.running():
            replica.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)
