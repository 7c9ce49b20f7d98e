"""Sync over HTTP on PostgreSQL: write-to-pull latency and confirmed turns per second.

    .venv/bin/python bench/sync_bench.py [--writes 1000] [--turns-per-device 200]

Starts `turnledger serve` on a loopback port against a fresh schema of the
PostgreSQL named by TURNLEDGER_POSTGRES_* (default postgres@127.0.0.1:5432),
then measures, with real HTTP clients:

1. latency: device A confirms a turn, device B is long-polling /v1/sync; the
   time from A sending the request (and from A's 200) to B's poll returning it;
   once with A and B on one service process, once with A on one and B on
   another of three processes sharing the database;
2. throughput: 8 devices confirming turns at once, each into its own
   conversation and all into one shared conversation;
3. the baseline, in the same run: single-row INSERT + COMMIT through psycopg
   on the same database, from one connection and from 8 at once;
4. CPU per write: the service process's CPU time (/proc) over a run of writes
   with 0, 100 and 1,000 idle long-polls of other users open, each count run
   six times, as ratios of the medians to the median with none;
5. paced writes: one device writing at 30 turns/s (a new request every 1/30 s,
   whatever the last one took), the latency of each;
6. reads on a replica: a private PostgreSQL primary and a streaming replica
   made with `pg_basebackup -R` (tests/e2e/cluster.py, ports 55460-55479), one
   service reading from the primary alone and one reading from the replica,
   the same window requests from 8 clients at once against each, in turn.
   `--no-replica` skips this part.

`--throughput-only` runs parts 2 and 3 alone, in `--rounds` rounds, each
with the service's CPU time per request (from /proc): the part of the
throughput the service controls, where the rest depends on the machine.

Client and server share the machine, so the figures include the client's cost.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
from lean_http import LeanClient
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from turnledger.infra.devices import open_device_registry  # noqa: E402
from turnledger.infra.settings import Settings  # noqa: E402

DEVICES = 8


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def start_server(
    settings: Settings, log: Path, workers: int, **extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNLEDGER_")}
    assert settings.master_key is not None
    env.update(
        TURNLEDGER_PERSISTENCE="postgres",
        TURNLEDGER_POSTGRES_HOST=settings.postgres_host,
        TURNLEDGER_POSTGRES_PORT=str(settings.postgres_port),
        TURNLEDGER_POSTGRES_DBNAME=settings.postgres_dbname,
        TURNLEDGER_POSTGRES_USER=settings.postgres_user,
        TURNLEDGER_POSTGRES_PASSWORD=settings.postgres_password.get_secret_value(),
        TURNLEDGER_POSTGRES_SCHEMA=settings.postgres_schema,
        TURNLEDGER_POSTGRES_POOL_SIZE=str(settings.postgres_pool_size),
        TURNLEDGER_MASTER_KEY=settings.master_key.get_secret_value(),
        **extra,
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "turnledger.infra.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{base_url}/v1/health").status_code == 200:
                return process, base_url
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"the server did not start:\n{log.read_text()}")


def measure_latency(
    base_url: str,
    tokens: list[str],
    writes: int,
    *,
    label: str,
    poll_url: str | None = None,
) -> dict[str, list[float]]:
    writer = httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {tokens[0]}"}
    )
    poller = httpx.Client(
        base_url=poll_url or base_url,
        headers={"Authorization": f"Bearer {tokens[1]}"},
        timeout=60,
    )
    conversation = writer.post("/v1/conversations").json()["conversation_id"]
    cursor = None
    while True:  # catch up to the head first
        params = {"limit": 1000} | ({"since": cursor} if cursor else {})
        body = poller.get("/v1/sync", params=params).json()
        cursor = body["next_cursor"]
        if not body["has_more"]:
            break
    received: dict[str, float] = {}
    arrived = threading.Condition()
    stop = threading.Event()

    def poll() -> None:
        nonlocal cursor
        while not stop.is_set():
            body = poller.get(
                "/v1/sync", params={"since": cursor, "timeout": 5, "limit": 1000}
            ).json()
            now = time.perf_counter()
            cursor = body["next_cursor"]
            with arrived:
                for change in body["changes"]:
                    if change["kind"] == "turn_recorded":
                        received[change["turn_id"]] = now
                arrived.notify_all()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    time.sleep(0.2)
    from_send: list[float] = []
    from_ack: list[float] = []
    for n in range(writes):
        turn_id = f"lat-{label}-{n}"
        sent = time.perf_counter()
        response = writer.put(
            f"/v1/conversations/{conversation}/turns/{turn_id}",
            json={"question": f"question {n}", "answer": f"answer {n}"},
        )
        acked = time.perf_counter()
        response.raise_for_status()
        with arrived:
            if not arrived.wait_for(lambda turn_id=turn_id: turn_id in received, 10):
                raise SystemExit(f"{turn_id} never reached the long-poll")
        from_send.append(received[turn_id] - sent)
        from_ack.append(received[turn_id] - acked)
    stop.set()
    return {"send": from_send, "ack": from_ack}


def measure_turns_per_second(
    base_url: str, tokens: list[str], turns_per_device: int, *, shared: bool
) -> float:
    """Turns/s from 8 devices, each a keep-alive connection writing one turn
    per request, each request answered after its turn's commit. The client
    is lean_http's, not httpx: its cost per request would otherwise be most of
    what the service is measured against on this machine (bench/lean_http.py)."""
    clients = [LeanClient(base_url, token) for token in tokens]
    if shared:
        one = clients[0].request("POST", "/v1/conversations")["conversation_id"]
        conversations = [one] * DEVICES
    else:
        conversations = [
            c.request("POST", "/v1/conversations")["conversation_id"] for c in clients
        ]
    bodies = [
        {"question": f"question {n}", "answer": f"answer {n}"}
        for n in range(turns_per_device)
    ]

    def push(index: int) -> None:
        client, conversation = clients[index], conversations[index]
        for n in range(turns_per_device):
            client.request(
                "PUT",
                f"/v1/conversations/{conversation}/turns/d{index}-{n}",
                bodies[n],
            )

    try:
        began = time.perf_counter()
        with ThreadPoolExecutor(DEVICES) as pool:
            list(pool.map(push, range(DEVICES)))
        return DEVICES * turns_per_device / (time.perf_counter() - began)
    finally:
        for client in clients:
            client.close()


def paced_write_latencies(
    base_url: str, token: str, *, rate: float, seconds: float
) -> list[float]:
    """One device writing `rate` turns/s on a fixed schedule: each request's
    time from its scheduled start to its 200 (so a late start counts too)."""
    writer = httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    conversation = writer.post("/v1/conversations").json()["conversation_id"]
    latencies = []
    began = time.perf_counter()
    for n in range(round(rate * seconds)):
        due = began + n / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        writer.put(
            f"/v1/conversations/{conversation}/turns/paced-{n}",
            json={"question": f"question {n}", "answer": f"answer {n}"},
        ).raise_for_status()
        latencies.append(time.perf_counter() - due)
    writer.close()
    return latencies


class ConnectionPeak:
    """The most TCP connections a process held to the database port at once,
    sampled with `ss` every 50 ms while in use."""

    def __init__(self, pid: int, port: int) -> None:
        self.peak = 0
        self._pid, self._port = pid, port
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ConnectionPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            listing = subprocess.run(
                ["ss", "-tnpH", "state", "established", f"dport = :{self._port}"],
                capture_output=True,
                text=True,
            ).stdout
            members = [f"pid={member}," for member in process_tree(self._pid)]
            held = sum(
                any(member in line for member in members)
                for line in listing.splitlines()
            )
            self.peak = max(self.peak, held)


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (`--server-workers` runs workers as children)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                pending.extend(int(child) for child in children.read_text().split())
            except FileNotFoundError:
                continue
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its workers so far, from /proc."""
    total = 0
    for member in process_tree(pid):
        try:
            stat = Path(f"/proc/{member}/stat").read_text()
        except FileNotFoundError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def head_cursors(base_url: str, tokens: list[str]) -> list[str]:
    """Each token's cursor at the head of the log now."""
    cursors = []
    with httpx.Client(base_url=base_url, timeout=60) as http:
        for token in tokens:
            response = http.get(
                "/v1/sync", headers={"Authorization": f"Bearer {token}"}
            )
            cursors.append(response.json()["next_cursor"])
    return cursors


