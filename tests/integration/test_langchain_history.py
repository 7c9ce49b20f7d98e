"""LangChain's own message types, tools and history runnable over turnledger.

The chat model is local (a `BaseChatModel`, scripted, no network): it calls
the weather tool, reads its `ToolMessage` and answers. The tool is a real
LangChain `@tool`, invoked with the model's tool call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tools import tool

from tests.conftest import durable_stores
from tests.sealed_text import assert_sealed_and_unreadable
from turnledger.domain.conversation import TurnStatus
from turnledger.domain.parts import AssistantText, ToolCall, ToolResult
from turnledger.infra.adapters.langchain import TurnLedgerChatHistory, window_messages
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.policy import WindowPolicy

OWNER = "alice"
CITIES = ["Paris", "Oslo", "Lima"]


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return json.dumps({"city": city, "temp_c": len(city) + 10})


class WeatherChatModel(BaseChatModel):
    """Calls get_weather for the city asked about, then answers from the result."""

    sent: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "weather-script"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.sent.append(list(messages))
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(f"Weather: {last.content}")
        else:
            city = str(last.content).rstrip("?").split()[-1]
            reply = AIMessage(
                f"Looking up {city}.",
                tool_calls=[
                    {
                        "name": "get_weather",
                        "args": {"city": city},
                        "id": f"call_{city}",
                    }
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _ask(
    history: TurnLedgerChatHistory, model: WeatherChatModel, question: str
) -> list[BaseMessage]:
    """One tool-using turn, each message stored as it happens; the turn's messages."""
    human = HumanMessage(question)
    sent = [*history.messages, human]
    history.add_message(human)
    produced: list[BaseMessage] = [human]
    while True:
        reply = model.invoke(sent)
        assert isinstance(reply, AIMessage)
        history.add_message(reply)
        sent.append(reply)
        produced.append(reply)
        if not reply.tool_calls:
            return produced
        for call in reply.tool_calls:
            result = get_weather.invoke(call)
            history.add_message(result)
            sent.append(result)
            produced.append(result)


def _history(ledger: Conversations, **kwargs: Any) -> TurnLedgerChatHistory:
    return TurnLedgerChatHistory(
        ledger, OWNER, ledger.start_conversation(OWNER), **kwargs
    )


def _pairing_holds(messages: list[BaseMessage]) -> bool:
    """Every tool call is answered by the ToolMessages right after its AIMessage,
    and no ToolMessage answers a call not made just before it."""
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in open_calls:
                return False
            open_calls.discard(message.tool_call_id)
        elif open_calls:
            return False
        elif isinstance(message, AIMessage):
            open_calls = {str(call["id"]) for call in message.tool_calls}
    return not open_calls


def _shape(messages: list[BaseMessage]) -> list[tuple[str, Any, Any]]:
    return [
        (
            message.type,
            message.content,
            getattr(message, "tool_call_id", None)
            or [
                (c["id"], c["name"], c["args"])
                for c in getattr(message, "tool_calls", [])
            ],
        )
        for message in messages
    ]


def test_tool_using_turns_go_in_and_come_back_as_langchain_messages(
    ledger: Conversations,
) -> None:
    history = _history(ledger)
    assert isinstance(history, BaseChatMessageHistory)
    model = WeatherChatModel()
    produced: list[BaseMessage] = []
    for city in CITIES:
        produced += _ask(history, model, f"Weather in {city}?")

    stored = ledger.get_history(OWNER, history.turns.conversation_id).items
    assert [item.status for item in stored] == [TurnStatus.CONFIRMED] * 3
    assert stored[0].parts is not None
    assert stored[0].parts.steps == (
        AssistantText("Looking up Paris."),
        ToolCall(
            call_id="call_Paris", name="get_weather", arguments='{"city": "Paris"}'
        ),
        ToolResult(call_id="call_Paris", content='{"city": "Paris", "temp_c": 15}'),
    )
    # Read back: the same messages, in order, calls paired with their results.
    assert _shape(history.messages) == _shape(produced)
    assert _pairing_holds(history.messages)
    # What the model was sent for the third question held the first two turns.
    assert _shape(model.sent[4][:-1]) == _shape(produced[:8])


def test_the_window_as_langchain_messages_keeps_whole_turns(
    ledger: Conversations,
) -> None:
    history = _history(ledger)
    model = WeatherChatModel()
    for city in CITIES:
        _ask(history, model, f"Weather in {city}?")
    conversation = history.turns.conversation_id
    window = window_messages(
        ledger,
        OWNER,
        conversation,
        question="And tomorrow?",
        system="Be brief.",
        model="gpt-4o-mini",
        policy=WindowPolicy(max_pairs=1, floor_messages=0),
    )
    assert isinstance(window[0], SystemMessage) and window[0].content == "Be brief."
    assert window[-1] == HumanMessage("And tomorrow?")
    kept = window[1:-1]
    # One turn: sent whole (human, AI with its call, tool, AI), never a
    # ToolMessage without the AIMessage that called it.
    assert [m.type for m in kept] == ["human", "ai", "tool", "ai"]
    assert kept[0].content == "Weather in Lima?"
    assert _pairing_holds(kept)
    # The history with a policy is that window's history.
    windowed = TurnLedgerChatHistory(
        ledger,
        OWNER,
        conversation,
        policy=WindowPolicy(max_pairs=1, floor_messages=0),
    )
    assert _shape(windowed.messages) == _shape(kept)


# The runnable is deprecated in favour of LangGraph, and still what LangChain
# applications built on langchain-core use.
@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_runnable_with_message_history_records_each_exchange(
    ledger: Conversations,
) -> None:
    history = _history(ledger)
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=["ORCHID-17 noted.", "It is ORCHID-17."])
    chain = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: history,
        input_messages_key="question",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": "s"}}
    chain.invoke({"question": "Our code is ORCHID-17."}, config=config)  # type: ignore[arg-type]
    answer = chain.invoke({"question": "What is the code?"}, config=config)  # type: ignore[arg-type]
    assert answer.content == "It is ORCHID-17."
    stored = ledger.get_history(OWNER, history.turns.conversation_id).items
    assert [(i.question, i.answer) for i in stored] == [
        ("Our code is ORCHID-17.", "ORCHID-17 noted."),
        ("What is the code?", "It is ORCHID-17."),
    ]


def test_an_unanswered_question_is_abandoned_by_the_next_one(
    ledger: Conversations,
) -> None:
    history = _history(ledger)
    history.add_message(HumanMessage("Weather in Rome?"))
    history.add_message(
        AIMessage("", tool_calls=[{"name": "get_weather", "args": {}, "id": "c1"}])
    )
    _ask(history, WeatherChatModel(), "Weather in Bern?")
    stored = ledger.get_history(OWNER, history.turns.conversation_id).items
    assert [i.status for i in stored] == [TurnStatus.STOPPED, TurnStatus.CONFIRMED]
    assert [m.content for m in history.messages if m.type == "human"] == [
        "Weather in Bern?"
    ]


@durable_stores
def test_clear_purges_like_any_deletion(
    open_ledger: Callable[[], Conversations],
) -> None:
    ledger = open_ledger()
    history = _history(ledger)
    for city in CITIES[:2]:
        _ask(history, WeatherChatModel(), f"Weather in {city}?")
    conversation = history.turns.conversation_id
    turn_ids = [i.turn_id for i in ledger.get_history(OWNER, conversation).items]
    history.clear()
    assert history.messages == []
    assert_sealed_and_unreadable([ledger, open_ledger()], conversation, turn_ids)
