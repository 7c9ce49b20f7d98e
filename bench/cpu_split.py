"""Where a benchmark's CPU goes: the service, this process, PostgreSQL.

`CpuSplit.start()` before a measured stretch and `.stop()` after it give the
CPU seconds (user + system, from /proc) of:

- the service process and its children (`service`);
- this process and its child processes but the service (`client`: the
  devices, as threads or processes), and each of their threads;
- PostgreSQL's backends serving the service's connections (`pg_service`:
  their client ports are the service's sockets to the database), the other
  backends and PostgreSQL's own processes, wal writer, checkpointer and
  autovacuum included, and the backends that ended meanwhile (the
  postmaster's reaped children: the raw baseline's connections) (`pg_other`;
  other sessions' backends fall here too);
- the whole machine (`machine`, busy jiffies of /proc/stat, every process
  and the kernel), and the wall time.

Plus each thread's share of a core in the service and in this process, to
see whether one of them (an event loop, a GIL) is saturated.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from sync_bench import process_tree as tree

TICK = os.sysconf("SC_CLK_TCK")
PG_PORT_HEX = "1538"  # 5432


def _stat_fields(path: str) -> list[str] | None:
    try:
        text = Path(path).read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()


def _cpu(path: str) -> int:
    fields = _stat_fields(path)
    return 0 if fields is None else int(fields[11]) + int(fields[12])


def children(pid: int) -> list[int]:
    found: list[int] = []
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in listing.read_text().split()]
        except FileNotFoundError:
            continue
    return found


def threads(pid: int) -> dict[str, int]:
    """CPU ticks of each thread of `pid`, by "tid name"."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip() if (task / "comm").exists() else "?"
        main = " (main)" if task.name == str(pid) else ""
        ticks[f"{task.name} {name}{main}"] = _cpu(str(task / "stat"))
    return ticks


def machine_busy() -> int:
    values = machine_fields()
    # user nice system idle iowait irq softirq steal guest guest_nice
    return sum(values[:8]) - values[3] - values[4]


def machine_fields() -> list[int]:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return [int(v) for v in fields]


