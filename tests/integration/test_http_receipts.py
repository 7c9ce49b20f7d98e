"""GET /v1/conversations/{id}/turns/{turn_id}/receipt: the window receipt stored
with a turn, to its owner's devices only, with typed errors."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient

from turnledger.infra.http.app import create_app
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy
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


# Turns written over HTTP with their window -----------------------------------

TIGHT = {
    "max_bytes": 2_000,
    "max_tokens": 200,
    "max_messages": 4,
    "floor_messages": 1,
    "max_message_tokens": 60,
    "fold_threshold_tokens": 100,
}


def _ask(api: Api, question: str, **request: Any) -> tuple[dict[str, Any], Any]:
    """POST .../window as a device asks it; the request and the answer."""
    sent = {"question": question, "model": "m-2", "system": "be brief", **request}
    answer = api.http.post(
        f"/v1/conversations/{api.conversation}/window",
        json=sent,
        headers={"Authorization": f"Bearer {api.tokens['a']}"},
    )
    assert answer.status_code == 200, answer.text
    return sent, answer.json()


def _named(sent: dict[str, Any], window: dict[str, Any], **change: Any) -> Any:
    """The `window` part of a turn write: the request but its question, the
    answer's ledger version, and the digest of the body that was sent."""
    named = {key: value for key, value in sent.items() if key != "question"}
    named["ledger_version"] = window["ledger_version"]
    named["body_sha256"] = hashlib.sha256(window["body"].encode()).hexdigest()
    return {**named, **change}


def _put(api: Api, turn_id: str, body: dict[str, Any]) -> Any:
    return api.http.put(
        f"/v1/conversations/{api.conversation}/turns/{turn_id}",
        json=body,
        headers={"Authorization": f"Bearer {api.tokens['a']}"},
    )


@pytest.mark.parametrize(
    "request_fields",
    [{"policy": TIGHT}, {"max_bytes": 700}, {}, {"policy": TIGHT, "max_bytes": 900}],
    ids=["policy", "max-bytes", "service-default", "policy-and-max-bytes"],
)
def test_a_turn_put_with_its_window_keeps_the_receipt_confirm_keeps(
    api: Api, request_fields: dict[str, Any]
) -> None:
    """The receipt stored for a PUT with `window` is the one the library's
    confirm_turn(..., window=) stores for the same window: same policy,
    version, turns and a MAC the audit re-derives."""
    sent, window = _ask(api, "q4", **request_fields)
    answer = _put(
        api, "t4", {"question": "q4", "answer": "a4", "window": _named(sent, window)}
    )
    assert answer.status_code == 200, answer.text
    served = api.get("t4")
    assert served.status_code == 200, served.text
    receipt = served.json()["receipt"]
    assert receipt["ledger_version"] == window["ledger_version"]
    assert receipt["turn_ids"] == window["kept_turn_ids"]
    projected = api.ledger.project_window(
        "alice",
        api.conversation,
        question="q4",
        system="be brief",
        model="m-2",
        max_bytes=request_fields.get("max_bytes"),
        policy=WindowPolicy(**request_fields["policy"])
        if "policy" in request_fields
        else (None if "max_bytes" in request_fields else Settings().window_policy()),
    )
    assert receipt["policy"] == projected.policy
    report = Auditor(api.ledger).audit(api.conversation)
    assert report.ok, report.failures
    # t3 (the library's) and t4 (over HTTP) both re-derive.
    assert report.conversation(api.conversation).receipts_verified == 2


def test_a_window_projected_before_other_turns_landed_is_still_kept(api: Api) -> None:
    """Another device writes between the window and the answer: the receipt
    names the version the window was projected from, and still verifies."""
    sent, window = _ask(api, "q5", policy=TIGHT)
    assert _put(api, "t4", {"question": "other", "answer": "x"}).status_code == 200
    answer = _put(
        api, "t5", {"question": "q5", "answer": "a5", "window": _named(sent, window)}
    )
    assert answer.status_code == 200, answer.text
    receipt = api.get("t5").json()["receipt"]
    assert receipt["ledger_version"] == window["ledger_version"]
    assert "t4" not in receipt["turn_ids"]
    assert Auditor(api.ledger).audit(api.conversation).ok


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("other body", 422),
        ("other question", 422),
        ("other policy", 422),
        ("later version", 422),
        ("abandoned", 422),
        ("bad digest", 422),
    ],
)
def test_a_window_that_is_not_this_turns_is_refused_and_nothing_written(
    api: Api, case: str, status: int
) -> None:
    sent, window = _ask(api, "q6", policy=TIGHT)
    turn: dict[str, Any] = {"question": "q6", "answer": "a6"}
    named = _named(sent, window)
    if case == "other body":
        named["body_sha256"] = hashlib.sha256(b"{}").hexdigest()
    elif case == "other question":
        turn["question"] = "q7"
    elif case == "other policy":
        named["policy"] = {**TIGHT, "max_messages": 1}
    elif case == "later version":
        named["ledger_version"] = window["ledger_version"] + 1
    elif case == "abandoned":
        turn = {"question": "q6", "answer": "", "status": "failed"}
    elif case == "bad digest":
        named["body_sha256"] = "XYZ"
    before = api.ledger.get_conversation("alice", api.conversation).version
    answer = _put(api, "t6", {**turn, "window": named})
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] in {"invalid_input", "invalid_request"}
    assert "Traceback" not in answer.text
    assert api.ledger.get_conversation("alice", api.conversation).version == before


def test_a_retried_put_with_its_window_is_written_once(api: Api) -> None:
    sent, window = _ask(api, "q8", policy=TIGHT)
    body = {"question": "q8", "answer": "a8", "window": _named(sent, window)}
    first, second = _put(api, "t8", body), _put(api, "t8", body)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert api.get("t8").json()["receipt"]["ledger_version"] == window["ledger_version"]


def test_a_window_whose_turn_was_deleted_since_is_refused(api: Api) -> None:
    sent, window = _ask(api, "q9", policy=TIGHT)
    assert "t2" in window["kept_turn_ids"]
    api.ledger.delete_history("alice", api.conversation, turn_ids=["t2"])
    before = api.ledger.get_conversation("alice", api.conversation).version
    answer = _put(
        api, "t9", {"question": "q9", "answer": "a9", "window": _named(sent, window)}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "window"
    assert api.ledger.get_conversation("alice", api.conversation).version == before
