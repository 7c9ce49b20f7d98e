"""The typed client against the real `turnledger serve`, on SQLite and PostgreSQL.

One scenario drives every method; it runs through `Client` and through
`AsyncClient` (each call awaited on a loop of its own), so both are checked
against the same server for the same answers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from turnledger.domain.errors import (
    ConversationNotFoundError,
    DeviceNotFoundError,
    FoldConflictError,
    InvalidInputError,
    LongPollLimitError,
    MandatoryInputTooLargeError,
    TurnConflictError,
    TurnDeletedError,
    TurnNotFoundError,
    TurnTooLargeError,
    UnauthenticatedError,
    VersionConflictError,
)
from turnledger.domain.parts import Attachment, ToolCall, ToolResult, TurnParts
from turnledger.infra.client import (
    NO_RETRIES,
    AsyncClient,
    Change,
    Client,
    MemoryCursorStore,
    RetryPolicy,
    ServiceUnreachableError,
    parts_of,
)
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings

TOOL_TURN = TurnParts(
    question="Weather in Paris? Here is my photo.",
    attachments=(Attachment(media_type="image/png", byte_size=4, data=b"\x89PNG"),),
    steps=(
        ToolCall(call_id="call_1", name="get_weather", arguments='{"city":"Paris"}'),
        ToolResult(call_id="call_1", content='{"temp_c":18}'),
    ),
    answer="It is 18 °C in Paris.",
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "postgres":
        settings: Settings = request.getfixturevalue("service_settings")
        return settings.model_copy(update={"max_turn_bytes": 20_000})
    return Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "data",
        max_turn_bytes=20_000,
    )


def device_token(settings: Settings, user: str = "alice") -> str:
    registry = open_device_registry(settings)
    try:
        return registry.add(user, "phone").token
    finally:
        registry.close()


@pytest.fixture
def running(store_settings: Settings, tmp_path: Path) -> Iterator[Server]:
    server = start_server(store_settings, tmp_path / "server.log")
    yield server
    stop_server(server)
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log, log


class Blocking:
    """AsyncClient's methods, each run to completion on one event loop."""

    def __init__(self, client: AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self._client = client
        self._loop = loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)
        return lambda *args, **kwargs: self._loop.run_until_complete(
            method(*args, **kwargs)
        )


@pytest.fixture(params=["sync", "async"])
def api(
    request: pytest.FixtureRequest, running: Server, store_settings: Settings
) -> Iterator[Any]:
    token = device_token(store_settings)
    if request.param == "sync":
        with Client(running.base_url, token) as client:
            yield client
        return
    loop = asyncio.new_event_loop()
    client = AsyncClient(running.base_url, token)
    yield Blocking(client, loop)
    loop.run_until_complete(client.aclose())
    loop.close()


