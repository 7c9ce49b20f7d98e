"""The ledger's pools on PostgreSQL lend no connection the server ended.

Their check (infra/pool_check.py) pings only a connection on which something
has arrived: a quiet one is lent without a round trip (counted in
test_write_round_trips.py), one the server ended is found out and replaced.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres


def test_a_connection_the_server_ended_is_replaced_before_a_write_uses_it(
    postgres_settings: Settings, statements: list[str]
) -> None:
    ledger: Conversations = open_conversations(postgres_settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        ledger.confirm_turn(
            "alice", conversation_id, turn_id="t0", question="q", answer="a"
        )
        datastore = ledger.recorder.datastore
        with datastore.get_connection() as connection:
            ended = connection.info.backend_pid
        with psycopg.connect(
            postgres_settings.postgres_conninfo(), autocommit=True
        ) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (ended,))
        time.sleep(0.2)  # the server's goodbye reaches the idle connection
        statements.clear()
        # The pool lends its connections in turn: within one more write than
        # it holds, the ended one comes up, is found out and replaced.
        writes = 0
        while datastore.pool.get_stats().get("connections_lost", 0) == 0:
            assert writes <= datastore.pool.max_size, "the ended one never came up"
            writes += 1
            ledger.confirm_turn(
                "alice", conversation_id, turn_id=f"t{writes}", question="q", answer="a"
            )
        # Sent on the dead connection, a write would fail and be sent again
        # by the library's retry on another: more calls than writes.
        calls = [s for s in statements if "turnledger_write_batch_v3" in s]
        assert len(calls) == writes, statements
        history = ledger.get_history("alice", conversation_id)
        assert [item.turn_id for item in history.items] == [
            f"t{k}" for k in range(writes + 1)
        ]
    finally:
        ledger.close()
