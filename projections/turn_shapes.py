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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from turnledger.domain.parts import (
    AssistantStep,
    Attachment,
    Refusal,
    ToolCall,
    ToolResult,
)


class TurnContent(Protocol):
    """A turn's texts as they are sent (trimmed where the policy trims)."""

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...

    @property
    def attachments(self) -> tuple[Attachment, ...]: ...

    @property
    def steps(self) -> tuple[AssistantStep, ...]: ...


def attachment_note(attachment: Attachment) -> str:
    """The text sent in place of an attachment a format cannot carry."""
    where = attachment.uri or attachment.file_id or "inline"
    name = f"{attachment.name} " if attachment.name else ""
    return (
        f"[attachment {name}({attachment.media_type}, "
        f"{attachment.byte_size} bytes): {where}]"
    )


def sent_as_note(wire_format: str, attachment: Attachment) -> bool:
    """Whether `wire_format` sends this attachment as a text note (see above)."""
    if wire_format == "openai-chat":
        return attachment.uri is not None and not attachment.is_image
    if wire_format == "anthropic-messages":
        return not attachment.is_image and attachment.media_type != "application/pdf"
    return False


def data_url(attachment: Attachment) -> str:
    return f"data:{attachment.media_type};base64,{attachment.data_base64()}"


def rounds(
    steps: Sequence[AssistantStep],
) -> list[tuple[list[AssistantStep], list[ToolResult]]]:
    """Steps as rounds: (assistant steps, the results that follow them)."""
    grouped: list[tuple[list[AssistantStep], list[ToolResult]]] = []
    for step in steps:
        if isinstance(step, ToolResult):
            grouped[-1][1].append(step)  # parts.py: a result follows its call
        elif not grouped or grouped[-1][1]:
            grouped.append(([step], []))
        else:
            grouped[-1][0].append(step)
    return grouped


def _call_names(steps: Sequence[AssistantStep]) -> dict[str, str]:
    return {s.call_id: s.name for s in steps if isinstance(s, ToolCall)}


# OpenAI chat completions -------------------------------------------------------


def _chat_attachment(attachment: Attachment) -> dict[str, Any]:
    if attachment.is_image and attachment.file_id is None:
        url = attachment.uri if attachment.uri is not None else data_url(attachment)
        return {"type": "image_url", "image_url": {"url": url}}
    if attachment.file_id is not None:
        return {"type": "file", "file": {"file_id": attachment.file_id}}
    if attachment.data is not None:
        return {
            "type": "file",
            "file": {
                "filename": attachment.name or "attachment",
                "file_data": data_url(attachment),
            },
        }
    return {"type": "text", "text": attachment_note(attachment)}


def _chat_user(turn: TurnContent) -> dict[str, Any]:
    if not turn.attachments:
        return {"role": "user", "content": turn.question}
    content = [{"type": "text", "text": turn.question}]
    content += [_chat_attachment(a) for a in turn.attachments]
    return {"role": "user", "content": content}


def openai_chat_turn(turn: TurnContent) -> list[dict[str, Any]]:
    messages = [_chat_user(turn)]
    for assistant, results in rounds(turn.steps):
        said = [s for s in assistant if not isinstance(s, ToolCall)]
        calls = [s for s in assistant if isinstance(s, ToolCall)]
        message: dict[str, Any] = {"role": "assistant"}
        if len(said) == 1 and isinstance(said[0], Refusal):
            message["content"] = None
            message["refusal"] = said[0].text
        elif len(said) == 1:
            message["content"] = said[0].text  # type: ignore[union-attr]
        elif said:
            message["content"] = [
                {"type": "refusal", "refusal": s.text}
                if isinstance(s, Refusal)
                else {"type": "text", "text": s.text}  # type: ignore[union-attr]
                for s in said
            ]
        else:
            message["content"] = None
        if calls:
            message["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in calls
            ]
        messages.append(message)
        messages += [
            {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
            for r in results
        ]
    messages.append({"role": "assistant", "content": turn.answer})
    return messages


# OpenAI Responses --------------------------------------------------------------


def _responses_attachment(attachment: Attachment) -> dict[str, Any]:
    if attachment.is_image:
        part: dict[str, Any] = {"type": "input_image"}
        if attachment.file_id is not None:
            part["file_id"] = attachment.file_id
        else:
            part["image_url"] = (
                attachment.uri if attachment.uri is not None else data_url(attachment)
            )
        part["detail"] = "auto"
        return part
    if attachment.file_id is not None:
        return {"type": "input_file", "file_id": attachment.file_id}
    if attachment.uri is not None:
        return {"type": "input_file", "file_url": attachment.uri}
    return {
        "type": "input_file",
        "filename": attachment.name or "attachment",
        "file_data": data_url(attachment),
    }


def openai_responses_turn(turn: TurnContent) -> list[dict[str, Any]]:
    if turn.attachments:
        content: Any = [{"type": "input_text", "text": turn.question}]
        content += [_responses_attachment(a) for a in turn.attachments]
    else:
        content = turn.question
    items: list[dict[str, Any]] = [{"role": "user", "content": content}]
    for step in turn.steps:
        if isinstance(step, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": step.call_id,
                    "name": step.name,
                    "arguments": step.arguments,
                }
            )
        elif isinstance(step, ToolResult):
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": step.call_id,
                    "output": step.content,
                }
            )
        else:
            items.append({"role": "assistant", "content": step.text})
    items.append({"role": "assistant", "content": turn.answer})
    return items


