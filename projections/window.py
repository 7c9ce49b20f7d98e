"""The budgeted request window: a pure function of the history and the budget.

The body is an OpenAI chat-completions request,
``{"model": M, "messages": [system, user, assistant, ..., user(current)]}``,
serialized as compact UTF-8 JSON without ASCII or HTML escaping. The window is
the longest contiguous newest suffix of whole turns whose body fits
``max_bytes``, measured on the exact bytes returned.

Selection never serializes candidate suffixes. Each turn's contribution to the
body is a constant plus the JSON-string sizes of its two texts, which are known
when the turn is confirmed; so the search walks back from the newest turn and
stops at the first turn that does not fit, touching only the turns it keeps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from domain.errors import MandatoryInputTooLargeError
from domain.text import json_string_size


@dataclass(frozen=True, slots=True)
class WindowTurn:
    """One confirmed exchange as the window sees it."""

    turn_id: str
    question: str
    answer: str


@dataclass(frozen=True, slots=True)
class Window:
    """A request body and what went into it."""

    body: bytes
    kept_turn_ids: tuple[str, ...]
    dropped_turn_ids: tuple[str, ...]
    max_bytes: int

    @property
    def byte_length(self) -> int:
        return len(self.body)

    @property
    def omitted(self) -> bool:
        """True when an eligible turn was left out of this request."""
        return bool(self.dropped_turn_ids)


def encode_json(document: Any) -> bytes:
    """Compact UTF-8 JSON, as a provider client sends it."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8"
    )


def _message(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def _envelope_size(role: str) -> int:
    # The message object's bytes around its content string (which is "" here).
    return len(encode_json(_message(role, ""))) - len(b'""')


# Two messages, each preceded by a comma inside the messages array.
_TURN_OVERHEAD = 2 + _envelope_size("user") + _envelope_size("assistant")


def turn_cost(question_json_bytes: int, answer_json_bytes: int) -> int:
    """Bytes one whole turn adds to a chat-completions body."""
    return _TURN_OVERHEAD + question_json_bytes + answer_json_bytes


def render_request(
    *, model: str, system: str, turns: Sequence[WindowTurn], question: str
) -> bytes:
    messages = [_message("system", system)]
    for turn in turns:
        messages.append(_message("user", turn.question))
        messages.append(_message("assistant", turn.answer))
    messages.append(_message("user", question))
    return encode_json({"model": model, "messages": messages})


def mandatory_size(*, model: str, system: str, question: str) -> int:
    return len(render_request(model=model, system=system, turns=(), question=question))


def count_fitting_turns(
    *, mandatory_bytes: int, costs_newest_first: Iterable[int], max_bytes: int
) -> int:
    """How many of the newest turns fit beside the mandatory input.

    Stops at the first turn that does not fit: a large recent turn is never
    skipped to pack an older, smaller one, so the window stays a contiguous
    suffix of the history.
    """
    if mandatory_bytes > max_bytes:
        raise MandatoryInputTooLargeError(mandatory_bytes, max_bytes)
    remaining = max_bytes - mandatory_bytes
    kept = 0
    for cost in costs_newest_first:
        if cost > remaining:
            break
        remaining -= cost
        kept += 1
    return kept


def select_window(
    *,
    model: str,
    system: str,
    turns: Sequence[WindowTurn],
    question: str,
    max_bytes: int,
) -> Window:
    """Build the request for `question` from the newest turns that fit `max_bytes`.

    `turns` are the eligible turns, oldest first. Raises
    MandatoryInputTooLargeError when system + question alone do not fit.
    """
    costs = (
        turn_cost(json_string_size(turn.question), json_string_size(turn.answer))
        for turn in reversed(turns)
    )
    kept = count_fitting_turns(
        mandatory_bytes=mandatory_size(model=model, system=system, question=question),
        costs_newest_first=costs,
        max_bytes=max_bytes,
    )
    start = len(turns) - kept
    return assemble_window(
        model=model,
        system=system,
        kept=turns[start:],
        dropped_turn_ids=tuple(turn.turn_id for turn in turns[:start]),
        question=question,
        max_bytes=max_bytes,
    )


def assemble_window(
    *,
    model: str,
    system: str,
    kept: Sequence[WindowTurn],
    dropped_turn_ids: tuple[str, ...],
    question: str,
    max_bytes: int,
) -> Window:
    body = render_request(model=model, system=system, turns=kept, question=question)
    # The accounting above is exact; this guards the budget against a future
    # change to the envelope that forgets to update it.
    if len(body) > max_bytes:
        raise AssertionError(f"window body {len(body)} bytes exceeds {max_bytes}")
    return Window(
        body=body,
        kept_turn_ids=tuple(turn.turn_id for turn in kept),
        dropped_turn_ids=dropped_turn_ids,
        max_bytes=max_bytes,
    )
