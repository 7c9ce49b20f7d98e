"""A turn written with a credential (TurnRequest.credential, the writing
device) is stored only if PostgreSQL finds that device not revoked in the
write's own transaction; the HTTP service relies on it to skip the token
lookup of devices it has seen write (infra/http/turn_queue.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql

from turnledger.domain.errors import (
    CredentialRevokedError,
    InvalidInputError,
    UnauthenticatedError,
)
from turnledger.infra.devices import DeviceRegistry, open_device_registry
from turnledger.infra.http.app import create_app
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.results import TurnReceipt, TurnRequest
from turnledger.infra.settings import Settings


@pytest.fixture
def postgres_ledger(postgres_settings: Settings) -> Iterator[Conversations]:
    ledger = open_conversations(postgres_settings)
    yield ledger
    ledger.close()


@pytest.fixture
def registry(postgres_settings: Settings) -> Iterator[DeviceRegistry]:
    registry = open_device_registry(postgres_settings)
    yield registry
    registry.close()


def turn_rows(settings: Settings) -> int:
    with psycopg.connect(settings.postgres_conninfo()) as connection:
        row = connection.execute(
            sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(settings.postgres_schema, "conversation_turns")
            )
        ).fetchone()
    assert row is not None
    return int(row[0])


def turn_ids(ledger: Conversations, owner: str, conversation: UUID) -> list[str]:
    return [item.turn_id for item in ledger.get_history(owner, conversation).items]


def test_a_revoked_or_unknown_credential_refuses_its_own_write_alone(
    postgres_ledger: Conversations,
    registry: DeviceRegistry,
    postgres_settings: Settings,
) -> None:
    kept = registry.add("alice", "phone").device
    lost = registry.add("alice", "laptop").device
    registry.revoke(lost.device_id)
    conversation = postgres_ledger.start_conversation("alice")
    rows = turn_rows(postgres_settings)

    def turn(turn_id: str, credential: str) -> TurnRequest:
        return TurnRequest(
            owner_id="alice",
            conversation_id=conversation,
            turn_id=turn_id,
            question=f"q {turn_id}",
            answer="a",
            credential=credential,
        )

    outcomes = postgres_ledger.record_turns(
        [
            turn("kept-1", kept.device_id),
            turn("lost", lost.device_id),
            turn("nobody", "dev_never-issued"),
            turn("kept-2", kept.device_id),
        ]
    )
    assert isinstance(outcomes[0], TurnReceipt) and isinstance(outcomes[3], TurnReceipt)
    for refused in (outcomes[1], outcomes[2]):
        assert isinstance(refused, CredentialRevokedError)
        assert isinstance(refused, UnauthenticatedError)  # 401 over HTTP
    assert turn_ids(postgres_ledger, "alice", conversation) == ["kept-1", "kept-2"]
    assert turn_rows(postgres_settings) == rows + 2
    assert postgres_ledger.get_conversation("alice", conversation).version == 3


def test_the_check_holds_in_a_transaction_that_also_deletes(
    postgres_ledger: Conversations,
    registry: DeviceRegistry,
) -> None:
    """A batch that also changes rows (here a deletion, merged by the group
    committer with the turn) is written in several messages; the credentials
    are checked in that transaction too."""
    lost = registry.add("alice", "laptop").device
    registry.revoke(lost.device_id)
    busy, deleted, written = (
        postgres_ledger.start_conversation("alice") for _ in "abc"
    )
    postgres_ledger.confirm_turn(
        "alice", deleted, turn_id="old", question="q", answer="a"
    )
    recorder: Any = postgres_ledger.recorder
    insert_events = recorder.insert_events
    calls: list[dict[str, Any]] = []
    first = threading.Event()

    def slow_first(stored_events: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        if len(calls) == 1:
            first.set()
            time.sleep(0.5)  # the two writes below queue meanwhile
        return insert_events(stored_events, **kwargs)

    recorder.insert_events = slow_first
    outcomes: dict[str, Any] = {}

    def run(name: str, work: Any) -> None:
        try:
            outcomes[name] = work()
        except Exception as error:
            outcomes[name] = error

    threads = [
        threading.Thread(
            target=run,
            args=(
                "busy",
                lambda: postgres_ledger.confirm_turn(
                    "alice", busy, turn_id="b", question="q", answer="a"
                ),
            ),
        )
    ]
    threads[0].start()
    assert first.wait(5)
    threads += [
        threading.Thread(
            target=run,
            args=("delete", lambda: postgres_ledger.delete_history("alice", deleted)),
        ),
        threading.Thread(
            target=run,
            args=(
                "turn",
                lambda: postgres_ledger.record_turns(
                    [
                        TurnRequest(
                            owner_id="alice",
                            conversation_id=written,
                            turn_id="t",
                            question="q",
                            answer="a",
                            credential=lost.device_id,
                        )
                    ]
                )[0],
            ),
        ),
    ]
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join()
    recorder.insert_events = insert_events
    assert any(
        call.get("credentials") == (lost.device_id,) and call["read_side"].deletions
        for call in calls
    ), calls
    assert isinstance(outcomes["turn"], CredentialRevokedError)
    assert not isinstance(outcomes["delete"], Exception), outcomes["delete"]
    assert turn_ids(postgres_ledger, "alice", written) == []
    deleted_items = postgres_ledger.get_history("alice", deleted).items
    assert [item.deleted_at is not None for item in deleted_items] == [True]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_stores_that_do_not_check_credentials_refuse_them(
    store: str, tmp_path: Any
) -> None:
    ledger = open_conversations(
        Settings(_env_file=None, persistence=store, data_dir=tmp_path / "data")
    )
    try:
        assert not ledger.checks_credentials
        conversation = ledger.start_conversation("alice")
        request = TurnRequest(
            owner_id="alice",
            conversation_id=conversation,
            turn_id="t",
            question="q",
            answer="a",
            credential="dev_x",
        )
        [outcome] = ledger.record_turns([request])
        assert isinstance(outcome, InvalidInputError)
        assert turn_ids(ledger, "alice", conversation) == []
    finally:
        ledger.close()


@pytest.fixture
def service_lookups(
    postgres_settings: Settings,
) -> Iterator[tuple[TestClient, list[str]]]:
    """The service, and every token it looks up from now on, in order."""
    app = create_app(postgres_settings)
    with TestClient(app) as client:
        yield client, record_lookups(app.state.service.registry)


def record_lookups(registry: DeviceRegistry) -> list[str]:
    """Every token `registry` looks up from now on, in order."""
    looked_up: list[str] = []
    authenticate_many = registry.authenticate_many

    def counting(tokens: Any) -> Any:
        looked_up.extend(tokens)
        return authenticate_many(tokens)

    registry.authenticate_many = counting
    return looked_up


def put_turn(client: TestClient, conversation: str, turn_id: str, token: str) -> Any:
    return client.put(
        f"/v1/conversations/{conversation}/turns/{turn_id}",
        headers={"Authorization": f"Bearer {token}"},
        json={"question": "q", "answer": "a"},
    )


def test_the_service_writes_with_kept_devices_and_still_refuses_a_revoked_one(
    service_lookups: tuple[TestClient, list[str]],
    postgres_settings: Settings,
    registry: DeviceRegistry,
) -> None:
    """After a device's first write its token is not looked up again; once it
    is revoked (through another registry, as by another process: what the
    service kept is not told), its next write is refused 401 by the write's
    transaction and nothing is stored."""
    client, looked_up = service_lookups
    phone = registry.add("alice", "phone")
    laptop = registry.add("alice", "laptop")
    conversation = client.post(
        "/v1/conversations", headers={"Authorization": f"Bearer {phone.token}"}
    ).json()["conversation_id"]
    assert put_turn(client, conversation, "t1", phone.token).status_code == 200
    looked_up.clear()
    assert put_turn(client, conversation, "t2", phone.token).status_code == 200
    assert put_turn(client, conversation, "t3", laptop.token).status_code == 200
    assert looked_up == [laptop.token]  # its first write only
    registry.revoke(phone.device.device_id)
    rows = turn_rows(postgres_settings)
    refused = put_turn(client, conversation, "t4", phone.token)
    assert refused.status_code == 401, refused.text
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "revoked" in refused.text
    assert looked_up == [laptop.token]  # refused by the write's transaction
    assert turn_rows(postgres_settings) == rows
    # Forgotten: the next attempt is looked up (and refused) again.
    assert put_turn(client, conversation, "t5", phone.token).status_code == 401
    assert looked_up == [laptop.token, phone.token]
    assert put_turn(client, conversation, "t6", laptop.token).status_code == 200
    history = client.get(
        f"/v1/conversations/{conversation}/turns",
        headers={"Authorization": f"Bearer {laptop.token}"},
    ).json()
    assert [item["turn_id"] for item in history["items"]] == ["t1", "t2", "t3", "t6"]


def test_the_service_keeps_a_bounded_number_of_devices_least_recent_dropped(
    service_lookups: tuple[TestClient, list[str]],
    registry: DeviceRegistry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("turnledger.infra.http.turn_queue.KEPT_DEVICES", 2)
    client, looked_up = service_lookups
    tokens = [registry.add("alice", f"device {n}").token for n in range(3)]
    conversation = client.post(
        "/v1/conversations", headers={"Authorization": f"Bearer {tokens[0]}"}
    ).json()["conversation_id"]

    def put(token: str, turn_id: str) -> None:
        response = put_turn(client, conversation, turn_id, token)
        assert response.status_code == 200, response.text

    for n, token in enumerate(tokens):  # the third pushes out the first
        put(token, f"first-{n}")
    looked_up.clear()
    put(tokens[1], "again-1")
    put(tokens[2], "again-2")
    assert looked_up == []
    put(tokens[0], "again-0")
    assert looked_up == [tokens[0]]


def test_off_postgresql_every_turn_write_looks_its_token_up(tmp_path: Any) -> None:
    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path)
    app = create_app(settings)
    with TestClient(app) as client:
        registry = app.state.service.registry
        looked_up = record_lookups(registry)
        phone = registry.add("alice", "phone")
        conversation = client.post(
            "/v1/conversations", headers={"Authorization": f"Bearer {phone.token}"}
        ).json()["conversation_id"]
        looked_up.clear()
        assert put_turn(client, conversation, "t1", phone.token).status_code == 200
        assert put_turn(client, conversation, "t2", phone.token).status_code == 200
        assert looked_up == [phone.token, phone.token]
        registry.revoke(phone.device.device_id)
        assert put_turn(client, conversation, "t3", phone.token).status_code == 401
