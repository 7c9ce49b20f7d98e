"""Every snapshot the first release wrote is compared, wherever its version sits.

The DBA copies a snapshot of a 0.1 store to a version beyond the
conversation's head: no event replays to it, and the audit must say so
rather than skip it.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from tests.integration import test_upgrade_from_0_1 as upgrade
from turnledger.domain.findings import SNAPSHOT_MISMATCH
from turnledger.infra.persistence import open_conversations
from turnledger.infra.raw_log import SNAPSHOTS_TABLE
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings

old_store = upgrade.old_store  # the fixture: a copy of the 0.1 store


def copy_snapshot(
    settings: Settings, conversation: UUID, version: int, to: int
) -> None:
    if settings.persistence == "sqlite":
        import sqlite3

        with sqlite3.connect(settings.sqlite_events_path) as connection:
            connection.execute(
                "INSERT INTO stored_snapshots SELECT originator_id, ?, topic, state "
                "FROM stored_snapshots WHERE originator_id = ? "
                "AND originator_version = ?",
                (to, conversation.hex, version),
            )
        connection.close()
        return
    table = sql.Identifier(settings.postgres_schema, SNAPSHOTS_TABLE)
    with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as connection:
        connection.execute(
            sql.SQL(
                "INSERT INTO {} SELECT originator_id, %s, topic, state FROM {} "
                "WHERE originator_id = %s AND originator_version = %s"
            ).format(table, table),
            (to, conversation, version),
        )


def test_a_snapshot_beyond_the_head_is_reported(
    old_store: tuple[Settings, Any],
) -> None:
    settings, expected = old_store
    alice = UUID(expected["alice_conversation"])
    head = expected["alice_version"]
    copy_snapshot(settings, alice, head, head + 4)
    ledger = open_conversations(settings)
    try:
        report = Auditor(ledger).audit()
    finally:
        ledger.close()
    assert not report.ok
    found = {(f.kind, f.conversation_id, f.version) for f in report.failures}
    assert found == {(SNAPSHOT_MISMATCH, alice, head + 4)}, report.failures