def open_idle_long_polls(
    base_url: str, tokens: list[str], cursors: list[str]
) -> list[socket.socket]:
    """One waiting long-poll per token, on raw sockets never read from."""
    host, port = base_url.removeprefix("http://").split(":")
    sockets = []
    for token, cursor in zip(tokens, cursors, strict=True):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(
            f"GET /v1/sync?timeout=280&since={cursor} HTTP/1.1\r\nHost: bench\r\n"
            f"Authorization: Bearer {token}\r\n\r\n".encode()
        )
        sockets.append(sock)
    return sockets


def wait_until_idle(pid: int, limit: float = 120.0) -> None:
    """Wait until the process uses under 5 % of a core for half a second."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(0.5)
        if cpu_seconds(pid) - before < 0.025:
            return
    raise SystemExit("the service never went idle")


def cpu_per_write(
    process: subprocess.Popen[bytes], base_url: str, token: str, writes: int
) -> float:
    """Server CPU seconds per confirmed turn, one writer, sequential writes."""
    writer = httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    conversation = writer.post("/v1/conversations").json()["conversation_id"]
    for n in range(20):  # warm up: caches, pools
        writer.put(
            f"/v1/conversations/{conversation}/turns/warm-{n}",
            json={"question": "warm", "answer": "up"},
        ).raise_for_status()
    before = cpu_seconds(process.pid)
    for n in range(writes):
        writer.put(
            f"/v1/conversations/{conversation}/turns/cpu-{n}",
            json={"question": f"question {n}", "answer": f"answer {n}"},
        ).raise_for_status()
    used = cpu_seconds(process.pid) - before
    writer.close()
    return used / writes


def window_requests_per_second(
    base_url: str, tokens: list[str], conversations: list[str], seconds: float
) -> float:
    """Window requests answered per second, one client per device, all at once."""
    deadline = time.perf_counter() + seconds

    def run(index: int) -> int:
        done = 0
        with httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {tokens[index]}"},
            timeout=60,
        ) as http:
            while time.perf_counter() < deadline:
                http.post(
                    f"/v1/conversations/{conversations[index]}/window",
                    json={"question": "what next?", "system": "be brief", "model": "m"},
                ).raise_for_status()
                done += 1
        return done

    began = time.perf_counter()
    with ThreadPoolExecutor(len(tokens)) as pool:
        total = sum(pool.map(run, range(len(tokens))))
    return total / (time.perf_counter() - began)


def replica_window_rates(
    turns: int, seconds: float
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Window requests/s from a service reading the primary alone and from one
    reading a streaming replica of it, each measured twice (A, B, B, A); and
    the share of the ledger's table scans each server ran during the replica
    runs."""
    from tests.e2e.cluster import private_cluster, streaming_replica

    schema = "bench_replica"
    with (
        private_cluster(range(55460, 55470)) as primary,
        streaming_replica(primary, range(55470, 55480)) as replica,
    ):
        settings = Settings(
            _env_file=None,
            persistence="postgres",
            postgres_host="127.0.0.1",
            postgres_port=primary.port,
            postgres_schema=schema,
            master_key=base64.b64encode(os.urandom(32)).decode(),
            postgres_pool_size=10,
        )
        registry = open_device_registry(settings)
        tokens = [registry.add(f"reader-{n}", "d").token for n in range(DEVICES)]
        registry.close()
        with_replica = {
            "TURNLEDGER_POSTGRES_REPLICA_HOST": "127.0.0.1",
            "TURNLEDGER_POSTGRES_REPLICA_PORT": str(replica.port),
            "TURNLEDGER_POSTGRES_REPLICA_POOL_SIZE": "10",
        }
        log = Path(f"/tmp/turnledger-{schema}")
        alone, alone_url = start_server(settings, log.with_suffix(".primary.log"), 1)
        served, served_url = start_server(
            settings, log.with_suffix(".replica.log"), 1, **with_replica
        )
        try:
            conversations = []
            for token in tokens:
                with httpx.Client(
                    base_url=alone_url,
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=60,
                ) as http:
                    conversation = http.post("/v1/conversations").json()[
                        "conversation_id"
                    ]
                    for n in range(turns):
                        http.put(
                            f"/v1/conversations/{conversation}/turns/t{n}",
                            json={"question": f"question {n}", "answer": f"answer {n}"},
                        ).raise_for_status()
                    conversations.append(conversation)
            wait_for_replay(primary.conninfo, replica.conninfo)
            rates: dict[str, list[float]] = {"primary": [], "replica": []}
            scans = {"primary": 0, "replica": 0}
            for name in ("primary", "replica", "replica", "primary"):
                url = alone_url if name == "primary" else served_url
                before = {
                    "primary": table_scans(primary.conninfo, schema),
                    "replica": table_scans(replica.conninfo, schema),
                }
                rates[name].append(
                    window_requests_per_second(url, tokens, conversations, seconds)
                )
                if name == "replica":
                    time.sleep(1.0)  # statistics reach the views within a second
                    scans["primary"] += (
                        table_scans(primary.conninfo, schema) - before["primary"]
                    )
                    scans["replica"] += (
                        table_scans(replica.conninfo, schema) - before["replica"]
                    )
        finally:
            for each in (alone, served):
                each.terminate()
            for each in (alone, served):
                each.wait(timeout=60)
    total = max(1, sum(scans.values()))
    return rates, {name: count / total for name, count in scans.items()}


