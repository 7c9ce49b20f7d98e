"""The Agents SDK's own Runner-with-session scenarios, on SQLiteSession and ours.

openai/openai-agents-python tests its sessions through the `Runner` in
tests/memory/test_session.py and tests/memory/test_session_limit.py, each
with the three ways to run an agent (`run`, `run_sync`, `run_streamed`) and
the SDK's own `agents.testing.ScriptedModel`. The scenarios below are those,
written anew: each runs on `SQLiteSession` and on `TurnLedgerSession` with
the same script, and what the model was sent and what the session holds
afterwards are compared item by item between the two.

One difference is normalized before comparing, as docs/adapters.md states
it: an assistant message the SDK saved from a model's output comes back from
turnledger in the window's shape (`{"role": "assistant", "content": text}`),
without the output item's id, status and annotations. Every other item
(user messages, function calls and outputs) must be equal as it is.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, set_tracing_disabled
from agents.memory import Session, SessionSettings, SQLiteSession
from agents.testing import ScriptedModel, assistant_message

from turnledger.infra.adapters.openai_agents import TurnLedgerSession
from turnledger.infra.service_layer.application import Conversations

OWNER = "alice"
RUNNER_METHODS = ["run", "run_sync", "run_streamed"]

set_tracing_disabled(True)

MakeSession = Callable[[str], Session]


def _stores(ledger: Conversations, directory: Path) -> dict[str, MakeSession]:
    """Per store, the session of each name (made on first use); SQLiteSession
    in a file, as the SDK's scenarios have it."""
    made: dict[tuple[str, str], Session] = {}

    def sqlite(name: str) -> Session:
        if ("sqlite", name) not in made:
            made[("sqlite", name)] = SQLiteSession(name, directory / "sessions.db")
        return made[("sqlite", name)]

    def ours(name: str) -> Session:
        if ("ours", name) not in made:
            conversation = ledger.start_conversation(OWNER)
            made[("ours", name)] = TurnLedgerSession(ledger, OWNER, conversation)
        return made[("ours", name)]

    return {"sqlite_session": sqlite, "turnledger": ours}


Both = Callable[[Callable[[MakeSession], Any]], Any]


@pytest.fixture
def both(memory_ledger: Conversations, tmp_path: Path) -> Both:
    """Runs a scenario on each store; what it returns must be equal."""

    def run(scenario: Callable[[MakeSession], Any]) -> Any:
        stores = _stores(memory_ledger, tmp_path)
        seen = {name: scenario(make) for name, make in stores.items()}
        assert _normal(seen["turnledger"]) == _normal(seen["sqlite_session"])
        return seen["sqlite_session"]

    return run


def _normal(value: Any) -> Any:
    """`value` with each saved assistant output message in the window's shape
    (the one documented difference), everything else as it is."""
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    if not isinstance(value, dict):
        return value
    if value.get("type") == "message" and value.get("role") == "assistant":
        texts = [part["text"] for part in value["content"]]
        return {"role": "assistant", "content": "".join(texts)}
    return value


