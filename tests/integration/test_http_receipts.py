"""GET /v1/conversations/{id}/turns/{turn_id}/receipt: the window receipt stored
with a turn, to its owner's devices only, with typed errors."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient

from turnledger.infra.http.app import create_app
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.settings import Settings
from turnledger.projections.receipt import WindowReceipt, receipt_key_ids
from turnledger.projections.results import ProjectedWindow


@dataclass
class Api:
    http: TestClient
    ledger: Conversations
    tokens: dict[str, str]
    conversation: UUID
    window: ProjectedWindow

    def get(self, turn_id: str, *, device: str = "a", conversation: Any = None) -> Any:
        return self.http.get(
            f"/v1/conversations/{conversation or self.conversation}/turns/"
            f"{turn_id}/receipt",
            headers={"Authorization": f"Bearer {self.tokens[device]}"},
        )


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    app = create_app(settings)
    with TestClient(app) as http:
        service = app.state.service
        tokens = {
            "a": service.registry.add("alice", "phone").token,
            "other": service.registry.add("mallory", "laptop").token,
        }
        ledger = service.ledger
        conversation = ledger.start_conversation("alice")
        for n in (1, 2):
            ledger.confirm_turn(
                "alice", conversation, turn_id=f"t{n}", question=f"q{n}", answer="a"
            )
        window = ledger.project_window(
            "alice",
            conversation,
            question="q3",
            system="be brief",
            model="m",
            max_bytes=4096,
        )
        ledger.confirm_turn(
            "alice",
            conversation,
            turn_id="t3",
            question="q3",
            answer="a3",
            window=window,
        )
        yield Api(http, ledger, tokens, conversation, window)


def test_the_stored_receipt_is_served_as_stored(api: Api) -> None:
    answer = api.get("t3")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    stored = next(
        event.window_receipt
        for event in api.ledger.events.get(api.conversation)
        if getattr(event, "turn_id", None) == "t3"
    )
    assert body["receipt"] == {
        **{"body_bytes": None, "body_sha256": None},
        **stored,
    }
    assert body["conversation_id"] == str(api.conversation)
    assert body["turn_id"] == "t3" and body["deleted"] is False
    assert body["receipt"]["turn_ids"] == ["t1", "t2"]
    # It is the receipt of the window the answer replied to.
    mac_key = api.ledger.vault.receipt_key(
        api.conversation, receipt_key_ids("t3", api.window.window.kept_turn_ids, None)
    )
    served = {k: v for k, v in body["receipt"].items() if v is not None}
    assert WindowReceipt.from_document(
        {**served, "fold_id": None}
    ) == api.window.receipt(mac_key)


def test_a_turn_without_a_window_has_no_receipt(api: Api) -> None:
    answer = api.get("t1")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "receipt_not_found"


def test_a_missing_turn_is_turn_not_found(api: Api) -> None:
    answer = api.get("t9")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "turn_not_found"


def test_another_users_device_learns_nothing(api: Api) -> None:
    """Another user's answer for a real turn equals the answer for a
    conversation that does not exist: a guess can not be confirmed."""
    theirs = api.get("t3", device="other")
    unknown = uuid4()
    missing = api.get("t3", device="other", conversation=unknown)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["error"]["code"] == "conversation_not_found"
    assert theirs.text == missing.text.replace(str(unknown), str(api.conversation))
    assert api.get("t1", device="other").text == theirs.text


def test_a_deleted_turns_receipt_stays_and_says_so(api: Api) -> None:
    api.ledger.delete_history("alice", api.conversation, turn_ids=["t3"])
    answer = api.get("t3")
    assert answer.status_code == 200
    assert answer.json()["deleted"] is True
    assert answer.json()["receipt"]["turn_ids"] == ["t1", "t2"]


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/v1/conversations/not-a-uuid/turns/t3/receipt", 422, "invalid_request"),
        ("/v1/conversations/{c}/turns/bad%20id/receipt", 422, "invalid_request"),
    ],
)
def test_bad_ids_are_typed_errors(api: Api, path: str, status: int, code: str) -> None:
    answer = api.http.get(
        path.format(c=api.conversation),
        headers={"Authorization": f"Bearer {api.tokens['a']}"},
    )
    assert answer.status_code == status
    assert answer.json()["error"]["code"] == code


def test_no_token_is_unauthenticated(api: Api) -> None:
    answer = api.http.get(f"/v1/conversations/{api.conversation}/turns/t3/receipt")
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthenticated"


def test_the_route_is_in_the_openapi_document(api: Api) -> None:
    document = api.http.get("/openapi.json").json()
    operation = document["paths"][
        "/v1/conversations/{conversation_id}/turns/{turn_id}/receipt"
    ]["get"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/StoredReceiptOut"
    }
    assert "receipt_not_found" in operation["responses"]["404"]["description"]
