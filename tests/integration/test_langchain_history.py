"""LangChain's own message types, tools and history runnable over turnledger.

The chat model is local (a `BaseChatModel`, scripted, no network): it calls
the weather tool, reads its `ToolMessage` and answers. The tool is a real
LangChain `@tool`, invoked with the model's tool call.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.chat_history import (
    BaseChatMessageHistory,
    InMemoryChatMessageHistory,
)
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
from langchain_core.runnables import RunnableLambda
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


# LangChain's own scenarios, on its reference store and on ours ---------------
#
# LangChain tests `InMemoryChatMessageHistory` (and the history runnable over
# it) with the scenarios below (langchain-core's tests of chat_history and of
# runnables/history). Each runs here on both stores through the same calls,
# and what each store gives back is compared message by message (a
# BaseMessage compares every field: content, id, name, response_metadata,
# tool calls, status). Where the stores differ on purpose, the difference is
# asserted as docs/adapters.md states it.

Factory = Callable[[str], BaseChatMessageHistory]


def _reference_history() -> BaseChatMessageHistory:
    with warnings.catch_warnings():  # deprecated for LangGraph, still the reference
        warnings.simplefilter("ignore")
        return InMemoryChatMessageHistory()


def _factories(ledger: Conversations) -> dict[str, Factory]:
    """Per store, the history of each session id (made on first use)."""
    reference: dict[str, BaseChatMessageHistory] = {}
    ours: dict[str, BaseChatMessageHistory] = {}

    def ours_of(session_id: str) -> BaseChatMessageHistory:
        if session_id not in ours:
            ours[session_id] = _history(ledger)
        return ours[session_id]

    def reference_of(session_id: str) -> BaseChatMessageHistory:
        return reference.setdefault(session_id, _reference_history())

    return {"reference": reference_of, "turnledger": ours_of}


def _on_both(ledger: Conversations, scenario: Callable[[Factory], Any]) -> Any:
    """Run `scenario` on each store; what it returns must be equal."""
    seen = {name: scenario(factory) for name, factory in _factories(ledger).items()}
    assert seen["turnledger"] == seen["reference"]
    return seen["reference"]


def _said(messages: list[BaseMessage]) -> str:
    return "you said: " + "\n".join(
        str(m.content) for m in messages if isinstance(m, HumanMessage)
    )


def _with_history(
    runnable: Any, factory: Factory, **keys: Any
) -> RunnableWithMessageHistory:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return RunnableWithMessageHistory(runnable, factory, **keys)


def _config(session_id: str) -> Any:
    return {"configurable": {"session_id": session_id}}


def test_interfaces_scenario(memory_ledger: Conversations) -> None:
    """langchain-core: a system message, add_user_message, add_ai_message and
    a human message, printed as the history's text."""

    def scenario(factory: Factory) -> Any:
        history = factory("1")
        history.add_message(SystemMessage(content="system"))
        history.add_user_message("human 1")
        history.add_ai_message("ai")
        history.add_message(HumanMessage(content="human 2"))
        return str(history), history.messages

    text, _ = _on_both(memory_ledger, scenario)
    assert text == "System: system\nHuman: human 1\nAI: ai\nHuman: human 2"


@pytest.mark.parametrize("asynchronous", [False, True])
def test_input_messages_scenario(
    memory_ledger: Conversations, asynchronous: bool
) -> None:
    """langchain-core: a runnable fed a list of messages, with its history."""

    def scenario(factory: Factory) -> Any:
        chain = _with_history(RunnableLambda(_said), factory)
        outputs = []
        for question in ("hello", "good bye"):
            given = [HumanMessage(content=question)]
            outputs.append(
                asyncio.run(chain.ainvoke(given, _config("1")))
                if asynchronous
                else chain.invoke(given, _config("1"))
            )
        return outputs, factory("1").messages

    outputs, _ = _on_both(memory_ledger, scenario)
    assert outputs == ["you said: hello", "you said: hello\ngood bye"]


