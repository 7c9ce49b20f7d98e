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
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid

import psycopg

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
                    timed(f"VACUUM (FULL) {turns}_p07") for _ in range(3)
                )
                print(
                    f"{n} turns: whole table {whole * 1000:.0f} ms, one partition "
                    f"{part * 1000:.0f} ms, ratio {part / whole:.3f}"
                )
        finally:
            c.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main([int(n) for n in sys.argv[1:]] or [100_000])
