"""A turn with tool calls and attachments in each provider's request shape.

A turn renders to the messages (items, contents) it adds to the history
array, in order: the user's message (the question, then its attachments),
then each round of the assistant's steps, then the final answer.

Each format uses its provider's own shapes (the table is in docs/tools.md):
OpenAI chat ``tool_calls`` and ``role:"tool"`` messages; OpenAI Responses
``function_call`` / ``function_call_output`` items; Anthropic ``tool_use`` /
``tool_result`` blocks and ``image`` / ``document`` blocks; Gemini
``functionCall`` / ``functionResponse`` parts and ``inlineData`` /
``fileData``.

Where a provider has no place for something, the choice is fixed and
documented in docs/tools.md: OpenAI has no error flag on a tool result (the
content is sent as is); a refusal is a ``refusal`` in OpenAI chat and plain
assistant text elsewhere; an attachment a provider cannot take by reference
(e.g. a PDF by URL in OpenAI chat) is sent as a text note naming it.

Anthropic and Gemini require user and assistant turns to alternate: trailing
assistant text (a run without calls) is sent in the same message as the
final answer, so every turn is user, (assistant, user)*, assistant. A
message with one text holds a plain string, as in a text-only turn.

This module writes each turn as the documents of its messages and keeps the
names the rest imports; the same shapes as JSON text, which a window
writes, are in turn_json.py, attachments in attachment_shapes.py, and what
a renderer reads of a turn in sent_turn.py.
"""

from __future__ import annotations

from typing import Any

from turnledger.domain.json_text import load_json
from turnledger.domain.parts import (
    AssistantText,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
)
from turnledger.projections.attachment_shapes import (
    anthropic_attachment,
    attachment_note,
    chat_attachment,
    data_url,
    gemini_attachment,
    responses_attachment,
    sent_as_note,
)
from turnledger.projections.sent_turn import (
    SentTurn,
    TurnContent,
    TurnDocuments,
    WireIds,
)
from turnledger.projections.turn_json import (
    ARGUMENTS_AS_OBJECTS,
    TURN_TEXTS,
    TurnTexts,
    anthropic_texts,
    arguments_json,
    arguments_json_many,
    gemini_texts,
    openai_chat_texts,
    openai_responses_texts,
)

__all__ = [
    "ARGUMENTS_AS_OBJECTS",
    "TURN_SHAPES",
    "TURN_TEXTS",
    "SentTurn",
    "TurnContent",
    "TurnDocuments",
    "TurnTexts",
    "WireIds",
    "anthropic_texts",
    "anthropic_turn",
    "arguments_json",
    "arguments_json_many",
    "attachment_note",
    "data_url",
    "gemini_texts",
    "gemini_turn",
    "openai_chat_texts",
    "openai_chat_turn",
    "openai_responses_texts",
    "openai_responses_turn",
    "sent_as_note",
]


# OpenAI chat completions -------------------------------------------------------


def _chat_user(turn: TurnContent) -> dict[str, Any]:
    if not turn.attachments:
        return {"role": "user", "content": turn.question}
    content = [{"type": "text", "text": turn.question}]
    content += [chat_attachment(a) for a in turn.attachments]
    return {"role": "user", "content": content}


def _wire(ids: WireIds, call_id: str) -> str:
    return call_id if ids is None else ids.get(call_id, call_id)


def openai_chat_turn(turn: TurnContent, ids: WireIds = None) -> list[dict[str, Any]]:
    messages = [_chat_user(turn)]
    said: list[AssistantText | Refusal] = []  # the current run's texts, refusals
    calls: list[dict[str, Any]] = []  # and its calls
    for step in turn.steps:
        if isinstance(step, ToolResult):
            if said or calls:
                messages.append(_chat_assistant(said, calls))
                said, calls = [], []
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _wire(ids, step.call_id),
                    "content": step.content,
                }
            )
        elif isinstance(step, Reasoning):
            continue  # OpenAI chat has no place for reasoning state
        elif isinstance(step, ToolCall):
            calls.append(
                {
                    "id": _wire(ids, step.call_id),
                    "type": "function",
                    "function": {"name": step.name, "arguments": step.arguments},
                }
            )
        else:
            said.append(step)
    if said or calls:
        messages.append(_chat_assistant(said, calls))
    messages.append({"role": "assistant", "content": turn.answer})
    return messages


def _chat_assistant(
    said: list[AssistantText | Refusal], calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """One run of assistant steps as one assistant message."""
    message: dict[str, Any] = {"role": "assistant"}
    if len(said) == 1 and isinstance(said[0], Refusal):
        message["content"] = None
        message["refusal"] = said[0].text
    elif len(said) == 1:
        message["content"] = said[0].text
    elif said:
        message["content"] = [
            {"type": "refusal", "refusal": s.text}
            if isinstance(s, Refusal)
            else {"type": "text", "text": s.text}
            for s in said
        ]
    else:
        message["content"] = None
    if calls:
        message["tool_calls"] = calls
    return message


# OpenAI Responses --------------------------------------------------------------


def openai_responses_turn(
    turn: TurnContent, ids: WireIds = None
) -> list[dict[str, Any]]:
    if turn.attachments:
        content: Any = [{"type": "input_text", "text": turn.question}]
        content += [responses_attachment(a) for a in turn.attachments]
    else:
        content = turn.question
    items: list[dict[str, Any]] = [{"role": "user", "content": content}]
    for step in turn.steps:
        if isinstance(step, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": _wire(ids, step.call_id),
                    "name": step.name,
                    "arguments": step.arguments,
                }
            )
        elif isinstance(step, ToolResult):
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": _wire(ids, step.call_id),
                    "output": step.content,
                }
            )
        elif isinstance(step, Reasoning):
            if step.provider == "openai":  # another's is never sent here
                items.append(load_json(step.payload))  # the item as returned
        else:
            items.append({"role": "assistant", "content": step.text})
    items.append({"role": "assistant", "content": turn.answer})
    return items


