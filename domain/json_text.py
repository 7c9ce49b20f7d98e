"""JSON text as the standard library reads and writes it, through its public API.

A request body, and the receipt that keeps its digest, must be byte for byte
what `json.dumps(document, ensure_ascii=False, separators=(",", ":"))` writes:
an audit re-derives old receipts and compares digests. `json.JSONEncoder`
with those options, made once, writes exactly those bytes: for a string its
`encode` runs the same escaping as `json.dumps`, for anything else the same
C encoder, and it keeps no state between calls (no circular check). Reading
uses `json.JSONDecoder.raw_decode`, the same scanner `json.loads` runs.

Why not orjson (measured with orjson 3.13): its bytes differ from the
standard library's. It writes `1e-7` and `0.00001` where `json.dumps` writes
`1e-07` and `1e-05` (about 8% of random floats differ), refuses integers over
64 bits and refuses lone surrogates, all of which a tool's arguments may
hold once parsed (tests/unit/test_json_text.py). Changing the bytes would
change every digest a receipt keeps, so the standard library stays the
reference.
(`domain/text.py` uses orjson only for the length of a JSON string, where
both escape every character the same way; tests/unit/test_text_metrics.py.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["dumps_compact", "json_string", "load_json"]

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False
)
_DECODER = json.JSONDecoder()

# `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`, without
# making an encoder on every call as json.dumps does with options.
dumps_compact: Callable[[Any], str] = _ENCODER.encode

# A string as a JSON string literal, quotes included (dumps_compact of a str).
json_string: Callable[[str], str] = _ENCODER.encode


def load_json(text: str) -> Any:
    """`json.loads(text)`, faster for JSON text with nothing around its value.

    `raw_decode` parses the value at the start of the text; json.loads first
    looks for whitespace around it with a regular expression, which costs as
    much as parsing a short text. Text with anything around its value, or
    none at its start, goes to json.loads (parsed, or refused, as there).
    """
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError:
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value
