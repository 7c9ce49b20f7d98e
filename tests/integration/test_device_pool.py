"""The device store's pool on PostgreSQL: a connection the server ended is
replaced before it is lent, though quiet connections are lent without a ping."""

from __future__ import annotations

import time

import psycopg
import pytest

from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres


def backends(settings: Settings) -> list[int]:
    """The backends serving the device store's pool now."""
    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = '' "
            "AND pid <> pg_backend_pid() AND datname = current_database() "
            "AND query LIKE %s",
            ("%devices%",),
        ).fetchall()
    return [int(row[0]) for row in rows]


def test_a_connection_the_server_ended_is_replaced_before_it_is_lent(
    postgres_settings: Settings,
) -> None:
    registry = open_device_registry(postgres_settings)
    try:
        token = registry.add("alice", "phone").token
        assert registry.authenticate(token).user_id == "alice"
        pooled = backends(postgres_settings)
        assert pooled, "the pool's connection was not found"
        with psycopg.connect(
            postgres_settings.postgres_conninfo(), autocommit=True
        ) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pooled[0],))
        time.sleep(0.2)  # the server's goodbye reaches the idle connection
        # Each pooled connection is lent in turn: the ended one is found out
        # and replaced, never used for a lookup (which would fail: a 503).
        for _ in range(len(pooled) + 1):
            assert registry.authenticate(token).user_id == "alice"
        assert pooled[0] not in backends(postgres_settings)
    finally:
        registry.close()
