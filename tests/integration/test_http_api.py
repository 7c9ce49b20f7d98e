"""The HTTP edge on every store: bad input is a 4xx with a JSON error that says
what is wrong, never a 500 and never a partial write."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import pytest
from fastapi.testclient import TestClient

from turnledger.infra.http.app import create_app
from turnledger.infra.settings import Settings

LIMIT = 16_384


@dataclass
class Api:
    http: TestClient
    token: str
    conversation: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def head(self) -> int:
        return int(self.http.app.state.service.feed.head_position())  # type: ignore[attr-defined]


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    app = create_app(settings.model_copy(update={"http_max_body_bytes": LIMIT}))
    with TestClient(app) as http:
        token = app.state.service.registry.add("alice", "phone").token
        created = http.post(
            "/v1/conversations", headers={"Authorization": f"Bearer {token}"}
        )
        api = Api(http, token, created.json()["conversation_id"])
        put = http.put(
            f"/v1/conversations/{api.conversation}/turns/t1",
            headers=api.auth,
            json={"question": "Hello?", "answer": "Hi."},
        )
        assert put.status_code == 200
        yield api


def turn_url(api: Api, turn_id: str = "t2", conversation: str | None = None) -> str:
    return f"/v1/conversations/{conversation or api.conversation}/turns/{turn_id}"


JSON = {"content-type": "application/json"}
BAD_BODIES = [
    ("malformed_json", b'{"question": "unterminated'),
    ("malformed_json", b"\xff\xfe not utf-8"),
    ("invalid_request", b'["a", "list"]'),
    ("invalid_request", b'{"question": 5, "answer": "a"}'),
    ("invalid_request", b'{"question": "q", "answer": "a", "expected_version": "2"}'),
    ("invalid_request", b'{"question": "q", "answer": "a", "status": "maybe"}'),
    ("invalid_request", b'{"question": "q", "answer": "a", "surprise": 1}'),
    ("invalid_request", b'{"answer": "a"}'),
    ("invalid_input", b'{"question": "lone \\ud800 surrogate", "answer": "a"}'),
    ("invalid_input", b'{"question": "   ", "answer": "a"}'),
    ("invalid_input", b'{"question": "q", "answer": ""}'),
]


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 5_000 + b"]" * 5_000,
        b'{"question": "q", "answer": "a", "expected_version": ' + b"9" * 5000 + b"}",
    ],
)
def test_a_body_json_cannot_parse_is_a_400_and_writes_nothing(
    api: Api, body: bytes
) -> None:
    before = api.head()
    response = api.http.put(turn_url(api), headers={**api.auth, **JSON}, content=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"
    assert api.head() == before


@pytest.mark.parametrize(("code", "body"), BAD_BODIES)
def test_a_bad_turn_body_is_a_422_that_says_why_and_writes_nothing(
    api: Api, code: str, body: bytes
) -> None:
    before = api.head()
    response = api.http.put(turn_url(api), headers={**api.auth, **JSON}, content=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    assert api.head() == before


def test_an_oversized_body_is_a_413_before_anything_is_parsed(api: Api) -> None:
    before = api.head()
    big = json.dumps({"question": "q" * LIMIT, "answer": "a"}).encode()
    declared = api.http.put(turn_url(api), headers={**api.auth, **JSON}, content=big)

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield big[:100]
        yield big[100:]

    streamed = api.http.put(
        turn_url(api), headers={**api.auth, **JSON}, content=chunks()
    )
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "body_too_large"
        assert str(LIMIT) in response.json()["error"]["message"]
    assert api.head() == before


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic YTpi"},
        {"Authorization": "Bearer"},
    ],
)
def test_a_missing_or_bad_token_is_a_401_and_writes_nothing(
    api: Api, headers: dict[str, str]
) -> None:
    before = api.head()
    for response in (
        api.http.put(
            turn_url(api), headers=headers, json={"question": "q", "answer": "a"}
        ),
        api.http.post("/v1/conversations", headers=headers),
        api.http.get("/v1/sync", headers=headers),
    ):
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthenticated"
    # A turn write checks its token in the write's own call, after the body's
    # validation (docs/sync.md): with a malformed body too, it is a 422.
    malformed = api.http.put(turn_url(api), headers=headers, json={"question": 1})
    assert malformed.status_code == 422
    assert malformed.json()["error"]["code"] == "invalid_request"
    assert api.head() == before


def test_unknown_ids_are_404s_and_malformed_ids_are_422s(api: Api) -> None:
    missing = str(uuid4())
    assert (
        api.http.get(f"/v1/conversations/{missing}", headers=api.auth).status_code
        == 404
    )
    assert (
        api.http.put(
            turn_url(api, conversation=missing),
            headers=api.auth,
            json={"question": "q", "answer": "a"},
        ).status_code
        == 404
    )
    gone = api.http.post(
        f"/v1/conversations/{api.conversation}/deletions",
        headers=api.auth,
        json={"turn_ids": ["t1", "nope"]},
    )
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "turn_not_found"
    for url in ("/v1/conversations/not-a-uuid", turn_url(api, turn_id="bad id!")):
        response = (
            api.http.get(url, headers=api.auth)
            if "turns" not in url
            else api.http.put(
                url, headers=api.auth, json={"question": "q", "answer": "a"}
            )
        )
        assert response.status_code == 422
        assert response.json()["error"]["details"]
    assert api.http.delete("/v1/devices/dev_nope", headers=api.auth).status_code == 404


@pytest.mark.parametrize(
    "params",
    [
        {"since": "c1.bogus"},
        {"since": "x" * 300},
        {"limit": 0},
        {"limit": 100_000},
        {"timeout": -1},
        {"timeout": "soon"},
    ],
)
def test_bad_sync_parameters_are_422s(api: Api, params: dict[str, Any]) -> None:
    response = api.http.get("/v1/sync", headers=api.auth, params=params)
    assert response.status_code == 422
    assert response.json()["error"]["code"] in ("invalid_input", "invalid_request")


def test_a_retried_confirmation_returns_the_same_receipt_and_writes_nothing(
    api: Api,
) -> None:
    body = {"question": "Again?", "answer": "Again."}
    first = api.http.put(turn_url(api), headers=api.auth, json=body)
    head = api.head()
    second = api.http.put(turn_url(api), headers=api.auth, json=body)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert api.head() == head
    changed = api.http.put(
        turn_url(api),
        headers=api.auth,
        json={"question": "Again?", "answer": "Different."},
    )
    assert (
        changed.status_code == 409
        and changed.json()["error"]["code"] == "turn_conflict"
    )
    api.http.post(
        f"/v1/conversations/{api.conversation}/deletions",
        headers=api.auth,
        json={"turn_ids": ["t2"]},
    )
    deleted = api.http.put(turn_url(api), headers=api.auth, json=body)
    assert (
        deleted.status_code == 409 and deleted.json()["error"]["code"] == "turn_deleted"
    )


def test_a_stale_expected_version_is_a_409_with_the_current_version(api: Api) -> None:
    stale = api.http.put(
        turn_url(api),
        headers=api.auth,
        json={"question": "q", "answer": "a", "expected_version": 1},
    )
    assert stale.status_code == 409
    assert stale.json()["error"] == {
        **stale.json()["error"],
        "code": "version_conflict",
        "current_version": 2,
    }
    fresh = api.http.put(
        turn_url(api),
        headers=api.auth,
        json={"question": "q", "answer": "a", "expected_version": 2},
    )
    assert fresh.status_code == 200 and fresh.json()["version"] == 3


def test_the_window_endpoint_returns_the_exact_request_body(api: Api) -> None:
    url = f"/v1/conversations/{api.conversation}/window"
    request = {
        "question": "Next?",
        "system": "Be brief.",
        "model": "m",
        "max_bytes": 500,
    }
    window = api.http.post(url, headers=api.auth, json=request)
    assert window.status_code == 200, window.text
    out = window.json()
    body = out["body"].encode("utf-8")
    assert len(body) == out["byte_length"] <= 500
    assert json.loads(body)["messages"][-1] == {"role": "user", "content": "Next?"}
    assert out["kept_turn_ids"] == ["t1"] and out["ledger_version"] == 2
    too_small = api.http.post(url, headers=api.auth, json={**request, "max_bytes": 10})
    assert too_small.status_code == 422
    assert too_small.json()["error"]["code"] == "window_error"


def test_deletion_needs_exactly_one_target(api: Api) -> None:
    url = f"/v1/conversations/{api.conversation}/deletions"
    before = api.head()
    for body in ({}, {"turn_ids": ["t1"], "whole_history": True}):
        response = api.http.post(url, headers=api.auth, json=body)
        assert response.status_code == 422
    assert api.head() == before
    whole = api.http.post(url, headers=api.auth, json={"whole_history": True})
    assert whole.status_code == 200 and whole.json()["deleted_turn_ids"] == ["t1"]


def test_a_long_poll_wakes_when_the_ledger_is_written_outside_the_service(
    api: Api,
) -> None:
    cursor = api.http.get("/v1/sync", headers=api.auth).json()["next_cursor"]
    ledger = api.http.app.state.service.ledger  # type: ignore[attr-defined]
    conversation = ledger.get_conversation("alice", UUID(api.conversation)).id

    def write_later() -> None:
        time.sleep(0.3)
        ledger.confirm_turn(
            "alice", conversation, turn_id="direct", question="q", answer="a"
        )

    writer = threading.Thread(target=write_later)
    began = time.monotonic()
    writer.start()
    response = api.http.get(
        "/v1/sync", headers=api.auth, params={"since": cursor, "timeout": 10}
    )
    waited = time.monotonic() - began
    writer.join()
    assert [c["turn_id"] for c in response.json()["changes"]] == ["direct"]
    assert 0.3 <= waited < 5


def test_devices_of_one_user_manage_each_other(api: Api) -> None:
    added = api.http.post("/v1/devices", headers=api.auth, json={"name": "laptop"})
    assert added.status_code == 201
    laptop = {"Authorization": f"Bearer {added.json()['token']}"}
    assert (
        api.http.get("/v1/conversations", headers=laptop).json()["conversations"][0][
            "conversation_id"
        ]
        == api.conversation
    )
    names = [
        d["name"] for d in api.http.get("/v1/devices", headers=laptop).json()["devices"]
    ]
    assert sorted(names) == ["laptop", "phone"]
    assert added.json()["device"]["added_by"] is not None
    # Revoking the phone revokes the laptop it added, too.
    phone_id = added.json()["device"]["added_by"]
    revoked = api.http.delete(f"/v1/devices/{phone_id}", headers=laptop)
    assert revoked.status_code == 200
    assert api.http.get("/v1/conversations", headers=laptop).status_code == 401
    assert api.http.get("/v1/conversations", headers=api.auth).status_code == 401


def test_starting_a_conversation_with_a_client_key_is_idempotent(api: Api) -> None:
    before = api.head()
    first = api.http.post(
        "/v1/conversations", headers=api.auth, json={"client_key": "k1"}
    )
    again = api.http.post(
        "/v1/conversations", headers=api.auth, json={"client_key": "k1"}
    )
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert api.head() == before + 1
    other = api.http.post(
        "/v1/conversations", headers=api.auth, json={"client_key": "k2"}
    )
    assert other.json()["conversation_id"] != first.json()["conversation_id"]


def test_the_same_client_key_of_another_user_names_another_conversation(
    api: Api,
) -> None:
    registry = api.http.app.state.service.registry  # type: ignore[attr-defined]
    bob = {"Authorization": f"Bearer {registry.add('bob', 'phone').token}"}
    alices = api.http.post(
        "/v1/conversations", headers=api.auth, json={"client_key": "k"}
    )
    bobs = api.http.post("/v1/conversations", headers=bob, json={"client_key": "k"})
    assert bobs.status_code == 201
    assert bobs.json()["conversation_id"] != alices.json()["conversation_id"]
    listed = api.http.get("/v1/conversations", headers=bob).json()["conversations"]
    assert [c["conversation_id"] for c in listed] == [bobs.json()["conversation_id"]]


def test_the_export_streams_the_users_conversations_as_json_lines(api: Api) -> None:
    registry = api.http.app.state.service.registry  # type: ignore[attr-defined]
    bob = {"Authorization": f"Bearer {registry.add('bob', 'phone').token}"}
    bobs = api.http.post("/v1/conversations", headers=bob).json()["conversation_id"]
    api.http.put(
        turn_url(api, conversation=bobs),
        headers=bob,
        json={"question": "Bob's secret", "answer": "kept"},
    )
    api.http.put(
        turn_url(api),
        headers=api.auth,
        json={"question": "Doomed", "answer": "soon gone"},
    )
    api.http.post(
        f"/v1/conversations/{api.conversation}/deletions",
        headers=api.auth,
        json={"turn_ids": ["t2"]},
    )
    response = api.http.get("/v1/export", headers=api.auth)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    records = [json.loads(line) for line in response.text.splitlines()]
    kinds = [r["record"] for r in records]
    assert kinds == ["export", "conversation", "turn", "turn", "deletion", "end"]
    assert records[0]["owner_id"] == "alice"
    turns = {r["turn_id"]: r for r in records if r["record"] == "turn"}
    assert turns["t1"]["question"] == "Hello?"
    assert turns["t2"]["deleted"] and turns["t2"]["question"] is None
    assert "Doomed" not in response.text and "Bob's secret" not in response.text
    assert records[-1] == {
        "record": "end",
        "conversations": 1,
        "turns": 2,
        "deleted_turns": 1,
    }
    assert api.http.get("/v1/export").status_code == 401


def test_concurrent_devices_on_every_store_lose_and_duplicate_nothing(
    api: Api,
) -> None:
    """The service's thread pool against each store (the PostgreSQL end-to-end
    test does 8 x 200 over real HTTP; this covers SQLite and memory too)."""
    from concurrent.futures import ThreadPoolExecutor

    def push(device: int) -> list[int]:
        versions = []
        for n in range(15):
            url = turn_url(api, f"d{device}-{n}")
            body = {"question": f"q{device}-{n}", "answer": "a"}
            first = api.http.put(url, headers=api.auth, json=body)
            again = api.http.put(url, headers=api.auth, json=body)
            assert first.status_code == 200 and first.json() == again.json()
            versions.append(first.json()["version"])
        return versions

    with ThreadPoolExecutor(4) as pool:
        versions = sorted(v for vs in pool.map(push, range(4)) for v in vs)
    assert versions == list(range(3, 63))  # t1 holds version 2
    changes = api.http.get("/v1/sync", headers=api.auth).json()["changes"]
    assert [c["version"] for c in changes] == list(range(1, 63))


def test_the_window_endpoint_takes_every_option_of_the_window_policy(api: Api) -> None:
    url = f"/v1/conversations/{api.conversation}/window"
    for n in range(2, 6):
        api.http.put(
            turn_url(api, f"t{n}"),
            headers=api.auth,
            json={"question": f"Question {n}?", "answer": f"Answer {n}."},
        )
    policy = {
        "wire_format": "anthropic-messages",
        "max_bytes": 100_000,
        "max_tokens": None,
        "max_messages": 4,
        "floor_messages": 2,
        "reserved_output_tokens": 256,
    }
    window = api.http.post(
        url,
        headers=api.auth,
        json={
            "question": "Next?",
            "system": "Be brief.",
            "model": "m",
            "policy": policy,
        },
    )
    assert window.status_code == 200, window.text
    out = window.json()
    assert out["wire_format"] == "anthropic-messages"
    assert out["kept_turn_ids"] == ["t4", "t5"]  # 4 messages = 2 turns
    assert out["dropped_turn_ids"] == ["t1", "t2", "t3"]
    body = json.loads(out["body"])
    assert body["max_tokens"] == 256 and body["system"] == "Be brief."
    assert out["report"]["kept_turn_ids"] == ["t4", "t5"]
    # The service's configured policy when the request names none.
    default = api.http.post(
        url, headers=api.auth, json={"question": "Next?", "model": "m"}
    )
    assert default.status_code == 200 and default.json()["wire_format"] == "openai-chat"
    # A policy that breaks its own rules is refused, naming the rule.
    bad = api.http.post(
        url,
        headers=api.auth,
        json={
            "question": "Next?",
            "model": "m",
            "policy": {"max_messages": 2, "floor_messages": 5},
        },
    )
    assert bad.status_code == 422 and "floor_messages" in bad.text
    unknown = api.http.post(
        url,
        headers=api.auth,
        json={"question": "Next?", "model": "m", "policy": {"max_bites": 5}},
    )
    assert unknown.status_code == 422


def test_an_application_service_records_a_fold_and_windows_send_it(api: Api) -> None:
    base = f"/v1/conversations/{api.conversation}"
    for n in range(2, 5):
        api.http.put(
            turn_url(api, f"t{n}"),
            headers=api.auth,
            json={"question": f"Question {n}?", "answer": f"Answer {n}."},
        )
    before = api.http.get(f"{base}/fold", headers=api.auth).json()
    assert before["fold_id"] is None and before["summary"] is None
    version = api.http.get(base, headers=api.auth).json()["version"]
    body = {
        "covers_through_turn_id": "t2",
        "summary": "Hello, twice.",
        "fold_id": "f1",
        "summarized_version": version,
    }
    recorded = api.http.post(f"{base}/folds", headers=api.auth, json=body)
    assert recorded.status_code == 201, recorded.text
    assert recorded.json()["fold_id"] == "f1"
    again = api.http.post(f"{base}/folds", headers=api.auth, json=body)
    assert again.status_code == 409 and again.json()["error"]["code"] == "fold_conflict"
    status = api.http.get(f"{base}/fold", headers=api.auth).json()
    assert status["summary"] == "Hello, twice."
    assert status["covers_through_turn_id"] == "t2"
    window = api.http.post(
        f"{base}/window",
        headers=api.auth,
        json={"question": "Next?", "model": "m", "max_bytes": 100_000},
    ).json()
    assert "Hello, twice." in window["body"] and window["fold_id"] == "f1"
    missing = api.http.post(
        f"{base}/folds",
        headers=api.auth,
        json={
            "covers_through_turn_id": "nope",
            "summary": "s",
            "summarized_version": 1,
        },
    )
    assert missing.status_code == 404
    # A fold that names no summarized version is refused whole.
    unnamed = api.http.post(
        f"{base}/folds",
        headers=api.auth,
        json={"covers_through_turn_id": "t3", "summary": "s"},
    )
    assert unnamed.status_code == 422


def row_counts(settings: Settings) -> dict[str, int]:
    """Rows in every table the store keeps (device store included)."""
    counts: dict[str, int] = {}
    if settings.persistence == "postgres":
        import psycopg
        from psycopg import sql

        with psycopg.connect(settings.postgres_conninfo()) as connection:
            tables = connection.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = %s AND table_type = 'BASE TABLE'",
                (settings.postgres_schema,),
            ).fetchall()
            for (table,) in tables:
                row = connection.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(
                        sql.Identifier(settings.postgres_schema, table)
                    )
                ).fetchone()
                assert row is not None
                counts[table] = int(row[0])
    elif settings.persistence == "sqlite":
        import sqlite3

        for path in sorted(settings.data_dir.glob("*.sqlite3")):
            with sqlite3.connect(path) as connection:
                tables = connection.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                ).fetchall()
                for (table,) in tables:
                    (count,) = connection.execute(
                        f'SELECT count(*) FROM "{table}"'
                    ).fetchone()
                    counts[f"{path.name}/{table}"] = int(count)
    assert counts or settings.persistence == "memory"
    return counts


NUL_REQUESTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("PUT", "/turns/t9", {"question": "nul \x00 here", "answer": "a"}),
    ("PUT", "/turns/t9", {"question": "q", "answer": "a\x00"}),
    ("PUT", "/turns/t9", {"question": "q", "answer": "\x00", "status": "failed"}),
    ("PUT", "/turns/t%009", {"question": "q", "answer": "a"}),
    (
        "POST",
        "/folds",
        {"covers_through_turn_id": "t1", "summary": "s\x00", "summarized_version": 1},
    ),
    (
        "POST",
        "/folds",
        {"covers_through_turn_id": "t\x001", "summary": "s", "summarized_version": 1},
    ),
    ("POST", "/window", {"question": "q\x00", "model": "m"}),
    ("POST", "/window", {"question": "q", "model": "m", "system": "\x00"}),
    ("POST", "/deletions", {"turn_ids": ["t\x001"]}),
    ("POST", "", {"client_key": "k\x00"}),
    ("POST", "devices", {"name": "my \x00 phone"}),
    ("DELETE", "devices/dev_%00", None),
]


@pytest.mark.parametrize(("method", "path", "body"), NUL_REQUESTS)
def test_nul_in_any_text_or_id_is_a_422_and_writes_no_row_anywhere(
    api: Api,
    settings: Settings,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    before = row_counts(settings)
    devices = api.http.get("/v1/devices", headers=api.auth).json()
    if path.startswith("devices"):
        url = f"/v1/{path}"
    elif path:
        url = f"/v1/conversations/{api.conversation}{path}"
    else:
        url = "/v1/conversations"
    response = api.http.request(method, url, headers=api.auth, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] in {"invalid_request", "invalid_input"}
    assert row_counts(settings) == before
    assert api.http.get("/v1/devices", headers=api.auth).json() == devices


def test_nul_is_refused_by_the_python_api_with_invalid_input(api: Api) -> None:
    from turnledger.domain.errors import InvalidInputError

    service = api.http.app.state.service  # type: ignore[attr-defined]
    conversation = UUID(api.conversation)
    before = api.head()
    with pytest.raises(InvalidInputError, match="NUL"):
        service.ledger.confirm_turn(
            "alice", conversation, turn_id="t9", question="q\x00", answer="a"
        )
    with pytest.raises(InvalidInputError, match="NUL"):
        service.ledger.record_fold(
            "alice",
            conversation,
            covers_through_turn_id="t1",
            summary="\x00",
            summarized_version=service.ledger.get_conversation(
                "alice", conversation
            ).version,
        )
    with pytest.raises(InvalidInputError, match="NUL"):
        service.registry.add("alice", "\x00")
    assert api.head() == before


def test_a_retried_keyed_start_reports_the_conversations_current_version(
    api: Api,
) -> None:
    first = api.http.post(
        "/v1/conversations", headers=api.auth, json={"client_key": "kv"}
    )
    conversation = first.json()["conversation_id"]
    assert first.json()["version"] == 1
    put = api.http.put(
        turn_url(api, "k1", conversation),
        headers=api.auth,
        json={"question": "q", "answer": "a"},
    )
    assert put.json()["version"] == 2
    again = api.http.post(
        "/v1/conversations", headers=api.auth, json={"client_key": "kv"}
    )
    assert again.status_code == 201
    assert again.json() == {"conversation_id": conversation, "version": 2}
    # The version it reports is the one to build on.
    built = api.http.put(
        turn_url(api, "k2", conversation),
        headers=api.auth,
        json={"question": "q", "answer": "a", "expected_version": 2},
    )
    assert built.status_code == 200, built.text


def test_a_write_wakes_only_its_own_users_long_polls(api: Api) -> None:
    """Idle long-polls of other users are not woken, so they read nothing."""
    service = api.http.app.state.service  # type: ignore[attr-defined]
    reads: dict[str, int] = {}
    changes_since = service.feed.changes_since

    def counting(owner_id: str, position: int, **kwargs: Any) -> Any:
        reads[owner_id] = reads.get(owner_id, 0) + 1
        return changes_since(owner_id, position, **kwargs)

    service.feed.changes_since = counting
    bob = {"Authorization": f"Bearer {service.registry.add('bob', 'b').token}"}
    carol = {"Authorization": f"Bearer {service.registry.add('carol', 'c').token}"}
    answers: list[Any] = []

    def long_poll(headers: dict[str, str]) -> None:
        answers.append(
            api.http.get("/v1/sync", headers=headers, params={"timeout": 2}).json()
        )

    waiting = [threading.Thread(target=long_poll, args=(h,)) for h in (bob, carol)]
    for thread in waiting:
        thread.start()
    time.sleep(0.3)
    for n in range(10):
        put = api.http.put(
            turn_url(api, f"w{n}"),
            headers=api.auth,
            json={"question": "q", "answer": "a"},
        )
        assert put.status_code == 200
        time.sleep(0.02)
    for thread in waiting:
        thread.join(timeout=10)
    assert [answer["changes"] for answer in answers] == [[], []]
    # One read when each long-poll began and one when it timed out: none of
    # alice's ten writes made bob or carol read the log.
    assert reads["bob"] == 2, reads
    assert reads["carol"] == 2, reads


def test_liveness_and_readiness_answer_without_a_token(api: Api) -> None:
    assert api.http.get("/v1/health").json() == {"status": "ok"}
    ready = api.http.get("/v1/ready")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert ready.json()["database"] == "available"
    assert "/v1/ready" in api.http.get("/openapi.json").json()["paths"]


def test_a_long_poll_is_released_when_its_device_is_revoked_outside_the_service(
    api: Api,
) -> None:
    """Revoked through the registry directly (as `turnledger device revoke`
    does): the service hears of it from the store, not from its own route."""
    service = api.http.app.state.service  # type: ignore[attr-defined]
    issued = service.registry.add("alice", "tablet")
    tablet = {"Authorization": f"Bearer {issued.token}"}
    cursor = api.http.get("/v1/sync", headers=tablet).json()["next_cursor"]
    outcome: list[tuple[int, float]] = []

    def long_poll() -> None:
        response = api.http.get(
            "/v1/sync", headers=tablet, params={"since": cursor, "timeout": 10}
        )
        outcome.append((response.status_code, time.monotonic()))

    thread = threading.Thread(target=long_poll)
    thread.start()
    time.sleep(0.5)
    assert not outcome
    revoked_at = time.monotonic()
    service.registry.revoke(issued.device.device_id)
    thread.join(timeout=15)
    status, answered_at = outcome[0]
    assert status == 401
    assert answered_at - revoked_at < 1.0, answered_at - revoked_at
