"""Parts as documents: the sealed JSON text of a turn's parts, read back.

A turn's attachments and steps are sealed as one JSON list of their
documents (`to_document`, "kind" included). Read back, they were checked
when the turn was recorded and the vault opened them authenticated (a
changed byte fails to open), so the objects are built without checking them
again (`attachment_of`, `steps_of`): a window reads many turns, and the
checks (parsing every argument, patterns) would cost more than the rest.
`part_from_document` is the checked way in, for documents a client sent.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

from turnledger.domain.attachment import Attachment
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.json_text import load_json
from turnledger.domain.steps import (
    AssistantStep,
    AssistantText,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
)

# The last document of a sealed parts text, when the turn has metadata: never
# a part, so decoding takes it off before anything reads the parts.
METADATA_KIND = "metadata"


def metadata_of(documents: list[dict[str, Any]]) -> str | None:
    """The metadata of a parts list, taken off its end (encode_parts)."""
    if documents and documents[-1]["kind"] == METADATA_KIND:
        data: str = documents.pop()["data"]
        return data
    return None


PartDocuments: TypeAlias = tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]


def decode_part_documents(parts_text: str) -> PartDocuments:
    """The documents of a sealed parts text (encode_parts), unchecked like
    decode_parts: its attachments' and its steps' (to_document, "kind"
    included). A window writes a turn from them (attachment_of and steps_of
    make the objects)."""
    return split_documents(load_json(parts_text))


def decode_many_part_documents(parts_texts: Sequence[str]) -> list[PartDocuments]:
    """decode_part_documents of each text, parsed as one JSON list: one parse
    of a window's turns instead of one per turn (each text is a JSON list)."""
    if len(parts_texts) < 2:
        return [decode_part_documents(text) for text in parts_texts]
    parsed = load_json("[" + ",".join(parts_texts) + "]")
    return [split_documents(documents) for documents in parsed]


def split_documents(documents: list[dict[str, Any]]) -> PartDocuments:
    """Attachments and steps of a parts list (its metadata taken off)."""
    metadata_of(documents)  # not a part: a window never sees it
    at = 0  # attachments come first (encode_parts)
    while at < len(documents) and documents[at]["kind"] == "attachment":
        at += 1
    return tuple(documents[:at]), tuple(documents[at:])


def attachment_of(document: Mapping[str, Any]) -> Attachment:
    """The attachment of its document (to_document: inline data as base64),
    unchecked like decode_parts (a field left out, such as a missing uri, is
    None)."""
    attachment = _new(Attachment)
    for name in _ATTACHMENT_FIELDS:
        _set(attachment, name, document.get(name))
    data = document.get("data")
    if data is not None:
        _set(attachment, "data", base64.b64decode(data))
    return attachment


_ATTACHMENT_FIELDS: tuple[str, ...] = Attachment.__slots__


def steps_of(documents: Sequence[Mapping[str, Any]]) -> tuple[AssistantStep, ...]:
    """The steps these documents (decode_part_documents) hold, unchecked."""
    steps = []
    for document in documents:
        build = _STEP_BUILDERS.get(document["kind"])
        if build is None:
            raise ValueError(f"unknown part kind {document['kind']!r}")
        steps.append(build(document))
    return tuple(steps)


# Building a part from values checked when its turn was recorded: what a
# frozen dataclass's generated __init__ does (object.__new__, then
# object.__setattr__ for each field, as the dataclasses documentation says of
# frozen classes), without __post_init__'s checks. Parts only, never events:
# events are not changed after they are made.
_new = object.__new__
_set = object.__setattr__
_T = TypeVar("_T")


def unchecked(cls: type[_T], **values: Any) -> _T:
    """An instance of the frozen dataclass `cls` from values already checked."""
    instance = _new(cls)
    for name, value in values.items():
        _set(instance, name, value)
    return instance


