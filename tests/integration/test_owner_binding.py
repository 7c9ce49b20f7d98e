"""Ownership is bound where the text is opened, not decided by the read side.

New seals (version 3) bind the conversation id and its owner in the AEAD
associated data; older seals are opened only when the conversation's chained
Started event names the reader. A database administrator who rewrites the
read side's owner, or copies a sealed event (and its key row) into another
user's conversation, gets a located refusal, never the text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from tests.conftest import durable_stores
from tests.integration.tamper import RawEvents
from turnledger.domain.errors import SealMismatchError
from turnledger.infra.http.app import create_app
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import ConversationFeed
from turnledger.infra.settings import Settings
from turnledger.infra.vault import KeyVault

ALICE, MALLORY = "alice", "mallory"
SECRET = "alice's secret plan"


@pytest.fixture
def raw(settings: Settings) -> Iterator[RawEvents]:
    events = RawEvents(settings)
    yield events
    events.close()


def _key(raw: RawEvents, conversation_id: UUID) -> Any:
    return conversation_id.hex if raw.kind == "sqlite" else conversation_id


def _write(ledger: Conversations, owner: str, text: str) -> UUID:
    conversation_id = ledger.start_conversation(owner)
    for turn_id in ("t1", "t2"):
        ledger.confirm_turn(
            owner,
            conversation_id,
            turn_id=turn_id,
            question=f"{text} {turn_id}",
            answer="noted",
        )
    return conversation_id


def _give_to_mallory(raw: RawEvents, conversation_id: UUID) -> None:
    raw.edit_read_side(
        "UPDATE HEADS SET owner_id = %s WHERE conversation_id = %s",
        (MALLORY, _key(raw, conversation_id)),
    )


def _refused(ledger: Conversations, conversation_id: UUID) -> None:
    """Mallory, whom the read side now names, reads nothing of it."""
    with pytest.raises(SealMismatchError) as raised:
        ledger.get_history(MALLORY, conversation_id)
    assert raised.value.conversation_id == conversation_id
    assert raised.value.turn_id == "t1"
    with pytest.raises(SealMismatchError):
        ledger.project_window(
            MALLORY,
            conversation_id,
            question="q",
            system="",
            model="m",
            max_bytes=10_000,
        )


@durable_stores
def test_a_rewritten_owner_row_yields_a_refusal_never_plaintext(
    ledger: Conversations, settings: Settings, raw: RawEvents
) -> None:
    conversation_id = _write(ledger, ALICE, SECRET)
    items = ledger.get_history(ALICE, conversation_id).items
    assert [item.question for item in items] == [f"{SECRET} t1", f"{SECRET} t2"]
    _give_to_mallory(raw, conversation_id)
    _refused(ledger, conversation_id)

    app = create_app(settings)
    with TestClient(app) as http:
        token = app.state.service.registry.add(MALLORY, "phone").token
        auth = {"Authorization": f"Bearer {token}"}
        for response in (
            http.get(f"/v1/conversations/{conversation_id}/turns", headers=auth),
            http.post(
                f"/v1/conversations/{conversation_id}/window",
                headers=auth,
                json={"question": "q", "system": "", "model": "m", "max_bytes": 9000},
            ),
        ):
            assert response.status_code == 410, response.text
            assert response.json()["error"]["code"] == "seal_mismatch"
            assert SECRET not in response.text


@durable_stores
def test_turns_sealed_before_owners_were_bound_are_checked_against_started(
    ledger: Conversations,
    settings: Settings,
    raw: RawEvents,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seal as releases before did: version 2, no owner in the associated data.
    def unbound_seal(
        self: KeyVault,
        data_key: bytes,
        conversation_id: UUID,
        turn_id: str,
        field: str,
        text: str,
        *,
        owner_id: str,
    ) -> bytes:
        return b"\x02" + self._encrypt(
            data_key,
            text,
            b"turnledger/text/v1|"
            + conversation_id.bytes
            + f"|{turn_id}|{field}".encode(),
        )

    with monkeypatch.context() as patched:
        patched.setattr(KeyVault, "seal_with", unbound_seal)
        conversation_id = _write(ledger, ALICE, SECRET)
    events = list(ledger.events.get(conversation_id))
    assert events[1].sealed_question[:1] == b"\x02"
    # Still readable by its owner, through every read path.
    assert ledger.get_history(ALICE, conversation_id).items[0].question == (
        f"{SECRET} t1"
    )
    _give_to_mallory(raw, conversation_id)
    _refused(ledger, conversation_id)
    # The sync feed too, with the owner index rewritten to hand them over.
    feed_table = (
        "owner_feed"
        if raw.kind == "sqlite"
        else f"{settings.postgres_schema}.owner_feed"
    )
    raw.edit_read_side(
        f"UPDATE {feed_table} SET owner_id = %s WHERE owner_id = %s", (MALLORY, ALICE)
    )
    with pytest.raises(SealMismatchError):
        ConversationFeed(ledger).changes_since(MALLORY, 0)


@durable_stores
def test_a_sealed_row_copied_into_another_users_conversation_does_not_open(
    ledger: Conversations, settings: Settings, raw: RawEvents
) -> None:
    alices = _write(ledger, ALICE, SECRET)
    mallorys = _write(ledger, MALLORY, "mallory's own")
    # The DBA copies Alice's t1 event over Mallory's t1, and Alice's key row
    # too (key wrapping binds no turn, so the copied key unwraps).
    raw.move(alices, 2, mallorys, 2)
    store: Any = ledger.vault.purge_view
    (alice_key,) = store.get_many(alices, ["t1"]).values()
    if raw.kind == "sqlite":
        import sqlite3

        with sqlite3.connect(settings.sqlite_keys_path) as connection:
            connection.execute(
                "UPDATE turn_keys SET wrapped_key = ? "
                "WHERE conversation_id = ? AND turn_id = 't1'",
                (alice_key, mallorys.hex),
            )
    else:
        import psycopg
        from psycopg import sql

        with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET wrapped_key = %s "
                    "WHERE conversation_id = %s AND turn_id = 't1'"
                ).format(sql.Identifier(settings.postgres_schema, "turn_keys")),
                (alice_key, mallorys),
            )
    with pytest.raises(SealMismatchError) as raised:
        ledger.get_history(MALLORY, mallorys)
    assert (raised.value.conversation_id, raised.value.turn_id) == (mallorys, "t1")
    assert raised.value.field == "question"
    assert SECRET not in str(raised.value)
