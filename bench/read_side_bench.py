"""Read side and group commit on PostgreSQL: every cost against a baseline.

    .venv/bin/python bench/read_side_bench.py            # full: 100,000 vs 1,000
    .venv/bin/python bench/read_side_bench.py --quick    # small sizes, ~1 minute
    .venv/bin/python bench/read_side_bench.py --only-throughput  # part 3 alone

Everything goes through the public API (`open_conversations`, `confirm_turn`,
`project_window`, `get_conversation`, `get_history`) on a fresh schema of the
PostgreSQL named by TURNLEDGER_POSTGRES_* (default postgres@127.0.0.1:5432),
dropped at the end. Each figure is compared with a baseline measured in the
same run:

1. one more `confirm_turn` on a conversation of --big turns vs one of --small
   turns (median of --calls single calls on each, interleaved);
2. a fresh process's first `project_window` (50 pairs) at --big vs --small
   turns, and that process's peak RSS;
3. confirmed turns/s from 8 threads on 8 conversations vs raw psycopg
   single-row INSERT + COMMIT from 8 connections, and 1 writer vs 1 connection;
4. 8 and 16 threads on one conversation: turns/s against the 8-conversation
   rate, VersionConflictErrors (none expected), and the history afterwards
   (every submitted turn id exactly once);
5. bytes stored per turn (all relations of the schema) vs the text's bytes.

The conversations are built through `confirm_turn` from 16 threads at once,
which the group committer writes in shared transactions. The script prints
PASS/FAIL per target and exits 0 either way: it measures, it does not gate.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from turnledger.domain.errors import VersionConflictError
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key

OWNER = "bench"
SYSTEM = "You are a helpful assistant. Answer in the user's language."
QUESTION = "Can you summarise what we decided about the migration? 请简要总结。"
MODEL = "bench-model"
BUILD_THREADS = 16
# UTF-8 bytes of question + answer per turn, as in the measurements.
TEXT_BYTES = 970
# The raw baseline's row: about what one sealed turn weighs (two AES-GCM texts
# of ~970 bytes of text in all, with nonces, tags and the wrapped key).
RAW_PAYLOAD_BYTES = 1_400

PHRASES = [
    "Let's move the orders table to the new cluster next week.",
    "我们下周把订单表迁移到新集群，先做只读副本。",
    "来週、注文テーブルを新しいクラスタに移行しましょう。",
    "다음 주에 주문 테이블을 새 클러스터로 옮깁시다.",
    'Use `ALTER TABLE orders SET (fillfactor = 90);` before the copy — "carefully".',
    "Vamos migrar a tabela de pedidos na próxima semana 👍🏽",
    "Die Migration läuft über Nacht; Rückfall per Snapshot.",
    "def migrate(batch):\n    return [row for row in batch if row['ok']]\n",
]

HIGHEST_ID = UUID("ffffffff-ffff-4fff-bfff-ffffffffffff")

# The child process of part 2: open the ledger from TURNLEDGER_* alone, then
# time its first window. Peak RSS is the child's own high-water mark: VmHWM of
# its address space (getrusage's ru_maxrss would keep the parent's peak, which
# Linux carries across fork and exec).
CHILD_CODE = """
import json, sys, time, uuid
started = time.perf_counter()
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy
policy = WindowPolicy(max_bytes=2_000_000, max_tokens=200_000, max_messages=None,
                      max_pairs=50, floor_messages=10, max_message_tokens=1_000)
ledger = open_conversations(Settings(_env_file=None))
opened = time.perf_counter()
try:
    projected = ledger.project_window(
        sys.argv[1], uuid.UUID(sys.argv[2]), question=sys.argv[3],
        system=sys.argv[4], model=sys.argv[5], policy=policy)
    done = time.perf_counter()
finally:
    ledger.close()
