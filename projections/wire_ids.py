"""Call ids on the wire: what each request says in place of the stored ids.

A turn keeps the call ids its caller gave (``ToolCall.call_id``: what a model
or a client made, 1-128 of ``A-Za-z0-9_.:@-``). A request body must carry ids
its provider accepts, each once per request, and every result must carry its
own call's id. The stored ids do not always do that: ``functions.f:0`` is not
an Anthropic id, ``call_0`` comes back in every turn of some servers, and an
OpenAI chat id may be at most 40 characters. So each body maps them, once per
request, in a fixed way:

- the turns are taken oldest first, and in each turn its calls in order;
- a call keeps its stored id when the format accepts it (``ID_RULES``), no
  call before it in the request has the same wire id, and it is not of the
  derived form below;
- any other call is sent as its derived id ``tl_`` + the first 24 hex digits
  of SHA-256 over the turn id, a NUL and the call's index in the turn (a turn
  id is unique in its conversation, so these differ between calls; should two
  ever be equal, the later one hashes again with a counter);
- a result is sent with its call's wire id.

The mapping is a pure function of the window's turns, so the same window is
the same bytes (receipts re-derive); the oldest call keeps an id, so adding a
newer turn never changes the bytes of the ones before it; and a window whose
ids were all valid and unique is sent exactly as before. The stored ids never
change. The derived form is valid in every format (27 characters of
``[a-z0-9_]``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

__all__ = [
    "DERIVED_ID",
    "ID_RULES",
    "IdRule",
    "derived_id",
    "request_wire_ids",
    "wire_id_growth",
]

DERIVED_ID = re.compile(r"tl_[0-9a-f]{24}")


@dataclass(frozen=True, slots=True)
class IdRule:
    """What a provider accepts as a call id, and where it says so."""

    pattern: re.Pattern[str] | None
    max_length: int | None
    source: str

    def accepts(self, call_id: str) -> bool:
        if self.max_length is not None and len(call_id) > self.max_length:
            return False
        return self.pattern is None or self.pattern.fullmatch(call_id) is not None


ID_RULES: dict[str, IdRule] = {
    "openai-chat": IdRule(
        None,
        40,
        "OpenAI chat completions answers 400 \"Invalid 'messages[i].tool_calls[j]"
        ".id': string too long. Expected a string with maximum length 40\"",
    ),
    "openai-responses": IdRule(
        None,
        64,
        "OpenAI Responses answers 400 \"Invalid 'input[i].call_id': string too "
        'long. Expected a string with maximum length 64"',
    ),
    "anthropic-messages": IdRule(
        re.compile(r"[a-zA-Z0-9_-]+"),
        None,
        "Anthropic Messages API reference: tool_use.id matches ^[a-zA-Z0-9_-]+$",
    ),
    "gemini-contents": IdRule(
        None,
        None,
        "Gemini API reference: FunctionCall.id and FunctionResponse.id are free "
        "strings (responses are matched to calls by position and name)",
    ),
}


class CallsOfTurn(Protocol):
    """A turn as the mapping reads it: its id and its steps' documents."""

    @property
    def turn_id(self) -> str: ...

    @property
    def step_documents(self) -> Sequence[Mapping[str, object]]: ...


@lru_cache(maxsize=65_536)  # a window derives the same ids each time it is made
def derived_id(turn_id: str, index: int, attempt: int = 0) -> str:
    """The id sent for the `index`-th call of turn `turn_id` when its own id
    does not fit (`attempt` > 0 only after an equal derived id)."""
    seed = f"{turn_id}\x00{index}" + (f"\x00{attempt}" if attempt else "")
    return "tl_" + hashlib.sha256(seed.encode("utf-8")).hexdigest()[:24]


def request_wire_ids(
    wire_format: str, turns: Iterable[CallsOfTurn]
) -> list[dict[str, str] | None]:
    """For each turn (oldest first), stored id -> wire id where they differ
    (None: every id of the turn is sent as stored)."""
    keeps = _KEEPS[wire_format]
    used: set[str] = set()
    mapped: list[dict[str, str] | None] = []
    for turn in turns:
        calls = [
            step["call_id"]
            for step in turn.step_documents
            if step["kind"] == "tool_call"
        ]
        # The usual case, at a set lookup and a check per call: every id is
        # kept (ids are unique within a turn, a rule of its parts).
        if used.isdisjoint(calls) and all(map(keeps, calls)):
            used.update(calls)  # type: ignore[arg-type]
            mapped.append(None)
            continue
        changes: dict[str, str] = {}
        for index, stored in enumerate(map(str, calls)):
            wire = stored
            if stored in used or not keeps(stored):
                attempt = 0
                wire = derived_id(turn.turn_id, index)
                while wire in used:
                    attempt += 1
                    wire = derived_id(turn.turn_id, index, attempt)
                changes[stored] = wire
            used.add(wire)
        mapped.append(changes)
    return mapped


def _keeps(rule: IdRule) -> Callable[[object], bool]:
    """Whether a stored id may be sent as itself, if no older call used it."""

    def keeps(call_id: object) -> bool:
        return (
            isinstance(call_id, str)
            and rule.accepts(call_id)
            and not (call_id.startswith("tl_") and DERIVED_ID.fullmatch(call_id))
        )

    return keeps


_KEEPS = {wire_format: _keeps(rule) for wire_format, rule in ID_RULES.items()}


def wire_id_growth(
    turns: Sequence[CallsOfTurn], mapped: Sequence[dict[str, str] | None]
) -> list[int]:
    """Bytes each turn's body grows by with its wire ids instead of its stored
    ones (negative when shorter): every id is sent as a JSON string of ASCII
    characters that need no escape, once per call and once per result."""
    growth = []
    for turn, changes in zip(turns, mapped, strict=True):
        if not changes:
            growth.append(0)
            continue
        answered = {
            step["call_id"]
            for step in turn.step_documents
            if step["kind"] == "tool_result"
        }
        growth.append(
            sum(
                (len(wire) - len(stored)) * (2 if stored in answered else 1)
                for stored, wire in changes.items()
            )
        )
    return growth
