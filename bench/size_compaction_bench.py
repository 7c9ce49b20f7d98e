"""The read side's share of a deletion's compaction on PostgreSQL.

    .venv/bin/python bench/size_compaction_bench.py 100000 1000000

A deletion's compaction rewrites (VACUUM FULL) the read side's turn rows
whose dead versions hold the erased sizes: the partition that holds the
deleted conversation (one of 32, as the key table), not the whole table.
For each number of turns, in a fresh schema (dropped afterwards) on the
server of TURNLEDGER_POSTGRES_*: the rows are inserted with SQL, then the
median of 3 rewrites of the whole table (what an unpartitioned table costs:
the baseline) and of 3 rewrites of one partition, and their ratio.
Reads and writes of the rows being rewritten wait for it.

Then what partitioning costs the rows' ordinary reads and writes, against an
unpartitioned table with the same columns and keys in the same schema
(100,000 rows each beforehand): the median of 300 transactions inserting 64
turn rows each (as a batch of the group committer does), alternating between
the two, and of 300 reads of one conversation's rows.

Last, the one-time upgrade: migration step 5 of the ledger run on an
unpartitioned turn table of the largest number of turns (its time at the
first opening of a store written before it).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from typing import Any

import psycopg

from turnledger.infra.migrations.ledger import PARTITIONED_READ_SIDE, POSTGRES_STEPS
from turnledger.infra.migrations.runner import StoreNames
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.infra.vault import new_master_key


def main(counts: list[int]) -> None:
    schema = "bench_sizes_" + uuid.uuid4().hex[:8]
    settings = Settings(
        persistence="postgres", postgres_schema=schema, master_key=new_master_key()
    )
    open_conversations(settings).close()
    turns = f"{schema}.conversation_turns"
    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as c:

        def timed(statement: str) -> float:
            start = time.perf_counter()
            c.execute(statement)
            return time.perf_counter() - start

        try:
            for n in counts:
                c.execute(f"TRUNCATE {turns}")
                c.execute(
                    f"INSERT INTO {turns} (conversation_id, recorded_at, position, "
                    "version, question_json_bytes, answer_json_bytes, "
                    "question_chars, answer_chars, status, turn_id) "
                    "SELECT md5((i / 100)::text)::uuid, now(), i % 100, i % 100 + 2, "
                    "600, 300, 598, 298, 'c', 't' || (i % 100) "
                    f"FROM generate_series(0, {n} - 1) i"
                )
                whole = statistics.median(
                    timed(f"VACUUM (FULL) {turns}") for _ in range(3)
                )
                part = statistics.median(
                    timed(f"VACUUM (FULL) {turns}_p7") for _ in range(3)
                )
                print(
                    f"{n} turns: whole table {whole * 1000:.0f} ms, one partition "
                    f"{part * 1000:.0f} ms, ratio {part / whole:.3f}"
                )
            ordinary_costs(c, schema)
            upgrade_cost(c, schema, max(counts))
        finally:
            c.execute(f"DROP SCHEMA {schema} CASCADE")


def _median_ms(c: psycopg.Connection[Any], statement: str, params: Any) -> float:
    times = []
    for args in params:
        start = time.perf_counter()
        with c.transaction():
            cursor = c.execute(statement, args)
            if cursor.description:
                cursor.fetchall()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def ordinary_costs(c: psycopg.Connection[Any], schema: str) -> None:
    columns, keys = PARTITIONED_READ_SIDE["conversation_turns"]
    plain = f"{schema}.plain_turns"
    turns = f"{schema}.conversation_turns"
    c.execute(
        f"CREATE TABLE {plain} ({', '.join(columns)}, "
        f"{keys.replace('conversation_turns_', 'plain_turns_')})"
    )
    for table in (plain, turns):
        c.execute(f"TRUNCATE {table}")
        c.execute(
            f"INSERT INTO {table} (conversation_id, recorded_at, position, version, "
            "status, turn_id) SELECT md5((i / 10)::text)::uuid, now(), i % 10, 1, "
            "'c', 't' || (i % 10) FROM generate_series(0, 99999) i"
        )
    batches = [
        (
            json.dumps(
                [
                    {
                        "conversation_id": str(uuid.uuid4()),
                        "recorded_at": "2026-01-01T00:00:00+00:00",
                        "position": 0,
                        "version": 2,
                        "question_json_bytes": 10,
                        "answer_json_bytes": 10,
                        "question_chars": 8,
                        "answer_chars": 8,
                        "status": "c",
                        "turn_id": "t0",
                    }
                    for _ in range(64)
                ]
            ),
        )
        for _ in range(300)
    ]
    insert = (
        "INSERT INTO {t} SELECT * FROM json_populate_recordset(NULL::{t}, %s::json)"
    )
    select = (
        "SELECT * FROM {t} WHERE conversation_id = md5(%s::text)::uuid "
        "ORDER BY position"
    )
    reads = [(str(i),) for i in range(300)]
    figures: dict[str, list[float]] = {plain: [0, 0], turns: [0, 0]}
    for half in (0, 1):  # alternating halves, so load changes hit both
        for table in (plain, turns) if half else (turns, plain):
            part = batches[half * 150 : (half + 1) * 150]
            figures[table][0] += _median_ms(c, insert.format(t=table), part) / 2
            figures[table][1] += _median_ms(c, select.format(t=table), reads) / 2
    (pi, ps), (qi, qs) = figures[plain], figures[turns]
    print(
        f"64-row insert transaction: unpartitioned {pi:.2f} ms, partitioned "
        f"{qi:.2f} ms, ratio {qi / pi:.2f}; one conversation's rows: "
        f"{ps:.3f} ms, {qs:.3f} ms, ratio {qs / ps:.2f}"
    )


def upgrade_cost(c: psycopg.Connection[Any], schema: str, n: int) -> None:
    names = StoreNames(schema=schema)
    c.execute(f"DROP TABLE {schema}.conversation_turns, {schema}.conversation_folds")
    cursor = c.cursor()
    for step in POSTGRES_STEPS[:2]:  # the read side's tables, unpartitioned
        step.apply(cursor, names)
    c.execute(
        f"INSERT INTO {schema}.conversation_turns (conversation_id, recorded_at, "
        "position, version, question_json_bytes, answer_json_bytes, "
        "question_chars, answer_chars, status, turn_id) "
        "SELECT md5((i / 100)::text)::uuid, now(), i % 100, i % 100 + 2, "
        "600, 300, 598, 298, 'c', 't' || (i % 100) "
        f"FROM generate_series(0, {n} - 1) i"
    )
    start = time.perf_counter()
    with c.transaction():
        POSTGRES_STEPS[4].apply(c.cursor(), names)  # step 5
    print(f"step 5 on {n} turn rows: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main([int(n) for n in sys.argv[1:]] or [100_000])
