"""The first request window: exact bytes, whole turns, contiguous newest suffix."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from turnledger.domain.errors import MandatoryInputTooLargeError
from turnledger.projections.window import WindowTurn, render_request, select_window

# Text that stresses JSON escaping and UTF-8 widths: CJK, emoji, quotes,
# backslashes, control characters, line separators, HTML-ish characters.
HOSTILE_ALPHABET = st.sampled_from(
    list("aZ 09中文字😀🧪\"\\\n\t\r\x00\x1f\u2028\u2029<>&='é")
)
texts = st.text(alphabet=HOSTILE_ALPHABET, min_size=1, max_size=40) | st.text(
    min_size=1, max_size=40
).filter(lambda text: _encodable(text))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@st.composite
def histories(draw: st.DrawFn) -> list[WindowTurn]:
    count = draw(st.integers(min_value=0, max_value=12))
    return [
        WindowTurn(turn_id=f"t{index}", question=draw(texts), answer=draw(texts))
        for index in range(count)
    ]


def naive_window(
    model: str, system: str, turns: list[WindowTurn], question: str, max_bytes: int
) -> tuple[bytes, int]:
    """Seed 000's loop: drop the oldest whole turn until the body fits."""
    for start in range(len(turns) + 1):
        messages = [{"role": "system", "content": system}]
        for turn in turns[start:]:
            messages += [
                {"role": "user", "content": turn.question},
                {"role": "assistant", "content": turn.answer},
            ]
        messages.append({"role": "user", "content": question})
        body = json.dumps(
            {"model": model, "messages": messages},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode("utf-8")
        if len(body) <= max_bytes:
            return body, start
    raise MandatoryInputTooLargeError(0, max_bytes)


@settings(max_examples=300)
@given(
    turns=histories(),
    system=texts,
    question=texts,
    max_bytes=st.integers(min_value=1, max_value=2_000),
)
def test_window_matches_the_naive_loop_byte_for_byte(
    turns: list[WindowTurn], system: str, question: str, max_bytes: int
) -> None:
    try:
        expected_body, start = naive_window("m", system, turns, question, max_bytes)
    except MandatoryInputTooLargeError:
        with pytest.raises(MandatoryInputTooLargeError):
            select_window(
                model="m",
                system=system,
                turns=turns,
                question=question,
                max_bytes=max_bytes,
            )
        return
    window = select_window(
        model="m", system=system, turns=turns, question=question, max_bytes=max_bytes
    )
    assert window.body == expected_body
    assert window.kept_turn_ids == tuple(turn.turn_id for turn in turns[start:])


@given(turns=histories(), question=texts, max_bytes=st.integers(1, 3_000))
def test_window_is_a_maximal_contiguous_newest_suffix_within_budget(
    turns: list[WindowTurn], question: str, max_bytes: int
) -> None:
    original = list(turns)
    try:
        window = select_window(
            model="m", system="sys", turns=turns, question=question, max_bytes=max_bytes
        )
    except MandatoryInputTooLargeError as error:
        assert error.required_bytes > max_bytes
        assert turns == original
        return
    kept = len(window.kept_turn_ids)
    # Never over budget, measured on the bytes returned.
    assert window.byte_length == len(window.body) <= max_bytes
    # A contiguous newest suffix, and everything else reported as dropped.
    assert window.kept_turn_ids == tuple(t.turn_id for t in turns[len(turns) - kept :])
    assert window.dropped_turn_ids == tuple(
        t.turn_id for t in turns[: len(turns) - kept]
    )
    assert window.omitted == (kept < len(turns))
    # Maximal: the next older turn would overflow.
    if kept < len(turns):
        wider = render_request(
            model="m",
            system="sys",
            turns=turns[len(turns) - kept - 1 :],
            question=question,
        )
        assert len(wider) > max_bytes
    # The current question is always last and never trimmed.
    body = json.loads(window.body)
    assert body["messages"][-1] == {"role": "user", "content": question}
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    # The history handed in is untouched.
    assert turns == original


@given(turns=histories(), question=texts)
def test_a_budget_of_exactly_the_full_body_keeps_every_turn(
    turns: list[WindowTurn], question: str
) -> None:
    full = render_request(model="m", system="s", turns=turns, question=question)
    window = select_window(
        model="m", system="s", turns=turns, question=question, max_bytes=len(full)
    )
    assert window.body == full
    assert window.dropped_turn_ids == ()


@given(question=texts, system=texts)
def test_mandatory_input_over_budget_raises_with_the_sizes(
    question: str, system: str
) -> None:
    needed = len(render_request(model="m", system=system, turns=(), question=question))
    with pytest.raises(MandatoryInputTooLargeError) as raised:
        select_window(
            model="m", system=system, turns=[], question=question, max_bytes=needed - 1
        )
    assert raised.value.required_bytes == needed
    assert raised.value.max_bytes == needed - 1
    window = select_window(
        model="m", system=system, turns=[], question=question, max_bytes=needed
    )
    assert window.byte_length == needed


def test_a_large_newest_turn_stops_the_window_instead_of_skipping_to_an_older_one() -> (
    None
):
    small_old = WindowTurn("old", "short?", "short.")
    large_new = WindowTurn("new", "x" * 500, "y" * 500)
    only_old = render_request(model="m", system="s", turns=[small_old], question="q")
    window = select_window(
        model="m",
        system="s",
        turns=[small_old, large_new],
        question="q",
        max_bytes=len(only_old) + 10,
    )
    assert window.kept_turn_ids == ()
    assert window.dropped_turn_ids == ("old", "new")


@given(text=st.text(alphabet=HOSTILE_ALPHABET, min_size=1, max_size=30))
def test_body_is_compact_utf8_without_ascii_or_html_escaping(text: str) -> None:
    assume(text.strip())
    body = render_request(model="m", system="", turns=[], question=text)
    assert body == json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": ""},
                {"role": "user", "content": text},
            ],
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    for raw in ("中", "😀", "<", ">", "&", "'", "é"):
        if raw in text:
            assert raw.encode("utf-8") in body
