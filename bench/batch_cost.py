"""What a batch costs on PostgreSQL, and what overlapping batches buys.

    .venv/bin/python bench/batch_cost.py              # 4,000 turns a run, 3 rounds
    .venv/bin/python bench/batch_cost.py --turns 800 --rounds 1   # a quick look

The 8-writer ratio of bench/read_side_bench.py is bounded by what one batch
of turns costs in Python and how much of that can overlap a write call
(docs/benchmarks.md, "Writes to many conversations in one batch"). This
measures both, on a fresh schema of the PostgreSQL named by TURNLEDGER_POSTGRES_*
(dropped at the end), through the public API:

- `TxN`: T threads, each writing batches of N turns to N conversations of its
  own with `record_turns`, on a ledger that lets T batches be in flight. One
  thread shows the CPU a turn and a batch cost when nothing competes; two
  threads show whether a second batch's Python overlaps the first's write call.
  `TxNcK`: the same batches over K conversations a thread (`1x8c1`: 8 turns
  of one conversation a batch), for what a conversation in a batch costs.
- `w8`: the read-side bench's scenario, 8 threads each calling `confirm_turn`
  on a conversation of its own, on a ledger with the default single batch in
  flight (the group committer makes the batches).

Each round runs every configuration once (in reverse order every other round)
and divides its turns/s by the same round's `1x8`: one thread writing the same
8-turn batches that 8 writers make. Printed per configuration, medians over
the rounds: turns/s, that ratio, the process's CPU (user + system) and
voluntary context switches a turn. From `1x1` and `1x16`, the CPU a turn and a
batch cost, fitted as cpu(N) = turn + batch / N. It measures; it does not gate.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql
from read_side_bench import OWNER, run_threads, turn_text

from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.results import TurnRequest
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

BASELINE = "1x8"
CONFIGS = ("1x1", "1x4", BASELINE, "1x8c1", "1x16", "2x4", "2x8", "w8")


@dataclass(frozen=True)
class Run:
    rate: float  # turns/s
    cpu_us: float  # process CPU (user + system) a turn
    switches: float  # voluntary context switches a turn


def measured(turns: int, work: Callable[[], object]) -> Run:
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(
        turns / seconds,
        cpu / turns * 1e6,
        (after.ru_nvcsw - before.ru_nvcsw) / turns,
    )


# (question, answer) of each turn of a run: made once, before any clock starts.
# Every run writes to new conversations, so its turn ids need no prefix.
Texts = list[tuple[str, str]]


def batches(
    ledger: Conversations, texts: Texts, threads: int, size: int, conversations: int
) -> Run:
    """`threads` threads, each writing `size`-turn batches over its own
    `conversations` conversations with `record_turns`."""
    turns = len(texts) - len(texts) % (threads * size)
    own = [
        [ledger.start_conversation(OWNER) for _ in range(conversations)]
        for _ in range(threads)
    ]

    def work(worker: int) -> None:
        for first in range(worker * size, turns, threads * size):
            requests = [
                TurnRequest(
                    OWNER,
                    own[worker][k % conversations],
                    f"t{first + k}",
                    question=texts[first + k][0],
                    answer=texts[first + k][1],
                )
                for k in range(size)
            ]
            for outcome in ledger.record_turns(requests):
                if isinstance(outcome, Exception):
                    raise outcome

    return measured(turns, lambda: run_threads(threads, work))


def writers(ledger: Conversations, texts: Texts, threads: int) -> Run:
    """`threads` threads, each calling `confirm_turn` on its own conversation."""
    turns = len(texts)
    own = [ledger.start_conversation(OWNER) for _ in range(threads)]

    def work(worker: int) -> None:
        for index in range(worker, turns, threads):
            question, answer = texts[index]
            ledger.confirm_turn(
                OWNER,
                own[worker],
                turn_id=f"t{index}",
                question=question,
                answer=answer,
            )

    return measured(turns, lambda: run_threads(threads, work))


def run_config(
    name: str, pipelined: Conversations, default: Conversations, texts: Texts
) -> Run:
    if name == "w8":
        return writers(default, texts, 8)
    pipeline = _pipeline(name)
    assert pipeline is not None, name  # parse_args refused any other name
    threads, size, conversations = pipeline
    return batches(pipelined, texts, threads, size, conversations)


def report(runs: dict[str, list[Run]]) -> None:
    baseline = runs[BASELINE]
    print(
        f"\n{'config':8} {'turns/s':>9} {'vs ' + BASELINE:>8} {'CPU/turn':>10}"
        f" {'switches/turn':>14}"
    )
    for name, measured_runs in runs.items():
        rate = statistics.median(r.rate for r in measured_runs)
        ratio = statistics.median(
            r.rate / b.rate for r, b in zip(measured_runs, baseline, strict=True)
        )
        cpu = statistics.median(r.cpu_us for r in measured_runs)
        switches = statistics.median(r.switches for r in measured_runs)
        print(f"{name:8} {rate:9,.0f} {ratio:8.2f} {cpu:8.0f} us {switches:14.1f}")
    if "1x1" in runs and "1x16" in runs:
        one = statistics.median(r.cpu_us for r in runs["1x1"])
        sixteen = statistics.median(r.cpu_us for r in runs["1x16"])
        batch = (one - sixteen) * 16 / 15
        print(
            f"\none thread, cpu(N) = turn + batch / N: about {one - batch:.0f} us"
            f" a turn and {batch:.0f} us a batch"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=4_000, help="turns a run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians)")
    parser.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"comma-separated, {BASELINE} always included (default: all)",
    )
    args = parser.parse_args()
    args.configs = [c for c in args.configs.split(",") if c]
    if BASELINE not in args.configs:
        args.configs.insert(0, BASELINE)
    unknown = [c for c in args.configs if c != "w8" and _pipeline(c) is None]
    if unknown:
        parser.error(
            f"unknown configurations {unknown}: TxN or TxNcK (e.g. 2x4, 1x8c1) or w8"
        )
    return args


def _pipeline(name: str) -> tuple[int, int, int] | None:
    """(threads, batch size, conversations a thread) of `TxN` or `TxNcK`."""
    match = re.fullmatch(r"([1-9][0-9]*)x([1-9][0-9]*)(?:c([1-9][0-9]*))?", name)
    if match is None:
        return None
    threads, size = int(match[1]), int(match[2])
    return threads, size, int(match[3]) if match[3] else size


def main() -> int:
    args = parse_args()
    in_flight = max([int(c.split("x")[0]) for c in args.configs if c != "w8"] + [1])
    schema = f"bench_batch_cost_{uuid.uuid4().hex[:10]}"
    master_key = new_master_key()
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_schema=schema,
        master_key=master_key,
    )
    default = open_conversations(settings)
    pipelined = open_conversations(
        settings.model_copy(update={"postgres_batches_in_flight": min(in_flight, 4)})
    )
    print(
        f"schema {schema}, {args.rounds} rounds of {args.turns:,} turns a run,"
        f" {os.cpu_count()} CPUs, load average"
        f" {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    runs: dict[str, list[Run]] = {name: [] for name in args.configs}
    texts = [turn_text(index) for index in range(args.turns)]
    try:
        for round_number in range(args.rounds):
            order = args.configs[:: -1 if round_number % 2 else 1]
            for name in order:
                runs[name].append(run_config(name, pipelined, default, texts))
            print(
                f"  round {round_number + 1}: "
                + ", ".join(f"{name} {runs[name][-1].rate:,.0f}/s" for name in runs)
            )
    finally:
        pipelined.close()
        default.close()
        with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)
                )
            )
    report(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