def every_process() -> dict[int, tuple[str, int]]:
    """Every process's (name, CPU ticks of its own): a process that ends
    meanwhile is not seen, and a shell's reaped children are not counted
    as the shell's."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(f"/proc/{entry.name}/stat")
        if fields is None:
            continue
        try:
            name = (entry / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        found[int(entry.name)] = (name, ticks)
    return found


def service_client_ports(pid: int) -> set[int]:
    """Local ports of the TCP connections `pid` (and children) hold to 5432."""
    inodes = set()
    for member in tree(pid):
        try:
            for fd in Path(f"/proc/{member}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except FileNotFoundError:
            continue
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            parts = line.split()
            local, remote, inode = parts[1], parts[2], parts[9]
            if inode in inodes and remote.endswith(":" + PG_PORT_HEX):
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


@dataclass
class Split:
    wall: float
    service: float
    client: float
    pg_service: float
    pg_other: float
    machine: float
    service_threads: dict[str, float] = field(default_factory=dict)
    client_threads: dict[str, float] = field(default_factory=dict)
    others: dict[str, float] = field(default_factory=dict)
    kernel: dict[str, float] = field(default_factory=dict)

    def elsewhere(self, turns: int, count: int = 5) -> str:
        ms = 1000 / turns
        ranked = sorted(self.others.items(), key=lambda item: -item[1])[:count]
        rest = ", ".join(f"{name} {cpu * ms:.2f}" for name, cpu in ranked)
        kernel = ", ".join(f"{k} {v * ms:.2f}" for k, v in self.kernel.items())
        return f"other processes ms/turn: [{rest}]; machine by mode: [{kernel}]"

    def ceiling(self, turns: int, cores: int) -> float:
        """Turns/s if the scenario's own processes (service, devices and the
        service's PostgreSQL backends) had every core and spent what they
        spent a turn here: no schedule does better on this machine."""
        return cores * turns / (self.service + self.client + self.pg_service)

    def ceiling_without_service(self, turns: int, cores: int) -> float:
        """`ceiling` for a service that cost nothing: the devices and the
        PostgreSQL backends alone, at what they spent a turn here. A ratio
        this ceiling does not reach is out of reach of any service."""
        return cores * turns / (self.client + self.pg_service)

    def per_turn_line(self, turns: int) -> str:
        ms = 1000 / turns
        attributed = self.service + self.client + self.pg_service + self.pg_other
        return (
            f"CPU ms/turn: service {self.service * ms:.2f}, "
            f"client {self.client * ms:.2f}, pg(service) {self.pg_service * ms:.2f}, "
            f"pg(other) {self.pg_other * ms:.2f}, sum {attributed * ms:.2f}, "
            f"machine {self.machine * ms:.2f}; "
            f"wall {self.wall * ms:.2f} ms/turn; cores: service "
            f"{self.service / self.wall:.2f}, client {self.client / self.wall:.2f}, "
            f"pg {(self.pg_service + self.pg_other) / self.wall:.2f}, machine "
            f"{self.machine / self.wall:.2f}"
        )

    def busiest_threads(self, count: int = 3) -> str:
        def top(shares: dict[str, float]) -> str:
            ranked = sorted(shares.items(), key=lambda item: -item[1])[:count]
            return ", ".join(f"{name} {cpu / self.wall:.2f}" for name, cpu in ranked)

        return (
            f"busiest threads (share of a core): service [{top(self.service_threads)}]"
            f"; client [{top(self.client_threads)}]"
        )


class CpuSplit:
    def __init__(self, service_pid: int, conninfo: str) -> None:
        self._service = service_pid
        CpuSplit._service_tree = set(tree(service_pid))
        with psycopg.connect(conninfo, autocommit=True) as connection:
            backend = connection.execute("SELECT pg_backend_pid()").fetchone()
            assert backend is not None
            fields = _stat_fields(f"/proc/{backend[0]}/stat")
            assert fields is not None
            self._postmaster = int(fields[1])
        self._conninfo = conninfo

    def _postgres(self) -> dict[int, int]:
        """Each PostgreSQL process's CPU ticks, and under the postmaster's pid
        its own and its reaped children's: backends that ended meanwhile (the
        raw baseline's connections) count too."""
        found = {pid: _cpu(f"/proc/{pid}/stat") for pid in children(self._postmaster)}
        fields = _stat_fields(f"/proc/{self._postmaster}/stat")
        assert fields is not None
        found[self._postmaster] = sum(int(v) for v in fields[11:15])
        return found

    @staticmethod
    def _client_pids() -> list[int]:
        """This process and its children but the service (which it started)."""
        return [p for p in tree(os.getpid()) if p not in CpuSplit._service_tree]

    _service_tree: set[int] = set()

    @staticmethod
    def _client_cpu() -> int:
        """This process and its children (device processes), in ticks."""
        return sum(_cpu(f"/proc/{pid}/stat") for pid in CpuSplit._client_pids())

    @staticmethod
    def _client_thread_cpu() -> dict[str, int]:
        found: dict[str, int] = {}
        for pid in CpuSplit._client_pids():
            try:
                found.update({f"{pid}/{name}": t for name, t in threads(pid).items()})
            except FileNotFoundError:
                continue
        return found

    def start(self) -> None:
        self._began = time.perf_counter()
        self._machine = machine_busy()
        self._service_cpu = sum(_cpu(f"/proc/{p}/stat") for p in tree(self._service))
        self._client = self._client_cpu()
        self._service_threads = threads(self._service)
        self._client_threads = self._client_thread_cpu()
        self._pg = self._postgres()
        self._everything = every_process()
        self._modes = machine_fields()

    def stop(self) -> Split:
        wall = time.perf_counter() - self._began
        everything = every_process()
        modes = machine_fields()
        pg = self._postgres()
        machine = machine_busy()
        service_cpu = sum(_cpu(f"/proc/{p}/stat") for p in tree(self._service))
        client = self._client_cpu()
        service_threads = threads(self._service)
        client_threads = self._client_thread_cpu()
        ports = service_client_ports(self._service)
        with psycopg.connect(self._conninfo, autocommit=True) as connection:
            rows = connection.execute(
                "SELECT pid, client_port FROM pg_stat_activity"
            ).fetchall()
        serving = {pid for pid, port in rows if port in ports}
        pg_service = pg_other = 0
        for pid, ticks in pg.items():
            used = ticks - self._pg.get(pid, 0)
            if pid in serving:
                pg_service += used
            else:
                pg_other += used

        def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, float]:
            return {k: (v - before.get(k, 0)) / TICK for k, v in after.items()}

        known = set(tree(self._service)) | set(pg) | set(tree(os.getpid()))
        others: dict[str, float] = {}
        for pid, (name, ticks) in everything.items():
            if pid in known:
                continue
            before = self._everything.get(pid, (name, 0))[1]
            others[name] = others.get(name, 0.0) + (ticks - before) / TICK
        names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
        kernel = {
            name: (after - before) / TICK
            for name, after, before in zip(names, modes, self._modes, strict=False)
            if name not in ("idle", "iowait")
        }
        return Split(
            others=others,
            kernel=kernel,
            wall=wall,
            service=(service_cpu - self._service_cpu) / TICK,
            client=(client - self._client) / TICK,
            pg_service=pg_service / TICK,
            pg_other=pg_other / TICK,
            machine=(machine - self._machine) / TICK,
            service_threads=delta(service_threads, self._service_threads),
            client_threads=delta(client_threads, self._client_threads),
        )