def test_every_method_against_the_real_service(api: Any) -> None:
    assert api.health().status == "ok"
    assert api.ready().status == "ready"

    # A keyed start is idempotent; an unkeyed one is keyed by the client.
    started = api.start_conversation(client_key="chat-1")
    assert api.start_conversation(client_key="chat-1") == started
    other = api.start_conversation()
    assert other.conversation_id != started.conversation_id
    listed = [c.conversation_id for c in api.list_conversations().conversations]
    assert listed == [started.conversation_id, other.conversation_id]
    conversation = started.conversation_id

    first = api.put_turn(conversation, "t1", question="Code?", answer="ORCHID-17")
    assert (
        api.put_turn(conversation, "t1", question="Code?", answer="ORCHID-17") == first
    )
    tool = api.put_turn(conversation, "t2", parts=TOOL_TURN)
    assert api.put_turn(conversation, "t2", parts=TOOL_TURN) == tool
    stopped = api.put_turn(
        conversation, "t3", question="And then?", answer="The", status="stopped"
    )
    assert (first.version, tool.version, stopped.version) == (2, 3, 4)
    assert stopped.status == "stopped"

    summary = api.get_conversation(conversation)
    assert (summary.version, summary.total_turns) == (4, 3)
    page = api.get_history(conversation, limit=2)
    assert [i.turn_id for i in page.items] == ["t1", "t2"] and page.next_offset == 2
    assert parts_of(page.items[1]) == TOOL_TURN

    window = api.project_window(
        conversation,
        question="What was the code?",
        model="gpt-4o-mini",
        max_bytes=4_000,
    )
    assert window.kept_turn_ids == ["t1", "t2"]  # t3 was stopped: never sent
    assert len(window.body.encode("utf-8")) == window.byte_length <= 4_000
    assert '"tool_call_id":"call_1"' in window.body

    fold = api.record_fold(
        conversation,
        covers_through_turn_id="t1",
        summary="The code is ORCHID-17.",
        summarized_version=4,
        fold_id="f1",
    )
    assert fold.fold_id == "f1" and fold.version == 5
    status = api.get_fold(conversation, threshold_tokens=10_000)
    assert (status.fold_id, status.summary) == ("f1", "The code is ORCHID-17.")

    deleted = api.delete_history(conversation, turn_ids=["t2"])
    assert deleted.deleted_turn_ids == ["t2"]
    # Deleting it again deletes nothing: the request is safe to retry.
    assert api.delete_history(conversation, turn_ids=["t2"]).deleted_turn_ids == []
    assert api.get_history(conversation).items[1].deleted
    assert api.purge_status().state in {"complete", "pending"}

    records = api.export()
    assert records[0]["record"] == "export" and records[-1]["record"] == "end"
    assert [r["turn_id"] for r in records if r["record"] == "turn"][:3] == [
        "t1",
        "t2",
        "t3",
    ]

    store = MemoryCursorStore()
    seen: list[Any] = []
    assert api.pull(store, seen.extend, limit=3) == len(seen) > 0
    kinds = [change.kind for change in seen]
    assert kinds.count("conversation_started") == 2 and "history_deleted" in kinds
    assert api.pull(store, seen.extend) == 0  # caught up: the cursor was kept
    tail = api.sync(since=store.load())
    assert tail.changes == [] and not tail.has_more

    added = api.add_device("laptop")
    assert added.token.startswith("tl1_")
    devices = [d.device_id for d in api.list_devices().devices]
    assert added.device.device_id in devices
    revoked = api.revoke_device(added.device.device_id)
    assert revoked.revoked_at is not None


def test_each_error_the_service_answers_is_the_library_class(
    running: Server, store_settings: Settings
) -> None:
    with Client(running.base_url, device_token(store_settings)) as api:
        conversation = api.start_conversation().conversation_id
        api.put_turn(conversation, "t1", question="q", answer="a")

        with pytest.raises(InvalidInputError) as invalid:
            api.put_turn(conversation, "t2", question="", answer="a")
        assert invalid.value.field == "question"
        with pytest.raises(InvalidInputError):
            api.sync(limit=0)  # refused by the schema: invalid_request
        with pytest.raises(TurnTooLargeError) as too_large:
            api.put_turn(conversation, "big", question="x" * 30_000, answer="a")
        assert too_large.value.limit == 20_000
        with pytest.raises(ConversationNotFoundError) as missing:
            api.get_conversation(unknown := uuid4())
        assert missing.value.conversation_id == unknown
        with pytest.raises(TurnNotFoundError) as no_turn:
            api.delete_history(conversation, turn_ids=["nope"])
        assert no_turn.value.turn_ids == ["nope"]
        with pytest.raises(DeviceNotFoundError) as no_device:
            api.revoke_device("nope")
        assert no_device.value.device_id == "nope"
        with pytest.raises(TurnConflictError) as conflict:
            api.put_turn(conversation, "t1", question="q", answer="other")
        assert type(conflict.value) is TurnConflictError
        assert conflict.value.turn_id == "t1"
        with pytest.raises(VersionConflictError) as stale:
            api.put_turn(
                conversation, "t2", question="q", answer="a", expected_version=1
            )
        assert (stale.value.expected_version, stale.value.current_version) == (1, 2)
        api.delete_history(conversation, turn_ids=["t1"])
        with pytest.raises(TurnDeletedError) as gone:
            api.put_turn(conversation, "t1", question="q", answer="a")
        assert gone.value.conversation_id == conversation
        with pytest.raises(MandatoryInputTooLargeError) as window:
            api.project_window(
                conversation, question="q" * 100, model="m", max_bytes=50
            )
        assert window.value.max_bytes == 50
        api.put_turn(conversation, "t3", question="q", answer="a")
        api.record_fold(
            conversation, covers_through_turn_id="t3", summary="s",
            summarized_version=4, fold_id="f1",
        )  # fmt: skip
        with pytest.raises(FoldConflictError) as fold:
            api.record_fold(
                conversation, covers_through_turn_id="t3", summary="s",
                summarized_version=4, fold_id="f1",
            )  # fmt: skip
        assert fold.value.fold_id == "f1"

    with (
        Client(running.base_url, "tl1_not-a-token") as stranger,
        pytest.raises(UnauthenticatedError),
    ):
        stranger.list_conversations()


