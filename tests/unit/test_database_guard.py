"""The outage guard: every request in flight when the database is found
unavailable is answered 503 at once; requests that ended are left alone."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from turnledger.infra.http.database import DatabaseGuard, DatabaseMonitor


class Database:
    """What the monitor's check asks: up or down."""

    def __init__(self) -> None:
        self.up = True

    async def check(self) -> None:
        if not self.up:
            raise ConnectionError("the database went away")


async def request(guard: DatabaseGuard, path: str = "/v1/sync") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "GET", "headers": []}
    await guard(scope, receive, send)
    return sent


def test_requests_in_flight_get_503_and_finished_ones_nothing_more() -> None:
    async def scenario() -> None:
        database = Database()
        monitor = DatabaseMonitor(database.check, interval=60, timeout=1)
        release = asyncio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["path"] == "/v1/slow":
                await release.wait()  # a long-poll
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        guard = DatabaseGuard(
            app, monitor=lambda: monitor, unguarded=frozenset(), retry_after=2
        )
        finished = [await request(guard, "/v1/fast") for _ in range(50)]
        waiting = [
            asyncio.create_task(request(guard, "/v1/slow")) for _ in range(2_000)
        ]
        await asyncio.sleep(0.05)
        database.up = False
        await monitor.check_now()
        await asyncio.sleep(0.05)
        release.set()
        answers = await asyncio.gather(*waiting)
        for sent in answers:
            assert sent[0]["status"] == 503
            assert (b"retry-after", b"2") in sent[0]["headers"]
            body = json.loads(sent[1]["body"])
            assert body["error"]["code"] == "database_unavailable"
            assert len(sent) == 2  # the work's own 200 was dropped
        for sent in finished:
            assert [m.get("status") for m in sent] == [200, None]
        # While down, a new request is refused at once; after recovery it is
        # served, and a later outage finds no one from before registered.
        assert (await request(guard, "/v1/fast"))[0]["status"] == 503
        database.up = True
        await monitor.check_now()
        assert (await request(guard, "/v1/fast"))[0]["status"] == 200
        database.up = False
        await monitor.check_now()
        assert all(len(sent) == 2 for sent in answers)

    asyncio.run(scenario())


def test_after_an_outage_the_database_is_available_only_once_the_pools_serve() -> None:
    async def scenario() -> None:
        database, pools = Database(), Database()
        recovering: list[bool] = []

        async def recover() -> None:
            recovering.append(True)
            await pools.check()

        monitor = DatabaseMonitor(
            database.check, interval=60, timeout=1, recover=recover
        )
        assert (await monitor.check_now()).available
        assert not recovering, "the pools are not asked while all is well"
        database.up = pools.up = False
        assert not (await monitor.check_now()).available
        database.up = True  # answers; the pools do not lend a connection yet
        state = await monitor.check_now()
        assert not state.available
        assert state.reason is not None and "went away" in state.reason
        pools.up = True
        assert (await monitor.check_now()).available
        assert len(recovering) == 2

    asyncio.run(scenario())


def test_a_write_unanswered_by_its_deadline_gets_503_and_reads_are_left_alone() -> None:
    async def scenario() -> None:
        database = Database()
        monitor = DatabaseMonitor(database.check, interval=60, timeout=1)

        async def slow_app(scope: Any, receive: Any, send: Any) -> None:
            await asyncio.sleep(0.3)  # a commit held by the database
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})

        guard = DatabaseGuard(
            slow_app,
            monitor=lambda: monitor,
            unguarded=frozenset(),
            retry_after=2,
            write_deadline=0.05,
        )

        async def call(method: str, path: str) -> list[dict[str, Any]]:
            sent: list[dict[str, Any]] = []

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            scope = {"type": "http", "path": path, "method": method, "headers": []}
            await guard(scope, receive, send)
            return sent

        write = await call("PUT", "/v1/conversations/c/turns/t1")
        assert write[0]["status"] == 503
        assert (b"retry-after", b"2") in write[0]["headers"]
        assert len(write) == 2, "the late 200 is dropped"
        start = await call("POST", "/v1/conversations")
        assert start[0]["status"] == 503
        read = await call("GET", "/v1/conversations/c/turns")
        assert read[0]["status"] == 200

    asyncio.run(scenario())