def wait_for_replay(primary: str, replica: str) -> None:
    with psycopg.connect(primary) as connection:
        row = connection.execute("SELECT pg_current_wal_lsn()").fetchone()
    assert row is not None
    with psycopg.connect(replica, autocommit=True) as connection:
        for _ in range(600):
            done = connection.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (row[0],)
            ).fetchone()
            if done is not None and done[0]:
                return
            time.sleep(0.05)
    raise SystemExit("the replica never caught up")


def table_scans(conninfo: str, schema: str) -> int:
    """Table and index scans of the schema's tables run on this server so far."""
    with psycopg.connect(conninfo) as connection:
        row = connection.execute(
            "SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)"
            " FROM pg_stat_user_tables WHERE schemaname = %s",
            (schema,),
        ).fetchone()
    return int(row[0]) if row is not None else 0


def raw_inserts_per_second(
    conninfo: str, schema: str, rows: int, connections: int
) -> float:
    table = sql.Identifier(schema, "raw_inserts")
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} "
                "(id bigserial PRIMARY KEY, payload bytea)"
            ).format(table)
        )
    payload = os.urandom(200)

    def insert(count: int) -> None:
        with psycopg.connect(conninfo) as connection:
            for _ in range(count):
                connection.execute(
                    sql.SQL("INSERT INTO {} (payload) VALUES (%s)").format(table),
                    (payload,),
                )
                connection.commit()

    began = time.perf_counter()
    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(insert, [rows // connections] * connections))
    return rows / (time.perf_counter() - began)


def drop_schema(conninfo: str, schema: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema))
        )


