"""A turn with parts in each provider's request shape, as JSON text.

A window renders kept turns straight to compact JSON text instead of building
the documents of turn_shapes.py and serializing them: a tool turn is six to
eleven small messages of nested objects, and building them costs more than
the texts they carry. The steps are read as their part documents
(Step.to_document, the form sealed in the ledger), so a turn opened for a
window is rendered from what was parsed, without making its step objects
first.

Each function below returns, for each message the shape function in
turn_shapes.py returns, exactly ``json.dumps(message, ensure_ascii=False,
separators=(",", ":"))``: every string goes through that serializer's own
string escaping (``_string``, domain/json_text.py), every constant is written
as it writes it, and attachments (rare, of many kinds) are built by their
shape functions and serialized whole (attachment_shapes.py).
tests/unit/test_turn_texts.py checks the equality over random turns in every
format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from turnledger.domain.json_text import dumps_compact, json_string, load_json
from turnledger.projections.attachment_shapes import (
    anthropic_attachment_text,
    chat_attachment_text,
    gemini_attachment_text,
    responses_attachment_text,
)
from turnledger.projections.sent_turn import TurnDocuments, WireIds

_string = json_string  # json.dumps's escaping, with ensure_ascii=False


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


# Steps said as text (a refusal is one in all but OpenAI chat).
_SAID = frozenset({"assistant_text", "refusal"})


def _unknown(step: Mapping[str, Any]) -> ValueError:
    return ValueError(f"unknown part kind {step.get('kind')!r}")


def openai_chat_texts(
    turn: TurnDocuments, arguments: Iterator[str] | None = None, ids: WireIds = None
) -> list[str]:
    if turn.attachment_documents:
        user = [f'{{"type":"text","text":{_string(turn.question)}}}']
        user += [chat_attachment_text(a) for a in turn.attachment_documents]
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
        user += [responses_attachment_text(a) for a in turn.attachment_documents]
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
        user += [anthropic_attachment_text(a) for a in turn.attachment_documents]
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
    user += [gemini_attachment_text(a) for a in turn.attachment_documents]
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