print(json.dumps({
    "window_ms": (done - opened) * 1000,
    "open_ms": (opened - started) * 1000,
    "kept": len(projected.window.kept_turn_ids),
    "version": projected.ledger_version,
    "peak_rss_kb": next(
        int(line.split()[1]) for line in open("/proc/self/status")
        if line.startswith("VmHWM:")
    ),
}))
"""


# Turn ids as short as the README's ("t17") by default; --uuid-turn-ids uses
# 36-character ids, as a client generating UUIDs would (every id is stored in
# the event, the turn row and its unique index, the key row and its index).
UUID_TURN_IDS = False


def turn_id(prefix: str, index: int) -> str:
    if UUID_TURN_IDS:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{prefix}{index}"))
    return f"{prefix}{index}"


def turn_text(index: int) -> tuple[str, str]:
    """A mixed-language turn of about TEXT_BYTES UTF-8 bytes, unique by index."""
    rng = random.Random(index)
    question = f"{index}: " + " ".join(rng.choices(PHRASES, k=rng.randint(1, 3)))
    answer = ""
    while len(question.encode()) + len(answer.encode()) < TEXT_BYTES:
        answer += rng.choice(PHRASES) + " "
    # Trim to the budget by characters, so no character is cut in half.
    while len(question.encode()) + len(answer.encode()) > TEXT_BYTES:
        answer = answer[:-1]
    return question, answer.rstrip() or "ok"


def text_bytes(index: int) -> int:
    question, answer = turn_text(index)
    return len(question.encode()) + len(answer.encode())


@dataclass
class WriteRun:
    """What a timed batch of concurrent writes did."""

    turns: int
    seconds: float
    conflicts: int = 0
    errors: list[str] = field(default_factory=list)
    # Set by the history check of the one-conversation runs.
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0

    @property
    def rate(self) -> float:
        return self.turns / self.seconds

    @property
    def intact(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)


def run_threads(threads: int, work: Callable[[int], None]) -> float:
    """Start `threads` workers together; return the wall time until all end."""
    start = threading.Barrier(threads + 1)
    failures: list[BaseException] = []

    def body(worker: int) -> None:
        start.wait()
        try:
            work(worker)
        except BaseException as error:  # reported, not swallowed
            failures.append(error)

    pool = [threading.Thread(target=body, args=(k,)) for k in range(threads)]
    for thread in pool:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise failures[0]
    return elapsed


def confirm_concurrently(
    ledger: Conversations,
    conversations: Sequence[UUID],
    *,
    threads: int,
    turns: int,
    prefix: str,
    first_index: int = 0,
    progress: bool = False,
) -> WriteRun:
    """`turns` turns from `threads` threads; thread k writes conversation k mod n.

    No expected_version: concurrent writers of one conversation must not need
    one. Conflicts and other errors are counted, not raised.
    """
    conflicts = [0] * threads
    errors: list[str] = []
    done = [0]
    lock = threading.Lock()
    # Made before the clock starts, as the raw baseline's payload is: what is
    # timed is the ledger, not the making of test text.
    texts = [turn_text(first_index + index) for index in range(turns)]

    def work(worker: int) -> None:
        conversation_id = conversations[worker % len(conversations)]
        for index in range(worker, turns, threads):
            question, answer = texts[index]
            try:
                ledger.confirm_turn(
                    OWNER,
                    conversation_id,
                    turn_id=turn_id(prefix, index),
                    question=question,
                    answer=answer,
                )
            except VersionConflictError:
                conflicts[worker] += 1
            except Exception as error:
                with lock:
                    errors.append(f"{type(error).__name__}: {error}")
            if progress:
                with lock:
                    done[0] += 1
                    if done[0] % 10_000 == 0:
                        print(f"    ... {done[0]:,} turns", file=sys.stderr)

    seconds = run_threads(threads, work)
    return WriteRun(turns, seconds, sum(conflicts), errors)


def raw_insert_rate(
    conninfo: str, table: sql.Composable, *, connections: int, rows: int
) -> float:
    """Rows/s of single-row INSERT + COMMIT from `connections` connections."""
    opened = [psycopg.connect(conninfo) for _ in range(connections)]
    payload = os.urandom(RAW_PAYLOAD_BYTES)
    statement = sql.SQL(
        "INSERT INTO {} (conversation_id, position, turn_id, status, recorded_at,"
        " sealed) VALUES (%s, %s, %s, 1, now(), %s)"
    ).format(table)
    conversation_ids = [uuid.uuid4() for _ in range(connections)]
    try:

        def work(worker: int) -> None:
            connection = opened[worker]
            for position in range(worker, rows, connections):
                connection.execute(
                    statement,
                    (conversation_ids[worker], position, f"t{position}", payload),
                )
                connection.commit()

        return rows / run_threads(connections, work)
    finally:
        for connection in opened:
            connection.close()


def schema_bytes(conninfo: str, schema: str) -> dict[str, int]:
    """Bytes of every table of the schema, with its indexes and TOAST.

    Partitions are tables of their own (the partitioned parent holds no
    data); they are summed under their parent's name.
    """
    with psycopg.connect(conninfo) as connection:
        found = connection.execute(
            "SELECT coalesce(parent.relname, c.relname),"
            " sum(pg_total_relation_size(c.oid))::bigint"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " LEFT JOIN pg_inherits i ON i.inhrelid = c.oid"
            " LEFT JOIN pg_class parent ON parent.oid = i.inhparent"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'm')"
            " GROUP BY 1",
            (schema,),
        ).fetchall()
    return {name: int(size) for name, size in found}


def history_ids(
    ledger: Conversations, conversation_id: UUID
) -> tuple[Counter[str], int]:
    """Every turn id in the history (with multiplicity) and the reported total."""
    seen: Counter[str] = Counter()
    offset: int | None = 0
    total = 0
    while offset is not None:
        page = ledger.get_history(OWNER, conversation_id, offset=offset, limit=500)
        total = page.total_turns
        seen.update(item.turn_id for item in page.items)
        offset = page.next_offset
    return seen, total


def child_env(settings: Settings) -> dict[str, str]:
    """The parent's environment, every TURNLEDGER_* kept, plus this store's."""
    env = dict(os.environ)
    assert settings.master_key is not None
    env.update(
        TURNLEDGER_PERSISTENCE="postgres",
        TURNLEDGER_POSTGRES_HOST=settings.postgres_host,
        TURNLEDGER_POSTGRES_PORT=str(settings.postgres_port),
        TURNLEDGER_POSTGRES_DBNAME=settings.postgres_dbname,
        TURNLEDGER_POSTGRES_USER=settings.postgres_user,
        TURNLEDGER_POSTGRES_PASSWORD=settings.postgres_password.get_secret_value(),
        TURNLEDGER_POSTGRES_SCHEMA=settings.postgres_schema,
        TURNLEDGER_MASTER_KEY=settings.master_key.get_secret_value(),
    )
    env.pop("TURNLEDGER_MASTER_KEY_FILE", None)
    return env


def cold_window(env: dict[str, str], conversation_id: UUID) -> dict[str, Any]:
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD_CODE,
            OWNER,
            str(conversation_id),
            QUESTION,
            SYSTEM,
            MODEL,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"window child failed:\n{completed.stderr}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


@dataclass
class Row:
    measure: str
    figure: str
    baseline: str
    ratio: str
    target: str
    passed: bool | None  # None: reported, no target


def verdict(passed: bool | None) -> str:
    return "" if passed is None else ("PASS" if passed else "**FAIL**")


def print_table(rows: Sequence[Row]) -> None:
    header = ("measure", "figure", "baseline (same run)", "ratio", "target", "result")
    lines = [header] + [
        (r.measure, r.figure, r.baseline, r.ratio, r.target, verdict(r.passed))
        for r in rows
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for line in lines[1:]:
        print("| " + " | ".join(line) + " |")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f} ms"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (5,000 vs 500 turns, short runs)",
    )
    parser.add_argument("--big", type=int, help="turns of the long conversation")
    parser.add_argument("--small", type=int, help="turns of the short one")
    parser.add_argument("--calls", type=int, help="single confirm_turn calls timed")
    parser.add_argument("--cold-runs", type=int, help="fresh processes per size")
    parser.add_argument(
        "--turns", type=int, help="turns per throughput run (8 and 16 threads)"
    )
    parser.add_argument(
        "--single-turns", type=int, help="turns of the one-writer throughput run"
    )
    parser.add_argument("--rounds", type=int, help="throughput rounds (medians)")
    parser.add_argument(
        "--only-throughput",
        action="store_true",
        help="part 3 alone (writers against the raw baseline): no build, no "
        "windows, no one-conversation runs, no stored bytes",
    )
    parser.add_argument(
        "--uuid-turn-ids",
        action="store_true",
        help="36-character turn ids instead of short ones like t17",
    )
    parser.add_argument(
        "--keep-schema",
        action="store_true",
        help="keep the schema at the end (to profile or inspect it) instead of "
        "dropping it",
    )
    args = parser.parse_args()
    defaults = (
        dict(
            big=5_000,
            small=500,
            calls=10,
            cold_runs=2,
            turns=400,
            single_turns=100,
            rounds=1,
        )
        if args.quick
        else dict(
            big=100_000,
            small=1_000,
            calls=30,
            cold_runs=5,
            turns=2_000,
            single_turns=500,
            rounds=3,
        )
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main() -> int:
    global UUID_TURN_IDS
    args = parse_args()
    UUID_TURN_IDS = args.uuid_turn_ids
    schema = f"bench_read_side_{uuid.uuid4().hex[:10]}"
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_schema=schema,
        master_key=new_master_key(),
    )
    conninfo = settings.postgres_conninfo()
    with psycopg.connect(conninfo) as connection:
        server = connection.execute("SHOW server_version").fetchone()
        sync = connection.execute("SHOW synchronous_commit").fetchone()
        autovacuum = connection.execute("SHOW autovacuum").fetchone()
    print(
        f"PostgreSQL {server[0] if server else '?'}, synchronous_commit="
        f"{sync[0] if sync else '?'}, "
        f"autovacuum={autovacuum[0] if autovacuum else '?'}, "
        f"schema {schema}, batches in flight "
        f"{settings.postgres_batches_in_flight}, {os.cpu_count()} CPUs, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"sizes: {args.big:,} vs {args.small:,} turns, ~{TEXT_BYTES} UTF-8 bytes "
        f"of text per turn"
    )
    ledger = open_conversations(settings)
    try:
        rows = run(args, settings, ledger)
    finally:
        ledger.close()
        if args.keep_schema:
            assert settings.master_key is not None
            print(
                f"\nschema kept: TURNLEDGER_POSTGRES_SCHEMA={schema} "
                f"TURNLEDGER_MASTER_KEY={settings.master_key.get_secret_value()}"
            )
        else:
            with psycopg.connect(conninfo, autocommit=True) as connection:
                connection.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(schema)
                    )
                )
    print()
    print_table(rows)
    failed = [r.measure for r in rows if r.passed is False]
    print()
    if failed:
        print(f"FAILED TARGETS ({len(failed)}): " + "; ".join(failed))
    else:
        print("All targets met.")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def run(
    args: argparse.Namespace, settings: Settings, ledger: Conversations
) -> list[Row]:
    if args.only_throughput:
        return throughput(args, settings, ledger, one_conversation_runs=False)
    conninfo = settings.postgres_conninfo()
    schema = settings.postgres_schema
    rows: list[Row] = []

    # Build ------------------------------------------------------------------
    # The short conversation takes the highest id, so the long one's rows sit
    # in the middle of every index on (conversation, ...), as in any store with
    # more than one conversation (the rightmost key range packs pages fuller).
    small = ledger.start_conversation(OWNER, conversation_id=HIGHEST_ID)
    big = ledger.start_conversation(OWNER)
    print(
        f"\nbuilding {args.small:,} turns ({BUILD_THREADS} threads, one conversation)"
    )
    built = confirm_concurrently(
        ledger, [small], threads=BUILD_THREADS, turns=args.small, prefix="t"
    )
    check_clean("build (small)", built)
    print(f"  {built.rate:,.0f} turns/s")
    before = schema_bytes(conninfo, schema)
    print(f"building {args.big:,} turns ({BUILD_THREADS} threads, one conversation)")
    built = confirm_concurrently(
        ledger,
        [big],
        threads=BUILD_THREADS,
        turns=args.big,
        prefix="t",
        progress=True,
    )
    check_clean("build (big)", built)
    after = schema_bytes(conninfo, schema)
    print(f"  {built.rate:,.0f} turns/s, {built.seconds:,.1f} s")
    for conversation_id, size in ((small, args.small), (big, args.big)):
        head = ledger.get_conversation(OWNER, conversation_id)
        if head.turn_count != size:
            raise SystemExit(f"built {head.turn_count} turns, expected {size}")

    # 5. Stored bytes per turn (the big build: every relation of the schema).
    text_per_turn = sum(text_bytes(i) for i in range(args.big)) / args.big
    growth = {
        name: size - before.get(name, 0)
        for name, size in after.items()
        if size != before.get(name, 0)
    }
    stored_per_turn = sum(growth.values()) / args.big
    budget = 1.6 * text_per_turn + 300
    rows_storage = Row(
        "stored bytes per turn (all relations of the schema)",
        f"{stored_per_turn:,.0f} B",
        f"text {text_per_turn:,.0f} B (UTF-8)",
        f"{stored_per_turn / text_per_turn:.2f}x text",
        f"<= 1.6 x text + 300 = {budget:,.0f} B",
        stored_per_turn <= budget,
    )
    print(f"  conversations: {small} ({args.small:,}), {big} ({args.big:,})")
    print(f"  schema grew {sum(growth.values()):,} bytes for {args.big:,} turns:")
    for name, grown in sorted(growth.items(), key=lambda item: -item[1]):
        print(f"    {name}: {grown / args.big:,.0f} B/turn")

    # 1. One more confirm_turn --------------------------------------------------
    print(f"\n1. one more confirm_turn: {args.calls} calls on each, interleaved")
    timings: dict[UUID, list[float]] = {small: [], big: []}
    for call in range(args.calls):
        for conversation_id in (small, big) if call % 2 == 0 else (big, small):
            question, answer = turn_text(10_000_000 + call)
            began = time.perf_counter()
            ledger.confirm_turn(
                OWNER,
                conversation_id,
                turn_id=turn_id("one-more-", call),
                question=question,
                answer=answer,
            )
            timings[conversation_id].append(time.perf_counter() - began)
    small_ms, big_ms = (statistics.median(timings[c]) for c in (small, big))
    print(
        f"  median {ms(small_ms)} at {args.small:,}, {ms(big_ms)} at {args.big:,}"
        f" (max {ms(max(timings[small]))} / {ms(max(timings[big]))})"
    )
    rows.append(
        Row(
            f"one more confirm_turn at {args.big:,} turns (median of {args.calls})",
            ms(big_ms),
            f"{ms(small_ms)} at {args.small:,} turns",
            f"{big_ms / small_ms:.2f}x",
            "<= 1.5x",
            big_ms / small_ms <= 1.5,
        )
    )

    # 2. A fresh process's first window, with the planner's statistics as the
    # build left them (none unless autovacuum has run), then after ANALYZE.
    print(f"\n2. first window in a fresh process: {args.cold_runs} processes per size")
    env = child_env(settings)
    rows.extend(cold_windows(args, env, small, big, stage="as built"))
    with psycopg.connect(conninfo, autocommit=True) as connection:
        for (table,) in connection.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN"
            " ('r', 'p')",
            (schema,),
        ).fetchall():
            connection.execute(sql.SQL("ANALYZE {}").format(sql.SQL(table)))
    rows.extend(cold_windows(args, env, small, big, stage="after ANALYZE"))
    rows.extend(throughput(args, settings, ledger, one_conversation_runs=True))
    rows.append(rows_storage)
    return rows


def throughput(
    args: argparse.Namespace,
    settings: Settings,
    ledger: Conversations,
    *,
    one_conversation_runs: bool,
) -> list[Row]:
    """Parts 3 and 4 (part 3 alone without `one_conversation_runs`)."""
    conninfo = settings.postgres_conninfo()
    schema = settings.postgres_schema
    rows: list[Row] = []
    # 3 and 4. Throughput ---------------------------------------------------------
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(
            sql.SQL(
                "CREATE TABLE {} (conversation_id uuid NOT NULL,"
                " position integer NOT NULL,"
                " turn_id text NOT NULL, status smallint NOT NULL,"
                " recorded_at timestamptz NOT NULL, sealed bytea NOT NULL,"
                " PRIMARY KEY (conversation_id, position))"
            ).format(sql.Identifier(schema, "raw_baseline"))
        )
    raw_table = sql.Identifier(schema, "raw_baseline")

    print(
        f"\n3. throughput: {args.rounds} rounds; {args.turns:,} turns per "
        f"multi-thread run, {args.single_turns:,} for one writer"
    )
    results: dict[str, list[float]] = {
        k: [] for k in ("raw8", "api8", "raw1", "api1", "one8", "one16")
    }
    one_runs: dict[str, list[WriteRun]] = {"one8": [], "one16": []}
    for round_number in range(args.rounds):
        steps: list[tuple[str, Callable[[], float]]] = [
            (
                "raw8",
                lambda: raw_insert_rate(
                    conninfo, raw_table, connections=8, rows=args.turns
                ),
            ),
            ("api8", lambda: own_conversations(ledger, args.turns, threads=8)),
            (
                "raw1",
                lambda: raw_insert_rate(
                    conninfo, raw_table, connections=1, rows=args.single_turns
                ),
            ),
            (
                "api1",
                lambda: own_conversations(ledger, args.single_turns, threads=1),
            ),
        ]
        if one_conversation_runs:
            steps += [
                ("one8", lambda: one_conversation(ledger, args.turns, 8, one_runs)),
                ("one16", lambda: one_conversation(ledger, args.turns, 16, one_runs)),
            ]
        if round_number % 2:
            steps.reverse()
        for name, step in steps:
            results[name].append(step())
        print(
            f"  round {round_number + 1}: "
            + ", ".join(
                f"{name} {values[-1]:,.0f}/s"
                for name, values in results.items()
                if values
            )
        )
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(sql.SQL("TRUNCATE {}").format(raw_table))

    median = {
        name: statistics.median(values) for name, values in results.items() if values
    }
    paired8 = statistics.median(
        a / r for a, r in zip(results["api8"], results["raw8"], strict=True)
    )
    paired1 = statistics.median(
        a / r for a, r in zip(results["api1"], results["raw1"], strict=True)
    )
    rows.append(
        Row(
            "confirmed turns/s, 8 threads on 8 conversations",
            f"{median['api8']:,.0f}/s",
            f"raw INSERT+COMMIT, 8 connections: {median['raw8']:,.0f}/s",
            f"{paired8:.2f}",
            ">= 0.5",
            paired8 >= 0.5,
        )
    )
    rows.append(
        Row(
            "confirmed turns/s, 1 writer",
            f"{median['api1']:,.0f}/s",
            f"raw INSERT+COMMIT, 1 connection: {median['raw1']:,.0f}/s",
            f"{paired1:.2f}",
            ">= 0.25",
            paired1 >= 0.25,
        )
    )
    for name, threads in (("one8", 8), ("one16", 16)) if one_conversation_runs else ():
        runs = one_runs[name]
        ratio = statistics.median(
            o / a for o, a in zip(results[name], results["api8"], strict=True)
        )
        conflicts = sum(r.conflicts for r in runs)
        problems = [p for r in runs for p in r.errors]
        rows.append(
            Row(
                f"{threads} threads on ONE conversation",
                f"{median[name]:,.0f}/s",
                f"8 threads on 8 conversations: {median['api8']:,.0f}/s",
                f"{ratio:.2f}",
                ">= 0.5",
                ratio >= 0.5,
            )
        )
        rows.append(
            Row(
                f"{threads} threads on one conversation: VersionConflictError "
                "without expected_version",
                f"{conflicts} of {sum(r.turns for r in runs):,}",
                "",
                "",
                "0",
                conflicts == 0,
            )
        )
        rows.append(
            Row(
                f"{threads} threads on one conversation: history lost / duplicated / "
                "unexpected / other errors",
                " / ".join(
                    str(x)
                    for x in (
                        sum(r.lost for r in runs),
                        sum(r.duplicated for r in runs),
                        sum(r.unexpected for r in runs),
                        len(problems),
                    )
                ),
                "",
                "",
                "0 / 0 / 0 / 0",
                all(r.intact for r in runs) and not problems,
            )
        )
        for problem in problems[:5]:
            print(f"  {name} error: {problem}")
    return rows


def cold_windows(
    args: argparse.Namespace,
    env: dict[str, str],
    small: UUID,
    big: UUID,
    *,
    stage: str,
) -> list[Row]:
    """First windows of fresh processes on both conversations, interleaved."""
    cold: dict[UUID, list[dict[str, Any]]] = {small: [], big: []}
    for attempt in range(args.cold_runs):
        for conversation_id in (small, big) if attempt % 2 == 0 else (big, small):
            result = cold_window(env, conversation_id)
            if result["kept"] != 50:
                raise SystemExit(f"the window kept {result['kept']} turns, not 50")
            cold[conversation_id].append(result)
    cold_small, cold_big = (
        statistics.median(r["window_ms"] for r in cold[c]) for c in (small, big)
    )
    open_small, open_big = (
        statistics.median(r["open_ms"] for r in cold[c]) for c in (small, big)
    )
    rss_small, rss_big = (
        max(r["peak_rss_kb"] for r in cold[c]) / 1024 for c in (small, big)
    )
    print(
        f"  {stage}: first window median {cold_small:,.1f} ms at {args.small:,}, "
        f"{cold_big:,.1f} ms at {args.big:,}; opening the ledger (imports "
        f"included) {open_small:,.0f} / {open_big:,.0f} ms; peak RSS "
        f"{rss_small:,.1f} / {rss_big:,.1f} MB"
    )
    return [
        Row(
            f"first window of a fresh process at {args.big:,} turns, {stage} "
            f"(median of {args.cold_runs})",
            f"{cold_big:,.2f} ms",
            f"{cold_small:,.2f} ms at {args.small:,} turns",
            f"{cold_big / cold_small:.2f}x",
            "<= 2x",
            cold_big / cold_small <= 2,
        ),
        Row(
            f"peak RSS of that process at {args.big:,} turns, {stage}",
            f"{rss_big:,.1f} MB",
            f"{rss_small:,.1f} MB at {args.small:,} turns",
            f"{rss_big / rss_small:.2f}x",
            "<= 80 MB",
            rss_big <= 80,
        ),
    ]


def check_clean(what: str, run: WriteRun) -> None:
    if run.conflicts or run.errors:
        print(
            f"  {what}: {run.conflicts} VersionConflictErrors, "
            f"{len(run.errors)} other errors (first: {run.errors[:1]})"
        )


def own_conversations(ledger: Conversations, turns: int, *, threads: int) -> float:
    """`threads` writers, each on a new conversation of its own."""
    conversations = [ledger.start_conversation(OWNER) for _ in range(threads)]
    run = confirm_concurrently(
        ledger,
        conversations,
        threads=threads,
        turns=turns,
        prefix="t",
        first_index=20_000_000,
    )
    if run.conflicts or run.errors:
        raise SystemExit(
            f"{threads} writers on own conversations failed: "
            f"{run.conflicts} conflicts, {run.errors[:3]}"
        )
    return run.rate


def one_conversation(
    ledger: Conversations, turns: int, threads: int, runs: dict[str, list[WriteRun]]
) -> float:
    """`threads` writers on one new conversation, then its history checked."""
    conversation_id = ledger.start_conversation(OWNER)
    run = confirm_concurrently(
        ledger,
        [conversation_id],
        threads=threads,
        turns=turns,
        prefix="s",
        first_index=30_000_000,
    )
    seen, total = history_ids(ledger, conversation_id)
    submitted = {turn_id("s", index) for index in range(turns)}
    run.lost = len(submitted - set(seen))
    run.duplicated = sum(1 for count in seen.values() if count > 1)
    run.unexpected = len(set(seen) - submitted) + abs(total - len(submitted))
    runs[f"one{threads}"].append(run)
    return run.rate


if __name__ == "__main__":
    sys.exit(main())