# Anthropic Messages -------------------------------------------------------------


def _anthropic_attachment(attachment: Attachment) -> dict[str, Any]:
    if attachment.is_image:
        kind = "image"
    elif attachment.media_type == "application/pdf":
        kind = "document"
    else:
        return {"type": "text", "text": attachment_note(attachment)}
    if attachment.file_id is not None:
        source: dict[str, Any] = {"type": "file", "file_id": attachment.file_id}
    elif attachment.uri is not None:
        source = {"type": "url", "url": attachment.uri}
    else:
        source = {
            "type": "base64",
            "media_type": attachment.media_type,
            "data": attachment.data_base64(),
        }
    return {"type": kind, "source": source}


def _text_content(blocks: list[dict[str, Any]]) -> Any:
    """One text block is sent as a plain string, as in a text-only turn."""
    if len(blocks) == 1 and blocks[0].get("type") == "text":
        return blocks[0]["text"]
    return blocks


def anthropic_turn(turn: TurnContent) -> list[dict[str, Any]]:
    user: list[dict[str, Any]] = [{"type": "text", "text": turn.question}]
    user += [_anthropic_attachment(a) for a in turn.attachments]
    messages: list[dict[str, Any]] = [{"role": "user", "content": _text_content(user)}]
    trailing: list[dict[str, Any]] = []
    for assistant, results in rounds(turn.steps):
        blocks: list[dict[str, Any]] = []
        for step in assistant:
            if isinstance(step, ToolCall):
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": step.call_id,
                        "name": step.name,
                        "input": step.arguments_object(),
                    }
                )
            else:
                blocks.append({"type": "text", "text": step.text})  # type: ignore[union-attr]
        if not results:
            trailing = blocks  # no calls answered: said with the final answer
            continue
        messages.append({"role": "assistant", "content": _text_content(blocks)})
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": r.call_id,
                        "content": r.content,
                    }
                    | ({"is_error": True} if r.is_error else {})
                    for r in results
                ],
            }
        )
    final = [*trailing, {"type": "text", "text": turn.answer}]
    messages.append({"role": "assistant", "content": _text_content(final)})
    return messages


# Gemini --------------------------------------------------------------------------


def _gemini_attachment(attachment: Attachment) -> dict[str, Any]:
    if attachment.data is not None:
        return {
            "inlineData": {
                "mimeType": attachment.media_type,
                "data": attachment.data_base64(),
            }
        }
    return {
        "fileData": {
            "mimeType": attachment.media_type,
            "fileUri": attachment.uri or attachment.file_id,
        }
    }


def gemini_turn(turn: TurnContent) -> list[dict[str, Any]]:
    user: list[dict[str, Any]] = [{"text": turn.question}]
    user += [_gemini_attachment(a) for a in turn.attachments]
    contents: list[dict[str, Any]] = [{"role": "user", "parts": user}]
    names = _call_names(turn.steps)
    trailing: list[dict[str, Any]] = []
    for assistant, results in rounds(turn.steps):
        parts: list[dict[str, Any]] = []
        for step in assistant:
            if isinstance(step, ToolCall):
                parts.append(
                    {
                        "functionCall": {
                            "id": step.call_id,
                            "name": step.name,
                            "args": step.arguments_object(),
                        }
                    }
                )
            else:
                parts.append({"text": step.text})  # type: ignore[union-attr]
        if not results:
            trailing = parts
            continue
        contents.append({"role": "model", "parts": parts})
        contents.append(
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": r.call_id,
                            "name": names[r.call_id],
                            "response": {
                                "error" if r.is_error else "output": r.content
                            },
                        }
                    }
                    for r in results
                ],
            }
        )
    contents.append({"role": "model", "parts": [*trailing, {"text": turn.answer}]})
    return contents


TURN_SHAPES = {
    "openai-chat": openai_chat_turn,
    "openai-responses": openai_responses_turn,
    "anthropic-messages": anthropic_turn,
    "gemini-contents": gemini_turn,
}
