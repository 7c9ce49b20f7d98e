"""Devices of one user push and pull through the real service and converge."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.conftest import Server, client
from tests.e2e.replica import Replica, pull

pytestmark = pytest.mark.postgres

SECRET = "the launch code is TANGERINE-42"


def confirm(
    http: httpx.Client,
    conversation_id: str,
    turn_id: str,
    question: str,
    answer: str,
    **extra: object,
) -> httpx.Response:
    return http.put(
        f"/v1/conversations/{conversation_id}/turns/{turn_id}",
        json={"question": question, "answer": answer, **extra},
    )


def start(http: httpx.Client) -> str:
    response = http.post("/v1/conversations")
    assert response.status_code == 201, response.text
    return str(response.json()["conversation_id"])


def test_two_devices_of_one_user_push_and_pull_and_converge(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    phone = client(server, add_device("alice", "phone"))
    laptop = client(server, add_device("alice", "laptop"))
    phone_copy, laptop_copy = Replica(), Replica()

    conversation = start(phone)
    assert confirm(phone, conversation, "p1", "Hello?", "Hi, Alice.").status_code == 200
    assert (
        confirm(
            phone, conversation, "p2", "Java 8 — “no var”. 谢谢", "OK 👍"
        ).status_code
        == 200
    )
    laptop_copy.sync(laptop)
    assert laptop_copy.versions[conversation] == 3

    # The laptop writes on top of what it saw; the phone's stale write is refused
    # with the current version, so it pulls and retries.
    assert (
        confirm(
            laptop, conversation, "l1", "From the laptop", "Seen.", expected_version=3
        ).status_code
        == 200
    )
    stale = confirm(phone, conversation, "p3", "Stale?", "Yes.", expected_version=3)
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "version_conflict"
    assert stale.json()["error"]["current_version"] == 4
    phone_copy.sync(phone)
    assert (
        confirm(
            phone,
            conversation,
            "p3",
            "Stale?",
            "Yes.",
            expected_version=phone_copy.versions[conversation],
        ).status_code
        == 200
    )

    phone_copy.sync(phone)
    laptop_copy.sync(laptop)
    assert phone_copy.turns == laptop_copy.turns
    assert phone_copy.versions == laptop_copy.versions == {conversation: 5}
    assert list(laptop_copy.turns[conversation]) == ["p1", "p2", "l1", "p3"]
    assert laptop_copy.turns[conversation]["p2"] == ("Java 8 — “no var”. 谢谢", "OK 👍")

    history = laptop.get(f"/v1/conversations/{conversation}/turns").json()
    assert [(i["turn_id"], i["question"], i["answer"]) for i in history["items"]] == [
        (turn_id, *texts) for turn_id, texts in laptop_copy.turns[conversation].items()
    ]
    listed = phone.get("/v1/conversations").json()["conversations"]
    assert [c["conversation_id"] for c in listed] == [conversation]


def test_a_third_users_device_can_neither_read_nor_write_nor_learn(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    alice = client(server, add_device("alice", "phone"))
    mallory = client(server, add_device("mallory", "laptop"))
    conversation = start(alice)
    assert confirm(alice, conversation, "t1", SECRET, "Noted.").status_code == 200
    _, alice_cursor = pull(alice)
    missing = str(uuid.uuid4())

    def attempts(target: str) -> list[httpx.Response]:
        return [
            mallory.get(f"/v1/conversations/{target}"),
            mallory.get(f"/v1/conversations/{target}/turns"),
            confirm(mallory, target, "t1", SECRET, "Noted."),
            confirm(mallory, target, "t9", "Let me in", "No."),
            mallory.post(
                f"/v1/conversations/{target}/window",
                json={"question": "q", "model": "m", "max_bytes": 10_000},
            ),
            mallory.post(
                f"/v1/conversations/{target}/deletions", json={"whole_history": True}
            ),
            mallory.post(
                f"/v1/conversations/{target}/folds",
                json={
                    "covers_through_turn_id": "t1",
                    "summary": "mine now",
                    "summarized_version": 2,
                },
            ),
            mallory.get(f"/v1/conversations/{target}/fold"),
        ]

    # Alice's conversation is answered exactly like one that does not exist.
    for foreign, absent in zip(attempts(conversation), attempts(missing), strict=True):
        assert foreign.status_code == absent.status_code == 404
        assert foreign.text.replace(conversation, "ID") == absent.text.replace(
            missing, "ID"
        )
        assert SECRET not in foreign.text

    assert mallory.get("/v1/conversations").json() == {"conversations": []}
    exported = mallory.get("/v1/export")
    assert exported.status_code == 200
    assert SECRET not in exported.text and conversation not in exported.text
    changes, _ = pull(mallory)
    assert changes == []
    # Alice's cursor is no use to Mallory, and says nothing about Alice.
    borrowed = mallory.get("/v1/sync", params={"since": alice_cursor})
    assert borrowed.status_code == 422
    assert SECRET not in borrowed.text and conversation not in borrowed.text

    # Nothing Mallory did changed Alice's conversation.
    state = alice.get(f"/v1/conversations/{conversation}").json()
    assert state["version"] == 2 and state["total_turns"] == 1
    changes, _ = pull(alice, alice_cursor)
    assert changes == []


def test_a_deletion_made_on_one_device_is_pulled_by_the_other(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    phone = client(server, add_device("alice", "phone"))
    laptop = client(server, add_device("alice", "laptop"))
    _, cursor_before_everything = pull(laptop)
    laptop_copy = Replica()

    conversation = start(phone)
    assert confirm(phone, conversation, "t1", SECRET, "Noted.").status_code == 200
    assert confirm(phone, conversation, "t2", "Keep this", "Kept.").status_code == 200
    laptop_copy.sync(laptop)
    assert laptop_copy.turns[conversation]["t1"] == (SECRET, "Noted.")

    deleted = phone.post(
        f"/v1/conversations/{conversation}/deletions", json={"turn_ids": ["t1"]}
    )
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted_turn_ids"] == ["t1"]

    changes = laptop_copy.sync(laptop)
    assert [c["kind"] for c in changes] == ["history_deleted"]
    assert changes[0]["turn_ids"] == ["t1"]
    assert laptop_copy.turns[conversation] == {
        "t1": (None, None),
        "t2": ("Keep this", "Kept."),
    }

    # A device whose cursor predates the deletion never receives the text.
    stale = laptop.get("/v1/sync", params={"since": cursor_before_everything})
    assert stale.status_code == 200
    assert "TANGERINE" not in stale.text
    recorded = [c for c in stale.json()["changes"] if c.get("turn_id") == "t1"]
    assert recorded == [
        {**recorded[0], "deleted": True, "question": None, "answer": None}
    ]
    fresh = Replica()
    fresh.sync(client(server, add_device("alice", "tablet")))
    assert fresh.turns == laptop_copy.turns
    history = laptop.get(f"/v1/conversations/{conversation}/turns")
    assert "TANGERINE" not in history.text


def test_a_long_poll_returns_as_soon_as_another_process_commits(
    launch: Callable[[], Server], add_device: Callable[[str, str], str]
) -> None:
    first, second = launch(), launch()
    phone = client(first, add_device("alice", "phone"))
    laptop = client(second, add_device("alice", "laptop"))
    conversation = start(phone)
    _, cursor = pull(laptop)

    result: dict[str, object] = {}

    def long_poll() -> None:
        began = time.monotonic()
        response = laptop.get("/v1/sync", params={"since": cursor, "timeout": 20})
        result.update(response=response, waited=time.monotonic() - began)

    waiter = threading.Thread(target=long_poll)
    waiter.start()
    time.sleep(0.5)  # the poll is waiting on the second process by now
    assert not result
    assert confirm(phone, conversation, "t1", "Ping", "Pong").status_code == 200
    waiter.join(timeout=25)
    response = result["response"]
    assert isinstance(response, httpx.Response) and response.status_code == 200
    changes = response.json()["changes"]
    assert [(c["kind"], c["turn_id"]) for c in changes] == [("turn_recorded", "t1")]
    assert 0.5 <= float(result["waited"]) < 10  # type: ignore[arg-type]


def test_a_long_poll_with_nothing_new_waits_for_its_timeout(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    alice = client(server, add_device("alice", "phone"))
    bob = client(server, add_device("bob", "phone"))
    _, cursor = pull(alice)
    bobs = start(bob)  # after Alice's cursor: the feed must read past it

    def bob_writes_meanwhile() -> None:
        time.sleep(0.3)
        assert confirm(bob, bobs, "t1", "q", "a").status_code == 200

    writer = threading.Thread(target=bob_writes_meanwhile)
    began = time.monotonic()
    writer.start()
    # Bob's write wakes the poll, but none of his changes is Alice's.
    response = alice.get("/v1/sync", params={"since": cursor, "timeout": 1})
    waited = time.monotonic() - began
    writer.join()
    assert response.status_code == 200
    assert waited >= 1
    assert response.json()["changes"] == []
    changes, _ = pull(alice, response.json()["next_cursor"])
    assert changes == []


def test_a_revoked_token_is_refused_at_once(
    server: Server, add_device: Callable[[str, str], str]
) -> None:
    phone = client(server, add_device("alice", "phone"))
    lost = client(server, add_device("alice", "lost tablet"))
    devices = phone.get("/v1/devices").json()["devices"]
    lost_id = next(d["device_id"] for d in devices if d["name"] == "lost tablet")
    revoked = phone.delete(f"/v1/devices/{lost_id}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    refused = lost.get("/v1/conversations")
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert json.loads(refused.text)["error"]["code"] == "unauthenticated"
    assert phone.get("/v1/conversations").status_code == 200