async def _run(method: str, agent: Agent[Any], given: Any, **kwargs: Any) -> Any:
    """As the SDK's tests run an agent: awaited, in a thread, or streamed."""
    if method == "run":
        return await Runner.run(agent, given, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(Runner.run_sync, agent, given, **kwargs)
    result = Runner.run_streamed(agent, given, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


def _turns(
    method: str,
    make: MakeSession,
    exchanges: list[tuple[str, Any, str]],
    **kwargs: Any,
) -> list[Any]:
    """Each (session name, input, answer) run in order; the input each model
    call was sent, then every session's items."""
    model = ScriptedModel()
    agent = Agent(name="test", model=model)

    async def go() -> list[Any]:
        outputs = []
        for name, given, answer in exchanges:
            model.enqueue([assistant_message(answer)])
            result = await _run(method, agent, given, session=make(name), **kwargs)
            outputs.append(result.final_output)
        names = sorted({name for name, _, _ in exchanges})
        stored = [await make(name).get_items() for name in names]
        return [outputs, [call.input for call in model.calls], stored]

    return asyncio.run(go())


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_basic_functionality(both: Both, method: str) -> None:
    """The second run is sent the first exchange."""
    outputs, inputs, _ = both(
        lambda make: _turns(
            method,
            make,
            [
                ("s", "What city is the Golden Gate Bridge in?", "San Francisco"),
                ("s", "What state is it in?", "California"),
            ],
        ),
    )
    assert outputs == ["San Francisco", "California"]
    assert len(inputs[-1]) == 3


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_different_sessions(both: Both, method: str) -> None:
    """Each session is sent its own history only."""
    _, inputs, stored = both(
        lambda make: _turns(
            method,
            make,
            [
                ("one", "I like cats", "I like cats"),
                ("two", "I like dogs", "I like dogs"),
                ("one", "What did I say I like?", "Yes, you mentioned cats"),
            ],
        ),
    )
    assert "dogs" not in str(inputs[-1])
    assert [len(items) for items in stored] == [4, 2]


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_memory_appends_list_input_by_default(both: Both, method: str) -> None:
    seeded = [
        {"role": "user", "content": "Earlier message"},
        {"role": "assistant", "content": "Saved reply"},
    ]

    def scenario(make: MakeSession) -> Any:
        asyncio.run(make("s").add_items(list(seeded)))
        given = [{"role": "user", "content": "Test message"}]
        return _turns(method, make, [("s", given, "This should run")])

    _, inputs, _ = both(scenario)
    assert inputs[-1] == [*seeded, {"role": "user", "content": "Test message"}]


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_callback_prepared_input(both: Both, method: str) -> None:
    """A session_input_callback that keeps only the history's user messages."""
    seeded = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]

    def only_users(history: list[Any], new_input: list[Any]) -> list[Any]:
        return [item for item in history if item.get("role") == "user"] + new_input

    def scenario(make: MakeSession) -> Any:
        asyncio.run(make("s").add_items(list(seeded)))
        given = [{"role": "user", "content": "What your name?"}]
        config = RunConfig(session_input_callback=only_users)
        return _turns(method, make, [("s", given, "I'm gpt-4o")], run_config=config)

    _, inputs, _ = both(scenario)
    assert inputs[-1] == [seeded[0], {"role": "user", "content": "What your name?"}]


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_callback_repeating_history_does_not_grow_session(
    both: Both, method: str
) -> None:
    def repeat_first(history: list[Any], new_input: list[Any]) -> list[Any]:
        return [*history, history[0], *new_input] if history else new_input

    config = RunConfig(session_input_callback=repeat_first)
    exchanges = [("s", f"user {n}", f"assistant {n}") for n in range(3)]
    _, _, [stored] = both(
        lambda make: _turns(method, make, exchanges, run_config=config)
    )
    users = [item.get("content") for item in stored if item.get("role") == "user"]
    assert users == ["user 0", "user 1", "user 2"] and len(stored) == 6


@pytest.mark.parametrize("method", RUNNER_METHODS)
@pytest.mark.parametrize("limit", [2, 0, None, 100])
def test_session_limit_in_the_run_config(
    both: Both, method: str, limit: int | None
) -> None:
    """RunConfig(session_settings=SessionSettings(limit=n)): the newest n
    history items (all with None or a limit past them), then the input."""
    exchanges = [("s", f"Message {n}", f"Reply {n}") for n in range(1, 4)]

    def scenario(make: MakeSession) -> Any:
        _turns(method, make, exchanges)
        config = RunConfig(session_settings=SessionSettings(limit=limit))
        return _turns(method, make, [("s", "Message 4", "Reply 4")], run_config=config)

    _, [sent], _ = both(scenario)
    history = 6 if limit is None else min(limit, 6)
    assert len(sent) == history + 1 and sent[-1]["content"] == "Message 4"


@pytest.mark.parametrize("method", RUNNER_METHODS)
def test_session_limit_drops_unmatched_history_function_call_output(
    both: Both, method: str
) -> None:
    """A limit that cuts between a call and its output: the SDK does not send
    the output whose call was left out."""
    seeded: list[Any] = [
        {"role": "user", "content": "What is the weather?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "It is sunny.", "annotations": []}
            ],
        },
    ]

    def scenario(make: MakeSession) -> Any:
        session = make("s")
        asyncio.run(session.add_items(list(seeded)))
        limited = asyncio.run(session.get_items(limit=2))
        config = RunConfig(session_settings=SessionSettings(limit=2))
        ran = _turns(
            method,
            make,
            [("s", "What about tomorrow?", "Sunny too.")],
            run_config=config,
        )
        return [limited, ran]

    limited, (_, [sent], _) = both(scenario)
    assert limited == seeded[-2:]
    assert sent == [seeded[-1], {"role": "user", "content": "What about tomorrow?"}]


def test_concurrent_writes_to_one_session(both: Both) -> None:
    """The SDK's concurrent-access scenario, with exchanges: ten add_items
    calls from five threads, each with its own event loop; every exchange is
    kept whole, whatever their order."""
    exchanges = [
        [
            {"role": "user", "content": f"Q{n}"},
            {"role": "assistant", "content": f"A{n}"},
        ]
        for n in range(10)
    ]

    def scenario(make: MakeSession) -> Any:
        session = make("s")

        failed: list[BaseException] = []

        def add(batches: list[list[Any]]) -> None:
            try:
                for items in batches:
                    asyncio.run(session.add_items(items))
            except BaseException as error:
                failed.append(error)

        # Daemon threads, joined with a deadline: a session that deadlocks
        # fails the test instead of hanging it.
        threads = [
            threading.Thread(target=add, args=(exchanges[n::5],), daemon=True)
            for n in range(5)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads), "deadlocked"
        assert failed == []
        stored = asyncio.run(session.get_items())
        pairs = {
            (q["content"], a["content"])
            for q, a in zip(stored[::2], stored[1::2], strict=True)
        }
        return len(stored), pairs

    count, pairs = both(scenario)
    assert count == 20 and pairs == {(f"Q{n}", f"A{n}") for n in range(10)}
