"""The per-user feed on PostgreSQL: catch-up cost, and writes with listeners.

    .venv/bin/python bench/feed_bench.py [--others 1000,50000] [--turns-per-device 150]

Starts `turnledger serve` on a loopback port against a fresh schema of the
PostgreSQL named by TURNLEDGER_POSTGRES_* (default postgres@127.0.0.1:5432),
then measures, with the project's own client library (httpx):

1. catch-up: for each N, a user's device holds a cursor behind N turns of
   other users (written through the ledger, in batches) and 5 changes of its
   own (a start and 4 turns, over HTTP). Each device's catch-up from its
   cursor (every page until `has_more` is false) is timed 15 times, the
   devices in turn, the median reported, and the ratio of the largest N's
   median to the smallest N's;
2. writes with listeners: 8 devices of one user writing turns at once through
   `Client.put_turn` (one conversation each), while 2 other devices of that
   user long-poll `/v1/sync` (`Client.sync` with a timeout), so every write is
   delivered twice. Turns/s against raw single-row INSERT+COMMIT/s from 8
   psycopg connections in the same run (bench/sync_bench.py's baseline),
   the service's CPU time per turn (from /proc) with and without the
   listeners, and the time from each write's 200 to its arrival at each
   long-polling device (median, p99). `--rounds` rounds, each with its
   baseline; the median ratio is reported. Each round also prints where
   the CPU went (bench/cpu_split.py): per turn, the service, the devices
   (this process and its children), PostgreSQL's backends serving the
   service and its other processes, the whole machine (other sessions'
   processes included) and the wall time; the busiest threads of the
   service and of the devices as shares of a core (is one saturated?); the
   other processes that used the machine meanwhile; and the same split per
   row of the raw baseline (its backends, which end with its connections,
   under "pg(other)"). The CPU ceiling is the rate with both cores busy at
   that CPU per turn, and the ratio it allows; the second ceiling leaves the
   service out (as if it cost nothing): the devices and the service's
   PostgreSQL backends alone, a bound no service on this machine can pass.
   `--devices processes` (the default) runs each device in a process of its
   own (spawned once, before the rounds), as a user's devices are separate
   programs; `--devices threads` runs the 10 devices as threads of this
   process, sharing its GIL. Either way: the same `Client`, the same 8
   writers and 2 listeners of one user, the same turns, and their CPU still
   counted.

3. one sync request: the service's CPU per `GET /v1/sync` (caught up, and
   with 5 changes) on the short path and through FastAPI's route,
   alternating, `--rounds` times 200 requests each.

`--profile FILE` also records the service during the first round of part 2
with listeners, with py-spy when it is installed (`pip install py-spy`): a
flame graph if FILE ends in .svg, collapsed stacks otherwise.

Client and server share the machine, so the figures include the client's cost.
"""

from __future__ import annotations

