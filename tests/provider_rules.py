"""The providers' request rules turnledger relies on, checked on a body's bytes.

Written from the providers' documentation and the errors their APIs answer
with, not from turnledger's renderer (nothing here imports it): a body that
breaks one of these rules is a 400 from that provider. Each rule names its
source. `violations(wire_format, body)` lists the rules a body breaks.

openai-chat (platform.openai.com/docs/api-reference/chat/create):
  C1 a tool call id is at most 40 characters (the API's 400: "Invalid
     'messages[i].tool_calls[j].id': string too long. Expected a string with
     maximum length 40");
  C2 tool call ids are unique in the request (a tool message names the one
     call it answers);
  C3 "An assistant message with 'tool_calls' must be followed by tool
     messages responding to each 'tool_call_id'", and a tool message "must be
     a response to a preceding message with 'tool_calls'" (the API's 400s);
  C4 an assistant message's content is "required unless tool_calls or
     function_call is specified" (a refusal carries its own field);
  C5 `function.arguments` is a string of JSON.
openai-responses (platform.openai.com/docs/api-reference/responses/create):
  R1 a call_id is at most 64 characters ("Invalid 'input[i].call_id': string
     too long. Expected a string with maximum length 64");
  R2 call_ids of function_call items are unique in the request;
  R3 a function_call_output follows a function_call with its call_id ("No
     tool call found for function call output with call_id ..."), and every
     function_call has its output ("No tool output found for function call");
  R4 a reasoning item is followed, in the same response, by the items it
     produced: it is not the last item before a user message (the API's 400:
     "Item 'rs_...' of type 'reasoning' was provided without its required
     following item").
anthropic-messages (docs.anthropic.com/en/api/messages, tool use guide):
  A1 a tool_use id matches ^[a-zA-Z0-9_-]+$ (API reference, tool_use.id);
  A2 tool_use ids are unique in the request ("tool_use ids must be unique");
  A3 each tool_use of an assistant message has a tool_result in the next
     message, a user message whose tool_result blocks come first ("tool_use
     ids were found without tool_result blocks immediately after"; the guide:
     "tool result blocks must immediately follow their corresponding tool use
     blocks ... and come first in the content array"); a tool_result names a
     tool_use of the message just before it;
  A4 messages begin with a user message and alternate user and assistant;
  A5 content is not empty, and text blocks are not empty or whitespace
     ("messages: text content blocks must contain non-whitespace text");
  A6 thinking and redacted_thinking blocks come before the tool_use blocks of
     their message, and thinking blocks carry a signature (extended thinking
     guide: "when using tools with thinking, pass the thinking blocks back").
gemini-contents (ai.google.dev/api/generate-content, function calling guide):
  G1 contents alternate user and model, beginning and ending with user;
  G2 a model content's functionCall parts are answered by the next content,
     a user content with the same number of functionResponse parts, in the
     calls' order, with the calls' names ("Please ensure that the number of
     function response parts is equal to the number of function call parts of
     the function call turn"; responses are matched by position and name);
  G3 functionCall ids, when given, are unique in the request and a response
     carries its call's id;
  G4 no part is an empty text ("Unable to submit request because it has an
     empty text parameter").
"""

from __future__ import annotations

import json
import re
from typing import Any

ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")


def violations(wire_format: str, body: bytes) -> list[str]:
    document = json.loads(body)
    return _CHECKS[wire_format](document)


def _openai_chat(document: dict[str, Any]) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    waiting: list[str] = []  # calls of the last assistant message, unanswered
    for index, message in enumerate(document["messages"]):
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            if call_id not in waiting:
                found.append(f"C3 messages[{index}] answers no open call {call_id}")
            else:
                waiting.remove(call_id)
            continue
        if waiting:
            found.append(f"C3 calls {waiting} unanswered before messages[{index}]")
        waiting = []
        if role != "assistant":
            continue
        calls = message.get("tool_calls") or []
        if message.get("content") is None and not calls and not message.get("refusal"):
            found.append(f"C4 messages[{index}] has no content")
        for call in calls:
            call_id = call["id"]
            if len(call_id) > 40:
                found.append(f"C1 id of {len(call_id)} characters")
            if call_id in seen:
                found.append(f"C2 id {call_id} used twice")
            seen.add(call_id)
            waiting.append(call_id)
            arguments = call["function"]["arguments"]
            if not isinstance(arguments, str):
                found.append("C5 arguments not a string")
            else:
                json.loads(arguments)
    if waiting:
        found.append(f"C3 calls {waiting} never answered")
    return found


