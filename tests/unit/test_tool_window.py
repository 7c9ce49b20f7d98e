"""Windows over turns with tool rounds and attachments: properties.

Over random histories (tool rounds, attachments, hostile text) and random
policies, in every wire format: the body equals the naive reference that
renders every suffix, byte for byte; it is within the byte budget; it is a
contiguous newest suffix of whole turns; and no call is sent without its
result nor a result without its call.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.reference_window import both_windows
from tests.strategies import hostile_text, sendable_text, tool_turns
from tests.tool_pairing import pairing_problems
from tests.unit.test_window_equivalence import fixed_tokens, policies
from turnledger.domain.parts import ToolCall, ToolResult
from turnledger.infra.tokenizers import token_counter
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE
from turnledger.projections.window import WindowTurn


@st.composite
def histories(draw: st.DrawFn) -> list[WindowTurn]:
    count = draw(st.integers(0, 8))
    return [
        WindowTurn.of(f"t{i}", draw(tool_turns(prefix=f"t{i}_"))) for i in range(count)
    ]


def call_ids(turn: WindowTurn) -> set[str]:
    return {s.call_id for s in turn.steps if isinstance(s, ToolCall | ToolResult)}


@settings(max_examples=400, deadline=None)
@given(
    turns=histories(),
    question=sendable_text,
    system=hostile_text,
    use_real_tokenizer=st.booleans(),
    data=st.data(),
)
def test_tool_windows_equal_the_naive_reference_and_never_orphan(
    turns: list[WindowTurn],
    question: str,
    system: str,
    use_real_tokenizer: bool,
    data: st.DataObject,
) -> None:
    counter = token_counter("o200k_base") if use_real_tokenizer else CHAR_ESTIMATE
    policy = data.draw(policies(fixed_tokens(counter, system, question)))
    if data.draw(st.booleans(), label="roomy"):
        # Tool turns are large: often give room for several of them.
        policy = WindowPolicy.model_validate(
            {
                **policy.model_dump(),
                "max_bytes": data.draw(st.integers(1_000, 30_000)),
                "max_tokens": data.draw(st.none() | st.integers(100, 3_000)),
                "context_tokens": None,
                "max_pairs": None,
                "max_messages": None,
            }
        )
    arguments: dict[str, Any] = dict(
        model="m",
        system=system,
        turns=turns,
        question=question,
        policy=policy,
        counter=counter,
    )
    both = both_windows(**arguments)
    if both is None:
        return
    window, expected = both
    assert window.body == expected.body
    assert window.kept_turn_ids == expected.kept_turn_ids
    assert len(window.body) <= policy.max_bytes
    # A contiguous newest suffix of whole turns.
    ids = [turn.turn_id for turn in turns]
    kept = list(window.kept_turn_ids)
    assert kept == ids[len(ids) - len(kept) :]
    # Whole turns: every call id of a kept turn is in the body, none of a
    # dropped one (ids are unique per turn here).
    text = window.body.decode("utf-8")
    for turn in turns:
        for call_id in call_ids(turn):
            assert (call_id in text) == (turn.turn_id in kept), call_id
    assert pairing_problems(policy.wire_format, window.body) == []
    with_tools = sum(1 for t in turns if t.turn_id in kept and t.steps)
    event(f"{policy.wire_format}: tool turns kept {min(with_tools, 3)}")
    if any(item.part == "tool_result" for item in window.trimmed):
        event("a tool result was trimmed")