import argparse
import base64
import multiprocessing
import multiprocessing.process
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from cpu_split import CpuSplit, Split
from sync_bench import (
    cpu_seconds,
    drop_schema,
    percentile,
    raw_inserts_per_second,
    start_server,
    wait_until_idle,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from turnledger.infra.client import Client  # noqa: E402
from turnledger.infra.devices import open_device_registry  # noqa: E402
from turnledger.infra.persistence import open_conversations  # noqa: E402
from turnledger.infra.service_layer.application import Conversations  # noqa: E402
from turnledger.infra.settings import Settings  # noqa: E402

WRITERS = 8
LISTENERS = 2
OWN_CHANGES = 5
CATCH_UP_RUNS = 15
OTHER_USERS = 50
BATCH = 500
CORES = os.cpu_count() or 1


def catch_up_seconds(client: Client, cursor: str) -> tuple[float, int]:
    """Time to read every change after `cursor`, and how many there were."""
    began = time.perf_counter()
    changes = 0
    while True:
        page = client.sync(since=cursor, limit=100)
        changes += len(page.changes)
        cursor = page.next_cursor
        if not page.has_more:
            return time.perf_counter() - began, changes


def others_write(ledger: Conversations, turns: int, tag: str) -> None:
    """`turns` turns of other users, spread over their conversations."""
    conversations = [
        (f"other-{n}", ledger.start_conversation(f"other-{n}"))
        for n in range(OTHER_USERS)
    ]
    written = 0
    while written < turns:
        owner, conversation = conversations[(written // BATCH) % OTHER_USERS]
        count = min(BATCH, turns - written)
        ledger.confirm_turns(
            owner,
            conversation,
            [
                (f"{tag}-{written + n}", f"question {n}", f"answer {n}")
                for n in range(count)
            ],
        )
        written += count


def head_cursor(client: Client) -> str:
    """The client's cursor once it has read everything there is."""
    cursor = None
    while True:
        page = client.sync(since=cursor, limit=1000)
        cursor = page.next_cursor
        if not page.has_more:
            return cursor


def measure_catch_up(
    settings: Settings, readers: dict[int, Client]
) -> dict[int, float]:
    """Each reader (one user per count) behind `count` other users' turns
    and 5 of its own; their catch-ups timed in turns, so that the machine's
    drift falls on every count alike."""
    ledger = open_conversations(settings)
    cursors: dict[int, str] = {}
    counts = sorted(readers, reverse=True)
    try:
        for count, following in zip(counts, [*counts[1:], 0], strict=True):
            cursors[count] = head_cursor(readers[count])
            others_write(ledger, count - following, tag=f"n{count}")
    finally:
        ledger.close()
    for client in readers.values():
        own = client.start_conversation().conversation_id
        for n in range(OWN_CHANGES - 1):  # the start is a change too
            client.put_turn(own, f"own-{n}", question="q", answer="a")
    runs: dict[int, list[float]] = {count: [] for count in counts}
    for _ in range(CATCH_UP_RUNS):
        for count in counts:
            seconds, changes = catch_up_seconds(readers[count], cursors[count])
            assert changes == OWN_CHANGES, changes
            runs[count].append(seconds)
    medians = {}
    for count in sorted(counts):
        medians[count] = statistics.median(runs[count])
        print(
            f"  catch-up of {OWN_CHANGES} own changes behind {count:>6} others' "
            f"turns: median {medians[count] * 1000:.1f} ms "
            f"(min {min(runs[count]) * 1000:.1f}, max {max(runs[count]) * 1000:.1f})",
            flush=True,
        )
    return medians


@dataclass
class WriteRound:
    turns_per_second: float
    cpu_per_turn: float
    raw_per_second: float
    latencies: list[float]
    ceiling: float  # turns/s with every core busy (cpu_split.Split.ceiling)
    bare_ceiling: float  # the same for a service of no CPU

    @property
    def ratio(self) -> float:
        return self.turns_per_second / self.raw_per_second

    @property
    def ceiling_ratio(self) -> float:
        return self.ceiling / self.raw_per_second

    @property
    def bare_ceiling_ratio(self) -> float:
        return self.bare_ceiling / self.raw_per_second


class Listener:
    """A device long-polling its user's changes, noting when each turn arrives."""

    def __init__(self, base_url: str, token: str) -> None:
        self.client = Client(base_url, token)
        self.arrived: dict[str, float] = {}
        self.answers = 0  # long-poll answers received, empty ones included
        self._cursor = head_cursor(self.client)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait_for(self, count: int, deadline: float) -> None:
        while len(self.arrived) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            page = self.client.sync(since=self._cursor, timeout=2, limit=1000)
            now = time.perf_counter()
            self.answers += 1
            self._cursor = page.next_cursor
            for change in page.changes:
                turn_id = getattr(change, "turn_id", None)
                if turn_id is not None:
                    self.arrived[turn_id] = now


class Writer:
    """A device writing turns into a conversation of its own."""

    def __init__(self, base_url: str, token: str) -> None:
        self.client = Client(base_url, token)
        self._conversation: uuid.UUID | None = None

    def start_conversation(self) -> None:
        self._conversation = self.client.start_conversation().conversation_id

    def push(self, tag: str, turns: int) -> dict[str, float]:
        """Write `turns` turns; when each was acknowledged (perf_counter)."""
        assert self._conversation is not None
        acked = {}
        for n in range(turns):
            turn_id = f"{tag}-{n}"
            self.client.put_turn(
                self._conversation,
                turn_id,
                question=f"question {n}",
                answer=f"answer {n}",
            )
            acked[turn_id] = time.perf_counter()
        return acked


def device_process(connection: Connection, base_url: str, token: str) -> None:
    """One device in a process of its own, run by the commands it receives:
    a writer ("start", "push") or a listener ("listen", "collect")."""
    writer: Writer | None = None
    listener: Listener | None = None
    while True:
        command, *arguments = connection.recv()
        if command == "start":
            writer = writer or Writer(base_url, token)
            writer.start_conversation()
            connection.send(None)
        elif command == "push":
            assert writer is not None
            connection.send(writer.push(*arguments))
        elif command == "listen":
            listener = Listener(base_url, token)
            listener.start()
            connection.send(None)
        elif command == "collect":
            assert listener is not None
            (count,) = arguments
            listener.wait_for(count, time.monotonic() + 30)
            listener.stop()
            connection.send((listener.arrived, listener.answers))
            listener = None
        elif command == "exit":
            if writer is not None:
                writer.client.close()
            return


class Devices:
    """The 8 writers and 2 listeners of part 2: threads of this process
    (`--devices threads`), or a process each (`--devices processes`), as a
    user's devices are separate programs on separate machines. Either way
    each is the project's `Client` over httpx, and each process is on this
    machine, so its CPU is counted (the client's share of the split)."""

    def __init__(
        self,
        base_url: str,
        writer_tokens: list[str],
        listener_tokens: list[str],
        way: str,
    ) -> None:
        self._way = way
        self._base_url = base_url
        self._listener_tokens = listener_tokens
        self._pipes: list[Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        if way == "threads":
            self._writers = [Writer(base_url, token) for token in writer_tokens]
            return
        context = multiprocessing.get_context("spawn")
        for token in writer_tokens + listener_tokens:
            here, there = context.Pipe()
            process = context.Process(
                target=device_process, args=(there, base_url, token), daemon=True
            )
            process.start()
            self._pipes.append(here)
            self._processes.append(process)

    def _ask(self, pipes: list[Connection], *command: object) -> list[Any]:
        for pipe in pipes:
            pipe.send(command)
        return [pipe.recv() for pipe in pipes]

    def start(self, listening: bool) -> None:
        """A new conversation for each writer; the listeners waiting at the head."""
        self._listeners: list[Listener] = []
        if self._way == "threads":
            for writer in self._writers:
                writer.start_conversation()
            if listening:
                self._listeners = [
                    Listener(self._base_url, t) for t in self._listener_tokens
                ]
                for listener in self._listeners:
                    listener.start()
            return
        self._ask(self._pipes[:WRITERS], "start")
        self._listening = listening
        if listening:
            self._ask(self._pipes[WRITERS:], "listen")

    def push(self, tag: str, turns: int) -> dict[str, float]:
        """Every writer writes `turns` turns at once; when each was acknowledged."""
        acked: dict[str, float] = {}
        if self._way == "threads":
            with ThreadPoolExecutor(WRITERS) as pool:
                for done in pool.map(
                    lambda i: self._writers[i].push(f"{tag}-{i}", turns),
                    range(WRITERS),
                ):
                    acked.update(done)
            return acked
        for index, pipe in enumerate(self._pipes[:WRITERS]):
            pipe.send(("push", f"{tag}-{index}", turns))
        for pipe in self._pipes[:WRITERS]:
            acked.update(pipe.recv())
        return acked

    def collect(self, count: int) -> list[tuple[dict[str, float], int]]:
        """Each listener's arrivals (once it has `count` turns, or after 30 s)
        and its number of long-poll answers; the listeners stop."""
        if self._way == "threads":
            found = []
            for listener in self._listeners:
                listener.wait_for(count, time.monotonic() + 30)
                listener.stop()
                found.append((listener.arrived, listener.answers))
            return found
        if not self._listening:
            return []
        return self._ask(self._pipes[WRITERS:], "collect", count)

    def close(self) -> None:
        if self._way == "threads":
            for writer in self._writers:
                writer.client.close()
            return
        for pipe in self._pipes:
            pipe.send(("exit",))
        for process in self._processes:
            process.join(timeout=30)


def write_round(
    process: subprocess.Popen[bytes],
    devices: Devices,
    listening: bool,
    turns_per_device: int,
    tag: str,
    split: CpuSplit | None = None,
) -> tuple[float, float, list[float], float, Split | None]:
    """Turns/s of the writers, service CPU per turn, write -> listener
    latencies (none without listeners), and long-poll answers per turn
    (of all listeners together)."""
    devices.start(listening)
    time.sleep(0.5)  # every listener waiting
    cpu_before = cpu_seconds(process.pid)
    if split is not None:
        split.start()
    began = time.perf_counter()
    acked = devices.push(tag, turns_per_device)
    elapsed = time.perf_counter() - began
    measured = split.stop() if split is not None else None
    cpu = cpu_seconds(process.pid) - cpu_before
    latencies = []
    answers = 0
    for arrived, answered in devices.collect(len(acked)):
        answers += answered
        missing = acked.keys() - arrived.keys()
        if missing:
            raise SystemExit(f"{len(missing)} turns never reached a listener")
        latencies += [arrived[t] - acked[t] for t in acked]
    turns = WRITERS * turns_per_device
    return turns / elapsed, cpu / turns, latencies, answers / turns, measured


def sync_request_cpu(
    process: subprocess.Popen[bytes], base_url: str, token: str, rounds: int
) -> None:
    """Service CPU per `GET /v1/sync`, on the short path (infra/http/
    sync_path.py) and through FastAPI's route (an extra query parameter,
    which the route ignores, sends it there), alternating in one run."""
    writer = Client(base_url, token)
    conversation = writer.start_conversation().conversation_id
    for n in range(OWN_CHANGES - 1):
        writer.put_turn(conversation, f"cpu-{n}", question="q", answer="a")
    cursor = head_cursor(writer)
    writer.close()
    requests = {
        "empty (caught up)": f"/v1/sync?since={cursor}",
        f"{OWN_CHANGES} changes": f"/v1/sync?limit={OWN_CHANGES}",
    }
    per_request = 200
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}
    ) as http:
        for name, path in requests.items():
            cpu: dict[str, list[float]] = {"short path": [], "route": []}
            for _ in range(rounds):
                for way, url in (("short path", path), ("route", path + "&via=route")):
                    before = cpu_seconds(process.pid)
                    for _ in range(per_request):
                        http.get(url).raise_for_status()
                    cpu[way].append((cpu_seconds(process.pid) - before) / per_request)
            short, route = (statistics.median(cpu[w]) for w in ("short path", "route"))
            print(
                f"  sync request, {name}: service CPU {short * 1000:.2f} ms on the "
                f"short path, {route * 1000:.2f} ms through the route "
                f"(medians of {rounds} x {per_request})",
                flush=True,
            )


def start_profile(pid: int, output: str) -> subprocess.Popen[bytes] | None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("  (py-spy is not installed: no profile)")
        return None
    # An .svg file gets a flame graph; any other, collapsed stacks (text).
    form = "flamegraph" if output.endswith(".svg") else "raw"
    return subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--output", output]
        # Only the thread holding the GIL: where the service's CPU goes,
        # not the threads waiting for a connection or the lock.
        + ["--format", form, "--rate", "200", "--threads", "--gil"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--others", default="1000,50000")
    parser.add_argument("--turns-per-device", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", help="write a py-spy flame graph of part 2")
    parser.add_argument(
        "--devices",
        choices=["processes", "threads"],
        default="processes",
        help="part 2's devices: a process each (default), or threads of this one",
    )
    arguments = parser.parse_args()
    counts = [int(n) for n in arguments.others.split(",")]

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    settings = Settings(
        persistence="postgres",
        postgres_schema=schema,
        master_key=base64.b64encode(os.urandom(32)).decode(),
        postgres_pool_size=10,
    )
    conninfo = settings.postgres_conninfo()
    registry = open_device_registry(settings)
    tokens = [
        registry.add("bench-user", f"device-{n}").token
        for n in range(WRITERS + LISTENERS)
    ]
    reader_tokens = {
        count: registry.add(f"reader-{count}", "phone").token for count in counts
    }
    registry.close()
    log = Path(f"/tmp/turnledger-{schema}.log")
    process, base_url = start_server(settings, log, 1)
    try:
        print(f"part 1: catch-up ({time.strftime('%H:%M:%S')} UTC)", flush=True)
        readers = {count: Client(base_url, t) for count, t in reader_tokens.items()}
        medians = measure_catch_up(settings, readers)
        for reader in readers.values():
            reader.close()
        low, high = min(counts), max(counts)
        ratio = medians[high] / medians[low]
        print(f"  ratio {high} / {low}: {ratio:.2f} (target <= 1.5)", flush=True)
        print(f"part 2: writes with listeners ({time.strftime('%H:%M:%S')} UTC)")
        devices = Devices(
            base_url,
            tokens[:WRITERS],
            tokens[WRITERS : WRITERS + LISTENERS],
            arguments.devices,
        )
        write_round(process, devices, False, 20, "warm")
        split = CpuSplit(process.pid, conninfo)
        profile = None
        rounds: list[WriteRound] = []
        alone: list[float] = []
        for number in range(arguments.rounds):
            wait_until_idle(process.pid)
            _, cpu_alone, _, _, alone_split = write_round(
                process,
                devices,
                False,
                arguments.turns_per_device,
                f"a{number}",
                split,
            )
            alone.append(cpu_alone)
            wait_until_idle(process.pid)
            if arguments.profile and profile is None:
                profile = start_profile(process.pid, arguments.profile)
            rate, cpu, latencies, answers, listened_split = write_round(
                process,
                devices,
                True,
                arguments.turns_per_device,
                f"l{number}",
                split,
            )
            if profile is not None:
                profile.send_signal(2)
                profile.wait(timeout=60)
            split.start()
            raw = raw_inserts_per_second(conninfo, schema, 2_000, WRITERS)
            raw_split = split.stop()
            assert listened_split is not None
            turns = WRITERS * arguments.turns_per_device
            ceiling = listened_split.ceiling(turns, CORES)
            bare = listened_split.ceiling_without_service(turns, CORES)
            this_round = WriteRound(rate, cpu, raw, latencies, ceiling, bare)
            rounds.append(this_round)
            print(
                f"  round {number + 1}: {rate:.0f} turns/s with {LISTENERS} "
                f"listeners, raw {raw:.0f}/s, ratio {this_round.ratio:.3f}; CPU/turn "
                f"{cpu * 1000:.2f} ms (no listeners {cpu_alone * 1000:.2f} ms); "
                f"write -> device median {percentile(latencies, 0.5) * 1000:.1f} "
                f"ms, p99 {percentile(latencies, 0.99) * 1000:.1f} ms; "
                f"{answers:.2f} long-poll answers per turn; CPU ceiling "
                f"{ceiling:.0f} turns/s on {CORES} cores (ratio at most "
                f"{this_round.ceiling_ratio:.3f}; with a service of no CPU "
                f"{this_round.bare_ceiling_ratio:.3f})",
                flush=True,
            )
            for name, measured in (
                ("no listeners", alone_split),
                ("listeners", listened_split),
            ):
                assert measured is not None
                print(f"    {name}: {measured.per_turn_line(turns)}")
                print(f"      {measured.busiest_threads()}")
                print(f"      {measured.elsewhere(turns)}")
            print(f"    raw baseline: {raw_split.per_turn_line(2_000)} (per row)")
        devices.close()
        every = [latency for r in rounds for latency in r.latencies]
        print(
            f"  median ratio {statistics.median(r.ratio for r in rounds):.3f} "
            "(target >= 0.25); write -> device p99 over all rounds "
            f"{percentile(every, 0.99) * 1000:.1f} ms (target < 100 ms); "
            "CPU/turn with listeners "
            f"{statistics.median(r.cpu_per_turn for r in rounds) * 1000:.2f} ms, "
            f"without {statistics.median(alone) * 1000:.2f} ms; ratio with "
            "every core busy at this CPU per turn (CPU ceiling / raw) "
            f"{statistics.median(r.ceiling_ratio for r in rounds):.3f}, and "
            "with a service of no CPU (the devices and PostgreSQL alone) "
            f"{statistics.median(r.bare_ceiling_ratio for r in rounds):.3f}"
        )
        print(f"part 3: one sync request ({time.strftime('%H:%M:%S')} UTC)")
        sync_request_cpu(process, base_url, tokens[0], arguments.rounds)
    finally:
        process.terminate()
        process.wait(timeout=60)
        drop_schema(conninfo, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
