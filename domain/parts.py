"""The parts of a turn: the user's input and everything the assistant did in reply.

A turn is the user's text and attachments, then the assistant's steps in
order (text, tool calls, tool results, refusals), then the final answer:

    TurnParts(
        question="What's the weather in Paris?",
        attachments=(Attachment(media_type="image/png", byte_size=1234, uri=...),),
        steps=(
            ToolCall(call_id="call_1", name="weather", arguments='{"city":"Paris"}'),
            ToolResult(call_id="call_1", content='{"temp_c":18}'),
        ),
        answer="It is 18 °C in Paris.",
    )

Every value is immutable and checked when it is made: bad input raises
InvalidInputError naming the field, so nothing malformed reaches the ledger.

The rules of steps (they keep every wire format's pairing valid):

- tool call ids are unique within the turn;
- a tool result answers a call made earlier in the turn, at most once;
- steps form rounds: a run of assistant steps (text, refusals, calls), then
  the results of that run's calls; a result may only answer a call of the
  run just before it, and a confirmed turn answers every call of a run before
  the next assistant step (or the final answer);
- only an abandoned turn may end with calls that have no result.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.json_text import load_json
from turnledger.domain.text import check_text

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_INLINE_ATTACHMENT_BYTES",
    "AssistantStep",
    "AssistantText",
    "Attachment",
    "REASONING_PROVIDERS",
    "Reasoning",
    "Refusal",
    "ToolCall",
    "ToolResult",
    "TurnParts",
    "attachment_of",
    "decode_many_part_documents",
    "decode_part_documents",
    "decode_parts",
    "encode_parts",
    "part_from_document",
    "sha256_digest",
    "steps_of",
]

MAX_INLINE_ATTACHMENT_BYTES = 65_536
"""Largest attachment kept inline in the turn (64 KiB); larger ones are references.

Inline bytes are sealed with the turn's key and destroyed with it, like its
text; they also count towards the turn's byte limit.
"""

MAX_ARGUMENT_DEPTH = 64
"""Deepest nesting of a call's arguments (the object itself is level 1).

