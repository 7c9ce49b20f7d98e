"""Properties of the adapters over random tool-using conversations.

Whatever the rounds of calls and results, the messages that go in come back
the same (LangChain), and whatever the policy keeps, the agent's input and
LangChain's window hold whole turns: every call with its result, no result
without its call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from turnledger.infra.adapters.langchain import TurnLedgerChatHistory, window_messages
from turnledger.infra.adapters.openai_agents import TurnLedgerSession
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy

OWNER = "alice"
words = st.text(alphabet="abcdefghij XYZ", min_size=1, max_size=30).filter(
    lambda text: text.strip() == text
)
rounds = st.lists(
    st.tuples(
        st.one_of(st.just(""), words),
        st.lists(
            st.dictionaries(st.sampled_from("xyz"), words, max_size=2),
            min_size=1,
            max_size=3,
        ),
    ),
    max_size=3,
)
turns = st.lists(st.tuples(words, rounds, words), min_size=1, max_size=5)
policies = st.builds(
    WindowPolicy,
    max_pairs=st.one_of(st.none(), st.integers(1, 4)),
    max_bytes=st.integers(600, 6_000),
    floor_messages=st.just(0),
)


def _langchain_messages(conversation: list[Any]) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    call = 0
    for question, tool_rounds, answer in conversation:
        messages.append(HumanMessage(question))
        for text, arguments in tool_rounds:
            ids = [f"call_{call + n}" for n in range(len(arguments))]
            call += len(arguments)
            messages.append(
                AIMessage(
                    text,
                    tool_calls=[
                        {"name": "tool", "args": args, "id": call_id}
                        for call_id, args in zip(ids, arguments, strict=True)
                    ],
                )
            )
            messages += [
                ToolMessage(json.dumps(a), tool_call_id=i)
                for i, a in zip(ids, arguments, strict=True)
            ]
        messages.append(AIMessage(answer))
    return messages


def _shape(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
    return [
        (
            m.type,
            m.content,
            getattr(m, "tool_call_id", None),
            [(c["id"], c["args"]) for c in getattr(m, "tool_calls", [])],
        )
        for m in messages
    ]


def _paired(kinds_and_ids: list[tuple[str, list[str]]]) -> bool:
    """("call", ids) opens calls; ("result", [id]) must answer an open one;
    anything else needs every call answered first."""
    open_calls: set[str] = set()
    for kind, ids in kinds_and_ids:
        if kind == "call":
            if open_calls:
                return False
            open_calls = set(ids)
        elif kind == "result":
            if ids[0] not in open_calls:
                return False
            open_calls.discard(ids[0])
        elif open_calls:
            return False
    return not open_calls


@settings(max_examples=40, deadline=None)
@given(conversation=turns, policy=policies)
def test_langchain_round_trips_and_its_window_pairs_every_call(
    conversation: list[Any], policy: WindowPolicy
) -> None:
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        chat = ledger.start_conversation(OWNER)
        history = TurnLedgerChatHistory(ledger, OWNER, chat)
        sent = _langchain_messages(conversation)
        history.add_messages(sent)
        assert _shape(history.messages) == _shape(sent)
        window = window_messages(
            ledger, OWNER, chat, question="Now?", model="m", policy=policy
        )
        kept = window[1:-1]
        assert not kept or kept[0].type == "human"  # starts at a whole turn
        assert _paired(
            [
                ("call", [str(c["id"]) for c in m.tool_calls])
                if isinstance(m, AIMessage) and m.tool_calls
                else ("result", [m.tool_call_id])
                if isinstance(m, ToolMessage)
                else ("other", [])
                for m in kept
            ]
        )
        # The kept turns are the newest: the history's suffix.
        assert _shape(kept) == _shape(sent[len(sent) - len(kept) :])
    finally:
        ledger.close()


@settings(max_examples=40, deadline=None)
@given(conversation=turns, policy=policies)
def test_the_agents_input_is_a_suffix_of_whole_turns_with_every_call_paired(
    conversation: list[Any], policy: WindowPolicy
) -> None:
    ledger = open_conversations(Settings(_env_file=None, persistence="memory"))
    try:
        session = TurnLedgerSession(
            ledger, OWNER, ledger.start_conversation(OWNER), policy=policy
        )
        for question, tool_rounds, answer in conversation:
            items: list[dict[str, Any]] = [{"role": "user", "content": question}]
            for round_number, (text, arguments) in enumerate(tool_rounds):
                if text:
                    items.append({"role": "assistant", "content": text})
                ids = [
                    f"c{len(items)}_{round_number}_{n}" for n in range(len(arguments))
                ]
                items += [
                    {"type": "function_call", "call_id": i, "name": "tool",
                     "arguments": json.dumps(a)}
                    for i, a in zip(ids, arguments, strict=True)
                ]  # fmt: skip
                items += [
                    {"type": "function_call_output", "call_id": i, "output": "ok"}
                    for i in ids
                ]
            items.append({"role": "assistant", "content": answer})
            asyncio.run(session.add_items(items))
        history = ledger.get_history(OWNER, session.conversation_id).items
        assert len(history) == len(conversation)
        given_items = asyncio.run(session.get_items())
        assert not given_items or given_items[0]["role"] == "user"
        assert _paired(_agent_steps(given_items))
        questions = [i["content"] for i in given_items if i.get("role") == "user"]
        expected = [q for q, _, _ in conversation]
        assert questions == expected[len(expected) - len(questions) :]
    finally:
        ledger.close()


def _agent_steps(items: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Items as steps for _paired: consecutive calls are one model response."""
    steps: list[tuple[str, list[str]]] = []
    for item in items:
        if item.get("type") == "function_call":
            if steps and steps[-1][0] == "call":
                steps[-1][1].append(item["call_id"])
            else:
                steps.append(("call", [item["call_id"]]))
        elif item.get("type") == "function_call_output":
            steps.append(("result", [item["call_id"]]))
        else:
            steps.append(("other", []))
    return steps
