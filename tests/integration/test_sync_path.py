"""GET /v1/sync on the short path (infra/http/sync_path.py): well-formed
requests skip FastAPI's routing and get the route's own answer; every other
request, malformed ones included, is answered by the route as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from turnledger.infra.http.app import create_app
from turnledger.infra.http.service import current_device
from turnledger.infra.settings import Settings

pytestmark = pytest.mark.parametrize("settings", ["memory"], indirect=True)


@pytest.fixture
def http(settings: Settings) -> Iterator[tuple[TestClient, list[str], dict[str, str]]]:
    """A client, the devices the FastAPI route authenticated, and a token."""
    app = create_app(settings)
    routed: list[str] = []

    def counted(service: Any = None, token: Any = None) -> Any:
        routed.append("route")
        return current_device(service, token)

    with TestClient(app) as client:
        service = app.state.service
        app.dependency_overrides[current_device] = lambda: counted(
            service, client.headers.get("x-token")
        )
        token = service.registry.add("alice", "phone").token
        auth = {"Authorization": f"Bearer {token}"}
        client.headers["x-token"] = token  # what the counting override reads
        conversation = client.post("/v1/conversations", headers=auth).json()
        for turn in ("t1", "t2"):
            client.put(
                f"/v1/conversations/{conversation['conversation_id']}/turns/{turn}",
                headers=auth,
                json={"question": f"question {turn}", "answer": "a"},
            )
        routed.clear()
        yield client, routed, auth


def _without_cursor(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "next_cursor"}


def test_well_formed_requests_skip_the_route_and_get_its_answer(
    http: tuple[TestClient, list[str], dict[str, str]],
) -> None:
    client, routed, auth = http
    first = client.get("/v1/sync?limit=2", headers=auth)
    assert first.status_code == 200, first.text
    assert routed == []
    cursor = first.json()["next_cursor"]
    rest = client.get(f"/v1/sync?since={cursor}&timeout=0", headers=auth)
    assert rest.status_code == 200 and routed == []
    assert [c["turn_id"] for c in rest.json()["changes"]] == ["t2"]
    # An extra parameter (which FastAPI ignores) sends it through the route.
    routed_answer = client.get(f"/v1/sync?since={cursor}&extra=1", headers=auth)
    assert routed == ["route"]
    assert _without_cursor(routed_answer.json()) == _without_cursor(rest.json())


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=1001",
        "limit=ten",
        "timeout=-1",
        "timeout=301",
        "timeout=1e1",
        "since=",
        "since=%2Fnot-a-cursor",
        "limit=1&limit=2",
        "since",
    ],
)
def test_malformed_requests_get_the_routes_answer(
    http: tuple[TestClient, list[str], dict[str, str]], query: str
) -> None:
    client, routed, auth = http
    answer = client.get(f"/v1/sync?{query}", headers=auth)
    assert routed == ["route"], query
    assert answer.status_code in (200, 400, 422), answer.text


def test_refusals_are_the_same_on_both_paths(
    http: tuple[TestClient, list[str], dict[str, str]],
) -> None:
    client, routed, auth = http
    forged = client.get("/v1/sync?since=v1.AAAA", headers=auth)
    assert routed == []
    via_route = client.get("/v1/sync?since=v1.AAAA&extra=1", headers=auth)
    assert routed == ["route"]
    assert (forged.status_code, forged.json()) == (
        via_route.status_code,
        via_route.json(),
    )
    unknown = client.get("/v1/sync", headers={"Authorization": "Bearer nope"})
    assert unknown.status_code == 401
    assert unknown.json()["error"]["code"] == "unauthenticated", unknown.text
    del client.headers["x-token"]  # the route's own check, with no token
    missing = client.get("/v1/sync")
    assert missing.status_code == 401