def _tool_call(document: Mapping[str, Any]) -> ToolCall:
    step = _new(ToolCall)
    _set(step, "call_id", document.get("call_id"))
    _set(step, "name", document.get("name"))
    _set(step, "arguments", document.get("arguments"))
    return step


def _tool_result(document: Mapping[str, Any]) -> ToolResult:
    step = _new(ToolResult)
    _set(step, "call_id", document.get("call_id"))
    _set(step, "content", document.get("content"))
    _set(step, "is_error", document.get("is_error"))
    return step


def _assistant_text(document: Mapping[str, Any]) -> AssistantText:
    step = _new(AssistantText)
    _set(step, "text", document.get("text"))
    return step


def _refusal(document: Mapping[str, Any]) -> Refusal:
    step = _new(Refusal)
    _set(step, "text", document.get("text"))
    return step


def _reasoning(document: Mapping[str, Any]) -> Reasoning:
    step = _new(Reasoning)
    _set(step, "provider", document.get("provider"))
    _set(step, "model", document.get("model"))
    _set(step, "payload", document.get("payload"))
    return step


_STEP_BUILDERS: dict[str, Callable[[Mapping[str, Any]], AssistantStep]] = {
    "reasoning": _reasoning,
    "assistant_text": _assistant_text,
    "refusal": _refusal,
    "tool_call": _tool_call,
    "tool_result": _tool_result,
}


def part_from_document(
    document: Mapping[str, Any], *, field_name: str = "part"
) -> Attachment | AssistantStep:
    """A part from its document (Attachment.to_document and the steps' own)."""
    if not isinstance(document, Mapping):
        raise InvalidInputError(field_name, "expected an object")
    kind = document.get("kind")
    allowed = _DOCUMENT_FIELDS.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        raise InvalidInputError(
            f"{field_name}.kind",
            "one of " + ", ".join(sorted(_DOCUMENT_FIELDS)),
        )
    unknown = sorted(set(document) - allowed - {"kind"})
    if unknown:
        raise InvalidInputError(field_name, "unknown fields " + ", ".join(unknown))
    values = {k: v for k, v in document.items() if k != "kind"}
    try:
        return _part_of(str(kind), values, field_name)
    except InvalidInputError as error:
        # "tool_call.arguments" is `arguments` of the part the caller named.
        _, dot, name = error.field.partition(".")
        if error.field.startswith(field_name):
            raise
        raise InvalidInputError(
            f"{field_name}.{name}" if dot else field_name, error.reason
        ) from None


def _part_of(
    kind: str, values: dict[str, Any], field_name: str
) -> Attachment | AssistantStep:
    try:
        if kind == "attachment":
            data = values.pop("data", None)
            if data is not None:
                if not isinstance(data, str):
                    raise InvalidInputError(
                        f"{field_name}.data", "expected base64 text"
                    )
                try:
                    values["data"] = base64.b64decode(data, validate=True)
                except (binascii.Error, ValueError):
                    raise InvalidInputError(
                        f"{field_name}.data", "is not valid base64"
                    ) from None
            return Attachment(**values)
        if kind == "assistant_text":
            return AssistantText(**values)
        if kind == "tool_call":
            return ToolCall(**values)
        if kind == "tool_result":
            return ToolResult(**values)
        if kind == "reasoning":
            return Reasoning(**values)
        return Refusal(**values)
    except TypeError:
        raise InvalidInputError(field_name, "missing required fields") from None


_DOCUMENT_FIELDS: dict[str, frozenset[str]] = {
    "attachment": frozenset(
        {
            "media_type",
            "byte_size",
            "uri",
            "file_id",
            "data",
            "digest",
            "name",
            "width",
            "height",
        }
    ),
    "assistant_text": frozenset({"text"}),
    "tool_call": frozenset({"call_id", "name", "arguments"}),
    "tool_result": frozenset({"call_id", "content", "is_error"}),
    "refusal": frozenset({"text"}),
    "reasoning": frozenset({"provider", "model", "payload"}),
}
