"""The report's per-part breakdown: envelope, system, fold, history and question
add up to the body's bytes and the window's estimated tokens, exactly, over
random windows in every wire format (text turns, tool rounds, attachments,
folds sent or dropped)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import hostile_text, sendable_text, tool_turns
from tests.unit.test_window_equivalence import fixed_tokens, policies
from turnledger.domain.errors import WindowError
from turnledger.projections.formats import WIRE_FORMATS, RequestParts, render_body
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE
from turnledger.projections.window import Window, WindowFold, WindowTurn, select_window
from turnledger.projections.window_parts import PART_NAMES


@st.composite
def histories(draw: st.DrawFn) -> list[WindowTurn]:
    turns = []
    for i in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            turns.append(WindowTurn.of(f"t{i}", draw(tool_turns(prefix=f"t{i}_"))))
        else:
            turns.append(WindowTurn(f"t{i}", draw(hostile_text), draw(hostile_text)))
    return turns


def assert_parts_add_up(window: Window) -> None:
    report = window.report()
    parts = report["by_part"]
    assert isinstance(parts, list)
    assert [part["part"] for part in parts] == list(PART_NAMES)
    assert all(part["bytes"] >= 0 and part["tokens"] >= 0 for part in parts)
    assert sum(part["bytes"] for part in parts) == len(window.body)
    assert sum(part["bytes"] for part in parts) == report["body_bytes"]
    assert sum(part["tokens"] for part in parts) == window.estimated_tokens
    by_name = {part["part"]: part for part in parts}
    assert by_name["history"]["tokens"] == window.history_tokens
    assert (by_name["history"]["bytes"] == 0) == (not window.kept_turn_ids)
    assert (by_name["fold"]["bytes"] > 0) == window.fold_sent


@settings(max_examples=300, deadline=None)
@given(
    turns=histories(),
    question=sendable_text,
    system=hostile_text,
    summary=st.none() | hostile_text,
    data=st.data(),
)
def test_parts_sum_to_the_body_and_the_tokens(
    turns: list[WindowTurn],
    question: str,
    system: str,
    summary: str | None,
    data: st.DataObject,
) -> None:
    policy = data.draw(
        policies(fixed_tokens(CHAR_ESTIMATE, system, question)), label="policy"
    )
    fold = None if summary is None else WindowFold("f", summary, ("t-old",))
    try:
        window = select_window(
            model="m\u2028",
            system=system,
            turns=turns,
            question=question,
            policy=policy,
            fold=fold,
        )
    except WindowError:
        return  # system + question alone do not fit: no window, no report
    assert_parts_add_up(window)


@given(system=hostile_text, question=hostile_text)
@settings(max_examples=100, deadline=None)
def test_the_system_part_is_what_the_system_adds_to_the_body(
    system: str, question: str
) -> None:
    for wire_format in WIRE_FORMATS:
        policy = WindowPolicy.bytes_only(10**6).model_copy(
            update={"wire_format": wire_format}
        )
        window = select_window(
            model="m", system=system, turns=[], question=question, policy=policy
        )
        without_system = RequestParts(
            model="m",
            system="",
            question=question,
            max_output_tokens=policy.reserved_output_tokens,
        )
        by_name = {part.part: part.bytes for part in window.by_part}
        assert by_name["system"] == len(window.body) - len(
            render_body(wire_format, without_system)
        )
