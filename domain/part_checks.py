"""The checks parts share: a string matching a pattern, a bool, an id."""

from __future__ import annotations

import re
from typing import Any

from turnledger.domain.errors import InvalidInputError

# A tool call id: providers' own ids ("call_…", "toolu_…") and client-made ones.
CALL_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")
CALL_ID_RULE = "1-128 characters of letters, digits and _ . : @ -"


def check_str(field_name: str, value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(
            field_name, f"expected a string, got {type(value).__name__}"
        )
    if not pattern.fullmatch(value):
        raise InvalidInputError(field_name, what)
    return value


def check_bool(field_name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(
            field_name, f"expected a bool, got {type(value).__name__}"
        )
    return value
