"""One change woken for several long-polls of a user is read once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from fastapi.testclient import TestClient

from turnledger.infra.http.app import create_app
from turnledger.infra.http.notifier import SharedReads
from turnledger.infra.http.sync_routes import _change_out
from turnledger.infra.settings import Settings
from turnledger.infra.wire.schemas import SyncOut


def test_waiters_holding_one_key_share_one_read() -> None:
    async def scenario() -> None:
        shared = SharedReads()
        calls = 0
        release = asyncio.Event()

        async def read() -> str:
            nonlocal calls
            calls += 1
            await release.wait()
            return f"batch {calls}"

        event = asyncio.Event()
        first = asyncio.ensure_future(shared.read(("ann", 7, 100, event), 0, read))
        second = asyncio.ensure_future(shared.read(("ann", 7, 100, event), 0, read))
        # Another wake-up event (a change fired in between): a read of its own.
        other = asyncio.ensure_future(
            shared.read(("ann", 7, 100, asyncio.Event()), 0, read)
        )
        # A waiter that must see a later WAL position does not join.
        later = asyncio.ensure_future(shared.read(("ann", 7, 100, event), 5, read))
        await asyncio.sleep(0)
        release.set()
        results = await asyncio.gather(first, second, other, later)
        assert results[0] == results[1]
        assert calls == 3
        assert (shared.started, shared.joined) == (3, 1)
        # Once a read is done its key is free: the next read is a new one.
        assert await shared.read(("ann", 7, 100, event), 0, read) == "batch 4"

    asyncio.run(scenario())


def test_a_waiter_that_goes_away_does_not_cancel_the_shared_read() -> None:
    async def scenario() -> None:
        shared = SharedReads()
        release = asyncio.Event()

        async def read() -> str:
            await release.wait()
            return "batch"

        key = ("ann", 0, 100, asyncio.Event())
        leaving = asyncio.ensure_future(shared.read(key, 0, read))
        staying = asyncio.ensure_future(shared.read(key, 0, read))
        await asyncio.sleep(0)
        leaving.cancel()
        release.set()
        assert await staying == "batch"

    asyncio.run(scenario())


def test_one_change_woken_for_three_devices_is_read_once(settings: Settings) -> None:
    app = create_app(settings)
    with TestClient(app) as http:
        service = app.state.service
        tokens = [service.registry.add("ann", f"device {n}").token for n in range(4)]
        writer = {"Authorization": f"Bearer {tokens[0]}"}
        conversation = http.post("/v1/conversations", headers=writer).json()[
            "conversation_id"
        ]
        cursor = http.get("/v1/sync", headers=writer).json()["next_cursor"]
        reads_with_changes: list[int] = []
        reads = 0
        original = service.feed.changes_since

        def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            batch = original(*args, **kwargs)
            reads += 1
            if batch.changes:
                reads_with_changes.append(len(batch.changes))
            return batch

        service.feed.changes_since = counting
        answers: list[dict[str, Any]] = []

        def long_poll(token: str) -> None:
            answer = http.get(
                "/v1/sync",
                headers={"Authorization": f"Bearer {token}"},
                params={"since": cursor, "timeout": 20},
            )
            answers.append(answer.json())

        threads = [
            threading.Thread(target=long_poll, args=(token,)) for token in tokens[1:]
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while reads < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # each is waiting now
        put = http.put(
            f"/v1/conversations/{conversation}/turns/t1",
            headers=writer,
            json={"question": "q", "answer": "a"},
        )
        assert put.status_code == 200
        for thread in threads:
            thread.join(timeout=30)
        del service.feed.changes_since
    assert len(answers) == 3
    assert all([c["turn_id"] for c in a["changes"]] == ["t1"] for a in answers)
    assert reads_with_changes == [1]
    assert service.signals.shared_reads.joined >= 2


def test_the_spliced_answer_is_the_sync_model_as_documented(settings: Settings) -> None:
    """The route splices the changes' JSON rendered once per read; the answer
    must be what the documented SyncOut gives for the same read."""
    app = create_app(settings)
    with TestClient(app) as http:
        service = app.state.service
        token = service.registry.add("ann", "phone").token
        ledger = service.ledger
        conversation = ledger.start_conversation("ann")
        ledger.confirm_turn(
            "ann",
            conversation,
            turn_id="t1",
            question='naïve "quoted"\n\ttext \u2028 🚀 <b>&</b>',
            answer="\\ backslash \x7f",
        )
        ledger.record_abandoned_turn(
            "ann", conversation, turn_id="t2", question="q", outcome="stopped"
        )
        ledger.confirm_turn("ann", conversation, turn_id="t3", question="q", answer="a")
        ledger.delete_history("ann", conversation, turn_ids=["t3"])
        answer = http.get(
            "/v1/sync",
            headers={"Authorization": f"Bearer {token}"},
            params={"limit": 4},
        )
        batch = service.feed.changes_since("ann", 0, limit=4)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    documented = SyncOut(
        changes=[_change_out(change) for change in batch.changes],
        next_cursor=body["next_cursor"],
        has_more=True,
    )
    assert body == documented.model_dump(mode="json")
    assert SyncOut.model_validate_json(answer.content) == documented