# Anthropic Messages -------------------------------------------------------------


def _text_content(blocks: list[dict[str, Any]]) -> Any:
    """One text block is sent as a plain string, as in a text-only turn."""
    if len(blocks) == 1 and blocks[0].get("type") == "text":
        return blocks[0]["text"]
    return blocks


def anthropic_turn(turn: TurnContent, ids: WireIds = None) -> list[dict[str, Any]]:
    user: list[dict[str, Any]] = [{"type": "text", "text": turn.question}]
    user += [anthropic_attachment(a) for a in turn.attachments]
    messages: list[dict[str, Any]] = [{"role": "user", "content": _text_content(user)}]
    run: list[dict[str, Any]] = []  # the current run's blocks
    thinking: list[dict[str, Any]] = []  # its thinking blocks: they come first
    results: list[dict[str, Any]] | None = None  # the user message answering it
    for step in turn.steps:
        if isinstance(step, ToolResult):
            if results is None:
                content = _text_content(thinking + run)
                messages.append({"role": "assistant", "content": content})
                results, run, thinking = [], [], []
                messages.append({"role": "user", "content": results})
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": _wire(ids, step.call_id),
                "content": step.content,
            }
            if step.is_error:
                block["is_error"] = True
            results.append(block)
            continue
        results = None
        if isinstance(step, ToolCall):
            run.append(
                {
                    "type": "tool_use",
                    "id": _wire(ids, step.call_id),
                    "name": step.name,
                    "input": step.arguments_object(),
                }
            )
        elif isinstance(step, Reasoning):
            if step.provider == "anthropic":  # another's is never sent here
                thinking.append(load_json(step.payload))  # the block as returned
        else:
            run.append({"type": "text", "text": step.text})
    # A run no result answered (text only) is said with the final answer.
    run.append({"type": "text", "text": turn.answer})
    messages.append({"role": "assistant", "content": _text_content(thinking + run)})
    return messages


# Gemini --------------------------------------------------------------------------


def gemini_turn(turn: TurnContent, ids: WireIds = None) -> list[dict[str, Any]]:
    user: list[dict[str, Any]] = [{"text": turn.question}]
    user += [gemini_attachment(a) for a in turn.attachments]
    contents: list[dict[str, Any]] = [{"role": "user", "parts": user}]
    names: dict[str, str] = {}
    order: dict[str, int] = {}  # the current run's calls, in order
    run: list[dict[str, Any]] = []
    results: list[tuple[int, dict[str, Any]]] | None = None
    signature: str | None = None  # for the run's next part (Reasoning)
    for step in turn.steps:
        if isinstance(step, ToolResult):
            if results is None:
                contents.append({"role": "model", "parts": run})
                results, run, signature = [], [], None
            response: dict[str, Any] = {
                "id": _wire(ids, step.call_id),
                "name": names[step.call_id],
                "response": {"error" if step.is_error else "output": step.content},
            }
            results.append((order[step.call_id], {"functionResponse": response}))
            continue
        if results is not None:
            contents.append(_gemini_responses(results))
            results, order = None, {}
        if isinstance(step, ToolCall):
            names[step.call_id] = step.name
            order[step.call_id] = len(order)
            part: dict[str, Any] = {
                "functionCall": {
                    "id": _wire(ids, step.call_id),
                    "name": step.name,
                    "args": step.arguments_object(),
                }
            }
        elif isinstance(step, Reasoning):
            if step.provider == "gemini":  # another's is never sent here
                signature = load_json(step.payload)["thoughtSignature"]
            continue
        else:
            part = {"text": step.text}
        if signature is not None:
            part["thoughtSignature"] = signature
            signature = None
        run.append(part)
    if results is not None:
        contents.append(_gemini_responses(results))
    answer: dict[str, Any] = {"text": turn.answer}
    if signature is not None:
        answer["thoughtSignature"] = signature
    run.append(answer)
    contents.append({"role": "model", "parts": run})
    return contents


def _gemini_responses(results: list[tuple[int, Any]]) -> dict[str, Any]:
    """The user content answering a run: Gemini matches responses to calls by
    position and name, so they go in the calls' order, whatever order the
    results came in."""
    results.sort(key=lambda result: result[0])
    return {"role": "user", "parts": [part for _, part in results]}


TURN_SHAPES = {
    "openai-chat": openai_chat_turn,
    "openai-responses": openai_responses_turn,
    "anthropic-messages": anthropic_turn,
    "gemini-contents": gemini_turn,
}