@dataclass(frozen=True)
class ThroughputRound:
    turns_per_second: float
    raw_rows_per_second: float
    service_cpu_per_request: float
    client_cpu_per_request: float

    @property
    def ratio(self) -> float:
        return self.turns_per_second / self.raw_rows_per_second


def throughput_rounds(
    process: subprocess.Popen[bytes],
    base_url: str,
    tokens: list[str],
    settings: Settings,
    arguments: argparse.Namespace,
) -> list[ThroughputRound]:
    """Rounds of turns/s over HTTP (own conversations), each followed by the
    raw baseline, so that each ratio compares two runs of the same minute
    (the machine's speed drifts within minutes): `arguments.rounds` of
    `arguments.turns_per_device` turns a device."""
    conninfo, schema = settings.postgres_conninfo(), settings.postgres_schema
    turns_per_device = arguments.turns_per_device
    rows = DEVICES * turns_per_device
    measured = []
    for _ in range(arguments.rounds):
        before, client_before = cpu_seconds(process.pid), time.process_time()
        own = measure_turns_per_second(base_url, tokens, turns_per_device, shared=False)
        requests = rows + DEVICES  # and each device's first write (its start)
        measured.append(
            ThroughputRound(
                turns_per_second=own,
                service_cpu_per_request=(cpu_seconds(process.pid) - before) / requests,
                client_cpu_per_request=(time.process_time() - client_before) / requests,
                raw_rows_per_second=raw_inserts_per_second(
                    conninfo, schema, rows, DEVICES
                ),
            )
        )
    return measured


