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

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from turnledger.domain.json_text import dumps_compact, json_string, load_json
from turnledger.domain.parts import (
    AssistantStep,
    AssistantText,
    Attachment,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
    attachment_of,
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


WireIds = Mapping[str, str] | None
"""Stored call id -> the id sent, where they differ (projections/wire_ids.py)."""


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


def openai_responses_turn(
    turn: TurnContent, ids: WireIds = None
) -> list[dict[str, Any]]:
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


def anthropic_turn(turn: TurnContent, ids: WireIds = None) -> list[dict[str, Any]]:
    user: list[dict[str, Any]] = [{"type": "text", "text": turn.question}]
    user += [_anthropic_attachment(a) for a in turn.attachments]
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


def gemini_turn(turn: TurnContent, ids: WireIds = None) -> list[dict[str, Any]]:
    user: list[dict[str, Any]] = [{"text": turn.question}]
    user += [_gemini_attachment(a) for a in turn.attachments]
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


# The same shapes as JSON text ----------------------------------------------------
#
# A window renders kept turns straight to compact JSON text instead of building
# the documents above and serializing them: a tool turn is six to eleven small
# messages of nested objects, and building them costs more than the texts they
# carry. The steps are read as their part documents (Step.to_document, the form
# sealed in the ledger), so a turn opened for a window is rendered from what
# was parsed, without making its step objects first.
#
# Each function below returns, for each message the shape function above
# returns, exactly ``json.dumps(message, ensure_ascii=False, separators=(",",
# ":"))``: every string goes through that serializer's own string function
# (``_string``), every constant is written as it writes it, and attachments
# (rare, of many kinds) are built by the functions above and serialized whole.
# tests/unit/test_turn_texts.py checks the equality over random turns in every
# format.


class TurnDocuments(Protocol):
    """A turn's texts as they are sent, its attachments and steps as their
    part documents (to_document; sealed in that form)."""

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...

    @property
    def attachment_documents(self) -> Sequence[Mapping[str, Any]]: ...

    @property
    def step_documents(self) -> Sequence[Mapping[str, Any]]: ...


class SentTurn(TurnContent, TurnDocuments, Protocol):
    """A turn with parts as a body takes it: as steps and as their documents,
    with its id (wire ids are derived from it, projections/wire_ids.py)."""

    @property
    def turn_id(self) -> str: ...


_string = json_string  # json.dumps's escaping, with ensure_ascii=False
_object = dumps_compact  # json.dumps(document, ensure_ascii=False, separators=...)


def arguments_json(arguments: str) -> str:
    """A call's arguments as the object Anthropic and Gemini take, as JSON text
    (the text as recorded is kept for OpenAI; these re-serialize the object)."""
    return dumps_compact(load_json(arguments))


# The formats that send a call's arguments as an object. A body in one of them
# serializes them all at once (arguments_json_many) and hands each turn's
# renderer (`arguments`) the texts, in the order of the calls.
ARGUMENTS_AS_OBJECTS = frozenset({"anthropic-messages", "gemini-contents"})

# A lone surrogate: never in a recorded text (check_text refuses it, as it
# cannot be encoded as UTF-8), and written by the serializer as itself.
_MARK = "\ud800"
_BETWEEN = ',"\ud800",'


def arguments_json_many(arguments: Sequence[str]) -> list[str]:
    """`[arguments_json(a) for a in arguments]`, parsed and serialized in one go.

    The texts are parsed as one JSON list (each is the JSON text of an object,
    checked when recorded), and the objects serialized as one list with the
    mark between them, which is then split at the marks: two calls into the
    serializer instead of two per call. Should an object itself hold
    the mark (a "\\ud800" escape in its text), the pieces do not add up and
    each is done alone.
    """
    if len(arguments) < 2:
        return [arguments_json(text) for text in arguments]
    values = load_json("[" + ",".join(arguments) + "]")
    marked = [_MARK] * (2 * len(values) - 1)
    marked[::2] = values
    pieces = dumps_compact(marked)[1:-1].split(_BETWEEN)
    if len(pieces) != len(values):
        return [arguments_json(text) for text in arguments]
    return pieces


def _arguments(call: Mapping[str, Any], arguments: Iterator[str] | None) -> str:
    """The call's arguments as an object: the next of `arguments` when the body
    serialized them beforehand."""
    if arguments is None:
        return arguments_json(call["arguments"])
    return next(arguments)


def _id(ids: WireIds, step: Mapping[str, Any]) -> str:
    """The step's call id as sent, as JSON text."""
    call_id: str = step["call_id"]
    return _string(call_id if ids is None else ids.get(call_id, call_id))


def _list(items: list[str]) -> str:
    return "[" + ",".join(items) + "]"


# Attachments: an image by URL (the usual one) is written out, any other is
# made from its document, built as the shape above and serialized.


def _image_url(attachment: Mapping[str, Any]) -> str | None:
    """The URL of an image by URL, as JSON text; None for any other."""
    uri = attachment.get("uri")
    if uri is None or not attachment["media_type"].startswith("image/"):
        return None
    return _string(uri)


def _chat_attachment_text(attachment: Mapping[str, Any]) -> str:
    url = _image_url(attachment)
    if url is not None:
        return f'{{"type":"image_url","image_url":{{"url":{url}}}}}'
    return _object(_chat_attachment(attachment_of(attachment)))


def _responses_attachment_text(attachment: Mapping[str, Any]) -> str:
    url = _image_url(attachment)
    if url is not None:
        return f'{{"type":"input_image","image_url":{url},"detail":"auto"}}'
    return _object(_responses_attachment(attachment_of(attachment)))


def _anthropic_attachment_text(attachment: Mapping[str, Any]) -> str:
    url = _image_url(attachment)
    if url is not None:
        return f'{{"type":"image","source":{{"type":"url","url":{url}}}}}'
    return _object(_anthropic_attachment(attachment_of(attachment)))


def _gemini_attachment_text(attachment: Mapping[str, Any]) -> str:
    uri = attachment.get("uri")
    if uri is not None:
        media_type = _string(attachment["media_type"])
        return f'{{"fileData":{{"mimeType":{media_type},"fileUri":{_string(uri)}}}}}'
    return _object(_gemini_attachment(attachment_of(attachment)))


# Steps said as text (a refusal is one in all but OpenAI chat).
_SAID = frozenset({"assistant_text", "refusal"})


def _unknown(step: Mapping[str, Any]) -> ValueError:
    return ValueError(f"unknown part kind {step.get('kind')!r}")


def openai_chat_texts(
    turn: TurnDocuments, arguments: Iterator[str] | None = None, ids: WireIds = None
) -> list[str]:
    if turn.attachment_documents:
        user = [f'{{"type":"text","text":{_string(turn.question)}}}']
        user += [_chat_attachment_text(a) for a in turn.attachment_documents]
        messages = [f'{{"role":"user","content":{_list(user)}}}']
    else:
        messages = [f'{{"role":"user","content":{_string(turn.question)}}}']
    said: list[Mapping[str, Any]] = []  # the current run's texts and refusals
    calls: list[str] = []  # and its calls
    for step in turn.step_documents:
        kind = step["kind"]
        if kind == "tool_result":
            if said or calls:
                messages.append(_chat_assistant_text(said, calls))
                said, calls = [], []
            messages.append(
                f'{{"role":"tool","tool_call_id":{_id(ids, step)},'
                f'"content":{_string(step["content"])}}}'
            )
        elif kind == "tool_call":
            calls.append(
                f'{{"id":{_id(ids, step)},"type":"function","function":'
                f'{{"name":{_string(step["name"])},'
                f'"arguments":{_string(step["arguments"])}}}}}'
            )
        elif kind in _SAID:
            said.append(step)
        elif kind != "reasoning":  # OpenAI chat has no place for it
            raise _unknown(step)
    if said or calls:
        messages.append(_chat_assistant_text(said, calls))
    messages.append(f'{{"role":"assistant","content":{_string(turn.answer)}}}')
    return messages


def _chat_assistant_text(said: list[Mapping[str, Any]], calls: list[str]) -> str:
    """`_chat_assistant` as text."""
    if len(said) == 1 and said[0]["kind"] == "refusal":
        content = f'null,"refusal":{_string(said[0]["text"])}'
    elif len(said) == 1:
        content = _string(said[0]["text"])
    elif said:
        content = _list(
            [
                f'{{"type":"refusal","refusal":{_string(s["text"])}}}'
                if s["kind"] == "refusal"
                else f'{{"type":"text","text":{_string(s["text"])}}}'
                for s in said
            ]
        )
    else:
        content = "null"
    if calls:
        return f'{{"role":"assistant","content":{content},"tool_calls":{_list(calls)}}}'
    return f'{{"role":"assistant","content":{content}}}'


def openai_responses_texts(
    turn: TurnDocuments, arguments: Iterator[str] | None = None, ids: WireIds = None
) -> list[str]:
    if turn.attachment_documents:
        user = [f'{{"type":"input_text","text":{_string(turn.question)}}}']
        user += [_responses_attachment_text(a) for a in turn.attachment_documents]
        items = [f'{{"role":"user","content":{_list(user)}}}']
    else:
        items = [f'{{"role":"user","content":{_string(turn.question)}}}']
    for step in turn.step_documents:
        kind = step["kind"]
        if kind == "tool_call":
            items.append(
                f'{{"type":"function_call","call_id":{_id(ids, step)},'
                f'"name":{_string(step["name"])},'
                f'"arguments":{_string(step["arguments"])}}}'
            )
        elif kind == "tool_result":
            items.append(
                '{"type":"function_call_output",'
                f'"call_id":{_id(ids, step)},'
                f'"output":{_string(step["content"])}}}'
            )
        elif kind in _SAID:
            items.append(f'{{"role":"assistant","content":{_string(step["text"])}}}')
        elif kind == "reasoning":
            if step["provider"] == "openai":
                items.append(arguments_json(step["payload"]))
        else:
            raise _unknown(step)
    items.append(f'{{"role":"assistant","content":{_string(turn.answer)}}}')
    return items


def _anthropic_content(blocks: list[str], first_text: str | None) -> str:
    """`_text_content` as text: one text block is sent as its plain string
    (`first_text`: the first block's string when it is a text block)."""
    if len(blocks) == 1 and first_text is not None:
        return first_text
    return _list(blocks)


def anthropic_texts(
    turn: TurnDocuments, arguments: Iterator[str] | None = None, ids: WireIds = None
) -> list[str]:
    question = _string(turn.question)
    if turn.attachment_documents:
        user = [f'{{"type":"text","text":{question}}}']
        user += [_anthropic_attachment_text(a) for a in turn.attachment_documents]
        messages = [f'{{"role":"user","content":{_list(user)}}}']
    else:
        messages = [f'{{"role":"user","content":{question}}}']
    run: list[str] = []  # the current run's blocks
    thinking: list[str] = []  # its thinking blocks: they come first
    first_text: str | None = None  # the run's first block's text, if a text
    results: list[str] | None = None  # the blocks of the user message answering it
    for step in turn.step_documents:
        kind = step["kind"]
        if kind == "tool_result":
            if results is None:
                content = _anthropic_content(thinking + run, first_text)
                messages.append(f'{{"role":"assistant","content":{content}}}')
                results, run, thinking, first_text = [], [], [], None
            error = ',"is_error":true' if step["is_error"] else ""
            results.append(
                f'{{"type":"tool_result","tool_use_id":{_id(ids, step)},'
                f'"content":{_string(step["content"])}{error}}}'
            )
            continue
        if results is not None:
            messages.append(f'{{"role":"user","content":{_list(results)}}}')
            results = None
        if kind == "tool_call":
            run.append(
                f'{{"type":"tool_use","id":{_id(ids, step)},'
                f'"name":{_string(step["name"])},'
                f'"input":{_arguments(step, arguments)}}}'
            )
        elif kind in _SAID:
            text = _string(step["text"])
            if not run:
                first_text = text
            run.append(f'{{"type":"text","text":{text}}}')
        elif kind == "reasoning":
            if step["provider"] == "anthropic":
                thinking.append(arguments_json(step["payload"]))
        else:
            raise _unknown(step)
    if results is not None:
        messages.append(f'{{"role":"user","content":{_list(results)}}}')
    # A run no result answered (text only) is said with the final answer.
    answer = _string(turn.answer)
    if not run:
        first_text = answer
    run.append(f'{{"type":"text","text":{answer}}}')
    content = _anthropic_content(thinking + run, first_text)
    messages.append(f'{{"role":"assistant","content":{content}}}')
    return messages


def gemini_texts(
    turn: TurnDocuments, arguments: Iterator[str] | None = None, ids: WireIds = None
) -> list[str]:
    user = [f'{{"text":{_string(turn.question)}}}']
    user += [_gemini_attachment_text(a) for a in turn.attachment_documents]
    contents = [f'{{"role":"user","parts":{_list(user)}}}']
    names: dict[str, str] = {}  # call id -> the call's name as JSON text
    order: dict[str, int] = {}  # the current run's calls, in order
    run: list[str] = []
    results: list[tuple[int, str]] | None = None
    signature = ""  # ',"thoughtSignature":...' for the run's next part
    for step in turn.step_documents:
        kind = step["kind"]
        if kind == "tool_result":
            if results is None:
                contents.append(f'{{"role":"model","parts":{_list(run)}}}')
                results, run, signature = [], [], ""
            key = "error" if step["is_error"] else "output"
            results.append(
                (
                    order[step["call_id"]],
                    f'{{"functionResponse":{{"id":{_id(ids, step)},'
                    f'"name":{names[step["call_id"]]},'
                    f'"response":{{"{key}":{_string(step["content"])}}}}}}}',
                )
            )
            continue
        if results is not None:
            contents.append(_gemini_responses_text(results))
            results, order = None, {}
        if kind == "tool_call":
            name = names[step["call_id"]] = _string(step["name"])
            order[step["call_id"]] = len(order)
            run.append(
                f'{{"functionCall":{{"id":{_id(ids, step)},"name":{name},'
                f'"args":{_arguments(step, arguments)}}}{signature}}}'
            )
        elif kind in _SAID:
            run.append(f'{{"text":{_string(step["text"])}{signature}}}')
        elif kind == "reasoning":
            if step["provider"] == "gemini":
                given = load_json(step["payload"])["thoughtSignature"]
                signature = f',"thoughtSignature":{_string(given)}'
            continue
        else:
            raise _unknown(step)
        signature = ""
    if results is not None:
        contents.append(_gemini_responses_text(results))
    run.append(f'{{"text":{_string(turn.answer)}{signature}}}')
    contents.append(f'{{"role":"model","parts":{_list(run)}}}')
    return contents


def _gemini_responses_text(results: list[tuple[int, str]]) -> str:
    """`_gemini_responses` as text."""
    results.sort(key=lambda result: result[0])
    return f'{{"role":"user","parts":{_list([part for _, part in results])}}}'


TurnTexts = Callable[[TurnDocuments, Iterator[str] | None, WireIds], list[str]]
TURN_TEXTS: dict[str, TurnTexts] = {
    "openai-chat": openai_chat_texts,
    "openai-responses": openai_responses_texts,
    "anthropic-messages": anthropic_texts,
    "gemini-contents": gemini_texts,
}
