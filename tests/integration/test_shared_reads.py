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
            number = calls
            await release.wait()
            return f"batch {number}"

        def waiter(
            event: asyncio.Event, *, position: int = 7, wal: int = 0
        ) -> asyncio.Future[tuple[str, bool]]:
            return asyncio.ensure_future(
                shared.read("ann", position=position, wal=wal, woken=event, start=read)
            )

        event = asyncio.Event()
        first, second = waiter(event), waiter(event)
        # Another wake-up event (a change fired in between): a read of its own.
        other = waiter(asyncio.Event())
        # A waiter that must see a later WAL position does not join.
        later = waiter(event, wal=5)
        await asyncio.sleep(0)
        release.set()
        results = await asyncio.gather(first, second, other, later)
        assert results[0] == results[1] == ("batch 1", True)
        assert all(exact for _, exact in results)
        assert calls == 3
        assert (shared.started, shared.joined) == (3, 1)
        # Once a read is done its key is free: the next read is a new one.
        assert await waiter(event) == ("batch 4", True)

    asyncio.run(scenario())


def test_a_later_cursor_joins_a_read_in_flight_that_is_not_exact_for_it() -> None:
    async def scenario() -> None:
        shared = SharedReads()
        calls = 0
        release = asyncio.Event()

        async def read() -> str:
            nonlocal calls
            calls += 1
            number = calls
            await release.wait()
            return f"batch {number}"

        def waiter(position: int, *, any_cursor: bool) -> asyncio.Future[Any]:
            return asyncio.ensure_future(
                shared.read(
                    "ann",
                    position=position,
                    wal=0,
                    woken=asyncio.Event(),
                    start=read,
                    any_cursor=any_cursor,
                )
            )

        first = waiter(7, any_cursor=True)
        await asyncio.sleep(0)
        # Started later, at or after the read's cursor: joins, not exact.
        ahead = waiter(9, any_cursor=True)
        # Behind the read in flight: it cannot hold this one's changes.
        behind = waiter(5, any_cursor=True)
        await asyncio.sleep(0)
        release.set()
        assert await first == ("batch 1", True)
        assert await ahead == ("batch 1", False)
        assert await behind == ("batch 2", True)
        # Without `any_cursor` only an exact read is joined.
        release.clear()
        leader = waiter(7, any_cursor=False)
        await asyncio.sleep(0)
        alone = waiter(9, any_cursor=False)
        await asyncio.sleep(0)
        release.set()
        assert (await leader, await alone) == (("batch 3", True), ("batch 4", True))

    asyncio.run(scenario())


def test_a_waiter_that_goes_away_does_not_cancel_the_shared_read() -> None:
    async def scenario() -> None:
        shared = SharedReads()
        release = asyncio.Event()

        async def read() -> str:
            await release.wait()
            return "batch"

        event = asyncio.Event()

        def waiter() -> asyncio.Future[tuple[str, bool]]:
            return asyncio.ensure_future(
                shared.read("ann", position=0, wal=0, woken=event, start=read)
            )

        leaving, staying = waiter(), waiter()
        await asyncio.sleep(0)
        leaving.cancel()
        release.set()
        assert await staying == ("batch", True)

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
        # Each long-poll has read, or joined a read in flight.
        joined = service.signals.shared_reads.joined
        while reads + joined < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            joined = service.signals.shared_reads.joined
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
