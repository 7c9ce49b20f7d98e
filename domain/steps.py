"""What the assistant did in a turn, in order: text, tool calls and their
results, refusals and reasoning; and the rule their order follows (rounds).

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

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.part_checks import CALL_ID, CALL_ID_RULE, check_bool, check_str
from turnledger.domain.text import check_text

MAX_ARGUMENT_DEPTH = 64
"""Deepest nesting of a call's arguments (the object itself is level 1).

Anthropic and Gemini bodies carry the arguments as an object, which is parsed
and serialized again for every window; a limit far above any tool schema
keeps that work bounded and refuses (InvalidInputError) what would otherwise
overflow the parser's recursion.
"""

# A tool name as every provider accepts it (OpenAI's rule is the narrowest).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


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
        check_str(
            "tool_call.call_id",
            self.call_id,
            CALL_ID,
            CALL_ID_RULE,
        )
        check_str(
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
    checked_object("tool_call.arguments", arguments)


def checked_object(field_name: str, text: str) -> dict[str, Any]:
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
        check_str(
            "tool_result.call_id",
            self.call_id,
            CALL_ID,
            CALL_ID_RULE,
        )
        # An empty result is legitimate (a tool that returned nothing).
        check_text("tool_result.content", self.content, allow_empty=True)
        check_bool("tool_result.is_error", self.is_error)

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
        check_str("reasoning.model", self.model, _MODEL, "1-256 characters, no spaces")
        check_text("reasoning.payload", self.payload)
        parsed = checked_object("reasoning.payload", self.payload)
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
STEP_TYPES = (AssistantText, ToolCall, ToolResult, Refusal, Reasoning)


def check_rounds(steps: Sequence[AssistantStep], *, complete: bool) -> None:
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
