"""JSON text through the standard library's public API, byte for byte json.dumps.

A body's bytes (and the digests receipts keep) are json.dumps's: these check
the shared encoder and decoder against it, that the code uses no private
name of the json package nor a slot's own setter, and the differences that
rule orjson out (docs/benchmarks.md, domain/json_text.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnledger.domain.json_text import dumps_compact, json_string, load_json

ROOT = Path(__file__).resolve().parents[2]

# Every character, lone surrogates included (a parsed argument may hold one).
TEXT = st.text(alphabet=st.characters(codec=None, min_codepoint=0))
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=300, deadline=None)
@given(value=VALUES)
def test_the_shared_encoder_writes_what_json_dumps_writes(value: Any) -> None:
    assert dumps_compact(value) == _dumps(value)


@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_a_string_literal_is_json_dumps_of_the_string(text: str) -> None:
    assert json_string(text) == json.dumps(text, ensure_ascii=False)


@settings(max_examples=300, deadline=None)
@given(value=VALUES, before=st.sampled_from(["", " ", "\n\t"]))
def test_load_json_reads_what_json_loads_reads(value: Any, before: str) -> None:
    text = before + _dumps(value) + before
    assert load_json(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", " ", "[1,", "{} x", "nul", "[1] ]"])
def test_load_json_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        load_json(text)


def test_orjson_writes_other_bytes_so_the_standard_library_stays() -> None:
    # Small exponents: json.dumps writes Python's repr, orjson its own.
    assert (_dumps(1e-7), orjson.dumps(1e-7)) == ("1e-07", b"1e-7")
    assert (_dumps(1e-5), orjson.dumps(1e-5)) == ("1e-05", b"0.00001")
    assert _dumps(2**64) == "18446744073709551616"
    with pytest.raises(orjson.JSONEncodeError, match="64-bit"):
        orjson.dumps(2**64)
    assert _dumps("\ud800") == '"\ud800"'
    with pytest.raises(orjson.JSONEncodeError, match="surrogates"):
        orjson.dumps("\ud800")


def test_no_private_name_of_the_json_package_nor_a_slot_setter() -> None:
    private = re.compile(
        r"c_make_encoder|encode_basestring|scan_once|make_scanner|\.__set__\b"
    )
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("domain", "projections")
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if private.search(line)
    ]
    assert found == []
