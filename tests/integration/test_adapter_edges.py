"""The adapters' boundaries (docs/adapters.md): what they refuse, skip and keep."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from turnledger.domain.conversation import TurnStatus
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import Attachment, Refusal, ToolResult
from turnledger.infra.adapters.langchain import TurnLedgerChatHistory
from turnledger.infra.adapters.openai_agents import TurnLedgerSession
from turnledger.infra.service_layer.application import Conversations

OWNER = "alice"
PNG = b"\x89PNG\r\n\x1a\n"
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def _session(ledger: Conversations) -> TurnLedgerSession:
    return TurnLedgerSession(ledger, OWNER, ledger.start_conversation(OWNER))


def _add(session: TurnLedgerSession, *items: dict[str, Any]) -> None:
    asyncio.run(session.add_items(list(items)))


def _version(ledger: Conversations, session: TurnLedgerSession) -> int:
    return ledger.get_conversation(OWNER, session.conversation_id).version


def _answered(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "output_text", "text": text}]}


def test_messages_the_session_cannot_store_are_refused_and_not_kept(
    memory_ledger: Conversations,
) -> None:
    session = _session(memory_ledger)
    with pytest.raises(InvalidInputError):
        _add(session, _answered("a reply to nothing"))
    _add(session, {"role": "user", "content": "Hi"})
    with pytest.raises(InvalidInputError):
        _add(session, {"type": "function_call_output", "call_id": "c9", "output": "x"})
    with pytest.raises(InvalidInputError):
        _add(session, {"type": "file_search_call", "id": "fs", "queries": []})
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "Hi"}]
    assert _version(memory_ledger, session) == 1  # nothing written
    # Reasoning items are skipped; the turn still confirms.
    _add(
        session, {"type": "reasoning", "id": "rs_1", "summary": []}, _answered("Hello")
    )
    items = memory_ledger.get_history(OWNER, session.conversation_id).items
    assert [(i.question, i.answer) for i in items] == [("Hi", "Hello")]


def test_attachments_are_kept_inline_by_reference_or_by_file_id(
    memory_ledger: Conversations,
) -> None:
    session = _session(memory_ledger)
    content = [
        {"type": "input_text", "text": "What is in these?"},
        {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
        {"type": "input_image", "image_url": "https://example.com/cat.jpg"},
        {"type": "input_file", "file_id": "file-abc123", "filename": "report.pdf"},
    ]
    _add(session, {"role": "user", "content": content}, _answered("A cat."))
    (item,) = memory_ledger.get_history(OWNER, session.conversation_id).items
    assert item.parts is not None
    assert item.parts.attachments == (
        Attachment(media_type="image/png", byte_size=len(PNG), data=PNG),
        Attachment(
            media_type="image/jpeg", byte_size=0, uri="https://example.com/cat.jpg"
        ),
        Attachment(
            media_type="application/pdf",
            byte_size=0,
            file_id="file-abc123",
            name="report.pdf",
        ),
    )


def test_a_refusal_alone_leaves_the_turn_open_and_the_next_question_abandons_it(
    memory_ledger: Conversations,
) -> None:
    session = _session(memory_ledger)
    refusal = {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}
    _add(session, {"role": "user", "content": "Do it"}, refusal)
    assert _version(memory_ledger, session) == 1
    _add(session, {"role": "user", "content": "Then this"}, _answered("Done."))
    items = memory_ledger.get_history(OWNER, session.conversation_id).items
    assert [i.status for i in items] == [TurnStatus.STOPPED, TurnStatus.CONFIRMED]
    assert items[0].parts is not None and items[0].parts.steps == (Refusal("No."),)


def test_pop_never_reaches_abandoned_turns_and_clear_keeps_the_conversation(
    memory_ledger: Conversations,
) -> None:
    session = _session(memory_ledger)
    assert asyncio.run(session.pop_item()) is None
    _add(session, {"role": "user", "content": "Stopped one"})
    session.turns.abandon("failed")
    assert asyncio.run(session.pop_item()) is None
    items = memory_ledger.get_history(OWNER, session.conversation_id).items
    assert [(i.status, i.deleted) for i in items] == [(TurnStatus.FAILED, False)]
    asyncio.run(session.clear_session())
    assert (
        memory_ledger.get_conversation(OWNER, session.conversation_id).turn_count == 1
    )
    assert memory_ledger.get_history(OWNER, session.conversation_id).items[0].deleted


def test_langchain_keeps_system_messages_and_refuses_calls_without_ids(
    memory_ledger: Conversations,
) -> None:
    history = TurnLedgerChatHistory(
        memory_ledger, OWNER, memory_ledger.start_conversation(OWNER)
    )
    history.add_message(SystemMessage("Be brief."))
    # A message type turns do not hold (a chat message of another role).
    with pytest.raises(InvalidInputError):
        history.add_message(ChatMessage("Looks fine.", role="critic"))
    history.add_message(
        HumanMessage(
            [
                {"type": "text", "text": "Is it sunny?"},
                {"type": "image_url", "image_url": {"url": DATA_URL}},
            ]
        )
    )
    no_id = AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": None}])
    with pytest.raises(InvalidInputError):
        history.add_message(no_id)
    history.add_messages(
        [
            AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": "c1"}]),
            ToolMessage("timeout", tool_call_id="c1", status="error"),
            AIMessage("I could not check."),
        ]
    )
    (item,) = memory_ledger.get_history(OWNER, history.turns.conversation_id).items
    assert item.parts is not None
    assert item.parts.attachments[0].data == PNG
    assert item.parts.steps[-1] == ToolResult(
        call_id="c1", content="timeout", is_error=True
    )
    # The system message is no step of the turn, and comes back first.
    assert history.messages[0] == SystemMessage("Be brief.")
    assert [m.type for m in history.messages] == ["system", "human", "ai", "tool", "ai"]


def test_the_fold_comes_first_in_both_adapters(memory_ledger: Conversations) -> None:
    session = _session(memory_ledger)
    for n in range(3):
        _add(session, {"role": "user", "content": f"Q{n}"}, _answered(f"A{n}"))
    first = memory_ledger.get_history(OWNER, session.conversation_id).items[0]
    memory_ledger.record_fold(
        OWNER,
        session.conversation_id,
        covers_through_turn_id=first.turn_id,
        summary="Q0 was asked.",
        summarized_version=4,
    )
    items = asyncio.run(session.get_items())
    assert items[0]["role"] == "developer" and "Q0 was asked." in str(items[0])
    assert [i["content"] for i in items[1:] if i["role"] == "user"] == ["Q1", "Q2"]
    history = TurnLedgerChatHistory(
        memory_ledger, OWNER, session.conversation_id, policy=session.policy
    )
    messages = history.messages
    assert isinstance(messages[0], SystemMessage)
    assert "Q0 was asked." in str(messages[0].content)
    assert [m.content for m in messages if m.type == "human"] == ["Q1", "Q2"]


def test_a_message_breaking_the_turn_rules_is_refused_and_the_turn_still_records(
    memory_ledger: Conversations,
) -> None:
    history = TurnLedgerChatHistory(
        memory_ledger, OWNER, memory_ledger.start_conversation(OWNER)
    )
    call = AIMessage("", tool_calls=[{"name": "weather", "args": {}, "id": "c1"}])
    history.add_messages([HumanMessage("Weather?"), call])
    with pytest.raises(InvalidInputError):
        history.add_message(call)  # the same call id again
    history.add_message(ToolMessage("sunny", tool_call_id="c1"))
    with pytest.raises(InvalidInputError):
        history.add_message(ToolMessage("sunny", tool_call_id="c1"))  # answered
    history.add_message(AIMessage("Sunny."))
    (item,) = memory_ledger.get_history(OWNER, history.turns.conversation_id).items
    assert item.status == TurnStatus.CONFIRMED and item.answer == "Sunny."


def test_langchain_messages_the_parts_merge_come_back_as_rendered(
    memory_ledger: Conversations,
) -> None:
    """Two AIMessages with calls before their results are one round of steps:
    that turn comes back as the parts render it (one AIMessage), without the
    messages' own fields, its system messages first (docs/adapters.md)."""
    history = TurnLedgerChatHistory(
        memory_ledger, OWNER, memory_ledger.start_conversation(OWNER)
    )
    history.add_messages(
        [
            HumanMessage("q", id="h1"),
            SystemMessage("mid-turn"),
            AIMessage("a", id="a1", tool_calls=[{"name": "f", "args": {}, "id": "c1"}]),
            AIMessage("b", id="a2", tool_calls=[{"name": "g", "args": {}, "id": "c2"}]),
            ToolMessage("r1", tool_call_id="c1"),
            ToolMessage("r2", tool_call_id="c2"),
            AIMessage("done", id="a3"),
        ]
    )
    messages = history.messages
    assert [m.type for m in messages] == ["system", "human", "ai", "tool", "tool", "ai"]
    assert messages[0] == SystemMessage("mid-turn")
    assert [m.id for m in messages] == [None] * 6
    assert [c["id"] for c in messages[2].tool_calls] == ["c1", "c2"]  # type: ignore[attr-defined]
    assert [m.name for m in messages[3:5]] == ["f", "g"]
