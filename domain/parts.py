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

The parts live by kind, and this module keeps the names the rest imports:

- attachment.py      `Attachment` (a reference or small inline bytes)
- steps.py           the assistant's steps and the rule of their order (rounds)
- part_documents.py  parts as the documents they are sealed as, read back
- parts.py           `TurnParts`, the whole turn, and its sealed text
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnledger.domain.attachment import (
    MAX_INLINE_ATTACHMENT_BYTES,
    Attachment,
    sha256_digest,
)
from turnledger.domain.errors import InvalidInputError
from turnledger.domain.json_text import load_json
from turnledger.domain.part_documents import (
    METADATA_KIND,
    PartDocuments,
    attachment_of,
    decode_many_part_documents,
    decode_part_documents,
    metadata_of,
    part_from_document,
    split_documents,
    steps_of,
    unchecked,
)
from turnledger.domain.steps import (
    MAX_ARGUMENT_DEPTH,
    REASONING_PROVIDERS,
    STEP_TYPES,
    AssistantStep,
    AssistantText,
    Reasoning,
    Refusal,
    ToolCall,
    ToolResult,
    check_rounds,
    checked_object,
)
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
    "unchecked",
    "PartDocuments",
]


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
            checked_object("metadata", self.metadata)
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
            if not isinstance(step, STEP_TYPES):
                raise InvalidInputError(
                    f"steps[{index}]",
                    "expected AssistantText, ToolCall, ToolResult, Refusal or "
                    "Reasoning, "
                    f"got {type(step).__name__}",
                )
        check_rounds(self.steps, complete=False)

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
        check_rounds(self.steps, complete=True)

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


def encode_parts(turn: TurnParts) -> str:
    """The attachments and steps of `turn` as the JSON text that is sealed,
    and its metadata last."""
    documents = turn.part_documents()
    if turn.metadata is not None:
        documents.append({"kind": METADATA_KIND, "data": turn.metadata})
    return json.dumps(documents, ensure_ascii=False, separators=(",", ":"))


def decode_parts(*, question: str, answer: str, parts_text: str | None) -> TurnParts:
    """The turn from its opened texts (`parts_text` None: text-only).

    The texts were checked when the turn was recorded and the vault opened
    them authenticated (a changed byte fails to open), so they are rebuilt
    without checking them again: a window reads many turns, and the checks
    (JSON parsing of every argument, patterns) would cost more than the rest.
    """
    documents = [] if parts_text is None else load_json(parts_text)
    metadata = metadata_of(documents)
    attachments, steps = split_documents(documents)
    return unchecked(
        TurnParts,
        question=question,
        answer=answer,
        attachments=tuple(map(attachment_of, attachments)),
        steps=steps_of(steps),
        metadata=metadata,
    )


def _as_tuple(field_name: str, value: Any) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise InvalidInputError(field_name, "expected a tuple or list")
    return tuple(value)
