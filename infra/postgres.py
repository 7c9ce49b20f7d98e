"""PostgreSQL pieces outside the library: the schema, the recorder and the key store.

The pieces live in their own modules (docs/architecture.md): the key store
in `postgres_keys.py`, the recorder in `postgres_recorder.py` with its
queries (`postgres_read_queries.py`) and rarer row writes
(`postgres_row_writes.py`), and the SQL they share in `postgres_sql.py`.
This module keeps the names others import, and the factory the library is
told to use (`turnledger.infra.postgres:PostgresReadSideFactory`).
"""

from __future__ import annotations

import psycopg
from eventsourcing.postgres import PostgresFactory
from eventsourcing.utils import Environment, EnvType

from turnledger.infra.migrations.runner import ensure_schema as ensure_schema_on
from turnledger.infra.migrations.stores import KEY_PARTITIONS
from turnledger.infra.pool_check import use_quiet_check
from turnledger.infra.postgres_keys import KEY_COLUMNS, KEY_TABLE, PostgresKeyStore
from turnledger.infra.postgres_recorder import (
    PostgresReadSideRecorder,
    PostgresSnapshotRecorder,
)
from turnledger.infra.postgres_sql import (
    DEVICE_TABLE,
    as_bytes,
    in_one_statement,
    json_insert,
    json_rows,
    schema_channel,
    wake_payload,
    woken_owners,
)

__all__ = [
    "DEVICE_TABLE",
    "KEY_COLUMNS",
    "KEY_PARTITIONS",
    "KEY_TABLE",
    "PostgresKeyStore",
    "PostgresReadSideFactory",
    "PostgresReadSideRecorder",
    "as_bytes",
    "ensure_schema",
    "in_one_statement",
    "json_insert",
    "json_rows",
    "schema_channel",
    "wake_payload",
    "woken_owners",
]


def ensure_schema(conninfo: str, schema: str) -> None:
    """Create the schema the event store and key store live in."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        ensure_schema_on(connection, schema)


class PostgresReadSideFactory(PostgresFactory):
    application_recorder_class = PostgresReadSideRecorder
    aggregate_recorder_class = PostgresSnapshotRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        # Connections broken by an outage are replaced, not handed out, with
        # no round trip before a transaction on a connection that is quiet.
        use_quiet_check(
            self.datastore,
            target_session_attrs=self.env.get("POSTGRES_TARGET_SESSION_ATTRS", "any"),
            options=self.env.get("POSTGRES_SESSION_OPTIONS"),
            wait_seconds=_seconds(self.env.get("POSTGRES_POOL_WAIT_SECONDS")),
        )

    def application_recorder(self) -> PostgresReadSideRecorder:
        recorder = super().application_recorder()
        assert isinstance(recorder, PostgresReadSideRecorder)
        if not self.env_create_table():  # read-only: nothing is migrated
            recorder.check_schema_version()
        return recorder


def _seconds(value: str | None) -> float | None:
    return None if not value else float(value)