Anthropic and Gemini bodies carry the arguments as an object, which is parsed
and serialized again for every window; a limit far above any tool schema
keeps that work bounded and refuses (InvalidInputError) what would otherwise
overflow the parser's recursion.
"""

# A tool name as every provider accepts it (OpenAI's rule is the narrowest).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A tool call id: providers' own ids ("call_…", "toolu_…") and client-made ones.
_CALL_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")
_MEDIA_TYPE = re.compile(
    r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}"
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00]+")
_FILE_ID = re.compile(r"[A-Za-z0-9][^\s\x00]*")
_MAX_REFERENCE = 2048


def _check_str(field_name: str, value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(
            field_name, f"expected a string, got {type(value).__name__}"
        )
    if not pattern.fullmatch(value):
        raise InvalidInputError(field_name, what)
    return value


def _check_bool(field_name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(
            field_name, f"expected a bool, got {type(value).__name__}"
        )
    return value


def _check_dimension(field_name: str, value: Any) -> int | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= 100_000
    ):
        raise InvalidInputError(
            field_name, "pixels: an integer from 1 to 100000, or None"
        )
    return value


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file the user sent with the question: a reference, or small inline bytes.

    Exactly one of `uri` (https:, gs:, s3:, data is not allowed: inline it),
    `file_id` (a provider's file id, e.g. "file-abc123") or `data` (at most
    MAX_INLINE_ATTACHMENT_BYTES) is given. `byte_size` is the file's size;
    with `data` it must equal len(data). `digest` ("sha256:<64 hex>") is
    checked against `data` when both are given. `width`/`height` (pixels) let
    image tokens be counted by the providers' documented formulas; without
    them they are estimated (docs/tools.md).
    """

    media_type: str
    byte_size: int
    uri: str | None = None
    file_id: str | None = None
    data: bytes | None = field(default=None, repr=False)
    digest: str | None = None
    name: str | None = None
    width: int | None = None
    height: int | None = None

    def __post_init__(self) -> None:
        _check_str(
            "attachment.media_type",
            self.media_type,
            _MEDIA_TYPE,
            "a lower-case media type such as image/png",
        )
        size = self.byte_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(
                "attachment.byte_size", "a non-negative integer (bytes)"
            )
        given = [n for n in ("uri", "file_id", "data") if getattr(self, n) is not None]
        if len(given) != 1:
            raise InvalidInputError(
                "attachment",
                "give exactly one of uri, file_id or data, not "
                + (", ".join(given) or "none"),
            )
        if self.uri is not None:
            _check_str(
                "attachment.uri",
                self.uri,
                _URI,
                "an absolute URI without spaces",
            )
            if len(self.uri) > _MAX_REFERENCE:
                raise InvalidInputError(
                    "attachment.uri", f"longer than {_MAX_REFERENCE} characters"
                )
            if self.uri.lower().startswith("data:"):
                raise InvalidInputError(
                    "attachment.uri", "a data: URI is inline bytes: pass them as data"
                )
        if self.file_id is not None:
            _check_str(
                "attachment.file_id",
                self.file_id,
                _FILE_ID,
                "a provider file id (no spaces)",
            )
            if len(self.file_id) > _MAX_REFERENCE:
                raise InvalidInputError(
                    "attachment.file_id", f"longer than {_MAX_REFERENCE} characters"
                )
        if self.data is not None:
            if not isinstance(self.data, bytes):
                raise InvalidInputError(
                    "attachment.data",
                    f"expected bytes, got {type(self.data).__name__}",
                )
            if len(self.data) > MAX_INLINE_ATTACHMENT_BYTES:
                raise InvalidInputError(
                    "attachment.data",
                    f"{len(self.data)} bytes, over the inline limit of "
                    f"{MAX_INLINE_ATTACHMENT_BYTES}: store the file and pass its uri",
                )
            if len(self.data) != size:
                raise InvalidInputError(
                    "attachment.byte_size",
                    f"is {size} but data holds {len(self.data)} bytes",
                )
        if self.digest is not None:
            _check_str(
                "attachment.digest",
                self.digest,
                _DIGEST,
                'expected "sha256:" and 64 lower-case hex digits',
            )
            if self.data is not None and self.digest != sha256_digest(self.data):
                raise InvalidInputError(
                    "attachment.digest", "does not match the inline data"
                )
        if self.name is not None:
            check_text("attachment.name", self.name)
            if len(self.name) > 255:
                raise InvalidInputError("attachment.name", "longer than 255 characters")
        _check_dimension("attachment.width", self.width)
        _check_dimension("attachment.height", self.height)
        if (self.width is None) != (self.height is None):
            raise InvalidInputError(
                "attachment.width", "give both width and height, or neither"
            )

    @property
    def inline(self) -> bool:
        return self.data is not None

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")

    def data_base64(self) -> str:
        """The inline bytes as base64 (standard alphabet, padded)."""
        assert self.data is not None
        return base64.b64encode(self.data).decode("ascii")

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "kind": "attachment",
            "media_type": self.media_type,
            "byte_size": self.byte_size,
        }
        for name in ("uri", "file_id", "digest", "name", "width", "height"):
            value = getattr(self, name)
            if value is not None:
                document[name] = value
        if self.data is not None:
            document["data"] = self.data_base64()
        return document


