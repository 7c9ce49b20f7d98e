"""Deleting 10,000 turns on PostgreSQL: HistoryDeleted plus the purge.

    .venv/bin/python bench/purge_bench.py [--turns 10000] [--other-keys 0] [--runs 3]

Each run builds, in a fresh schema, one conversation of --turns confirmed turns
(plus --other-keys keys of other conversations in the key table), then times
`delete_history` of the whole history: load, record one HistoryDeleted naming
every turn, and the purge (destroy the keys with the tracked position, VACUUM
FULL of the touched key partition, switch the WAL past the segments that held
the keys and start the CHECKPOINT that removes them, waiting for it 0.2 s at
most). Beside it, the time from the same start until the purge reports
nothing left (the CHECKPOINT done and pg_wal verified), polling the purge.
The baseline, in the same run, is a raw psycopg DELETE of the same number of
rows from a plain table of the same shape, with its COMMIT. Prints medians
and the ratio.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turnledger.infra.persistence import open_conversations  # noqa: E402
from turnledger.infra.settings import Settings  # noqa: E402
from turnledger.infra.vault import new_master_key  # noqa: E402

OWNER = "bench-owner"
SAVE_BATCH = 500
GONE_TIMEOUT_SECONDS = 120


def build_conversation(settings: Settings, turns: int, other_keys: int) -> uuid.UUID:
    """Write the conversation through the public bulk import (group commit),
    then add unrelated keys to the key table."""
    ledger = open_conversations(settings)
    try:
        conversation_id = ledger.start_conversation(OWNER)
        for start in range(0, turns, SAVE_BATCH):
            ledger.confirm_turns(
                OWNER,
                conversation_id,
                [
                    (f"turn-{index:05d}", "q" * 38, "a" * 38)
                    for index in range(start, min(turns, start + SAVE_BATCH))
                ],
            )
    finally:
        ledger.close()
    with (
        psycopg.connect(settings.postgres_conninfo()) as connection,
        connection.cursor() as cursor,
    ):
        table = sql.Identifier(settings.postgres_schema, "turn_keys")
        if other_keys:
            cursor.execute(
                sql.SQL(
                    "INSERT INTO {} SELECT gen_random_uuid(), 't', "
                    "decode(md5(g::text) || md5(random()::text), 'hex') "
                    "FROM generate_series(1, %s) g"
                ).format(table),
                (other_keys,),
            )
    return conversation_id


def time_ledger_delete(
    settings: Settings, conversation_id: uuid.UUID
) -> tuple[float, float, float]:
    ledger = open_conversations(settings)
    try:
        ledger.get_conversation(OWNER, conversation_id)  # warm the pool
        purge_seconds = 0.0
        original = ledger.purge_deleted_history

        def timed_purge():  # type: ignore[no-untyped-def]
            nonlocal purge_seconds
            started = time.perf_counter()
            try:
                return original()
            finally:
                purge_seconds = time.perf_counter() - started

        ledger.purge_deleted_history = timed_purge  # type: ignore[method-assign]
        started = time.perf_counter()
        receipt = ledger.delete_history(OWNER, conversation_id)
        total = time.perf_counter() - started
        assert receipt.purge is not None
        assert receipt.purge.keys_destroyed == len(receipt.deleted_turn_ids)
        # Until nothing is left: key rows rewritten out of their partition and
        # the WAL segments that held them removed, as the purge verifies.
        report = receipt.purge
        while report.compaction_pending:
            if time.perf_counter() - started > GONE_TIMEOUT_SECONDS:
                raise SystemExit(f"still pending: {report.state}")
            if not any("CHECKPOINT" in reason for reason in report.pending_reasons):
                print(f"  ({report.state})")
                time.sleep(0.05)
            report = ledger.purge_deleted_history()
        gone = time.perf_counter() - started
    finally:
        ledger.close()
    return total, purge_seconds, gone


def time_raw_delete(conninfo: str, schema: str, rows: int) -> float:
    table = sql.Identifier(schema, "baseline_keys")
    conversation_id = uuid.uuid4()
    turn_ids = [f"turn-{index:05d}" for index in range(rows)]
    with psycopg.connect(conninfo) as connection:
        connection.execute(
            sql.SQL(
                "CREATE TABLE {} (conversation_id uuid, turn_id text,"
                " wrapped_key bytea, PRIMARY KEY (conversation_id, turn_id))"
            ).format(table)
        )
        connection.execute(
            sql.SQL(
                "INSERT INTO {} SELECT %s, 'turn-' || lpad(g::text, 5, '0'), "
                "decode(md5(g::text) || md5(random()::text), 'hex') "
                "FROM generate_series(0, %s) g"
            ).format(table),
            (conversation_id, rows - 1),
        )
        connection.commit()
        started = time.perf_counter()
        deleted = connection.execute(
            sql.SQL(
                "DELETE FROM {} WHERE conversation_id = %s AND turn_id = ANY(%s)"
            ).format(table),
            (conversation_id, turn_ids),
        ).rowcount
        connection.commit()
        elapsed = time.perf_counter() - started
    assert deleted == rows
    return elapsed


def time_whole_table_vacuum(conninfo: str, schema: str) -> tuple[float, float]:
    """VACUUM FULL of one key partition vs. of an unpartitioned copy of the table."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        copy = sql.Identifier(schema, "unpartitioned_keys")
        connection.execute(
            sql.SQL("CREATE TABLE {} AS SELECT * FROM {}").format(
                copy, sql.Identifier(schema, "turn_keys")
            )
        )
        connection.execute(
            sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (conversation_id, turn_id)").format(
                copy
            )
        )
        started = time.perf_counter()
        connection.execute(
            sql.SQL("VACUUM FULL {}").format(sql.Identifier(schema, "turn_keys_p00"))
        )
        partition = time.perf_counter() - started
        started = time.perf_counter()
        connection.execute(sql.SQL("VACUUM FULL {}").format(copy))
        whole = time.perf_counter() - started
    return partition, whole


