"""The Agents SDK's own session scenarios, run on its SQLiteSession and on ours.

The SDK tests its reference store (`agents.memory.SQLiteSession`) with a set
of scenarios (tests/memory/test_session.py and test_session_limit.py in
openai/openai-agents-python): add and get with and without a limit (also
from `SessionSettings`), pop down to empty, clear, ordering, Unicode and
SQL-looking text, isolation between sessions, a `Runner` that is sent the
history, a list input appended to seeded history, tool calls and reasoning
items. Each scenario here is written anew and run on both stores; the items
each returns are compared item by item. Where turnledger differs on purpose
(docs/adapters.md, "Where the session differs from SQLiteSession") the
difference is asserted as documented, so that it cannot change unnoticed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from agents import (
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    Runner,
    Tool,
    Usage,
    set_tracing_disabled,
)
from agents.memory import Session, SessionSettings, SQLiteSession
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from turnledger.domain.conversation import TurnStatus
from turnledger.infra.adapters.openai_agents import TurnLedgerSession
from turnledger.infra.service_layer.application import Conversations

OWNER = "alice"
STORES = ["sqlite_session", "turnledger"]

set_tracing_disabled(True)

MakeSession = Callable[..., Session]


@pytest.fixture(params=STORES)
def make_session(
    request: pytest.FixtureRequest, memory_ledger: Conversations
) -> MakeSession:
    """Sessions of one store: SQLiteSession in memory, or ours on the ledger."""
    conversations: dict[str, Any] = {}

    def make(name: str = "s", settings: SessionSettings | None = None) -> Session:
        if request.param == "sqlite_session":
            session = conversations.get(("sqlite", name))
            if session is None:
                session = SQLiteSession(name, session_settings=settings)
                conversations[("sqlite", name)] = session
            return session
        conversation = conversations.get(name)
        if conversation is None:
            conversation = conversations[name] = memory_ledger.start_conversation(OWNER)
        return TurnLedgerSession(
            memory_ledger, OWNER, conversation, session_settings=settings
        )

    make.store = request.param  # type: ignore[attr-defined]
    return make


def run(awaitable: Awaitable[Any]) -> Any:
    return asyncio.run(awaitable)  # type: ignore[arg-type]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


# What both return for each scenario: every item exactly as added -----------


def test_add_get_and_clear(make_session: MakeSession) -> None:
    session = make_session()
    items = [user("Hello"), assistant("Hi there!")]
    run(session.add_items(items))
    assert run(session.get_items()) == items
    run(session.clear_session())
    assert run(session.get_items()) == []


def test_pop_item_down_to_empty(make_session: MakeSession) -> None:
    session = make_session()
    assert run(session.pop_item()) is None
    items = [user("Hello"), assistant("Hi there!"), user("How are you?")]
    run(session.add_items(items))
    assert run(session.get_items()) == items
    assert run(session.pop_item()) == items[2]
    assert run(session.get_items()) == items[:2]
    assert run(session.pop_item()) == items[1]
    assert run(session.pop_item()) == items[0]
    assert run(session.pop_item()) is None
    assert run(session.get_items()) == []


def test_get_items_with_a_limit(make_session: MakeSession) -> None:
    session = make_session()
    items = [
        message(f"{kind} {n}")
        for n in range(1, 4)
        for message, kind in ((user, "Message"), (assistant, "Response"))
    ]
    run(session.add_items(items))
    assert run(session.get_items()) == items
    for limit in (2, 4, 10, 0):
        assert run(session.get_items(limit=limit)) == (items[-limit:] if limit else [])


def test_session_settings_limit_and_an_explicit_one(make_session: MakeSession) -> None:
    session = make_session(settings=SessionSettings(limit=3))
    items = [user("m0"), assistant("r0"), user("m1"), assistant("r1"), user("m2")]
    run(session.add_items(items))
    assert run(session.get_items()) == items[-3:]
    assert run(session.get_items(limit=2)) == items[-2:]


def test_session_settings_as_given(make_session: MakeSession) -> None:
    """The default, the constructor's, a dict made SessionSettings, and a
    dict with an unknown key refused."""
    assert make_session("default").session_settings == SessionSettings()
    given = make_session("typed", settings=SessionSettings(limit=5))
    assert given.session_settings == SessionSettings(limit=5)
    as_dict = make_session("dict", settings={"limit": 0})  # type: ignore[arg-type]
    assert as_dict.session_settings == SessionSettings(limit=0)
    assert as_dict.session_settings.resolve({"limit": 4}).limit == 4
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        make_session("bad", settings={"limitt": 1})  # type: ignore[arg-type]


def test_unicode_and_sql_looking_text(make_session: MakeSession) -> None:
    session = make_session()
    items = [
        user("こんにちは"),
        assistant("😊👍"),
        user("O'Reilly \"SELECT * FROM users WHERE name = 'admin';\""),
        assistant("Robert'); DROP TABLE students;--"),
        user("Привет"),
    ]
    run(session.add_items(items))
    assert run(session.get_items()) == items


def test_sessions_are_isolated(make_session: MakeSession) -> None:
    first, second = make_session("one"), make_session("two")
    run(first.add_items([user("Session 1 message")]))
    run(second.add_items([user("2a"), assistant("2b"), user("2c")]))
    assert run(second.pop_item()) == user("2c")
    assert run(first.get_items()) == [user("Session 1 message")]
    assert run(second.get_items()) == [user("2a"), assistant("2b")]


def test_tool_calls_and_reasoning_items_come_back(make_session: MakeSession) -> None:
    session = make_session()
    items = [
        user("Weather in Paris?"),
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
        assistant("18 °C."),
    ]
    run(session.add_items(items))
    assert run(session.get_items()) == items


class ScriptedModel(Model):
    """Answers with the next scripted text; records every input it is sent."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.inputs: list[list[Any]] = []

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
        text = self.answers.pop(0)
        message = ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def _texts(items: list[Any]) -> list[tuple[str, str]]:
    """Role and text of each message (the SDK's output messages carry ids and
    statuses that turnledger does not keep: docs/adapters.md)."""
    out = []
    for item in items:
        content = item["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        out.append((item["role"], text))
    return out


def test_the_runner_is_sent_the_history(make_session: MakeSession) -> None:
    session = make_session()
    model = ScriptedModel(["San Francisco", "California"])
    agent = Agent(name="test", model=model)
    first = run(Runner.run(agent, "Golden Gate Bridge city?", session=session))
    second = run(Runner.run(agent, "What state is it in?", session=session))
    assert (first.final_output, second.final_output) == ("San Francisco", "California")
    assert _texts(model.inputs[-1]) == [
        ("user", "Golden Gate Bridge city?"),
        ("assistant", "San Francisco"),
        ("user", "What state is it in?"),
    ]
    assert _texts(run(session.get_items())) == [
        *_texts(model.inputs[-1]),
        ("assistant", "California"),
    ]


def test_a_list_input_is_appended_to_seeded_history(make_session: MakeSession) -> None:
    session = make_session()
    history = [user("Earlier message"), assistant("Saved reply")]
    run(session.add_items(history))
    model = ScriptedModel(["This should run"])
    run(
        Runner.run(
            Agent(name="t", model=model), [user("Test message")], session=session
        )
    )
    assert model.inputs[-1] == [*history, user("Test message")]


# Where turnledger differs, as documented ------------------------------------


def test_consecutive_user_messages(
    make_session: MakeSession, memory_ledger: Conversations
) -> None:
    """SQLiteSession keeps every message; a turn is a question and its answer,
    so a question followed by another one was stopped: recorded as abandoned
    (shown in history, never sent), and the window holds the newest only."""
    session = make_session()
    items = [user(f"Message {i}") for i in range(3)]
    run(session.add_items(items))
    got = run(session.get_items())
    if make_session.store == "sqlite_session":  # type: ignore[attr-defined]
        assert got == items
        return
    assert got == items[-1:]
    assert isinstance(session, TurnLedgerSession)
    history = memory_ledger.get_history(OWNER, session.conversation_id).items
    assert [(i.status, i.question) for i in history] == [
        (TurnStatus.STOPPED, "Message 0"),
        (TurnStatus.STOPPED, "Message 1"),
    ]


def test_popping_a_finished_exchange(
    make_session: MakeSession, memory_ledger: Conversations
) -> None:
    """Both return the answer; turnledger deletes the whole recorded turn (its
    text is destroyed) and holds its question as the open turn again."""
    session = make_session()
    items = [user("Hello"), assistant("Hi there!")]
    run(session.add_items(items))
    assert run(session.pop_item()) == items[1]
    assert run(session.get_items()) == items[:1]
    if make_session.store == "turnledger":  # type: ignore[attr-defined]
        assert isinstance(session, TurnLedgerSession)
        [turn] = memory_ledger.get_history(OWNER, session.conversation_id).items
        assert turn.deleted and turn.question is None


def test_sdk_output_messages_come_back_without_their_ids(
    make_session: MakeSession,
) -> None:
    """The SDK saves a model's message with its id, status and annotations;
    turnledger keeps the text and gives the message back in the window's
    shape (role and content)."""
    session = make_session()
    model = ScriptedModel(["Hi"])
    run(Runner.run(Agent(name="t", model=model), "Hello", session=session))
    items = run(session.get_items())
    assert _texts(items) == [("user", "Hello"), ("assistant", "Hi")]
    if make_session.store == "sqlite_session":  # type: ignore[attr-defined]
        assert items[1]["id"] == "msg_1" and items[1]["status"] == "completed"
    else:
        assert items[1] == assistant("Hi")
