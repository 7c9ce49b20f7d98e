"""json_string_size is the size the standard library's encoder gives a text,
which is what the request bodies are serialized with."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from turnledger.domain.text import TextMetrics, json_string_size

# Every character a turn may hold: all of Unicode but the surrogates (a lone
# one is refused by check_text) and NUL (refused too, but escaped the same).
EVERY_CHARACTER = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def standard_size(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8"))


def test_every_character_is_measured_as_the_standard_encoder_writes_it() -> None:
    sizes = [json_string_size(c) for c in EVERY_CHARACTER]
    expected = [standard_size(c) for c in EVERY_CHARACTER]
    mismatched = [
        f"U+{ord(c):04X}"
        for c, got, want in zip(EVERY_CHARACTER, sizes, expected, strict=True)
        if got != want
    ]
    assert not mismatched, mismatched[:20]


@given(st.text(st.characters(blacklist_categories=("Cs",))))
def test_any_text_is_measured_as_the_standard_encoder_writes_it(text: str) -> None:
    assert json_string_size(text) == standard_size(text)
    assert TextMetrics.of(text) == TextMetrics(standard_size(text), len(text))