def test_too_many_long_polls_is_the_library_class(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None,
        persistence="sqlite",
        data_dir=tmp_path / "data",
        http_max_long_polls_per_device=1,
        http_max_long_polls_per_user=1,
    )
    token = device_token(settings)
    server = start_server(settings, tmp_path / "server.log")
    try:
        with Client(server.base_url, token, retry=NO_RETRIES) as waiting:
            cursor = waiting.sync().next_cursor
            poll = threading.Thread(
                target=waiting.sync, kwargs={"since": cursor, "timeout": 5}
            )
            poll.start()
            time.sleep(1.0)
            with (
                Client(server.base_url, token, retry=NO_RETRIES) as second,
                pytest.raises(LongPollLimitError) as limited,
            ):
                second.sync(since=cursor, timeout=5)
            poll.join()
    finally:
        stop_server(server)
    assert (limited.value.scope, limited.value.limit) == ("device", 1)


def test_an_unreachable_service_is_retried_then_reported(tmp_path: Path) -> None:
    attempts: list[float] = []
    hooks = {"request": [lambda request: attempts.append(time.monotonic())]}
    with (
        httpx.Client(event_hooks=hooks) as http,
        Client(
            "http://127.0.0.1:9",  # discard port: nothing listens
            "tl1_x",
            retry=RetryPolicy(attempts=3, initial_delay=0.1),
            http=http,
        ) as api,
        pytest.raises(ServiceUnreachableError) as unreachable,
    ):
        api.put_turn(uuid4(), "t1", question="q", answer="a")
    assert unreachable.value.attempts == 3 == len(attempts)
    assert attempts[2] - attempts[1] >= attempts[1] - attempts[0] >= 0.1


def test_async_pull_awaits_a_coroutine_handler_and_follow_stops(
    tmp_path: Path,
) -> None:
    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path / "d")
    token = device_token(settings)
    server = start_server(settings, tmp_path / "server.log")

    async def scenario() -> list[str]:
        applied: list[str] = []

        async def apply(changes: Sequence[Change]) -> None:
            await asyncio.sleep(0)
            applied.extend(change.kind for change in changes)

        async with AsyncClient(server.base_url, token) as api:
            chat = (await api.start_conversation()).conversation_id
            await api.put_turn(chat, "t1", question="q", answer="a")
            store = MemoryCursorStore()
            # follow: long-polls until stop() is true (here after two changes)
            await api.follow(store, apply, stop=lambda: len(applied) >= 2, timeout=1)
            await api.put_turn(chat, "t2", question="q", answer="a")
            assert await api.pull(store, apply) == 1
        return applied

    try:
        applied = asyncio.run(scenario())
    finally:
        stop_server(server)
    assert applied == ["conversation_started", "turn_recorded", "turn_recorded"]
