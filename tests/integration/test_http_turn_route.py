"""The turn write's short path (infra/http/turn_route.py) answers exactly as the
documented FastAPI route, and hands that route every request it does not
plainly accept."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from turnledger.infra.http.app import create_app
from turnledger.infra.http.service import get_service
from turnledger.infra.settings import Settings


@pytest.fixture
def http(settings: Settings) -> Iterator[tuple[TestClient, dict[str, str], str]]:
    app = create_app(settings)
    with TestClient(app) as client:
        token = app.state.service.registry.add("alice", "phone").token
        auth = {"Authorization": f"Bearer {token}"}
        created = client.post("/v1/conversations", headers=auth)
        yield client, auth, created.json()["conversation_id"]


def history(client: TestClient, auth: dict[str, str], conversation: str) -> list[str]:
    page = client.get(f"/v1/conversations/{conversation}/turns", headers=auth)
    return [item["turn_id"] for item in page.json()["items"]]


def test_both_routes_give_the_same_receipt_for_the_same_turn(
    http: tuple[TestClient, dict[str, str], str],
) -> None:
    client, auth, conversation = http
    turn = {"question": "Hello?", "answer": "Hi."}
    # The canonical spelling takes the short path; the same id without hyphens
    # is valid too, but is passed on to the documented route.
    short = client.put(
        f"/v1/conversations/{conversation}/turns/t1", headers=auth, json=turn
    )
    passed_on = client.put(
        f"/v1/conversations/{UUID(conversation).hex}/turns/t1", headers=auth, json=turn
    )
    assert short.status_code == passed_on.status_code == 200
    assert short.content == passed_on.content
    assert short.headers["content-type"] == passed_on.headers["content-type"]
    assert short.json()["conversation_id"] == conversation
    assert short.json()["version"] == 2
    assert history(client, auth, conversation) == ["t1"]


def test_a_new_turn_is_written_alike_through_either_entry_point(
    http: tuple[TestClient, dict[str, str], str],
) -> None:
    """One implementation (`turn_route.record_turn`), two ways in: the short
    path, which skips FastAPI's routing, and the documented route. A new turn
    written each way (into two conversations) gets the same answer but for
    the conversation and the time, and reads back the same."""
    client, auth, first = http
    second = client.post("/v1/conversations", headers=auth).json()["conversation_id"]
    app: Any = client.app
    routed: list[str] = []

    async def counted(request: Request) -> Any:
        routed.append("route")
        return await get_service(request)

    app.dependency_overrides[get_service] = counted
    turn = {"question": "Hello?", "answer": "Hi.", "status": "stopped"}
    short = client.put(f"/v1/conversations/{first}/turns/t1", headers=auth, json=turn)
    assert routed == []  # taken before routing
    passed_on = client.put(
        f"/v1/conversations/{UUID(second).hex}/turns/t1", headers=auth, json=turn
    )
    assert routed == ["route"]
    assert short.status_code == passed_on.status_code == 200
    assert short.headers["content-type"] == passed_on.headers["content-type"]

    def apart_from_where_and_when(body: dict[str, Any]) -> list[tuple[str, Any]]:
        return [
            (key, value)
            for key, value in body.items()
            if key not in ("conversation_id", "recorded_at")
        ]

    assert list(short.json()) == list(passed_on.json())  # same fields, same order
    assert apart_from_where_and_when(short.json()) == apart_from_where_and_when(
        passed_on.json()
    )
    assert (short.json()["conversation_id"], passed_on.json()["conversation_id"]) == (
        first,
        second,
    )
    pages = [
        client.get(f"/v1/conversations/{c}/turns", headers=auth).json()["items"]
        for c in (first, second)
    ]
    for page in pages:
        for item in page:
            del item["recorded_at"]
    assert pages[0] == pages[1]


def test_an_abandoned_turn_takes_the_short_path_too(
    http: tuple[TestClient, dict[str, str], str],
) -> None:
    client, auth, conversation = http
    response = client.put(
        f"/v1/conversations/{conversation}/turns/t1",
        headers=auth,
        json={"question": "Hello?", "answer": "Hi, I", "status": "stopped"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "stopped"
    # Written on the service's own write pool, not on anyio's worker threads.
    assert any(t.name.startswith("turnledger-write") for t in threading.enumerate())


@pytest.mark.parametrize(
    ("content_type", "body", "status", "code"),
    [
        ("text/plain", b'{"question": "q", "answer": "a"}', 422, "invalid_request"),
        (None, b'{"question": "q", "answer": "a"}', 422, "invalid_request"),
        ("application/json", b"", 422, "invalid_request"),
        (
            "application/json",
            b'{"question": "q", "answer": "a", "x": 1}',
            422,
            "invalid_request",
        ),
        ("application/json", b'{"question": "q"', 422, "malformed_json"),
        (
            "application/merge-patch+json",
            b'{"question": "q", "answer": "a"}',
            200,
            None,
        ),
    ],
)
def test_what_the_short_path_does_not_take_is_answered_by_the_documented_route(
    http: tuple[TestClient, dict[str, str], str],
    content_type: str | None,
    body: bytes,
    status: int,
    code: str | None,
) -> None:
    client, auth, conversation = http
    headers = dict(auth)
    if content_type is not None:
        headers["content-type"] = content_type
    response = client.put(
        f"/v1/conversations/{conversation}/turns/t1", headers=headers, content=body
    )
    assert response.status_code == status, response.text
    if code is not None:
        assert response.json()["error"]["code"] == code
        assert history(client, auth, conversation) == []
    else:
        assert history(client, auth, conversation) == ["t1"]


def test_a_malformed_turn_id_or_conversation_id_keeps_its_documented_answer(
    http: tuple[TestClient, dict[str, str], str],
) -> None:
    client, auth, conversation = http
    turn = {"question": "q", "answer": "a"}
    bad_turn = client.put(
        f"/v1/conversations/{conversation}/turns/-starts-with-a-dash",
        headers=auth,
        json=turn,
    )
    long_turn = client.put(
        f"/v1/conversations/{conversation}/turns/{'t' * 129}", headers=auth, json=turn
    )
    bad_conversation = client.put(
        "/v1/conversations/not-a-uuid/turns/t1", headers=auth, json=turn
    )
    for response in (bad_turn, long_turn, bad_conversation):
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] == "invalid_request"
    # Other methods on the path are not the short path's either.
    assert (
        client.delete(
            f"/v1/conversations/{conversation}/turns/t1", headers=auth
        ).status_code
        == 405
    )
    assert history(client, auth, conversation) == []


def test_the_short_paths_refusals_are_the_documented_routes_answers(
    http: tuple[TestClient, dict[str, str], str],
) -> None:
    """Errors raised while writing (an unknown token, a version conflict,
    text the ledger refuses, another user's conversation) are answered by the
    application's handlers, byte for byte as through the documented route."""
    client, auth, conversation = http
    first = client.put(
        f"/v1/conversations/{conversation}/turns/t0",
        headers=auth,
        json={"question": "q", "answer": "a"},
    )
    assert first.status_code == 200
    stranger = str(UUID(int=12345))
    cases = [
        ({"Authorization": "Bearer not-a-token"}, conversation, {}, 401),
        ({}, conversation, {}, 401),
        (auth, conversation, {"expected_version": 1}, 409),
        (auth, conversation, {"question": "a\x00b"}, 422),
        (auth, stranger, {}, 404),
    ]
    for headers, target, change, status in cases:
        turn = {"question": "q", "answer": "a", **change}
        short = client.put(
            f"/v1/conversations/{target}/turns/t1", headers=headers, json=turn
        )
        passed_on = client.put(
            f"/v1/conversations/{UUID(target).hex}/turns/t1", headers=headers, json=turn
        )
        assert short.status_code == status, (change, short.text)
        assert (short.status_code, short.content) == (
            passed_on.status_code,
            passed_on.content,
        ), change
        assert short.headers.get("www-authenticate") == passed_on.headers.get(
            "www-authenticate"
        )
    assert history(client, auth, conversation) == ["t0"]


def test_concurrent_writes_are_written_in_groups_each_with_its_own_answer(
    http: tuple[TestClient, dict[str, str], str],
) -> None:
    """Requests that arrive while a batch is being written go together as the
    next batch of the group committer (infra/http/turn_queue.py): one token
    lookup and one set of turns made for them all, yet each gets the answer
    it would get alone."""
    client, auth, conversation = http
    service = client.app.state.service  # type: ignore[attr-defined]
    writes = service.turn_writes
    make_requests = writes.requests
    groups: list[int] = []
    refused: list[str] = []

    def recording(items: Any) -> Any:
        groups.append(len(items))
        if len(groups) == 1:
            time.sleep(0.5)  # the others arrive meanwhile
        made = make_requests(items)
        refused.extend(type(r).__name__ for r in made if isinstance(r, Exception))
        return made

    writes.requests = recording
    users = {
        f"user{n}": service.registry.add(f"user{n}", "phone").token for n in range(6)
    }
    own = {
        user: client.post(
            "/v1/conversations", headers={"Authorization": f"Bearer {token}"}
        ).json()["conversation_id"]
        for user, token in users.items()
    }
    groups.clear()
    calls: list[tuple[str, dict[str, str], str, dict[str, Any], int]] = [
        ("first", auth, conversation, {}, 200),
        *[
            (user, {"Authorization": f"Bearer {token}"}, own[user], {}, 200)
            for user, token in users.items()
        ],
        ("unknown", {"Authorization": "Bearer nope"}, conversation, {}, 401),
        ("stale", auth, conversation, {"expected_version": 1}, 409),
        ("elsewhere", auth, own["user0"], {}, 404),
    ]
    answers: dict[str, Any] = {}

    def put(
        name: str, headers: dict[str, str], target: str, change: dict[str, Any]
    ) -> None:
        if name != "first":
            time.sleep(0.1)  # after the first request's group has begun
        answers[name] = client.put(
            f"/v1/conversations/{target}/turns/{name}",
            headers=headers,
            json={"question": f"q {name}", "answer": "a", **change},
        )

    threads = [
        threading.Thread(target=put, args=(name, headers, target, change))
        for name, headers, target, change, _ in calls
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name, _, target, _, status in calls:
        assert answers[name].status_code == status, (name, answers[name].text)
        if status == 200:
            assert answers[name].json()["turn_id"] == name
            assert answers[name].json()["conversation_id"] == target
    assert groups[0] == 1 and max(groups[1:]) >= 2, groups
    # Each request was made once; the unknown token never reached the ledger.
    assert sum(groups) == len(calls)
    assert refused == ["UnauthenticatedError"]
    assert history(client, auth, conversation) == ["first"]
    for user, token in users.items():
        mine = {"Authorization": f"Bearer {token}"}
        assert history(client, mine, own[user]) == [user]
