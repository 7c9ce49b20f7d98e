"""On PostgreSQL a batch of new turns is one statement (docs/read-side.md).

Counted at psycopg's cursor: every statement the ledger sends while it
confirms a turn, but for the pool's own check of a connection (an empty
query) and the once-per-connection logging settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counting(self: psycopg.Cursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(query, bytes):
            text = query.decode()
        elif isinstance(query, str):
            text = query
        else:
            text = query.as_string(self)
        if text.strip() and not text.startswith("SELECT set_config('log_parameter"):
            sent.append(text)
        return execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    yield sent


def test_a_new_turn_is_written_in_one_statement(
    postgres_settings: Settings, statements: list[str]
) -> None:
    ledger = open_conversations(postgres_settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        ledger.confirm_turn(
            "alice", conversation_id, turn_id="t0", question="q", answer="a"
        )
        statements.clear()
        ledger.confirm_turn(
            "alice", conversation_id, turn_id="t1", question="q1", answer="a1"
        )
        assert len(statements) == 1, statements
        assert "turnledger_write_batch_v1" in statements[0]
        assert ledger.get_conversation("alice", conversation_id).turn_count == 2
    finally:
        ledger.close()


def test_a_deletion_takes_the_transaction_of_several_messages(
    postgres_settings: Settings, statements: list[str]
) -> None:
    ledger = open_conversations(postgres_settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        ledger.confirm_turn(
            "alice", conversation_id, turn_id="t0", question="q", answer="a"
        )
        statements.clear()
        ledger.delete_history("alice", conversation_id, turn_ids=["t0"])
        assert any(text.startswith("BEGIN") for text in statements), statements
        assert not any("turnledger_write_batch_v1" in text for text in statements)
        assert ledger.get_history("alice", conversation_id).items[0].deleted
    finally:
        ledger.close()
