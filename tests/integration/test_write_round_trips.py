"""On PostgreSQL a batch of new turns is one statement (docs/read-side.md).

Counted at psycopg's cursor: every statement the ledger sends while it
confirms a turn, the pool's check of the connection it lends included (the
full check is an empty query), but for the once-per-connection logging
settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

import pytest

from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.postgres


@pytest.fixture
def ledger_with_a_turn(
    postgres_settings: Settings,
) -> Iterator[tuple[Conversations, UUID]]:
    """A ledger whose conversation holds one turn: its connections are warm."""
    ledger = open_conversations(postgres_settings)
    try:
        conversation_id = ledger.start_conversation("alice")
        ledger.confirm_turn(
            "alice", conversation_id, turn_id="t0", question="q", answer="a"
        )
        yield ledger, conversation_id
    finally:
        ledger.close()


def test_a_new_turn_is_written_in_one_statement(
    ledger_with_a_turn: tuple[Conversations, UUID], statements: list[str]
) -> None:
    ledger, conversation_id = ledger_with_a_turn
    statements.clear()
    ledger.confirm_turn(
        "alice", conversation_id, turn_id="t1", question="q1", answer="a1"
    )
    assert len(statements) == 1, statements
    assert "turnledger_write_batch_v3" in statements[0]
    assert ledger.get_conversation("alice", conversation_id).turn_count == 2


def test_a_deletion_takes_the_transaction_of_several_messages(
    ledger_with_a_turn: tuple[Conversations, UUID], statements: list[str]
) -> None:
    ledger, conversation_id = ledger_with_a_turn
    statements.clear()
    ledger.delete_history("alice", conversation_id, turn_ids=["t0"])
    assert any(text.startswith("BEGIN") for text in statements), statements
    assert not any("turnledger_write_batch_v3" in text for text in statements)
    assert ledger.get_history("alice", conversation_id).items[0].deleted