def _openai_responses(document: dict[str, Any]) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    open_calls: set[str] = set()
    items = document["input"]
    for index, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "function_call":
            call_id = item["call_id"]
            if len(call_id) > 64:
                found.append(f"R1 call_id of {len(call_id)} characters")
            if call_id in seen:
                found.append(f"R2 call_id {call_id} used twice")
            seen.add(call_id)
            open_calls.add(call_id)
            json.loads(item["arguments"])
        elif kind == "function_call_output":
            if item["call_id"] not in open_calls:
                found.append(f"R3 input[{index}] answers no call {item['call_id']}")
            open_calls.discard(item["call_id"])
        elif kind == "reasoning":
            following = items[index + 1] if index + 1 < len(items) else None
            if following is None or following.get("role") == "user":
                found.append(f"R4 input[{index}] reasoning without its next item")
    if open_calls:
        found.append(f"R3 calls {sorted(open_calls)} never answered")
    return found


def _anthropic_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _anthropic(document: dict[str, Any]) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    messages = document["messages"]
    expected_role = "user"
    pending: list[str] = []  # tool_use ids of the message just before
    for index, message in enumerate(messages):
        role = message["role"]
        if role != expected_role:
            found.append(f"A4 messages[{index}] is {role}, expected {expected_role}")
        expected_role = "assistant" if role == "user" else "user"
        blocks = _anthropic_blocks(message)
        if not blocks:
            found.append(f"A5 messages[{index}] has empty content")
        for block in blocks:
            if block["type"] == "text" and not block["text"].strip():
                found.append(f"A5 messages[{index}] has an empty text block")
        if role == "user":
            results = [b for b in blocks if b["type"] == "tool_result"]
            leading = blocks[: len(results)]
            if results and leading != results:
                found.append(f"A3 messages[{index}] tool_result blocks not first")
            answered = [b["tool_use_id"] for b in results]
            for call_id in answered:
                if call_id not in pending:
                    found.append(f"A3 messages[{index}] answers no tool_use {call_id}")
            missing = [c for c in pending if c not in answered]
            if missing:
                found.append(f"A3 tool_use {missing} without a result after it")
            pending = []
            continue
        if pending:
            found.append(f"A3 tool_use {pending} without a result after it")
        pending = []
        used_tool = False
        for block in blocks:
            kind = block["type"]
            if kind in ("thinking", "redacted_thinking"):
                if used_tool:
                    found.append(f"A6 messages[{index}] thinking after tool_use")
                if kind == "thinking" and not block.get("signature"):
                    found.append(f"A6 messages[{index}] thinking without signature")
            if kind != "tool_use":
                continue
            used_tool = True
            call_id = block["id"]
            if not ANTHROPIC_ID.fullmatch(call_id):
                found.append(f"A1 tool_use id {call_id!r} has invalid characters")
            if call_id in seen:
                found.append(f"A2 tool_use id {call_id} used twice")
            seen.add(call_id)
            pending.append(call_id)
            if not isinstance(block["input"], dict):
                found.append("A1 tool_use input is not an object")
    if pending:
        found.append(f"A3 tool_use {pending} never answered")
    if messages and messages[0]["role"] != "user":
        found.append("A4 the first message is not a user message")
    return found


def _gemini(document: dict[str, Any]) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    contents = document["contents"]
    calls: list[dict[str, Any]] = []  # of the model content just before
    for index, content in enumerate(contents):
        role = content["role"]
        expected = "user" if index % 2 == 0 else "model"
        if role != expected:
            found.append(f"G1 contents[{index}] is {role}, expected {expected}")
        parts = content["parts"]
        for part in parts:
            if "text" in part and not part["text"]:
                found.append(f"G4 contents[{index}] has an empty text part")
        responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if role == "user":
            if [r["name"] for r in responses] != [c["name"] for c in calls]:
                found.append(
                    f"G2 contents[{index}] responses {[r['name'] for r in responses]} "
                    f"do not answer calls {[c['name'] for c in calls]} in order"
                )
            elif [r.get("id") for r in responses] != [c.get("id") for c in calls]:
                found.append(f"G3 contents[{index}] response ids differ from calls'")
            calls = []
            continue
        if calls:
            found.append(f"G2 calls before contents[{index}] never answered")
        calls = [p["functionCall"] for p in parts if "functionCall" in p]
        for call in calls:
            call_id = call.get("id")
            if call_id is not None and call_id in seen:
                found.append(f"G3 functionCall id {call_id} used twice")
            seen.add(call_id)
    if contents and contents[-1]["role"] != "user":
        found.append("G1 the contents do not end with a user content")
    if calls:
        found.append("G2 the last calls are never answered")
    return found


_CHECKS = {
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic-messages": _anthropic,
    "gemini-contents": _gemini,
}