@pytest.mark.parametrize(
    ("output", "output_key"),
    [
        (lambda text: text, None),  # a string: stored as an AIMessage
        (lambda text: AIMessage(content=text), None),
        (lambda text: [AIMessage(content=text)], None),
        (lambda text: {"output": [AIMessage(content=text)]}, "output"),
    ],
    ids=["string", "message", "messages", "dict"],
)
def test_input_dict_and_output_scenarios(
    memory_ledger: Conversations, output: Callable[[str], Any], output_key: str | None
) -> None:
    """langchain-core: input and history under keys of a dict; the output as
    a string, a message, a list of messages, or a list under a key."""

    def answer(given: dict[str, Any]) -> Any:
        return output(_said([*given["history"], HumanMessage(given["input"])]))

    def scenario(factory: Factory) -> Any:
        chain = _with_history(
            RunnableLambda(answer),
            factory,
            input_messages_key="input",
            history_messages_key="history",
            output_messages_key=output_key,
        )
        outputs = [chain.invoke({"input": q}, _config("3")) for q in ("hello", "bye")]
        return outputs, factory("3").messages

    outputs, messages = _on_both(memory_ledger, scenario)
    assert [m.content for m in messages] == [
        "hello",
        "you said: hello",
        "bye",
        "you said: hello\nbye",
    ]


def test_sessions_are_kept_apart_scenario(memory_ledger: Conversations) -> None:
    """langchain-core (custom config specs): each session its own history."""

    def scenario(factory: Factory) -> Any:
        chain = _with_history(
            RunnableLambda(lambda given: [AIMessage(_said(given["messages"]))]),
            factory,
            input_messages_key="messages",
        )
        for session_id, question in (
            ("u1", "hello"),
            ("u1", "goodbye"),
            ("u2", "meow"),
        ):
            chain.invoke({"messages": [HumanMessage(question)]}, _config(session_id))
        return factory("u1").messages, factory("u2").messages

    first, second = _on_both(memory_ledger, scenario)
    assert [m.content for m in second] == ["meow", "you said: meow"]
    assert len(first) == 4


