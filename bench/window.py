"""Benchmark: the request window against the textbook loop, and on PostgreSQL.

Part 1 (in-memory store): for histories of 1,000, 10,000 and 100,000 turns
(mixed languages, some long pasted texts), time the naive loop, which
re-serializes every candidate suffix, against `Conversations.project_window`,
check that both give the same bytes, and print the ratio. The naive loop is
run only up to --naive-max turns (it is quadratic).

Part 2 (PostgreSQL): project a 50-turn window from conversations of 1,000 and
100,000 turns and print the ratio of the two, cold (the first call of a new
application) and warm (later calls of a long-running one). Windows are read
from the read side; nothing is cached between calls.

    .venv/bin/python bench/window.py                       # everything
    .venv/bin/python bench/window.py --skip-postgres --sizes 1000 10000
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from turnledger.infra.persistence import open_conversations  # noqa: E402
from turnledger.infra.service_layer.application import Conversations  # noqa: E402
from turnledger.infra.settings import Settings  # noqa: E402
from turnledger.infra.vault import new_master_key  # noqa: E402
from turnledger.projections.formats import RequestParts, render_body  # noqa: E402
from turnledger.projections.policy import WindowPolicy  # noqa: E402
from turnledger.projections.tokens import CHAR_ESTIMATE, trim_text  # noqa: E402

OWNER = "bench"
SYSTEM = "You are a helpful assistant. Answer in the user's language."
QUESTION = "Can you summarise what we decided about the migration? 请简要总结。"
MODEL = "bench-model"
# A 50-turn window: the token budget and byte limit are wide enough that the
# pair limit decides.
POLICY = WindowPolicy(
    max_bytes=2_000_000,
    max_tokens=200_000,
    max_messages=None,
    max_pairs=50,
    floor_messages=10,
    max_message_tokens=1_000,
)

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


def make_texts(count: int, seed: int = 7) -> list[tuple[str, str]]:
    """Mixed-language turns; about one in fifty carries a long pasted text."""
    rng = random.Random(seed)
    texts = []
    for index in range(count):
        question = " ".join(rng.choices(PHRASES, k=rng.randint(1, 3)))
        if index % 50 == 17:
            question += "\n" + "\n".join(rng.choices(PHRASES, k=300))  # ~15 kB pasted
        answer = " ".join(rng.choices(PHRASES, k=rng.randint(2, 6)))
        texts.append((f"{index}: {question}", answer))
    return texts


def build_conversation(ledger: Conversations, texts: Sequence[tuple[str, str]]) -> UUID:
    """Record the turns in order through the public bulk import (group commit)."""
    conversation_id = ledger.start_conversation(OWNER)
    for start in range(0, len(texts), 1_000):
        chunk = texts[start : start + 1_000]
        ledger.confirm_turns(
            OWNER,
            conversation_id,
            [
                (f"t{start + index}", question, answer)
                for index, (question, answer) in enumerate(chunk)
            ],
        )
    return conversation_id


def naive_window(texts: Sequence[tuple[str, str]], policy: WindowPolicy) -> bytes:
    """The seeds' textbook loop: serialize every candidate suffix until one fits."""
    limit = policy.max_message_tokens
    trimmed = [
        (trim_text(q, CHAR_ESTIMATE, limit), trim_text(a, CHAR_ESTIMATE, limit))
        for q, a in texts
    ]
    pair_limit = policy.max_pairs_total
    budget = policy.max_tokens
    floor = policy.floor_pairs
    for start in range(len(trimmed) + 1):
        suffix = trimmed[start:]
        body = render_body(
            policy.wire_format,
            RequestParts(
                model=MODEL,
                system=SYSTEM,
                question=QUESTION,
                pairs=[(q.text, a.text) for q, a in suffix],
                max_output_tokens=policy.reserved_output_tokens,
            ),
        )
        if len(body) > policy.max_bytes:
            continue
        if pair_limit is not None and len(suffix) > pair_limit:
            continue
        tokens = sum(q.tokens + a.tokens for q, a in suffix)
        if budget is not None and tokens > budget and len(suffix) > floor:
            continue
        return body
    raise AssertionError("unreachable")


