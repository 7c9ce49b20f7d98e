"""Wire formats: the request body a provider client sends, byte for byte.

Every body is serialized as compact UTF-8 JSON without ASCII escaping
(``json.dumps(doc, ensure_ascii=False, separators=(",", ":"))``), which is
what httpx-based provider clients put on the wire. Keys are in a fixed order.

Each format places the four parts of a request where its API expects them:

==================  ======================  ==========================  ==============
format              system instructions     fold (summary)              history
==================  ======================  ==========================  ==============
openai-chat         first ``system`` msg    second ``system`` message   ``messages``
openai-responses    ``instructions``        first ``developer`` item    ``input``
anthropic-messages  top-level ``system``    a second ``system`` block   ``messages``
gemini-contents     ``system_instruction``  a second instruction part   ``contents``
==================  ======================  ==========================  ==============

Empty system instructions are left out where the API allows it (all but
openai-chat, whose body has always carried the system message). Anthropic
requires ``max_tokens``, so its body carries the policy's output reserve.

The accounting the window relies on: a history pair adds, in every format, a
constant number of bytes (``pair_overhead``) plus the JSON-string sizes of
its two texts, because every text is one JSON string and every pair is two
more elements of one array that always holds at least the current question.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Literal, get_args

from turnledger.domain.json_text import json_string
from turnledger.projections.reasoning import as_sent
from turnledger.projections.turn_shapes import (
    ARGUMENTS_AS_OBJECTS,
    TURN_SHAPES,
    TURN_TEXTS,
    SentTurn,
    WireIds,
    anthropic_turn,
    arguments_json_many,
    gemini_turn,
    openai_chat_turn,
    openai_responses_turn,
)
from turnledger.projections.wire_ids import request_wire_ids

WireFormatName = Literal[
    "openai-chat", "openai-responses", "anthropic-messages", "gemini-contents"
]
WIRE_FORMATS: tuple[str, ...] = get_args(WireFormatName)

FOLD_LABEL = (
    "Summary of the earlier conversation (it stands in for the turns before "
    "the messages that follow):\n"
)


def label_fold(summary: str) -> str:
    """The fold as sent: a label that says what it is, then the summary."""
    return FOLD_LABEL + summary


@dataclass(frozen=True, slots=True)
class RequestParts:
    """Everything a request body is made of, texts already final."""

    model: str
    system: str
    question: str
    # Text-only turns as (question, answer); a turn with tool calls or
    # attachments as itself, steps and their documents (turn_shapes.SentTurn).
    pairs: Sequence[tuple[str, str] | SentTurn] = field(default_factory=tuple)
    fold: str | None = None  # labelled summary, or None
    max_output_tokens: int = 1000
    # Each turn with parts' wire ids (wire_ids.request_wire_ids), when the
    # window has them already; else they are worked out from the turns.
    wire_ids: Sequence[WireIds] | None = None


def encode_json(document: Any) -> bytes:
    """Compact UTF-8 JSON, as a provider client sends it."""
    return _dumps(document).encode("utf-8")


def _dumps(document: Any) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def sent_turns(parts: RequestParts) -> list[SentTurn]:
    """The request's turns with parts, oldest first."""
    return [pair for pair in parts.pairs if not isinstance(pair, tuple)]


def _pairs(
    wire_format: str, parts: RequestParts
) -> Iterator[tuple[str, str] | SentTurn]:
    """The request's pairs as sent: turns without the reasoning parts this
    request leaves out (projections/reasoning.py)."""
    for pair in parts.pairs:
        yield (
            pair if isinstance(pair, tuple) else as_sent(pair, wire_format, parts.model)
        )


def _wire_ids(wire_format: str, parts: RequestParts) -> Iterator[WireIds]:
    """Each turn with parts' wire ids (wire_ids.py), in the turns' order."""
    if parts.wire_ids is not None:
        return iter(parts.wire_ids)
    return iter(request_wire_ids(wire_format, sent_turns(parts)))


def _openai_chat(parts: RequestParts) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": parts.system}]
    if parts.fold is not None:
        messages.append({"role": "system", "content": parts.fold})
    ids = _wire_ids("openai-chat", parts)
    for pair in _pairs("openai-chat", parts):
        if not isinstance(pair, tuple):
            messages += openai_chat_turn(pair, next(ids))
            continue
        messages.append({"role": "user", "content": pair[0]})
        messages.append({"role": "assistant", "content": pair[1]})
    messages.append({"role": "user", "content": parts.question})
    return {"model": parts.model, "messages": messages}


def _openai_responses(parts: RequestParts) -> dict[str, Any]:
    document: dict[str, Any] = {"model": parts.model}
    if parts.system:
        document["instructions"] = parts.system
    items: list[dict[str, Any]] = []
    if parts.fold is not None:
        items.append({"role": "developer", "content": parts.fold})
    ids = _wire_ids("openai-responses", parts)
    for pair in _pairs("openai-responses", parts):
        if not isinstance(pair, tuple):
            items += openai_responses_turn(pair, next(ids))
            continue
        items.append({"role": "user", "content": pair[0]})
        items.append({"role": "assistant", "content": pair[1]})
    items.append({"role": "user", "content": parts.question})
    document["input"] = items
    return document


def _anthropic_messages(parts: RequestParts) -> dict[str, Any]:
    document: dict[str, Any] = {
        "model": parts.model,
        "max_tokens": parts.max_output_tokens,
    }
    if parts.fold is not None:
        document["system"] = [
            {"type": "text", "text": text}
            for text in (parts.system, parts.fold)
            if text
        ]
    elif parts.system:
        document["system"] = parts.system
    # Whole pairs then the question: user/assistant alternate strictly.
    messages: list[dict[str, Any]] = []
    ids = _wire_ids("anthropic-messages", parts)
    for pair in _pairs("anthropic-messages", parts):
        if not isinstance(pair, tuple):
            messages += anthropic_turn(pair, next(ids))
            continue
        messages.append({"role": "user", "content": pair[0]})
        messages.append({"role": "assistant", "content": pair[1]})
    messages.append({"role": "user", "content": parts.question})
    document["messages"] = messages
    return document


