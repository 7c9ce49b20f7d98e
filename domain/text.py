"""Checks and measurements of the text and identifiers a caller hands in."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from turnledger.domain.errors import InvalidInputError, TurnTooLargeError

# Client-chosen identifiers: wide enough for UUIDs, ULIDs and "device:42" styles,
# narrow enough that they are safe in logs, URLs and SQL identifiers' neighbours.
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")

DEFAULT_MAX_TURN_BYTES = 1_048_576
"""Default limit on the UTF-8 size of one turn's question plus answer (1 MiB)."""


def check_identifier(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(field, f"expected a string, got {type(value).__name__}")
    if not _IDENTIFIER.fullmatch(value):
        raise InvalidInputError(
            field,
            "must be 1-128 characters of letters, digits and . _ : @ -, "
            "starting with a letter or digit",
        )
    return value


def check_text(field: str, value: Any, *, allow_empty: bool = False) -> str:
    """Return `value` if it is a string that can be sent as UTF-8 JSON and stored.

    NUL is refused: PostgreSQL text cannot hold it, so the same input would be
    accepted by one store and fail on another.
    """
    if not isinstance(value, str):
        raise InvalidInputError(field, f"expected a string, got {type(value).__name__}")
    nul = value.find("\x00")
    if nul >= 0:
        raise InvalidInputError(
            field, f"contains NUL (U+0000) at index {nul}; PostgreSQL cannot store it"
        )
    if not allow_empty and (not value or value.isspace()):
        raise InvalidInputError(field, "must not be empty or only whitespace")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        # A lone surrogate cannot be encoded, so it could never reach a provider.
        raise InvalidInputError(
            field,
            f"contains an unpaired surrogate (U+{ord(value[error.start]):04X}) at "
            f"index {error.start}; text must be valid Unicode",
        ) from None
    return value


def check_turn_size(*texts: str, limit: int, extra: int = 0) -> int:
    """The UTF-8 size of `texts` plus `extra` bytes (inline attachments)."""
    size = extra + sum(len(text.encode("utf-8")) for text in texts)
    if size > limit:
        raise TurnTooLargeError(size, limit)
    return size


def check_expected_version(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(
            "expected_version", "must be a positive integer or None"
        )
    return value


def json_string_size(text: str) -> int:
    """UTF-8 length of `text` as a JSON string literal, quotes included.

    This is what `text` adds to any request body serialized as compact JSON
    with ensure_ascii=False, whatever the wire format around it. Measured
    with orjson, which escapes every character exactly as the standard
    library does there (tests/unit/test_text_metrics.py checks each one) in
    a twentieth of the time: it runs twice for every turn written.
    """
    return len(orjson.dumps(text))


@dataclass(frozen=True, slots=True)
class TextMetrics:
    """Sizes of one text, kept with the turn so windows need no decryption."""

    json_bytes: int
    chars: int

    @classmethod
    def of(cls, text: str) -> TextMetrics:
        return cls(json_bytes=json_string_size(text), chars=len(text))
