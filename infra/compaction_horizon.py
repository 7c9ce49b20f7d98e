"""The horizon of a key compaction (infra/compaction.py, step 1): who may
still see the rows a deletion removed, so VACUUM FULL would keep them."""

from __future__ import annotations

import time
from typing import Any

import psycopg

# Who may still see rows deleted by transaction %(xid)s, so VACUUM FULL must
# keep them: sessions of this database whose snapshot or xid is not newer;
# sessions of any database holding an older xid (every snapshot taken now,
# VACUUM's own included, treats that xid as running); prepared transactions;
# standbys' hot_standby_feedback; replication slots. backend_xid and
# backend_xmin are shown to every role. The rewrite's own report catches
# anything this misses.
OLDER_TRANSACTIONS = """
SELECT format('session %%s in database %%s (%%s, since %%s)', pid,
              coalesce(datname, '-'), coalesce(state, '-'),
              coalesce(xact_start::text, '-'))
FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
  AND (age(backend_xid) >= age(xid(%(xid)s::xid8))
       OR (datname = current_database()
           AND age(backend_xmin) >= age(xid(%(xid)s::xid8))))
UNION ALL
SELECT format('prepared transaction %%s in database %%s', gid, database)
FROM pg_prepared_xacts WHERE age(transaction) >= age(xid(%(xid)s::xid8))
UNION ALL
SELECT format('standby %%s (hot_standby_feedback)',
              coalesce(application_name, pid::text))
FROM pg_stat_replication WHERE age(backend_xmin) >= age(xid(%(xid)s::xid8))
UNION ALL
SELECT format('replication slot %%s', slot_name) FROM pg_replication_slots
WHERE greatest(coalesce(age(xmin), 0), coalesce(age(catalog_xmin), 0))
      >= age(xid(%(xid)s::xid8))
"""


def wait_for_horizon(
    connection: psycopg.Connection[Any],
    destroyed_xid: object,
    *,
    timeout_seconds: float,
) -> list[str]:
    """Wait until nothing older than `destroyed_xid` runs; else who still does."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        holders = [
            str(row[0])
            for row in connection.execute(
                OLDER_TRANSACTIONS, {"xid": destroyed_xid}
            ).fetchall()
        ]
        if not holders or time.monotonic() >= deadline:
            return holders
        time.sleep(0.05)
