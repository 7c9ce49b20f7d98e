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

from typing import Any, Protocol

from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
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
    said: list[AssistantText | Refusal] = []  # the current run's texts, refusals
    calls: list[dict[str, Any]] = []  # and its calls
    for step in turn.steps:
        if isinstance(step, ToolResult):
            if said or calls:
                messages.append(_chat_assistant(said, calls))
                said, calls = [], []
            messages.append(
                {"role": "tool", "tool_call_id": step.call_id, "content": step.content}
            )
        elif isinstance(step, ToolCall):
            calls.append(
                {
                    "id": step.call_id,
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
    run: list[dict[str, Any]] = []  # the current run's blocks
    results: list[dict[str, Any]] | None = None  # the user message answering it
    for step in turn.steps:
        if isinstance(step, ToolResult):
            if results is None:
                messages.append({"role": "assistant", "content": _text_content(run)})
                results, run = [], []
                messages.append({"role": "user", "content": results})
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": step.call_id,
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
                    "id": step.call_id,
                    "name": step.name,
                    "input": step.arguments_object(),
                }
            )
        else:
            run.append({"type": "text", "text": step.text})
    # A run no result answered (text only) is said with the final answer.
    run.append({"type": "text", "text": turn.answer})
    messages.append({"role": "assistant", "content": _text_content(run)})
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
    names: dict[str, str] = {}
    run: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None
    for step in turn.steps:
        if isinstance(step, ToolResult):
            if results is None:
                contents.append({"role": "model", "parts": run})
                results, run = [], []
                contents.append({"role": "user", "parts": results})
            results.append(
                {
                    "functionResponse": {
                        "id": step.call_id,
                        "name": names[step.call_id],
                        "response": {
                            "error" if step.is_error else "output": step.content
                        },
                    }
                }
            )
            continue
        results = None
        if isinstance(step, ToolCall):
            names[step.call_id] = step.name
            run.append(
                {
                    "functionCall": {
                        "id": step.call_id,
                        "name": step.name,
                        "args": step.arguments_object(),
                    }
                }
            )
        else:
            run.append({"text": step.text})
    run.append({"text": turn.answer})
    contents.append({"role": "model", "parts": run})
    return contents


TURN_SHAPES = {
    "openai-chat": openai_chat_turn,
    "openai-responses": openai_responses_turn,
    "anthropic-messages": anthropic_turn,
    "gemini-contents": gemini_turn,
}
