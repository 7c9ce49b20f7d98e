"""Providers' reasoning state kept with the turn and sent back to its producer.

An Anthropic thinking block, an OpenAI reasoning item and a Gemini thought
signature are recorded as parts of the turn (sealed, deleted with it), sent
back in their provider's format to the model that produced them, before the
calls they led to, and left out, reported, everywhere else.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from tests.integration.test_http_api import Api, turn_url
from tests.integration.test_http_api import api as api  # noqa: F401 (fixture)
from tests.provider_rules import violations
from tests.sealed_text import assert_sealed_and_unreadable
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import Reasoning, ToolCall, ToolResult, TurnParts
from turnledger.infra.adapters.openai_agents import TurnLedgerSession
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.audit import Auditor
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy

OWNER = "alice"
MODEL = "claude-sonnet-4-5"
THINKING = {"type": "thinking", "thinking": "Look it up.", "signature": "EqQBCkgI"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3p"}
RS_ITEM = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [],
    "encrypted_content": "gAAAAABo",
}
PROVIDER_OF = {
    "anthropic-messages": "anthropic",
    "openai-responses": "openai",
    "gemini-contents": "gemini",
}


def reasoning_turn(provider: str, model: str = MODEL) -> TurnParts:
    payloads = {
        "anthropic": [THINKING, REDACTED],
        "openai": [RS_ITEM],
        "gemini": [{"thoughtSignature": "CiQBcsjafE"}],
    }[provider]
    return TurnParts(
        question="Weather in Paris?",
        steps=(
            *(Reasoning(provider, model, json.dumps(p)) for p in payloads),
            ToolCall("call_1", "weather", '{"city":"Paris"}'),
            ToolResult("call_1", "18C"),
        ),
        answer="18 °C.",
    )


def project(
    ledger: Conversations, conversation_id: uuid.UUID, wire_format: str, model: str
) -> Any:
    policy = WindowPolicy(wire_format=wire_format, max_bytes=100_000)  # type: ignore[arg-type]
    return ledger.project_window(
        OWNER,
        conversation_id,
        question="And Rome?",
        system="s",
        model=model,
        policy=policy,
    )


def test_thinking_goes_back_first_in_its_message_to_the_model_that_thought_it(
    ledger: Conversations,
) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    turn = reasoning_turn("anthropic")
    ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=turn)
    [item] = ledger.get_history(OWNER, conversation_id).items
    assert item.parts == turn
    projected = project(ledger, conversation_id, "anthropic-messages", MODEL)
    window = projected.window
    assert violations("anthropic-messages", window.body) == []
    assistant = json.loads(window.body)["messages"][1]
    assert assistant["content"][:2] == [THINKING, REDACTED]
    assert assistant["content"][2]["type"] == "tool_use"
    assert window.dropped_reasoning == ()
    ledger.confirm_turn(
        OWNER,
        conversation_id,
        turn_id="t2",
        question="And Rome?",
        answer="20 °C.",
        window=projected,
    )
    report = Auditor(ledger).audit()
    assert report.ok, report.failures
    assert report.conversation(conversation_id).receipts_verified == 1


@pytest.mark.parametrize("wire_format", WIRE_FORMATS)
def test_reasoning_is_left_out_for_another_model_or_format_and_reported(
    memory_ledger: Conversations, wire_format: str
) -> None:
    conversation_id = memory_ledger.start_conversation(OWNER)
    memory_ledger.confirm_turn(
        OWNER, conversation_id, turn_id="t1", parts=reasoning_turn("anthropic")
    )
    for model in (MODEL, "claude-opus-4-1"):
        window = project(memory_ledger, conversation_id, wire_format, model).window
        assert violations(wire_format, window.body) == []
        body = window.body.decode()
        sent = wire_format == "anthropic-messages" and model == MODEL
        assert ("EqQBCkgI" in body) == sent and ("EmwKAhgBEgy3va3p" in body) == sent
        reasons = [d["reason"] for d in window.report()["dropped_reasoning"]]
        if sent:
            assert reasons == []
        elif wire_format == "anthropic-messages":
            assert reasons == ["other_model", "other_model"]
        else:
            assert reasons == ["other_format", "other_format"]
        assert len(window.body) <= 100_000


@pytest.mark.parametrize("wire_format", ["openai-responses", "gemini-contents"])
def test_openai_items_and_gemini_signatures_go_back_before_their_calls(
    memory_ledger: Conversations, wire_format: str
) -> None:
    conversation_id = memory_ledger.start_conversation(OWNER)
    turn = reasoning_turn(PROVIDER_OF[wire_format], "gpt-5")
    memory_ledger.confirm_turn(OWNER, conversation_id, turn_id="t1", parts=turn)
    window = project(memory_ledger, conversation_id, wire_format, "gpt-5").window
    assert violations(wire_format, window.body) == []
    document = json.loads(window.body)
    if wire_format == "openai-responses":
        kinds = [item.get("type", "message") for item in document["input"]]
        assert document["input"][1] == RS_ITEM
        assert kinds[1:4] == ["reasoning", "function_call", "function_call_output"]
    else:
        call = document["contents"][1]["parts"][0]
        assert call["thoughtSignature"] == "CiQBcsjafE"
        assert call["functionCall"]["name"] == "weather"


def test_a_window_for_another_model_is_shorter_by_the_reasoning_it_leaves_out(
    memory_ledger: Conversations,
) -> None:
    """Recorded sizes count the reasoning; planned at the byte limit, a window
    for another model is exactly the body without it."""
    conversation_id = memory_ledger.start_conversation(OWNER)
    memory_ledger.confirm_turn(
        OWNER, conversation_id, turn_id="t1", parts=reasoning_turn("anthropic")
    )
    same = project(memory_ledger, conversation_id, "anthropic-messages", MODEL)
    other = project(memory_ledger, conversation_id, "anthropic-messages", "x")
    without = len(json.dumps(THINKING, separators=(",", ":")).encode()) + len(
        json.dumps(REDACTED, separators=(",", ":")).encode()
    )
    # Each block and its comma leave; the model's name differs by its length.
    assert len(same.window.body) - len(other.window.body) == (
        without + 2 + len(MODEL) - 1
    )


def test_reasoning_is_sealed_and_deleted_with_its_turn(ledger: Conversations) -> None:
    conversation_id = ledger.start_conversation(OWNER)
    ledger.confirm_turn(
        OWNER, conversation_id, turn_id="t1", parts=reasoning_turn("anthropic")
    )
    ledger.delete_history(OWNER, conversation_id, turn_ids=["t1"])
    assert ledger.get_history(OWNER, conversation_id).items[0].parts is None
    assert_sealed_and_unreadable([ledger], conversation_id, ["t1"])


@pytest.mark.parametrize(
    ("provider", "payload"),
    [
        ("anthropic", {"type": "reasoning"}),
        ("openai", {"type": "thinking"}),
        ("gemini", {"thoughtSignature": 5}),
        ("gemini", {"thoughtSignature": "s", "x": 1}),
        ("mistral", {"type": "thinking"}),
    ],
)
def test_a_payload_not_of_its_provider_is_refused(
    provider: str, payload: dict[str, object]
) -> None:
    with pytest.raises(InvalidInputError):
        Reasoning(provider, MODEL, json.dumps(payload))


def test_reasoning_parts_over_http(api: Api) -> None:  # noqa: F811
    parts = [
        {
            "kind": "reasoning",
            "provider": "anthropic",
            "model": MODEL,
            "payload": json.dumps(THINKING),
        },
        {"kind": "tool_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"kind": "tool_result", "call_id": "c1", "content": "r", "is_error": False},
    ]
    turn = {"question": "q", "answer": "a", "parts": parts}
    put = api.http.put(turn_url(api, "t-r"), headers=api.auth, json=turn)
    assert put.status_code == 200, put.text
    items = api.http.get(
        f"/v1/conversations/{api.conversation}/turns", headers=api.auth
    ).json()["items"]
    assert items[-1]["parts"][0] == parts[0]
    before = api.head()
    bad = [{**parts[0], "payload": '{"type":"reasoning"}'}, *parts[1:]]
    response = api.http.put(
        turn_url(api, "t-bad"),
        headers=api.auth,
        json={"question": "q", "answer": "a", "parts": bad},
    )
    assert response.status_code == 422
    assert "invalid parts[0].payload" in response.json()["error"]["message"]
    assert api.head() == before


def test_the_agents_session_keeps_reasoning_items(
    memory_ledger: Conversations,
) -> None:
    conversation_id = memory_ledger.start_conversation(OWNER)
    session = TurnLedgerSession(memory_ledger, OWNER, conversation_id, model="gpt-5")
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "weather",
        "arguments": "{}",
    }
    output = {"type": "function_call_output", "call_id": "call_1", "output": "18C"}
    answer = {
        "role": "assistant",
        "content": [{"type": "output_text", "text": "18 °C."}],
    }
    items = [{"role": "user", "content": "Weather?"}, RS_ITEM, call, output, answer]
    asyncio.run(session.add_items(items))
    back = asyncio.run(session.get_items())
    assert back[1] == RS_ITEM
    assert [item.get("type", "message") for item in back] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
    ]
