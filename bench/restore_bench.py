"""The restore check at start-up, with 100,000 destroyed keys.

    .venv/bin/python bench/restore_bench.py [--keys 100000] [--runs 5]
        [--stores sqlite,postgres]

For each store, in a fresh SQLite directory or PostgreSQL schema: the store's
list of destroyed keys and the deletion record are filled with --keys ids, one
deletion each (the worst case for the record: one line, one hash per key), in
1,000 conversations. Then, each a median of --runs:

- `check`: the restore check alone on an open store (read and verify the
  whole record, read the store's list, compare);
- `open`: `open_conversations` and `close` with those keys;
- `baseline`: the same opening of a store and record with no deletions, in
  the same run.

Last, once: a store restored from before 1,000 of those deletions (their ids
removed from the store's list) is checked and repaired (`repair`).

Each figure is given as wall time and as this process's CPU time: on a shared
machine the wall time mostly measures the other processes (on PostgreSQL the
CPU time leaves out the server's share).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turnledger.infra.persistence import open_conversations  # noqa: E402
from turnledger.infra.restore import check_restore, deletion_record  # noqa: E402
from turnledger.infra.settings import Settings  # noqa: E402
from turnledger.infra.sqlite import SQLiteKeyStore  # noqa: E402
from turnledger.infra.vault import new_master_key  # noqa: E402

CONVERSATIONS = 1_000
RESTORED_BEHIND = 1_000


def _ids(keys: int) -> list[tuple[uuid.UUID, str]]:
    conversations = [uuid.uuid4() for _ in range(CONVERSATIONS)]
    return [(conversations[i % CONVERSATIONS], f"turn-{i:06d}") for i in range(keys)]


def _settings(store: str, root: Path) -> tuple[Settings, Callable[[], None]]:
    record_dir = root / "records"
    if store == "sqlite":
        settings = Settings(
            _env_file=None,
            persistence="sqlite",
            data_dir=root / "data",
            deletion_record_dir=record_dir,
        )
        return settings, lambda: None
    schema = f"restore_bench_{uuid.uuid4().hex[:8]}"
    settings = Settings(
        persistence="postgres",
        postgres_schema=schema,
        master_key=new_master_key(),
        deletion_record_dir=record_dir,
    )
    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))

    def drop() -> None:
        with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as c:
            c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))

    return settings, drop


def _fill_store(settings: Settings, ids: list[tuple[uuid.UUID, str]]) -> None:
    """The destroyed keys' ids, written as the purge leaves them."""
    if settings.persistence == "sqlite":
        keys = SQLiteKeyStore(settings.sqlite_keys_path)
        connection = keys._connection  # the bench writes the rows in bulk
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO destroyed_turn_keys VALUES (?, ?)",
            ((c.hex, t) for c, t in ids),
        )
        connection.execute("COMMIT")
        keys.close()
        return
    table = sql.Identifier(settings.postgres_schema, "destroyed_turn_keys")
    copy_sql = sql.SQL("COPY {} (conversation_id, turn_id) FROM STDIN").format(table)
    with (
        psycopg.connect(settings.postgres_conninfo()) as connection,
        connection.cursor().copy(copy_sql) as copy,
    ):
        for conversation_id, turn_id in ids:
            copy.write_row((conversation_id, turn_id))


def _unfill_store(settings: Settings, ids: list[tuple[uuid.UUID, str]]) -> None:
    """Remove ids from the store's list: a store restored from before them."""
    if settings.persistence == "sqlite":
        keys = SQLiteKeyStore(settings.sqlite_keys_path)
        keys._connection.executemany(
            "DELETE FROM destroyed_turn_keys WHERE conversation_id = ? AND turn_id = ?",
            ((c.hex, t) for c, t in ids),
        )
        keys.close()
        return
    table = sql.Identifier(settings.postgres_schema, "destroyed_turn_keys")
    with psycopg.connect(settings.postgres_conninfo()) as connection:
        connection.cursor().executemany(
            sql.SQL(
                "DELETE FROM {} WHERE conversation_id = %s AND turn_id = %s"
            ).format(table),
            ids,
        )


Figure = tuple[float, float]  # wall seconds, CPU seconds of this process


def _median(runs: int, action: Callable[[], object]) -> Figure:
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _open_and_close(settings: Settings) -> None:
    open_conversations(settings).close()


_REPORTS: list[int] = []


def _reopen(settings: Settings) -> None:
    ledger = open_conversations(settings)
    report = ledger.restore_report
    ledger.close()
    _REPORTS.append(report.deletions_behind if report else -1)


def bench_store(store: str, keys: int, runs: int) -> dict[str, Figure]:
    with tempfile.TemporaryDirectory() as directory:
        settings, drop = _settings(store, Path(directory))
        try:
            _open_and_close(settings)  # creates the store and its empty record
            baseline = _median(runs, lambda: _open_and_close(settings))
            ids = _ids(keys)
            ledger = open_conversations(settings)
            store_keys = ledger.vault.purge_view
            record = deletion_record(settings.deletion_record_directory, store_keys)  # type: ignore[arg-type]
            record.remember_many([(c, [t], 0) for c, t in ids])
            _fill_store(settings, ids)
            check = _median(
                runs,
                lambda: check_restore(ledger, store_keys, record, apply=True),  # type: ignore[arg-type]
            )
            ledger.close()
            opened = _median(runs, lambda: _open_and_close(settings))
            _unfill_store(settings, ids[:RESTORED_BEHIND])
            repair = _median(1, lambda: _reopen(settings))
            assert _REPORTS[-1] == RESTORED_BEHIND
        finally:
            drop()
    return {"baseline": baseline, "check": check, "open": opened, "repair": repair}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--stores", default="sqlite,postgres")
    arguments = parser.parse_args()
    print(f"{arguments.keys} destroyed keys, median of {arguments.runs} runs")
    print("seconds, wall / CPU of this process")
    print(
        f"{'store':<9} {'baseline open':>15} {'check':>15} {'open':>15}"
        f" {'open/baseline':>14} {'repair 1,000':>15}"
    )
    for store in arguments.stores.split(","):
        f = bench_store(store, arguments.keys, arguments.runs)
        ratio = f["open"][0] / f["baseline"][0]
        cells = [
            f"{f[k][0]:.3f} / {f[k][1]:.3f}" for k in ("baseline", "check", "open")
        ]
        print(
            f"{store:<9} {cells[0]:>15} {cells[1]:>15} {cells[2]:>15} {ratio:>13.1f}x"
            f" {f['repair'][0]:>6.3f} / {f['repair'][1]:.3f}"
        )


if __name__ == "__main__":
    main()
