"""Each result goes out with the wire id of its own call.

tests/provider_rules.py checks that every result names an open call; with
parallel calls, a result sent under the id of another call of the same round
would pass that check and still answer the wrong call. Here, read from the
body's bytes alone (nothing of the renderer), each result is joined to the
call its wire id names, and the (tool, arguments, result) triples must be
those of the stored turns the window kept, over random conversations with
reused and provider-invalid ids, parallel calls answered in any order and
reasoning parts, in all four formats.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_provider_rules import conversations
from turnledger.domain.parts import ToolCall, ToolResult
from turnledger.projections.formats import WIRE_FORMATS
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.window import WindowTurn, select_window

Triple = tuple[str, str, str]  # tool name, arguments (canonical JSON), result


def _canonical(arguments: Any) -> str:
    value = json.loads(arguments) if isinstance(arguments, str) else arguments
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def sent_pairs(wire_format: str, body: bytes) -> Counter[Triple]:
    """Every result of the body joined to the call its id names."""
    document = json.loads(body)
    calls: dict[str, tuple[str, str]] = {}
    results: list[tuple[str, str]] = []
    if wire_format == "openai-chat":
        for message in document["messages"]:
            for call in message.get("tool_calls") or []:
                function = call["function"]
                calls[call["id"]] = (
                    function["name"],
                    _canonical(function["arguments"]),
                )
            if message["role"] == "tool":
                results.append((message["tool_call_id"], message["content"]))
    elif wire_format == "openai-responses":
        for item in document["input"]:
            if item.get("type") == "function_call":
                calls[item["call_id"]] = (item["name"], _canonical(item["arguments"]))
            elif item.get("type") == "function_call_output":
                results.append((item["call_id"], item["output"]))
    elif wire_format == "anthropic-messages":
        for message in document["messages"]:
            if isinstance(message["content"], str):
                continue
            for block in message["content"]:
                if block["type"] == "tool_use":
                    calls[block["id"]] = (block["name"], _canonical(block["input"]))
                elif block["type"] == "tool_result":
                    results.append((block["tool_use_id"], block["content"]))
    else:
        for content in document["contents"]:
            for part in content["parts"]:
                if "functionCall" in part:
                    call = part["functionCall"]
                    calls[call["id"]] = (call["name"], _canonical(call["args"]))
                elif "functionResponse" in part:
                    response = part["functionResponse"]
                    answer = response["response"]
                    text = answer["output"] if "output" in answer else answer["error"]
                    results.append((response["id"], text))
    return Counter((*calls[wire_id], text) for wire_id, text in results)


def stored_pairs(turns: list[WindowTurn]) -> Counter[Triple]:
    found: Counter[Triple] = Counter()
    for turn in turns:
        calls = {s.call_id: s for s in turn.steps if isinstance(s, ToolCall)}
        for step in turn.steps:
            if isinstance(step, ToolResult):
                call = calls[step.call_id]
                found[(call.name, _canonical(call.arguments), step.content)] += 1
    return found


@settings(max_examples=150, deadline=None)
@given(turns=conversations(), wire_format=st.sampled_from(WIRE_FORMATS))
def test_every_result_carries_the_wire_id_of_its_own_call(
    turns: list[WindowTurn], wire_format: str
) -> None:
    policy = WindowPolicy(wire_format=wire_format, max_bytes=1_000_000)  # type: ignore[arg-type]
    window = select_window(
        model="m", system="S", turns=turns, question="?", policy=policy
    )
    kept = [turn for turn in turns if turn.turn_id in window.kept_turn_ids]
    assert sent_pairs(wire_format, window.body) == stored_pairs(kept)


def test_a_result_under_another_calls_id_is_caught() -> None:
    """Not vacuous: two results swapped between parallel calls differ."""
    body = {
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": n, "arguments": "{}"},
                    }
                    for i, n in (("c1", "a"), ("c2", "b"))
                ],
            },
            {"role": "tool", "tool_call_id": "c2", "content": "from a"},
            {"role": "tool", "tool_call_id": "c1", "content": "from b"},
        ]
    }
    sent = sent_pairs("openai-chat", json.dumps(body).encode())
    assert sent == Counter({("b", "{}", "from a"): 1, ("a", "{}", "from b"): 1})
    assert sent != Counter({("a", "{}", "from a"): 1, ("b", "{}", "from b"): 1})