class ToolChatModel(BaseChatModel):
    """A chat model's replies as providers' integrations make them: an id,
    response_metadata and usage_metadata on every AIMessage; a tool call,
    then an answer once the tool's message is in."""

    @property
    def _llm_type(self) -> str:
        return "tool-script"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, **kwargs: Any
    ) -> ChatResult:
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        usage = {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12}
        metadata = {"finish_reason": "stop", "model_name": "script-1"}
        if isinstance(messages[-1], ToolMessage):
            reply = AIMessage(
                f"It is {messages[-1].content}.",
                id=f"run-{turn}-answer",
                response_metadata=metadata,
                usage_metadata=usage,  # type: ignore[arg-type]
            )
        else:
            reply = AIMessage(
                "",
                tool_calls=[
                    {
                        "name": "get_weather",
                        "args": {"city": "Oslo"},
                        "id": f"call_{turn}",
                    }
                ],
                id=f"run-{turn}-call",
                response_metadata={**metadata, "finish_reason": "tool_calls"},
                usage_metadata=usage,  # type: ignore[arg-type]
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _tool_exchange(history: BaseChatMessageHistory, question: BaseMessage) -> None:
    """One exchange with a tool call, each message stored as it comes."""
    model = ToolChatModel()
    history.add_message(question)
    reply = model.invoke(history.messages)
    history.add_message(reply)
    for call in reply.tool_calls:
        history.add_message(get_weather.invoke(call))
    history.add_message(model.invoke(history.messages))


def test_tool_calls_and_message_fields_scenario(ledger: Conversations) -> None:
    """What a provider's integration puts on messages comes back as it went
    in: ids, names, response and usage metadata, a tool's name, an error
    status, image blocks, system messages before and between turns; sync and
    async, on every store."""
    image = {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}

    def scenario(factory: Factory) -> Any:
        history = factory("tools")
        history.add_message(SystemMessage("Be brief.", id="sys-1"))
        _tool_exchange(
            history,
            HumanMessage([{"type": "text", "text": "Weather?"}, image], id="h-1"),
        )
        history.add_message(SystemMessage("Answer in French."))
        asyncio.run(
            history.aadd_messages(
                [
                    HumanMessage("Again?", name="alice", id="h-2"),
                    AIMessage(
                        "",
                        id="ai-2",
                        name="bot",
                        tool_calls=[{"name": "get_weather", "args": {}, "id": "c9"}],
                    ),
                    ToolMessage(
                        "timeout", tool_call_id="c9", status="error", id="tool-2"
                    ),
                    AIMessage("Je ne sais pas.", id="ai-3"),
                ]
            )
        )
        return asyncio.run(history.aget_messages())

    messages = _on_both(ledger, scenario)
    assert [m.type for m in messages] == (
        ["system", "human", "ai", "tool", "ai"]
        + ["system", "human", "ai", "tool", "ai"]
    )
    assert messages[2].response_metadata["finish_reason"] == "tool_calls"
    assert messages[2].id == "run-1-call" and messages[3].name == "get_weather"
    assert messages[8].status == "error" and messages[8].name is None


@durable_stores
def test_message_fields_outlive_the_process(
    open_ledger: Callable[[], Conversations],
) -> None:
    """A history opened anew on the same store gives the same messages."""
    ledger = open_ledger()
    reference, history = _reference_history(), _history(ledger)
    for store in (reference, history):
        store.add_message(SystemMessage("Be brief."))
        _tool_exchange(store, HumanMessage("Weather?", id="h-1"))
    reopened = TurnLedgerChatHistory(
        open_ledger(), OWNER, history.turns.conversation_id
    )
    assert reopened.messages == reference.messages


def test_the_window_history_keeps_message_fields(
    memory_ledger: Conversations,
) -> None:
    """Under a policy the history is the window's: its newest whole turn, with
    the fields its messages were added with (system messages are the
    window's `system`, not in it)."""
    reference, history = _reference_history(), _history(memory_ledger)
    for store in (reference, history):
        for question in ("Weather?", "And now?"):
            store.add_message(SystemMessage("Be brief."))
            _tool_exchange(store, HumanMessage(question, id=f"h-{question}"))
    windowed = TurnLedgerChatHistory(
        memory_ledger,
        OWNER,
        history.turns.conversation_id,
        policy=WindowPolicy(max_pairs=1, floor_messages=0),
    )
    assert windowed.messages == reference.messages[-4:]


def test_consecutive_user_messages_scenario(memory_ledger: Conversations) -> None:
    """langchain-core (add_message / add_messages, and the async interface):
    four user messages in a row. The reference keeps four; a turn is a
    question and its answer, so each unanswered question is recorded as
    abandoned (stopped, in history, never sent) and only the newest is
    shown (docs/adapters.md)."""
    questions = ["Hello", "World", "Hello", "World"]
    factories = _factories(memory_ledger)
    for factory in factories.values():
        history = factory("1")
        history.add_message(HumanMessage(questions[0]))
        history.add_message(HumanMessage(questions[1]))
        asyncio.run(history.aadd_messages([HumanMessage(q) for q in questions[2:]]))
    reference, ours = factories["reference"]("1"), factories["turnledger"]("1")
    assert isinstance(ours, TurnLedgerChatHistory)
    assert asyncio.run(reference.aget_messages()) == [
        HumanMessage(q) for q in questions
    ]
    assert asyncio.run(ours.aget_messages()) == [HumanMessage("World")]
    stored = memory_ledger.get_history(OWNER, ours.turns.conversation_id).items
    assert [i.status for i in stored] == [TurnStatus.STOPPED] * 3
    asyncio.run(ours.aclear())
    asyncio.run(reference.aclear())
    assert ours.messages == reference.messages == []