@dataclass(frozen=True, slots=True)
class AssistantText:
    """Text the assistant wrote before the final answer (e.g. before a tool call)."""

    text: str

    def __post_init__(self) -> None:
        check_text("assistant_text.text", self.text)

    def to_document(self) -> dict[str, Any]:
        return {"kind": "assistant_text", "text": self.text}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the assistant made. `arguments` is JSON text of an object.

    The arguments are kept and sent exactly as given (never re-serialized,
    never trimmed), except in Anthropic and Gemini bodies, whose APIs take
    them as an object.
    """

    call_id: str
    name: str
    arguments: str

    def __post_init__(self) -> None:
        _check_str(
            "tool_call.call_id",
            self.call_id,
            _CALL_ID,
            "1-128 characters of letters, digits and _ . : @ -",
        )
        _check_str(
            "tool_call.name",
            self.name,
            _TOOL_NAME,
            "1-64 characters of letters, digits, _ and - (every provider's rule)",
        )
        check_text("tool_call.arguments", self.arguments)
        _check_arguments(self.arguments)

    def arguments_object(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.arguments)
        return parsed

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": "tool_call",
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
        }


def _check_arguments(arguments: str) -> None:
    """JSON text of an object that every body can carry (see ToolCall)."""
    _checked_object("tool_call.arguments", arguments)


def _checked_object(field_name: str, text: str) -> dict[str, Any]:
    """The object of JSON text that every body can carry, or InvalidInputError."""
    too_deep = False
    parsed: Any = None
    try:
        parsed = json.loads(text)
    except RecursionError:
        too_deep = True  # deeper than the parser goes
    except ValueError:
        raise InvalidInputError(
            field_name, "must be JSON text (it did not parse)"
        ) from None
    if too_deep or _depth_over(parsed, MAX_ARGUMENT_DEPTH):
        raise InvalidInputError(
            field_name, f"nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        )
    if not isinstance(parsed, dict):
        raise InvalidInputError(
            field_name, "must be a JSON object (every provider takes named arguments)"
        )
    try:
        # Anthropic and Gemini take the arguments as an object, serialized
        # again as UTF-8 JSON: 1e999 parses to infinity, which JSON cannot
        # write, and a "\\ud800" escape to a lone surrogate, which UTF-8
        # cannot encode.
        json.dumps(parsed, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except ValueError:
        raise InvalidInputError(
            field_name, "holds a number JSON cannot represent"
        ) from None
    except UnicodeEncodeError:
        raise InvalidInputError(
            field_name, "holds a lone surrogate escape (no UTF-8 text for it)"
        ) from None
    return parsed


def _depth_over(value: Any, limit: int) -> bool:
    """Whether `value` nests objects and arrays deeper than `limit` levels."""
    level: list[tuple[Any, int]] = [(value, 1)]
    while level:
        item, depth = level.pop()
        children = (
            item.values()
            if isinstance(item, dict)
            else item
            if isinstance(item, list)
            else None
        )
        if children is None:
            continue
        if depth > limit:
            return True
        level.extend((child, depth + 1) for child in children)
    return False


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of a tool call, as text; `is_error` when the tool failed."""

    call_id: str
    content: str
    is_error: bool = False

    def __post_init__(self) -> None:
        _check_str(
            "tool_result.call_id",
            self.call_id,
            _CALL_ID,
            "1-128 characters of letters, digits and _ . : @ -",
        )
        # An empty result is legitimate (a tool that returned nothing).
        check_text("tool_result.content", self.content, allow_empty=True)
        _check_bool("tool_result.is_error", self.is_error)

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": "tool_result",
            "call_id": self.call_id,
            "content": self.content,
            "is_error": self.is_error,
        }


@dataclass(frozen=True, slots=True)
class Refusal:
    """The assistant declined (a provider's refusal, e.g. OpenAI's `refusal`)."""

    text: str

    def __post_init__(self) -> None:
        check_text("refusal.text", self.text)

    def to_document(self) -> dict[str, Any]:
        return {"kind": "refusal", "text": self.text}


REASONING_PROVIDERS = ("anthropic", "openai", "gemini")
"""Who may have produced a Reasoning part, and what its payload then is:

- anthropic: a `thinking` block (`thinking`, `signature`) or a
  `redacted_thinking` block (`data`), as the Messages API returned it;
- openai: a Responses `reasoning` item (`id`, `summary`, `encrypted_content`);
- gemini: `{"thoughtSignature": ...}`, the signature Gemini returned on the
  part that follows it (a function call or text).
"""