def main() -> int:
    # `kill -USR1 <pid>` prints every thread's stack if a run ever hangs.
    faulthandler.register(signal.SIGUSR1)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--other-keys", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args()

    totals, purges, gones, baselines, vacuums = [], [], [], [], []
    for run in range(arguments.runs):
        schema = f"bench_purge_{uuid.uuid4().hex[:8]}"
        settings = Settings(
            _env_file=None,
            persistence="postgres",
            postgres_schema=schema,
            master_key=new_master_key(),
        )
        conninfo = settings.postgres_conninfo()
        try:
            conversation_id = build_conversation(
                settings, arguments.turns, arguments.other_keys
            )
            total, purge, gone = time_ledger_delete(settings, conversation_id)
            baseline = time_raw_delete(conninfo, schema, arguments.turns)
            if arguments.other_keys:
                vacuums.append(time_whole_table_vacuum(conninfo, schema))
        finally:
            with psycopg.connect(conninfo, autocommit=True) as connection:
                connection.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(schema)
                    )
                )
        totals.append(total)
        purges.append(purge)
        gones.append(gone)
        baselines.append(baseline)
        print(
            f"run {run + 1}: delete_history {total * 1000:.0f} ms "
            f"(purge {purge * 1000:.0f} ms), nothing left after {gone * 1000:.0f} ms, "
            f"raw DELETE {baseline * 1000:.1f} ms",
            flush=True,
        )

    total, purge, baseline = (
        statistics.median(totals),
        statistics.median(purges),
        statistics.median(baselines),
    )
    print(
        f"\n{arguments.turns} turns, {arguments.other_keys} other keys in the key table"
    )
    print(f"delete_history (event + purge): {total * 1000:.0f} ms median")
    print(f"  of which the purge:           {purge * 1000:.0f} ms median")
    gone = statistics.median(gones)
    print(f"nothing left (files and WAL):   {gone * 1000:.0f} ms median")
    print(f"raw psycopg DELETE + COMMIT:    {baseline * 1000:.1f} ms median")
    print(f"ratio ledger / raw DELETE:      {total / baseline:.1f}x")
    if vacuums:
        partition = statistics.median(v[0] for v in vacuums)
        whole = statistics.median(v[1] for v in vacuums)
        print(f"VACUUM FULL one key partition:  {partition * 1000:.0f} ms median")
        print(f"VACUUM FULL unpartitioned copy: {whole * 1000:.0f} ms median")
    print("under one second:", "yes" if total < 1.0 else "NO")
    return 0 if total < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
