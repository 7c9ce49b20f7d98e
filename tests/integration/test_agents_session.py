"""The OpenAI Agents SDK's real Runner keeping its history in turnledger.

The model is local (the SDK's `Model` interface, scripted, no network): it
asks for the weather tool, reads its output, and answers. Every input the
runner hands it is recorded, so the test sees what the agent was sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from uuid import UUID

from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    Runner,
    Tool,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from tests.conftest import durable_stores
from tests.sealed_text import assert_sealed_and_unreadable
from turnledger.domain.conversation import TurnStatus
from turnledger.domain.parts import AssistantText, ToolCall, ToolResult
from turnledger.infra.adapters.openai_agents import TurnLedgerSession
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.policy import WindowPolicy

OWNER = "alice"

set_tracing_disabled(True)  # no trace export: the tests run offline


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return json.dumps({"city": city, "temp_c": len(city) + 10})


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class WeatherModel(Model):
    """Asks for the weather of the city named last, then answers from its output.

    Before a call it says what it is doing (an intermediate text step)."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []
        self.calls = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        self.inputs.append(json.loads(json.dumps(items, default=str)))
        last = items[-1]
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            output: list[Any] = [_message(f"Weather: {last['output']}")]
        else:
            question = last["content"] if isinstance(last, dict) else str(last)
            city = str(question).rstrip("?").split()[-1]
            self.calls += 1
            output = [
                _message(f"Looking up {city}."),
                ResponseFunctionToolCall(
                    id=f"fc_{self.calls}",
                    type="function_call",
                    call_id=f"call_{self.calls}",
                    name="get_weather",
                    arguments=json.dumps({"city": city}),
                    status="completed",
                ),
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run without streaming")


CITIES = ["Paris", "Oslo", "Lima"]


async def _run_turns(
    session: TurnLedgerSession, model: WeatherModel, cities: list[str]
) -> list[str]:
    agent = Agent(
        name="weather", instructions="Be brief.", model=model, tools=[get_weather]
    )
    answers = []
    for city in cities:
        result = await Runner.run(agent, f"Weather in {city}?", session=session)
        answers.append(str(result.final_output))
    return answers


def _session(ledger: Conversations, **kwargs: Any) -> TurnLedgerSession:
    conversation = ledger.start_conversation(OWNER)
    return TurnLedgerSession(ledger, OWNER, conversation, **kwargs)


def test_the_runner_stores_tool_using_turns_and_is_sent_the_window(
    ledger: Conversations,
) -> None:
    asyncio.run(_the_runner_stores_tool_using_turns_and_is_sent_the_window(ledger))


async def _the_runner_stores_tool_using_turns_and_is_sent_the_window(
    ledger: Conversations,
) -> None:
    session = _session(ledger)
    assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
    model = WeatherModel()
    answers = await _run_turns(session, model, CITIES)
    assert answers == [
        'Weather: {"city": "Paris", "temp_c": 15}',
        'Weather: {"city": "Oslo", "temp_c": 14}',
        'Weather: {"city": "Lima", "temp_c": 14}',
    ]
    history = ledger.get_history(OWNER, session.conversation_id).items
    assert [item.status for item in history] == [TurnStatus.CONFIRMED] * 3
    assert all(item.turn_id.startswith("turn-") for item in history)
    first = history[0].parts
    assert first is not None
    assert first.question == "Weather in Paris?"
    assert first.steps == (
        AssistantText("Looking up Paris."),
        ToolCall(call_id="call_1", name="get_weather", arguments='{"city": "Paris"}'),
        ToolResult(call_id="call_1", content='{"city": "Paris", "temp_c": 15}'),
    )
    assert first.answer == answers[0]

    # The third run's first request held the first two turns whole, from the
    # window, then the new question.
    third = model.inputs[4]
    kinds = [item.get("type", item.get("role")) for item in third]
    assert kinds == [
        "user", "assistant", "function_call", "function_call_output", "assistant",
    ] * 2 + ["user"]  # fmt: skip
    assert third[-1]["content"] == "Weather in Lima?"
    assert await session.get_items() == session.window_items()


def test_the_window_policy_decides_what_the_agent_is_sent(
    ledger: Conversations,
) -> None:
    asyncio.run(_the_window_policy_decides_what_the_agent_is_sent(ledger))


async def _the_window_policy_decides_what_the_agent_is_sent(
    ledger: Conversations,
) -> None:
    session = _session(ledger, policy=WindowPolicy(max_pairs=1, floor_messages=0))
    model = WeatherModel()
    await _run_turns(session, model, CITIES)
    sent = model.inputs[4]
    users = [item["content"] for item in sent if item.get("role") == "user"]
    assert users == ["Weather in Oslo?", "Weather in Lima?"]  # one whole turn
    # Never an output without its call, whatever the policy keeps.
    calls = {i["call_id"] for i in sent if i.get("type") == "function_call"}
    outputs = {i["call_id"] for i in sent if i.get("type") == "function_call_output"}
    assert calls == outputs


def test_pop_item_deletes_the_newest_turn_and_reopens_it(
    ledger: Conversations,
) -> None:
    asyncio.run(_pop_item_deletes_the_newest_turn_and_reopens_it(ledger))


async def _pop_item_deletes_the_newest_turn_and_reopens_it(
    ledger: Conversations,
) -> None:
    session = _session(ledger)
    await _run_turns(session, WeatherModel(), CITIES[:2])
    turn_ids = [
        i.turn_id for i in ledger.get_history(OWNER, session.conversation_id).items
    ]
    popped = await session.pop_item()
    assert popped == {
        "role": "assistant",
        "content": 'Weather: {"city": "Oslo", "temp_c": 14}',
    }
    history = ledger.get_history(OWNER, session.conversation_id).items
    assert history[1].turn_id == turn_ids[1] and history[1].deleted
    # The rest of the turn is open again: user, text, call, output.
    items = await session.get_items()
    assert items[-1]["type"] == "function_call_output"
    assert items[-4] == {"role": "user", "content": "Weather in Oslo?"}
    for _ in range(3):
        await session.pop_item()
    assert (await session.pop_item()) == {"role": "user", "content": "Weather in Oslo?"}
    assert await session.get_items() == session.window_items()
    assert len(await session.get_items()) == 5  # the Paris turn
    # Asked again, it is recorded as a new turn.
    await _run_turns(session, WeatherModel(), ["Oslo"])
    history = ledger.get_history(OWNER, session.conversation_id).items
    assert [i.deleted for i in history] == [False, True, False]


def test_a_run_that_fails_mid_tool_is_recorded_abandoned_and_never_sent(
    ledger: Conversations,
) -> None:
    asyncio.run(_a_run_that_fails_mid_tool_is_recorded_abandoned_and_never_sent(ledger))


async def _a_run_that_fails_mid_tool_is_recorded_abandoned_and_never_sent(
    ledger: Conversations,
) -> None:
    session = _session(ledger)
    await session.add_items(
        [
            {"role": "user", "content": "Weather in Rome?"},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "get_weather",
                "arguments": '{"city": "Rome"}',
            },
        ]  # fmt: skip
    )
    # Open, not in the ledger yet; the call without its output is not shown.
    assert await session.get_items() == [
        {"role": "user", "content": "Weather in Rome?"}
    ]
    model = WeatherModel()
    await _run_turns(session, model, ["Bern", "Kyiv"])
    history = ledger.get_history(OWNER, session.conversation_id).items
    assert [i.status for i in history] == [
        TurnStatus.STOPPED,
        TurnStatus.CONFIRMED,
        TurnStatus.CONFIRMED,
    ]
    assert all(item.get("call_id") != "c1" for item in model.inputs[0])
    # Once abandoned, the turn is never sent again.
    assert all(item.get("content") != "Weather in Rome?" for item in model.inputs[2])
    assert model.inputs[2][0] == {"role": "user", "content": "Weather in Bern?"}


@durable_stores
def test_clear_session_purges_like_any_deletion(
    open_ledger: Callable[[], Conversations],
) -> None:
    asyncio.run(_clear_session_purges_like_any_deletion(open_ledger))


async def _clear_session_purges_like_any_deletion(
    open_ledger: Callable[[], Conversations],
) -> None:
    ledger = open_ledger()
    session = _session(ledger)
    await _run_turns(session, WeatherModel(), CITIES[:2])
    conversation: UUID = session.conversation_id
    turn_ids = [i.turn_id for i in ledger.get_history(OWNER, conversation).items]
    await session.clear_session()
    assert await session.get_items() == []
    history = ledger.get_history(OWNER, conversation).items
    assert all(item.deleted and item.parts is None for item in history)
    # The sealed texts stay in the log; no key opens them any more, in this
    # process or in a fresh one reading the same store.
    assert_sealed_and_unreadable([ledger, open_ledger()], conversation, turn_ids)
