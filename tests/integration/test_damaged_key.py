"""A damaged key loses its own turn, located; never the conversation.

One byte of one turn's wrapped key is flipped directly in the key table (for
the memory store, through the key store's own connection), as a careless
operator or an attacker would: the other turns stay readable, the window
leaves that turn out for "key-damaged", HTTP answers without a 500, and the
audit locates exactly it.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from tests.key_rows import set_wrapped_key, wrapped_key
from turnledger.domain.errors import TurnKeyDamagedError
from turnledger.domain.findings import DAMAGED_KEY
from turnledger.infra.http.app import create_app
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings

OWNER = "owner-1"
TURNS = ("t1", "t2", "t3", "t4", "t5")


def damage_key(
    ledger: Conversations, settings: Settings, conversation_id: uuid.UUID, turn_id: str
) -> None:
    """Flip one byte of the turn's stored wrapped key, beside the ledger."""
    if settings.persistence == "memory":  # the key store's own database
        store: Any = ledger.vault.purge_view
        wrapped = bytearray(wrapped_key(store, conversation_id, turn_id))
        wrapped[7] ^= 0x40
        set_wrapped_key(store, conversation_id, turn_id, bytes(wrapped))
    elif settings.persistence == "sqlite":
        with sqlite3.connect(settings.sqlite_keys_path) as connection:
            (wrapped,) = connection.execute(
                "SELECT wrapped_key FROM turn_keys "
                "WHERE conversation_id = ? AND turn_id = ?",
                (conversation_id.hex, turn_id),
            ).fetchone()
            changed = bytearray(wrapped)
            changed[7] ^= 0x40
            connection.execute(
                "UPDATE turn_keys SET wrapped_key = ? "
                "WHERE conversation_id = ? AND turn_id = ?",
                (bytes(changed), conversation_id.hex, turn_id),
            )
    else:
        table = sql.Identifier(settings.postgres_schema, "turn_keys")
        with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET wrapped_key = set_byte(wrapped_key, 7, "
                    "get_byte(wrapped_key, 7) # 64) "
                    "WHERE conversation_id = %s AND turn_id = %s"
                ).format(table),
                (conversation_id, turn_id),
            )


def _conversation(ledger: Conversations) -> uuid.UUID:
    conversation_id = ledger.start_conversation(OWNER)
    for turn_id in TURNS:
        window = ledger.project_window(
            OWNER,
            conversation_id,
            question=f"question {turn_id}",
            system="be brief",
            model="gpt-4o",
            max_bytes=100_000,
        )
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id=turn_id,
            question=f"question {turn_id}",
            answer=f"answer {turn_id}",
            window=window,
        )
    return conversation_id


def test_a_damaged_key_loses_only_its_turn_and_the_audit_locates_it(
    ledger: Conversations, settings: Settings
) -> None:
    conversation_id = _conversation(ledger)
    other_id = _conversation(ledger)
    damage_key(ledger, settings, conversation_id, "t3")

    # History: every other turn is read; the damaged one is marked, not lost.
    items = ledger.get_history(OWNER, conversation_id).items
    assert [(i.turn_id, i.question, i.unreadable) for i in items] == [
        ("t1", "question t1", None),
        ("t2", "question t2", None),
        ("t3", None, "key-damaged"),
        ("t4", "question t4", None),
        ("t5", "question t5", None),
    ]
    assert not items[2].deleted

    # The window leaves it out and says so; everything else is sent.
    window = ledger.project_window(
        OWNER,
        conversation_id,
        question="next",
        system="be brief",
        model="gpt-4o",
        max_bytes=100_000,
    ).window
    assert window.kept_turn_ids == ("t1", "t2", "t4", "t5")
    report = window.report()
    assert report["dropped"] == [{"turn_id": "t3", "reason": "key-damaged"}]
    assert report["dropped_counts"] == {"key-damaged": 1}
    assert b"question t3" not in window.body and b"question t4" in window.body

    # A tight window that stops before reaching it reports only its limit.
    tight = ledger.project_window(
        OWNER,
        conversation_id,
        question="next",
        system="be brief",
        model="gpt-4o",
        max_bytes=len(window.body) - 60,
    ).window
    assert tight.kept_turn_ids == ("t2", "t4", "t5")
    assert tight.report()["dropped"] == [
        {"turn_id": "t1", "reason": "bytes"},
        {"turn_id": "t3", "reason": "key-damaged"},
    ]

    # A strict read of that turn is a typed error naming it.
    rows = ledger.read_side.turns_by_id(conversation_id, ["t3"])
    with pytest.raises(TurnKeyDamagedError) as raised:
        ledger.queries.read_texts(conversation_id, list(rows.values()), owner_id=OWNER)
    assert raised.value.conversation_id == conversation_id
    assert raised.value.turn_ids == ("t3",)

    # The audit locates exactly that turn; the other conversation is intact.
    audit = Auditor(ledger).audit()
    failures = [(f.kind, f.conversation_id, f.version) for f in audit.failures]
    t3_version = rows["t3"].version
    assert failures == [(DAMAGED_KEY, conversation_id, t3_version)]
    assert "t3" in audit.failures[0].detail
    assert audit.conversation(other_id).ok
    # Receipts that needed its text are not re-derivable, not failures.
    assert audit.conversation(conversation_id).receipts_failed == 0


def test_http_serves_the_rest_and_names_the_damaged_turn(settings: Settings) -> None:
    app = create_app(settings)
    with TestClient(app) as http:
        service = app.state.service
        auth = {"Authorization": f"Bearer {service.registry.add(OWNER, 'phone').token}"}
        conversation = http.post("/v1/conversations", headers=auth).json()[
            "conversation_id"
        ]
        for turn_id in ("t1", "t2", "t3"):
            put = http.put(
                f"/v1/conversations/{conversation}/turns/{turn_id}",
                headers=auth,
                json={"question": f"question {turn_id}", "answer": "a"},
            )
            assert put.status_code == 200, put.text
        damage_key(service.ledger, settings, uuid.UUID(conversation), "t2")

        history = http.get(f"/v1/conversations/{conversation}/turns", headers=auth)
        assert history.status_code == 200, history.text
        assert [
            (i["turn_id"], i["question"], i["deleted"], i["unreadable"])
            for i in history.json()["items"]
        ] == [
            ("t1", "question t1", False, None),
            ("t2", None, False, "key-damaged"),
            ("t3", "question t3", False, None),
        ]

        window = http.post(
            f"/v1/conversations/{conversation}/window",
            headers=auth,
            json={"question": "q", "system": "", "model": "m", "max_bytes": 10_000},
        )
        assert window.status_code == 200, window.text
        assert window.json()["kept_turn_ids"] == ["t1", "t3"]
        assert window.json()["dropped_turn_ids"] == ["t2"]
        assert window.json()["report"]["dropped_counts"] == {"key-damaged": 1}

        sync = http.get("/v1/sync", headers=auth)
        assert sync.status_code == 200, sync.text
        turns = {c["turn_id"]: c for c in sync.json()["changes"] if "turn_id" in c}
        assert turns["t2"]["unreadable"] == "key-damaged"
        assert not turns["t2"]["deleted"] and turns["t2"]["question"] is None
        assert turns["t3"]["question"] == "question t3"