def timed(action: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Median seconds of `repeat` runs, and the last result."""
    times = []
    result: object = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def first_call(
    settings: Settings, action: Callable[[Conversations], object], repeat: int = 5
) -> float:
    """Median seconds of `action` on a freshly opened application (not timed)."""
    times = []
    for _ in range(repeat):
        ledger = open_conversations(settings)
        try:
            started = time.perf_counter()
            action(ledger)
            times.append(time.perf_counter() - started)
        finally:
            ledger.close()
    return statistics.median(times)


def project(ledger: Conversations, conversation_id: UUID) -> bytes:
    return ledger.project_window(
        OWNER,
        conversation_id,
        question=QUESTION,
        system=SYSTEM,
        model=MODEL,
        policy=POLICY,
    ).window.body


def part_one(sizes: Sequence[int], naive_max: int) -> None:
    print("Part 1: naive loop vs project_window (in-memory store)")
    print(f"{'turns':>8} {'naive s':>10} {'window ms':>10} {'ratio':>10}")
    for size in sizes:
        print(in_memory_row(size, naive_max))


def in_memory_row(size: int, naive_max: int) -> str:
    texts = make_texts(size)
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        conversation_id = build_conversation(ledger, texts)
        window_s, body = timed(lambda: project(ledger, conversation_id), 50)
    finally:
        ledger.close()
    naive, ratio = "(skipped)", "-"
    if size <= naive_max:
        naive_s, naive_body = timed(lambda: naive_window(texts, POLICY), 1)
        assert naive_body == body, "the window and the naive loop disagree"
        ratio = f"{naive_s / window_s:,.0f}x"
        naive = f"{naive_s:.2f}"
    return f"{size:>8,} {naive:>10} {window_s * 1e3:>10.2f} {ratio:>10}"


def part_two(sizes: Sequence[int], keep_schema: bool) -> None:
    print("\nPart 2: 50-turn window on PostgreSQL, end to end (project_window)")
    schema = f"bench_window_{uuid.uuid4().hex[:8]}"
    base = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_schema=schema,
        master_key=new_master_key(),
    )
    results: dict[int, tuple[float, float]] = {}
    try:
        for size in sizes:
            results[size] = postgres_row(base, size)
    finally:
        if not keep_schema:
            with psycopg.connect(
                base.postgres_conninfo(), autocommit=True
            ) as connection:
                connection.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(schema)
                    )
                )
    if len(results) >= 2:
        small, large = min(results), max(results)
        warm = results[large][1] / results[small][1]
        cold = results[large][0] / results[small][0]
        print(f"ratio {large:,} / {small:,} turns: warm {warm:.2f}x, cold {cold:.1f}x")


def postgres_row(base: Settings, size: int) -> tuple[float, float]:
    """(cold, warm) seconds for a conversation of `size` turns."""
    started = time.perf_counter()
    builder = open_conversations(base)
    conversation_id = build_conversation(builder, make_texts(size))
    builder.close()
    built = time.perf_counter() - started
    cold_s = first_call(base, lambda ledger: project(ledger, conversation_id))
    warm_ledger = open_conversations(base)
    try:
        project(warm_ledger, conversation_id)
        warm_s, _ = timed(lambda: project(warm_ledger, conversation_id), 50)
    finally:
        warm_ledger.close()
    print(
        f"{size:>8,} turns (built in {built:.0f} s): cold {cold_s * 1e3:.1f} ms, "
        f"warm {warm_s * 1e3:.2f} ms"
    )
    return cold_s, warm_s


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000]
    )
    parser.add_argument("--naive-max", type=int, default=10_000)
    parser.add_argument(
        "--postgres-sizes", type=int, nargs="+", default=[1_000, 100_000]
    )
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-naive", action="store_true", help="skip part 1")
    parser.add_argument("--keep-schema", action="store_true")
    arguments = parser.parse_args(argv)
    if not arguments.skip_naive:
        part_one(arguments.sizes, arguments.naive_max)
    if not arguments.skip_postgres:
        part_two(arguments.postgres_sizes, arguments.keep_schema)
    return 0


if __name__ == "__main__":
    sys.exit(main())