def print_rounds(measured: list[ThroughputRound]) -> None:
    """Print each round and the median ratio."""
    for number, each in enumerate(measured, 1):
        print(
            f"  round {number}: {each.turns_per_second:6.0f} turns/s, raw "
            f"{each.raw_rows_per_second:6.0f} rows/s, ratio {each.ratio:.2f}; "
            f"CPU per request: service {each.service_cpu_per_request * 1000:.2f} "
            f"ms, client {each.client_cpu_per_request * 1000:.2f} ms"
        )
    median = statistics.median(each.ratio for each in measured)
    print(f"  median ratio {median:.2f} (target >= 0.25)")


def throughput_only(
    process: subprocess.Popen[bytes],
    base_url: str,
    tokens: list[str],
    settings: Settings,
    arguments: argparse.Namespace,
) -> int:
    """`--throughput-only`: the throughput rounds alone, with the service's
    CPU per request (the part the service controls: the throughput also
    depends on what else runs on the machine)."""
    measure_turns_per_second(base_url, tokens, 20, shared=False)  # warm-up
    print(
        f"confirmed turns/s, {DEVICES} devices x {arguments.turns_per_device} "
        f"turns, own conversations, then raw INSERT+COMMIT of "
        f"{DEVICES * arguments.turns_per_device} rows from {DEVICES} connections"
    )
    print_rounds(throughput_rounds(process, base_url, tokens, settings, arguments))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--turns-per-device", type=int, default=200)
    parser.add_argument("--server-workers", type=int, default=1)
    parser.add_argument("--cpu-writes", type=int, default=500)
    parser.add_argument("--idle-long-polls", default="0,100,1000")
    parser.add_argument("--paced-seconds", type=float, default=20.0)
    parser.add_argument("--window-seconds", type=float, default=10.0)
    parser.add_argument("--window-turns", type=int, default=40)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="throughput rounds (each with its raw baseline)",
    )
    parser.add_argument(
        "--no-replica", action="store_true", help="skip the replica comparison"
    )
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="only the confirmed turns/s against the raw INSERT+COMMIT baseline",
    )
    arguments = parser.parse_args()
    idle_counts = [int(n) for n in arguments.idle_long_polls.split(",")]

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    settings = Settings(
        persistence="postgres",
        postgres_schema=schema,
        master_key=base64.b64encode(os.urandom(32)).decode(),
        postgres_pool_size=10,
    )
    conninfo = settings.postgres_conninfo()
    registry = open_device_registry(settings)
    tokens = [registry.add("bench-user", f"device-{n}").token for n in range(DEVICES)]
    idle_tokens = [
        registry.add(f"idle-{n}", "idle").token for n in range(max(idle_counts))
    ]
    registry.close()
    log = Path(f"/tmp/turnledger-{schema}.log")
    # Idle long-polls must outlive the CPU runs.
    long_wait = {"TURNLEDGER_SYNC_MAX_WAIT_SECONDS": "300"}
    process, base_url = start_server(
        settings, log, arguments.server_workers, **long_wait
    )
    others: list[subprocess.Popen[bytes]] = []
    if arguments.throughput_only:
        try:
            return throughput_only(process, base_url, tokens, settings, arguments)
        finally:
            process.terminate()
            process.wait(timeout=60)
            drop_schema(conninfo, schema)
    try:
        cpu: dict[int, list[float]] = {}
        cpu_per_write(process, base_url, tokens[2], arguments.cpu_writes)  # warm-up
        # Each count six times, in three rounds of an order that cancels a
        # steady drift (0, 100, 1000, 1000, 100, 0); the median of the six is
        # reported. The machine's speed here can change by half within a
        # minute, at any count: with fewer, shorter-spread runs that drift,
        # not the long-polls, decided the ratio. Long-polls are opened as
        # the count rises and closed as it falls, all within their timeout.
        idle: list[socket.socket] = []
        for count in [*idle_counts, *reversed(idle_counts)] * 3:
            if count > len(idle):
                # At the head of the log as they open: a long-poll that came
                # back with an old cursor would first read through every
                # write made since (docs/sync.md, "Paging").
                opened = idle_tokens[len(idle) : count]
                idle += open_idle_long_polls(
                    base_url, opened, head_cursors(base_url, opened)
                )
            while len(idle) > count:
                idle.pop().close()
            wait_until_idle(process.pid)  # every one of them is waiting
            cpu.setdefault(count, []).append(
                cpu_per_write(process, base_url, tokens[2], arguments.cpu_writes)
            )
        for sock in idle:
            sock.close()
        latency = measure_latency(base_url, tokens, arguments.writes, label="one")
        paced = paced_write_latencies(
            base_url, tokens[3], rate=30, seconds=arguments.paced_seconds
        )
        for n in (1, 2):
            other, other_url = start_server(
                settings, Path(f"/tmp/turnledger-{schema}-{n}.log"), 1
            )
            others.append(other)
        across = measure_latency(
            base_url, tokens, arguments.writes, label="three", poll_url=other_url
        )
        # Their connections are not needed any more (the server is shared).
        for each in others:
            each.terminate()
            each.wait(timeout=60)
        with ConnectionPeak(process.pid, settings.postgres_port) as connections:
            rounds = throughput_rounds(process, base_url, tokens, settings, arguments)
        shared = measure_turns_per_second(
            base_url, tokens, arguments.turns_per_device, shared=True
        )
        rows = DEVICES * arguments.turns_per_device
        raw_one = raw_inserts_per_second(conninfo, schema, rows, 1)
        raw_eight = raw_inserts_per_second(conninfo, schema, rows, DEVICES)
        # Last, with the shared server's service stopped: its own clusters.
        for each in [process, *others]:
            each.terminate()
        for each in [process, *others]:
            each.wait(timeout=60)
        if not arguments.no_replica:
            window_rates, scan_shares = replica_window_rates(
                arguments.window_turns, arguments.window_seconds
            )
    finally:
        for each in [process, *others]:
            each.terminate()
        for each in [process, *others]:
            each.wait(timeout=60)
        drop_schema(conninfo, schema)

    def row(label: str, values: list[float]) -> str:
        return (
            f"  {label:<34} median {statistics.median(values) * 1000:6.2f} ms   "
            f"p99 {percentile(values, 0.99) * 1000:6.2f} ms   "
            f"max {max(values) * 1000:6.2f} ms"
        )

    print(
        f"write -> long-poll latency, {arguments.writes} writes, PostgreSQL, loopback, "
        f"{arguments.server_workers} service process(es)"
    )
    for label, measured in (("same process", latency), ("3 processes", across)):
        print(f" A and B on {label}")
        print(row("A sends -> B's poll returns", measured["send"]))
        print(row("A's 200 arrives -> B's poll returns", measured["ack"]))
        print(
            "  p99 under the 50 ms target, from A's 200: "
            f"{'yes' if percentile(measured['ack'], 0.99) < 0.05 else 'NO'}; "
            "from A's send: "
            f"{'yes' if percentile(measured['send'], 0.99) < 0.05 else 'NO'}"
        )
    print(
        f"\npaced writes, 30/s for {arguments.paced_seconds:.0f} s ({len(paced)}): "
        f"median {statistics.median(paced) * 1000:.2f} ms, "
        f"p99 {percentile(paced, 0.99) * 1000:.2f} ms, max {max(paced) * 1000:.2f} ms "
        f"(target p99 < 50 ms: "
        f"{'yes' if percentile(paced, 0.99) < 0.05 else 'NO'})"
    )
    print(
        f"\nserver CPU per write, {arguments.cpu_writes} sequential writes, "
        "median of six runs"
    )
    median = {count: statistics.median(runs) for count, runs in cpu.items()}
    for count, seconds in median.items():
        runs = ", ".join(f"{run * 1000:.2f}" for run in cpu[count])
        print(
            f"  {count:5d} idle long-polls of other users  {seconds * 1000:6.2f} ms"
            f"   x{seconds / median[idle_counts[0]]:.2f}   (runs: {runs} ms)"
        )
    spread = max(median.values()) / min(median.values())
    print(f"  max/min {spread:.2f} (target: within 1.2)")
    print(
        f"\nconfirmed turns/s, {DEVICES} devices x {arguments.turns_per_device} turns,"
        f" own conversation each, each round followed by raw INSERT+COMMIT of "
        f"{rows} rows from {DEVICES} connections (the service held at most "
        f"{connections.peak} connections to PostgreSQL, pool size "
        f"{settings.postgres_pool_size})"
    )
    print_rounds(rounds)
    print(f"  one shared conversation      {shared:8.0f} turns/s")
    print(f"raw INSERT+COMMIT via psycopg, {rows} rows, after the rounds")
    print(f"  1 connection                 {raw_one:8.0f} rows/s")
    print(f"  {DEVICES} connections                {raw_eight:8.0f} rows/s")
    own = statistics.median(each.turns_per_second for each in rounds)
    print(
        f"ratio turns/s / raw rows/s after the rounds ({DEVICES} conns): "
        f"own (median of the rounds) {own / raw_eight:.2f}, shared "
        f"{shared / raw_eight:.2f}; vs 1 conn: own {own / raw_one:.2f}"
    )
    if not arguments.no_replica:
        print(
            f"\nwindow requests/s, {DEVICES} clients, {arguments.window_turns} turns "
            f"each, {arguments.window_seconds:.0f} s per run (private primary + "
            "streaming replica on this machine)"
        )
        for name, label in (
            ("primary", "reads on the primary alone"),
            ("replica", "reads on the replica"),
        ):
            runs = ", ".join(f"{rate:.0f}" for rate in window_rates[name])
            print(
                f"  {label:<28} {statistics.mean(window_rates[name]):8.0f} req/s"
                f"   (runs: {runs})"
            )
        ratio = statistics.mean(window_rates["replica"]) / statistics.mean(
            window_rates["primary"]
        )
        print(
            f"  replica / primary alone {ratio:.2f}; during the replica runs the "
            f"replica ran {scan_shares['replica']:.0%} of the ledger's table scans"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
