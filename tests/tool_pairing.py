"""Checks a request body against its provider's rules for tool calls.

In every format: each call is answered by exactly one result and each
result answers a call, where the provider expects it; roles alternate where
the provider requires it (Anthropic, Gemini); the history starts with a user
message and ends with the current question.
"""

from __future__ import annotations

import json
from typing import Any


def pairing_problems(wire_format: str, body: bytes) -> list[str]:
    document = json.loads(body)
    return _CHECKS[wire_format](document)


def _openai_chat(document: dict[str, Any]) -> list[str]:
    problems = []
    messages = [m for m in document["messages"] if m["role"] != "system"]
    if messages[0]["role"] != "user" or messages[-1]["role"] != "user":
        problems.append("history must start and end with a user message")
    waiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in waiting:
                problems.append(f"orphan tool result {message['tool_call_id']}")
            else:
                waiting.remove(message["tool_call_id"])
            continue
        if waiting:
            problems.append(f"calls {waiting} not answered before a {message['role']}")
            waiting = []
        if message["role"] == "assistant":
            waiting = [call["id"] for call in message.get("tool_calls", [])]
            for call in message.get("tool_calls", []):
                json.loads(call["function"]["arguments"])
    if waiting:
        problems.append(f"calls {waiting} never answered")
    return problems


def _openai_responses(document: dict[str, Any]) -> list[str]:
    problems = []
    items = [i for i in document["input"] if i.get("role") != "developer"]
    if items[0].get("role") != "user" or items[-1].get("role") != "user":
        problems.append("input must start and end with a user message")
    open_calls: list[str] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            json.loads(item["arguments"])
            open_calls.append(item["call_id"])
        elif kind == "function_call_output":
            if item["call_id"] not in open_calls:
                problems.append(f"orphan function_call_output {item['call_id']}")
            else:
                open_calls.remove(item["call_id"])
        elif item.get("role") == "user" and open_calls:
            problems.append(f"calls {open_calls} unanswered at a user message")
            open_calls = []
    if open_calls:
        problems.append(f"calls {open_calls} never answered")
    return problems


def _alternating(
    turns: list[dict[str, Any]],
    *,
    user: str,
    assistant: str,
    calls_of: Any,
    results_of: Any,
) -> list[str]:
    problems = []
    for index, turn in enumerate(turns):
        expected = user if index % 2 == 0 else assistant
        if turn["role"] != expected:
            problems.append(f"message {index} is {turn['role']}, not {expected}")
    if turns[-1]["role"] != user:
        problems.append("the last message must be the user's")
    for index, turn in enumerate(turns):
        results = results_of(turn)
        calls = calls_of(turn)
        if results:
            previous = calls_of(turns[index - 1]) if index > 0 else []
            if sorted(results) != sorted(previous):
                problems.append(
                    f"message {index} answers {results}, the one before called "
                    f"{previous}"
                )
        if calls:
            following = results_of(turns[index + 1]) if index + 1 < len(turns) else []
            if sorted(calls) != sorted(following):
                problems.append(f"calls {calls} not answered in the next message")
    return problems


def _blocks(content: Any) -> list[dict[str, Any]]:
    return content if isinstance(content, list) else []


def _anthropic(document: dict[str, Any]) -> list[str]:
    return _alternating(
        document["messages"],
        user="user",
        assistant="assistant",
        calls_of=lambda m: [
            b["id"] for b in _blocks(m["content"]) if b["type"] == "tool_use"
        ],
        results_of=lambda m: [
            b["tool_use_id"]
            for b in _blocks(m["content"])
            if b["type"] == "tool_result"
        ],
    )


def _gemini(document: dict[str, Any]) -> list[str]:
    return _alternating(
        document["contents"],
        user="user",
        assistant="model",
        calls_of=lambda c: [
            p["functionCall"]["id"] for p in c["parts"] if "functionCall" in p
        ],
        results_of=lambda c: [
            p["functionResponse"]["id"] for p in c["parts"] if "functionResponse" in p
        ],
    )


_CHECKS = {
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic-messages": _anthropic,
    "gemini-contents": _gemini,
}
