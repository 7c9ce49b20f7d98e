"""Adapter cases that lost or changed what an application handed over.

- The Agents SDK seeds a session with prior exchanges in one `add_items`
  call (`Runner.run(agent, [u1, a1, u2], session=...)`); every exchange of the
  batch must be kept, not only the last.
- LangChain's `ToolMessage(status="error")` must come back as an error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from turnledger.domain.conversation import TurnStatus
from turnledger.infra.adapters.langchain import TurnLedgerChatHistory, window_messages
from turnledger.infra.adapters.openai_agents import TurnLedgerSession
from turnledger.infra.service_layer.application import Conversations
from turnledger.projections.policy import WindowPolicy

OWNER = "alice"


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "output_text", "text": text}]}


def _texts(items: list[Any]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        content = item["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        out.append((item["role"], text))
    return out


def test_one_add_items_with_several_exchanges_keeps_every_exchange(
    memory_ledger: Conversations,
) -> None:
    conversation = memory_ledger.start_conversation(OWNER)
    session = TurnLedgerSession(memory_ledger, OWNER, conversation)
    batch = [_user("u1"), _assistant("a1"), _user("u2"), _assistant("a2")]
    asyncio.run(session.add_items(batch))
    history = memory_ledger.get_history(OWNER, conversation).items
    assert [(i.status, i.question, i.answer) for i in history] == [
        (TurnStatus.CONFIRMED, "u1", "a1"),
        (TurnStatus.CONFIRMED, "u2", "a2"),
    ]
    items = asyncio.run(session.get_items())
    assert _texts(items) == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("user", "u2"),
        ("assistant", "a2"),
    ]
    assert _texts(asyncio.run(session.get_items(limit=2))) == [
        ("user", "u2"),
        ("assistant", "a2"),
    ]


def test_a_seeded_batch_ending_with_a_question_keeps_the_exchange_before_it(
    memory_ledger: Conversations,
) -> None:
    conversation = memory_ledger.start_conversation(OWNER)
    session = TurnLedgerSession(memory_ledger, OWNER, conversation)
    asyncio.run(session.add_items([_user("u1"), _assistant("a1"), _user("u2")]))
    history = memory_ledger.get_history(OWNER, conversation).items
    assert [(i.status, i.answer) for i in history] == [(TurnStatus.CONFIRMED, "a1")]
    assert _texts(asyncio.run(session.get_items())) == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("user", "u2"),
    ]


def _error_turn() -> list[Any]:
    return [
        HumanMessage("Weather?"),
        AIMessage(
            "", tool_calls=[{"name": "weather", "args": {"c": "x"}, "id": "call_1"}]
        ),
        ToolMessage("timeout", tool_call_id="call_1", status="error"),
        AIMessage("The tool failed."),
    ]


def test_an_error_tool_message_comes_back_as_an_error(
    memory_ledger: Conversations,
) -> None:
    conversation = memory_ledger.start_conversation(OWNER)
    history = TurnLedgerChatHistory(memory_ledger, OWNER, conversation)
    history.add_messages(_error_turn())
    # The history gives the message back as it was added (no name given).
    [tool] = [m for m in history.messages if isinstance(m, ToolMessage)]
    assert tool.status == "error" and tool.name is None
    windowed = TurnLedgerChatHistory(
        memory_ledger, OWNER, conversation, policy=WindowPolicy()
    )
    [tool] = [m for m in windowed.messages if isinstance(m, ToolMessage)]
    assert tool.status == "error" and tool.name is None
    # The window to send names the tool the result answers.
    window = window_messages(
        memory_ledger, OWNER, conversation, question="?", model="gpt-4o-mini"
    )
    [tool] = [m for m in window if isinstance(m, ToolMessage)]
    assert tool.status == "error" and tool.name == "weather"
