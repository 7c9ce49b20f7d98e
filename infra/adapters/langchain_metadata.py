"""What the LangChain history keeps of a message beyond its parts.

A turn's parts hold what a provider is sent (text, calls, results). A
LangChain message also carries fields that describe it to the application:
its `id`, its `name`, an `AIMessage`'s `response_metadata` and
`usage_metadata`. The history keeps them in the turn's metadata
(`TurnParts.metadata`: sealed and deleted with the turn, never sent), one
entry per message in the order they were added, and puts them back on the
messages it rebuilds from the parts. A `SystemMessage` has no part at all:
its entry is the whole message (`message_to_dict`), put back where it was.

    {"langchain": [{"type": "system", "message": {...}},
                   {"type": "human", "id": "h1"},
                   {"type": "ai", "id": "run-1", "response_metadata": {...}},
                   {"type": "tool", "name": "get_weather"}, ...]}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    BaseMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.parts import TurnParts

_KEY = "langchain"
# Fields kept when the message carries them (not at their defaults).
_KEPT = ("id", "name", "response_metadata", "usage_metadata")


def entry(message: BaseMessage) -> dict[str, Any]:
    """What is kept of `message` beyond its parts, checked now so that a
    message whose fields cannot be stored is refused before it is kept."""
    if isinstance(message, SystemMessage):
        kept: dict[str, Any] = {"type": "system", "message": message_to_dict(message)}
    else:
        kept = {"type": message.type}
        for name in _KEPT:
            value = getattr(message, name, None)
            if value:
                kept[name] = value
        if isinstance(message, ToolMessage) and message.name is None:
            kept["name"] = None  # the tool's name is otherwise filled in
    _encode([kept])
    return kept


def describe(messages: Sequence[BaseMessage]) -> str:
    """The turn's metadata for its messages (TurnRecorder's `describe`)."""
    return _encode([entry(message) for message in messages])


def _encode(entries: list[dict[str, Any]]) -> str:
    # Values JSON cannot hold (a datetime in response_metadata) are kept as
    # their text, as LangChain's own JSON serialization of messages does.
    try:
        text = json.dumps(
            {_KEY: entries}, ensure_ascii=False, allow_nan=False, default=str
        )
        TurnParts(question="?", metadata=text)  # the turn's own rules
    except (ValueError, InvalidInputError) as error:
        raise InvalidInputError(
            "messages", f"a message's metadata cannot be stored: {error}"
        ) from None
    return text


def restore(
    messages: list[BaseMessage], parts: TurnParts, *, system: bool
) -> list[BaseMessage]:
    """The turn's `messages` (rebuilt from its parts) with what was kept of
    them put back, and its system messages in their places when `system`.

    The kept entries are put on the messages in order when the messages are
    the ones the turn was added as (their types match one by one); a turn
    recorded otherwise (through the API, or with messages the parts merge)
    keeps its messages as rebuilt, and its system messages go first."""
    entries = _entries(parts.metadata)
    if entries is None:
        return messages
    described = [e for e in entries if e["type"] != "system"]
    systems = [e for e in entries if e["type"] == "system"] if system else []
    if [m.type for m in messages] != [e["type"] for e in described]:
        return [_system(e) for e in systems] + messages
    restored, rebuilt = [], iter(messages)
    for kept in entries:
        if kept["type"] == "system":
            if system:
                restored.append(_system(kept))
            continue
        message = next(rebuilt)
        for name in _KEPT:
            if name in kept:
                setattr(message, name, kept[name])
        restored.append(message)
    return restored


def _entries(metadata: str | None) -> list[dict[str, Any]] | None:
    if metadata is None:
        return None
    entries = json.loads(metadata).get(_KEY)
    return entries if isinstance(entries, list) else None


def _system(kept: dict[str, Any]) -> BaseMessage:
    (message,) = messages_from_dict([kept["message"]])
    return message
