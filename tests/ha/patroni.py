"""A private Patroni cluster (scripts/patroni-cluster) and the faults tests inflict.

Three PostgreSQL 15 members on 127.0.0.1-3, one port; a single-node etcd. The
cluster lives in a temporary directory; the machine's PostgreSQL is untouched.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "patroni-cluster"
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
PORTS = range(56400, 56500, 4)


def available() -> bool:
    return shutil.which("patroni") is not None and shutil.which("etcd") is not None


@dataclass
class PatroniCluster:
    directory: Path
    port: int

    @property
    def conninfo(self) -> str:
        return (
            f"host={','.join(HOSTS)} port={self.port} user=postgres "
            "dbname=postgres target_session_attrs=read-write connect_timeout=2"
        )

    def member_conninfo(self, member: str) -> str:
        return (
            f"host={self.host(member)} port={self.port} user=postgres dbname=postgres"
        )

    def host(self, member: str) -> str:
        return HOSTS[int(member.removeprefix("m")) - 1]

    def data_dir(self, member: str) -> Path:
        return self.directory / member / "data"

    def members(self) -> list[dict[str, object]]:
        """Patroni's view of the members (its REST API's /cluster)."""
        for host in HOSTS:
            try:
                url = f"http://{host}:{self.port + 1}/cluster"
                with urllib.request.urlopen(url, timeout=1) as response:
                    return list(json.load(response)["members"])
            except OSError:
                continue
        return []

    def leader(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member in self.members():
                if member["role"] == "leader" and member["state"] == "running":
                    return str(member["name"])
            time.sleep(0.2)
        raise RuntimeError(f"no leader after {timeout} s: {self.members()}")

    def healthy(self) -> bool:
        """A leader, a synchronous standby and a replica run, both standbys on
        the leader's timeline with a known lag.

        The timeline matters: an old primary that comes back streams its old
        timeline for a second or two before Patroni sees that it diverged and
        rewinds it (restarting it). Killed during that, the next primary has
        one standby left and, in strict synchronous mode, holds every commit
        until a second one attaches: 7-13 s instead of 2-3 (docs/ha.md).
        """
        members = self.members()
        roles = sorted(str(m["role"]) for m in members)
        leaders = [m for m in members if m["role"] == "leader"]
        return (
            roles == ["leader", "replica", "sync_standby"]
            and all(m["state"] in ("running", "streaming") for m in members)
            and all(m.get("timeline") == leaders[0].get("timeline") for m in members)
            and all(isinstance(m.get("lag", 0), int) for m in members)
        )

    def wait_healthy(self, timeout: float = 60.0, steady: float = 2.0) -> float:
        """Seconds until the cluster is `healthy()` and stays so for `steady`
        seconds (Patroni publishes each member's state once a second)."""
        began = time.monotonic()
        since: float | None = None
        while True:
            now = time.monotonic()
            if self.healthy():
                since = now if since is None else since
                if now - since >= steady:
                    return now - began
            else:
                since = None
            if now - began > timeout:
                raise RuntimeError(f"not healthy after {timeout} s: {self.members()}")
            time.sleep(0.2)

    def postmaster_pid(self, member: str) -> int:
        pidfile = self.data_dir(member) / "postmaster.pid"
        return int(pidfile.read_text().split()[0])

    def patroni_pid(self, member: str) -> int:
        return int((self.directory / member / "patroni.pid").read_text().strip())

    def kill_postmaster(self, member: str) -> None:
        """kill -9 of the member's postmaster (Patroni lives on)."""
        os.kill(self.postmaster_pid(member), signal.SIGKILL)

    def kill_member(self, member: str) -> None:
        """The whole member lost: its Patroni and its postmaster, kill -9."""
        postmaster = self.postmaster_pid(member)
        os.kill(self.patroni_pid(member), signal.SIGKILL)
        os.kill(postmaster, signal.SIGKILL)

    def start(self) -> None:
        """Start whatever is not running (a lost member comes back) and wait."""
        subprocess.run(
            [str(SCRIPT), "start", str(self.directory), str(self.port)],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def stop(self) -> None:
        subprocess.run(
            [str(SCRIPT), "stop", str(self.directory)],
            check=False,
            capture_output=True,
            timeout=120,
        )

    def wait_writable(self, since: float, timeout: float = 30.0) -> float:
        """time.monotonic() when a member first committed a write after
        `since` (a row: a commit that writes WAL waits for the synchronous
        standby, which a new primary may not have yet)."""
        deadline = since + timeout
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as connection:
                    connection.execute(
                        "CREATE TABLE IF NOT EXISTS public.ha_probe (at float8)"
                    )
                    connection.execute(
                        "INSERT INTO public.ha_probe VALUES (%s)", (time.monotonic(),)
                    )
                return time.monotonic()
            except psycopg.OperationalError:
                time.sleep(0.02)
        raise RuntimeError(f"no writable member {timeout} s after {since}")


def _free_port() -> int:
    for port in PORTS:
        try:
            for host in HOSTS:
                for offset in range(4):
                    with socket.socket() as probe:
                        probe.bind((host if offset < 2 else HOSTS[0], port + offset))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no free port in {PORTS}")


@contextmanager
def patroni_cluster() -> Iterator[PatroniCluster]:
    directory = Path(tempfile.mkdtemp(prefix="turnledger-patroni-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    cluster = PatroniCluster(directory, _free_port())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