_REASONING_TYPES = {
    "anthropic": ("thinking", "redacted_thinking"),
    "openai": ("reasoning",),
}
_MODEL = re.compile(r"[^\s\x00]{1,256}")


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A provider's opaque reasoning state, kept to be sent back unchanged.

    `payload` is the JSON text of the object the provider returned (see
    REASONING_PROVIDERS), kept and sent as given; `model` is the model that
    produced it. A window sends it only in its provider's format and to that
    same model (docs/tools.md); it is sealed, sized and deleted with the
    turn, like every text.
    """

    provider: str
    model: str
    payload: str

    def __post_init__(self) -> None:
        if self.provider not in REASONING_PROVIDERS:
            raise InvalidInputError(
                "reasoning.provider", "one of " + ", ".join(REASONING_PROVIDERS)
            )
        _check_str("reasoning.model", self.model, _MODEL, "1-256 characters, no spaces")
        check_text("reasoning.payload", self.payload)
        parsed = _checked_object("reasoning.payload", self.payload)
        kind = parsed.get("type")
        if self.provider == "gemini":
            signature = parsed.get("thoughtSignature")
            if set(parsed) != {"thoughtSignature"} or not isinstance(signature, str):
                raise InvalidInputError(
                    "reasoning.payload",
                    'a Gemini payload is {"thoughtSignature": "..."}',
                )
        elif kind not in _REASONING_TYPES[self.provider]:
            raise InvalidInputError(
                "reasoning.payload",
                f"an {self.provider} payload has type "
                + " or ".join(_REASONING_TYPES[self.provider]),
            )

    def to_document(self) -> dict[str, Any]:
        return {
            "kind": "reasoning",
            "provider": self.provider,
            "model": self.model,
            "payload": self.payload,
        }


AssistantStep: TypeAlias = AssistantText | ToolCall | ToolResult | Refusal | Reasoning
_STEP_TYPES = (AssistantText, ToolCall, ToolResult, Refusal, Reasoning)


@dataclass(frozen=True, slots=True)
class TurnParts:
    """One turn: the question and its attachments, the steps, the final answer.

    `answer` is the final answer; it may be empty only in an abandoned turn
    (a partial answer). A turn without attachments or steps is today's
    text-only turn.
    """

    question: str
    answer: str = ""
    attachments: tuple[Attachment, ...] = ()
    steps: tuple[AssistantStep, ...] = ()
    metadata: str | None = None
    """JSON text of an object: the application's own data about the turn
    (e.g. the ids of its messages in a library's history). Sealed, counted
    in the turn's byte limit and deleted with the turn; never sent in a
    window, and not part of `part_documents` (HTTP, sync and export)."""

    def __post_init__(self) -> None:
        check_text("question", self.question)
        check_text("answer", self.answer, allow_empty=True)
        if self.metadata is not None:
            check_text("metadata", self.metadata)
            _checked_object("metadata", self.metadata)
        object.__setattr__(
            self, "attachments", _as_tuple("attachments", self.attachments)
        )
        object.__setattr__(self, "steps", _as_tuple("steps", self.steps))
        for index, attachment in enumerate(self.attachments):
            if not isinstance(attachment, Attachment):
                raise InvalidInputError(
                    f"attachments[{index}]",
                    f"expected an Attachment, got {type(attachment).__name__}",
                )
        for index, step in enumerate(self.steps):
            if not isinstance(step, _STEP_TYPES):
                raise InvalidInputError(
                    f"steps[{index}]",
                    "expected AssistantText, ToolCall, ToolResult, Refusal or "
                    "Reasoning, "
                    f"got {type(step).__name__}",
                )
        _check_rounds(self.steps, complete=False)

    @property
    def text_only(self) -> bool:
        return not self.attachments and not self.steps

    @property
    def open_calls(self) -> tuple[ToolCall, ...]:
        """Calls without a result (only an abandoned turn may have them)."""
        answered = {s.call_id for s in self.steps if isinstance(s, ToolResult)}
        return tuple(
            s
            for s in self.steps
            if isinstance(s, ToolCall) and s.call_id not in answered
        )

    def check_complete(self) -> None:
        """Raise InvalidInputError unless this turn may be confirmed."""
        check_text("answer", self.answer)
        _check_rounds(self.steps, complete=True)

    def summary(self) -> str:
        """One line naming the attachments and steps (not their text), e.g.
        "image/png; call get_weather call_1; result call_1; refusal"."""
        names = [a.media_type for a in self.attachments]
        for step in self.steps:
            if isinstance(step, ToolCall):
                names.append(f"call {step.name} {step.call_id}")
            elif isinstance(step, ToolResult):
                failed = " (error)" if step.is_error else ""
                names.append(f"result {step.call_id}{failed}")
            elif isinstance(step, Refusal):
                names.append("refusal")
            elif isinstance(step, Reasoning):
                names.append(f"reasoning {step.provider}")
            else:
                names.append("text")
        return "; ".join(names)

    def inline_bytes(self) -> int:
        return sum(len(a.data) for a in self.attachments if a.data is not None)

    def metadata_bytes(self) -> int:
        return 0 if self.metadata is None else len(self.metadata.encode("utf-8"))

    def texts(self) -> tuple[str, ...]:
        """Every text of the turn (for size limits): question, steps, answer."""
        texts = [self.question]
        for step in self.steps:
            if isinstance(step, ToolCall):
                texts += [step.name, step.arguments]
            elif isinstance(step, ToolResult):
                texts.append(step.content)
            elif isinstance(step, Reasoning):
                texts += [step.model, step.payload]
            else:
                texts.append(step.text)
        texts.append(self.answer)
        return tuple(texts)

    def part_documents(self) -> list[dict[str, Any]]:
        """Attachments then steps, as plain JSON-ready documents, in order."""
        return [a.to_document() for a in self.attachments] + [
            s.to_document() for s in self.steps
        ]

    @classmethod
    def from_documents(
        cls, *, question: str, answer: str, parts: Sequence[Mapping[str, Any]]
    ) -> TurnParts:
        """The turn from its question, answer and part documents (part_documents)."""
        attachments: list[Attachment] = []
        steps: list[AssistantStep] = []
        for index, document in enumerate(parts):
            part = part_from_document(document, field_name=f"parts[{index}]")
            if isinstance(part, Attachment):
                if steps:
                    raise InvalidInputError(
                        f"parts[{index}]", "attachments come before every step"
                    )
                attachments.append(part)
            else:
                steps.append(part)
        try:
            return cls(
                question=question,
                answer=answer,
                attachments=tuple(attachments),
                steps=tuple(steps),
            )
        except InvalidInputError as error:
            raise as_parts_error(error, len(attachments)) from None

    def check_complete_parts(self) -> None:
        """check_complete, its errors naming `parts` as a client sent them."""
        try:
            self.check_complete()
        except InvalidInputError as error:
            raise as_parts_error(error, len(self.attachments)) from None


_STEP_FIELD = re.compile(r"steps\[(\d+)\](.*)")


def as_parts_error(error: InvalidInputError, attachments: int) -> InvalidInputError:
    """`error` naming the field of the parts list a client sent: `steps[i]` is
    `parts[attachments + i]` there, and `steps` is `parts`."""
    if error.field == "steps":
        return InvalidInputError("parts", error.reason)
    step = _STEP_FIELD.fullmatch(error.field)
    if step is None:
        return error
    index = attachments + int(step.group(1))
    return InvalidInputError(f"parts[{index}]{step.group(2)}", error.reason)


# The last document of a sealed parts text, when the turn has metadata: never
# a part, so decoding takes it off before anything reads the parts.
_METADATA_KIND = "metadata"


def encode_parts(turn: TurnParts) -> str:
    """The attachments and steps of `turn` as the JSON text that is sealed,
    and its metadata last."""
    documents = turn.part_documents()
    if turn.metadata is not None:
        documents.append({"kind": _METADATA_KIND, "data": turn.metadata})
    return json.dumps(documents, ensure_ascii=False, separators=(",", ":"))


def decode_parts(*, question: str, answer: str, parts_text: str | None) -> TurnParts:
    """The turn from its opened texts (`parts_text` None: text-only).

    The texts were checked when the turn was recorded and the vault opened
    them authenticated (a changed byte fails to open), so they are rebuilt
    without checking them again: a window reads many turns, and the checks
    (JSON parsing of every argument, patterns) would cost more than the rest.
    """
    documents = [] if parts_text is None else load_json(parts_text)
    metadata = _metadata_of(documents)
    attachments, steps = _split_documents(documents)
    turn = _new(TurnParts)
    _set(turn, "question", question)
    _set(turn, "answer", answer)
    _set(turn, "attachments", tuple(map(attachment_of, attachments)))
    _set(turn, "steps", steps_of(steps))
    _set(turn, "metadata", metadata)
    return turn


def _metadata_of(documents: list[dict[str, Any]]) -> str | None:
    """The metadata of a parts list, taken off its end (encode_parts)."""
    if documents and documents[-1]["kind"] == _METADATA_KIND:
        data: str = documents.pop()["data"]
        return data
    return None


PartDocuments: TypeAlias = tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]


def decode_part_documents(parts_text: str) -> PartDocuments:
    """The documents of a sealed parts text (encode_parts), unchecked like
    decode_parts: its attachments' and its steps' (to_document, "kind"
    included). A window writes a turn from them (attachment_of and steps_of
    make the objects)."""
    return _split_documents(load_json(parts_text))


def decode_many_part_documents(parts_texts: Sequence[str]) -> list[PartDocuments]:
    """decode_part_documents of each text, parsed as one JSON list: one parse
    of a window's turns instead of one per turn (each text is a JSON list)."""
    if len(parts_texts) < 2:
        return [decode_part_documents(text) for text in parts_texts]
    parsed = load_json("[" + ",".join(parts_texts) + "]")
    return [_split_documents(documents) for documents in parsed]


def _split_documents(documents: list[dict[str, Any]]) -> PartDocuments:
    _metadata_of(documents)  # not a part: a window never sees it
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


# Building a part from values checked when its turn was recorded: what the
# frozen dataclass's generated __init__ does (object.__new__, then
# object.__setattr__ for each field, as the dataclasses documentation says of
# frozen classes), without __post_init__'s checks. These are parts, never
# events: events are not changed after they are made.
_new = object.__new__
_set = object.__setattr__


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


def sha256_digest(data: bytes) -> str:
    """The digest form Attachment.digest takes: "sha256:<hex>"."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


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


def _as_tuple(field_name: str, value: Any) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise InvalidInputError(field_name, "expected a tuple or list")
    return tuple(value)


def _check_rounds(steps: Sequence[AssistantStep], *, complete: bool) -> None:
    """Steps form rounds: assistant steps, then results of that run's calls."""
    seen_ids: set[str] = set()
    open_run: dict[str, int] = {}  # calls of the last assistant run, unanswered
    answering = False  # inside a run of results
    for index, step in enumerate(steps):
        if isinstance(step, ToolResult):
            if step.call_id not in open_run:
                reason = (
                    "answers a call that was already answered"
                    if step.call_id in seen_ids
                    else "answers no call of the assistant steps just before it"
                )
                raise InvalidInputError(f"steps[{index}]", reason)
            del open_run[step.call_id]
            answering = True
            continue
        if answering:
            # A new assistant run: the previous run's calls must all be answered.
            if open_run:
                raise InvalidInputError(
                    f"steps[{index}]",
                    "comes before the results of calls "
                    + ", ".join(sorted(open_run))
                    + " (each round's results follow its calls)",
                )
            answering = False
        if isinstance(step, ToolCall):
            if step.call_id in seen_ids:
                raise InvalidInputError(
                    f"steps[{index}]", f"call id {step.call_id} is used twice"
                )
            seen_ids.add(step.call_id)
            open_run[step.call_id] = index
    if complete and open_run:
        raise InvalidInputError(
            "steps",
            "calls "
            + ", ".join(sorted(open_run))
            + " have no result: only an abandoned turn may end mid-tool",
        )