def _gemini_contents(parts: RequestParts) -> dict[str, Any]:
    # The model is part of the URL, not of the body.
    document: dict[str, Any] = {}
    instruction = [{"text": text} for text in (parts.system, parts.fold) if text]
    if instruction:
        document["system_instruction"] = {"parts": instruction}
    contents: list[dict[str, Any]] = []
    ids = _wire_ids("gemini-contents", parts)
    for pair in _pairs("gemini-contents", parts):
        if not isinstance(pair, tuple):
            contents += gemini_turn(pair, next(ids))
            continue
        contents.append({"role": "user", "parts": [{"text": pair[0]}]})
        contents.append({"role": "model", "parts": [{"text": pair[1]}]})
    contents.append({"role": "user", "parts": [{"text": parts.question}]})
    document["contents"] = contents
    return document


_BUILDERS: dict[str, Callable[[RequestParts], dict[str, Any]]] = {
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic-messages": _anthropic_messages,
    "gemini-contents": _gemini_contents,
}


def request_document(wire_format: str, parts: RequestParts) -> dict[str, Any]:
    """The request as a JSON-ready document in `wire_format`."""
    try:
        builder = _BUILDERS[wire_format]
    except KeyError:
        raise ValueError(f"unknown wire format {wire_format!r}") from None
    return builder(parts)


def render_body(wire_format: str, parts: RequestParts) -> bytes:
    """The exact bytes of the request body: ``encode_json(request_document(...))``.

    A body with turns with parts is written as text (``_render_text``), the
    same bytes without building its many small documents.
    """
    if all(isinstance(pair, tuple) for pair in parts.pairs):
        return encode_json(request_document(wire_format, parts))
    return _render_text(wire_format, parts).encode("utf-8")


def _render_text(wire_format: str, parts: RequestParts) -> str:
    """The body as text: the frame (everything but the history) serialized as
    a document, the history's messages written into it as text.

    In every format the history is the last member of the body and the
    current question its last element, so the frame ends with the question's
    message and "]}", and each history message goes before it with a comma.
    """
    frame = _dumps(request_document(wire_format, replace(parts, pairs=())))
    pair_texts = _PAIR_TEXTS[wire_format]
    tail = pair_texts(parts.question, None)[0] + "]}"
    if not frame.endswith(tail):
        raise AssertionError(f"the {wire_format} body does not end with its question")
    turn_texts = TURN_TEXTS[wire_format]
    ids = _wire_ids(wire_format, parts)
    arguments = None
    if wire_format in ARGUMENTS_AS_OBJECTS:
        arguments = iter(
            arguments_json_many(
                [
                    step["arguments"]
                    for pair in parts.pairs
                    if not isinstance(pair, tuple)
                    for step in pair.step_documents
                    if step["kind"] == "tool_call"
                ]
            )
        )
    messages: list[str] = []
    for pair in _pairs(wire_format, parts):
        if isinstance(pair, tuple):
            messages += pair_texts(*pair)
        else:
            messages += turn_texts(pair, arguments, next(ids))
    messages.append(tail)
    return frame[: len(frame) - len(tail)] + ",".join(messages)


def _content_pair(question: str, answer: str | None) -> list[str]:
    """A text-only pair's messages where a message's text is its "content"
    (the question alone with `answer` None)."""
    user = f'{{"role":"user","content":{json_string(question)}}}'
    if answer is None:
        return [user]
    return [user, f'{{"role":"assistant","content":{json_string(answer)}}}']


def _gemini_pair(question: str, answer: str | None) -> list[str]:
    user = f'{{"role":"user","parts":[{{"text":{json_string(question)}}}]}}'
    if answer is None:
        return [user]
    return [
        user,
        f'{{"role":"model","parts":[{{"text":{json_string(answer)}}}]}}',
    ]


_PAIR_TEXTS: dict[str, Callable[[str, str | None], list[str]]] = {
    "openai-chat": _content_pair,
    "openai-responses": _content_pair,
    "anthropic-messages": _content_pair,
    "gemini-contents": _gemini_pair,
}


@cache
def pair_overhead(wire_format: str) -> int:
    """Bytes a history pair adds besides its two JSON strings."""
    bare = RequestParts(model="m", system="s", question="q")
    with_pair = RequestParts(model="m", system="s", question="q", pairs=(("", ""),))
    empty_strings = 2 * len(b'""')
    return (
        len(render_body(wire_format, with_pair))
        - len(render_body(wire_format, bare))
        - empty_strings
    )


def turn_bytes(wire_format: str, turn: SentTurn, model: str | None = None) -> int:
    """Bytes one whole turn with parts adds to a body in `wire_format`, sent to
    `model` (None: with every reasoning part its format carries, the size a
    turn is recorded with).

    Every turn's messages go before the current question's, so each adds its
    own compact JSON and one comma, whatever the format.
    """
    try:
        shape = TURN_SHAPES[wire_format]
    except KeyError:
        raise ValueError(f"unknown wire format {wire_format!r}") from None
    sent = as_sent(turn, wire_format, model)
    return sum(len(encode_json(message)) + 1 for message in shape(sent))


def pair_bytes(
    wire_format: str, question_json_bytes: int, answer_json_bytes: int
) -> int:
    """Bytes one whole pair adds to a body in `wire_format`."""
    return pair_overhead(wire_format) + question_json_bytes + answer_json_bytes
