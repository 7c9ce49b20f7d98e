"""Every rule of the window, each with a case where it decides the outcome."""

from __future__ import annotations

import json
import re

import pytest

from turnledger.domain.errors import (
    MandatoryInputOverContextError,
    MandatoryInputTooLargeError,
    WindowError,
)
from turnledger.infra.tokenizers import token_counter
from turnledger.projections.formats import FOLD_LABEL, RequestParts, render_body
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.tokens import CHAR_ESTIMATE
from turnledger.projections.window import WindowFold, WindowTurn, select_window

MARKER = re.compile(r"\n… (\d+) tokens omitted …\n")


def turn(turn_id: str, question_chars: int = 8, answer_chars: int = 8) -> WindowTurn:
    return WindowTurn(turn_id, "q" * question_chars, "a" * answer_chars)


def policy(**limits: object) -> WindowPolicy:
    """A policy with every limit off except those given."""
    base: dict[str, object] = {
        "max_tokens": None,
        "max_messages": None,
        "floor_messages": 0,
        "max_message_tokens": None,
        "fold_max_tokens": None,
        "fold_threshold_tokens": 1,
    }
    return WindowPolicy(**{**base, **limits})  # type: ignore[arg-type]


def window(turns: list[WindowTurn], rules: WindowPolicy, **kwargs: object):  # type: ignore[no-untyped-def]
    arguments: dict[str, object] = {
        "model": "m",
        "system": "S",
        "turns": turns,
        "question": "Q?",
        "policy": rules,
    }
    return select_window(**{**arguments, **kwargs})  # type: ignore[arg-type]


def body_size(turns: list[WindowTurn], fmt: str = "openai-chat") -> int:
    parts = RequestParts(
        model="m",
        system="S",
        question="Q?",
        pairs=[(t.question, t.answer) for t in turns],
    )
    return len(render_body(fmt, parts))


# Floor --------------------------------------------------------------------------------


def test_the_floor_keeps_the_newest_pairs_over_the_token_budget() -> None:
    turns = [turn("t1", 160, 160), turn("t2", 160, 160), turn("t3", 160, 160)]
    # 80 tokens a pair; the budget holds one pair, the floor keeps two.
    result = window(turns, policy(max_tokens=100, floor_messages=4))
    assert result.kept_turn_ids == ("t2", "t3")
    assert result.floor_over_budget == 1
    assert result.history_tokens == 160  # over the 100-token budget
    assert [(d.turn_id, d.reason) for d in result.dropped] == [("t1", "tokens")]
    without_floor = window(turns, policy(max_tokens=100))
    assert without_floor.kept_turn_ids == ("t3",)


def test_the_floor_never_breaks_the_byte_limit() -> None:
    turns = [turn("t1", 160, 160), turn("t2", 160, 160), turn("t3", 160, 160)]
    limit = body_size(turns[2:]) + 10  # one pair fits, not two
    result = window(turns, policy(max_tokens=100, floor_messages=6, max_bytes=limit))
    assert result.kept_turn_ids == ("t3",)
    assert result.byte_length <= limit
    assert result.dropped.counts() == {"bytes": 2}


def test_the_floor_never_breaks_the_count_limit() -> None:
    turns = [turn(f"t{i}") for i in range(6)]
    result = window(turns, policy(max_tokens=2, floor_messages=10, max_messages=10))
    assert len(result.kept_turn_ids) == 5  # floor of 5 pairs, limit of 5
    result = window(turns, policy(max_tokens=2, floor_messages=6, max_pairs=2))
    assert result.kept_turn_ids == ("t4", "t5")
    assert result.dropped.counts() == {"count": 4}


# Whole pairs and the stopping rule ----------------------------------------------------


def test_a_too_large_newest_pair_stops_the_window_instead_of_skipping_it() -> None:
    turns = [turn("old", 10, 10), turn("huge", 2_000, 10)]
    limit = body_size([turns[0]])  # the older pair alone would fit exactly
    result = window(turns, policy(max_bytes=limit))
    assert result.kept_turn_ids == ()
    assert result.dropped.counts() == {"bytes": 2}
    assert result.byte_length == body_size([])
    assert result.omitted


def test_a_newest_pair_over_the_token_budget_stops_it_too() -> None:
    turns = [turn("old", 4, 4), turn("wordy", 800, 8)]
    result = window(turns, policy(max_tokens=100))
    assert result.kept_turn_ids == ()
    assert [d.reason for d in result.dropped] == ["tokens", "tokens"]


def test_an_answer_is_never_sent_without_its_question() -> None:
    turns = [turn(f"t{i}", 10, 10) for i in range(4)]
    for limit in range(body_size([]), body_size(turns) + 1, 7):
        result = window(turns, policy(max_bytes=limit))
        document = json.loads(result.body)
        roles = [m["role"] for m in document["messages"][1:-1]]
        assert roles == ["user", "assistant"] * len(result.kept_turn_ids)


# Counts -------------------------------------------------------------------------------


def test_the_message_limit_decides() -> None:
    turns = [turn(f"t{i}") for i in range(5)]
    result = window(turns, policy(max_messages=5))  # 5 messages: 2 whole pairs
    assert result.kept_turn_ids == ("t3", "t4")
    assert result.dropped.counts() == {"count": 3}


def test_the_pair_limit_decides() -> None:
    turns = [turn(f"t{i}") for i in range(5)]
    assert window(turns, policy(max_pairs=3)).kept_turn_ids == ("t2", "t3", "t4")


# Bytes --------------------------------------------------------------------------------


def test_mandatory_input_over_the_byte_limit_is_a_typed_error() -> None:
    limit = body_size([]) - 1
    with pytest.raises(MandatoryInputTooLargeError) as raised:
        window([turn("t1")], policy(max_bytes=limit))
    assert raised.value.required_bytes == limit + 1
    assert raised.value.max_bytes == limit


@pytest.mark.parametrize(
    "fmt", ["openai-chat", "openai-responses", "anthropic-messages", "gemini-contents"]
)
def test_every_byte_limit_is_met_exactly_at_the_boundary(fmt: str) -> None:
    turns = [turn("t1", 30, 30), turn("t2", 30, 31)]
    exact = window(turns, policy(wire_format=fmt, max_bytes=10**6)).byte_length
    assert window(turns, policy(wire_format=fmt, max_bytes=exact)).kept_turn_ids == (
        "t1",
        "t2",
    )
    one_short = window(turns, policy(wire_format=fmt, max_bytes=exact - 1))
    assert one_short.kept_turn_ids == ("t2",)


# Tokens -------------------------------------------------------------------------------


def test_the_context_window_and_output_reserve_shrink_the_token_budget() -> None:
    turns = [turn(f"t{i}", 40, 40) for i in range(4)]  # 20 tokens a pair
    roomy = window(turns, policy(max_tokens=1_000))
    assert len(roomy.kept_turn_ids) == 4
    # 100 - 50 reserved - 2 (system + question) leaves 48: two pairs.
    tight = window(
        turns,
        policy(max_tokens=1_000, context_tokens=100, reserved_output_tokens=50),
    )
    assert tight.kept_turn_ids == ("t2", "t3")
    # The context, a hard limit, stopped the walk, not the soft budget.
    assert tight.dropped.counts() == {"context": 2}


def test_the_floor_never_breaks_the_context() -> None:
    """The issue's case: a 1,000-token context, 500 reserved for the reply and
    a 400-token system + question leave 100 tokens; the floor of 10 messages
    used to keep 5 pairs of 200 tokens (1,400 tokens of context) anyway."""
    turns = [turn(f"t{i}", 400, 400) for i in range(6)]  # 200 tokens a pair
    rules = policy(
        max_tokens=4_000,
        context_tokens=1_000,
        reserved_output_tokens=500,
        floor_messages=10,
    )
    system, question = "s" * 800, "q" * 800  # 200 tokens each
    result = window(turns, rules, system=system, question=question)
    assert result.kept_turn_ids == ()
    assert result.dropped.counts() == {"context": 6}
    assert result.estimated_tokens + 500 <= 1_000
    # Room for exactly one pair: the floor stops at the context, not at 5 pairs.
    wider = WindowPolicy.model_validate({**rules.model_dump(), "context_tokens": 1_200})
    one_pair = window(turns, wider, system=system, question=question)
    assert one_pair.kept_turn_ids == ("t5",)
    roomy = window(turns, policy(max_tokens=4_000, floor_messages=10))
    assert len(roomy.kept_turn_ids) == 6


def test_the_floor_still_beats_the_soft_budget_inside_the_context() -> None:
    turns = [turn(f"t{i}", 160, 160) for i in range(4)]  # 80 tokens a pair
    rules = policy(
        max_tokens=100, context_tokens=300, reserved_output_tokens=50, floor_messages=8
    )
    # 300 - 50 - 1 (system + question) = 249 tokens: three pairs, the floor
    # asks for four, the soft budget for one.
    result = window(turns, rules)
    assert result.kept_turn_ids == ("t1", "t2", "t3")
    assert result.floor_over_budget == 2
    assert result.history_tokens == 240 > 100
    assert result.dropped.counts() == {"context": 1}


def test_mandatory_input_over_the_context_is_a_typed_error() -> None:
    rules = policy(context_tokens=100, reserved_output_tokens=60)
    fits = "x" * (4 * 39 - 4)  # 38 tokens + "Q?" = 39, + 60 reserved < 100
    assert window([turn("t1")], rules, system=fits).kept_turn_ids == ()
    exact = "x" * (4 * 39)  # 39 + 1 + 60 = 100: nothing left, but it fits
    assert window([turn("t1")], rules, system=exact).dropped.counts() == {"context": 1}
    with pytest.raises(MandatoryInputOverContextError) as raised:
        window([turn("t1")], rules, system=exact + "x")
    assert isinstance(raised.value, WindowError)
    assert raised.value.input_tokens == 41
    assert raised.value.reserved_output_tokens == 60
    assert raised.value.context_tokens == 100
    assert raised.value.token_counter == "char/4"
    assert "101" not in str(raised.value) and "100-token context" in str(raised.value)


def test_a_fold_over_the_context_is_dropped_and_reported() -> None:
    fold = WindowFold("f1", "s" * 400, covered_turn_ids=("t1", "t2"))  # ~130 tokens
    rules = policy(context_tokens=120, reserved_output_tokens=10)
    result = window([turn("t3")], rules, fold=fold)
    assert not result.fold_sent and result.fold_dropped_reason == "context"
    assert b"Summary of the earlier" not in result.body
    assert result.kept_turn_ids == ("t3",)
    assert result.dropped.counts() == {"fold_dropped": 2}
    roomy = window([turn("t3")], policy(), fold=fold)
    assert roomy.fold_sent and roomy.fold_dropped_reason is None


def test_a_real_tokenizer_can_decide_where_char_over_four_would_not() -> None:
    # 40 CJK characters: 10 tokens by char/4, far more for a real tokenizer.
    cjk = WindowTurn(
        "cjk",
        "这是一个关于数据库迁移计划的问题，请详细说明每一个步骤和风险。" * 2,
        "好",
    )
    turns = [turn("old"), cjk]
    rules = policy(max_tokens=30)
    assert window(turns, rules).kept_turn_ids == ("old", "cjk")
    real = window(turns, rules, counter=token_counter("o200k_base"))
    assert real.kept_turn_ids == ()
    assert real.token_counter == "o200k_base"


# Trimming -----------------------------------------------------------------------------


def test_history_messages_are_trimmed_with_the_real_omitted_count() -> None:
    pasted = "HEAD" * 100 + "middle " * 500 + "TAIL" * 100  # 4,300 chars
    turns = [WindowTurn("paste", pasted, "ok")]
    result = window(turns, policy(max_message_tokens=1_000))
    sent = json.loads(result.body)["messages"][1]["content"]
    head, count, tail = MARKER.split(sent)
    assert pasted.startswith(head) and pasted.endswith(tail)
    cut = pasted[len(head) : len(pasted) - len(tail)]
    assert int(count) == CHAR_ESTIMATE.count(cut) == 275  # 4,300 - 2 x 1,600 chars
    assert [(t.turn_id, t.part, t.omitted_tokens) for t in result.trimmed] == [
        ("paste", "question", 275)
    ]


def test_the_current_question_is_never_trimmed() -> None:
    question = "Please review: " + "x" * 20_000
    result = window([turn("t1")], policy(max_message_tokens=100), question=question)
    assert json.loads(result.body)["messages"][-1]["content"] == question
    assert result.trimmed == ()


def test_trimming_can_let_a_pasted_turn_fit_the_bytes() -> None:
    turns = [WindowTurn("paste", "z" * 40_000, "ok")]
    limit = 10_000
    assert window(turns, policy(max_bytes=limit)).kept_turn_ids == ()
    trimmed = window(turns, policy(max_bytes=limit, max_message_tokens=1_000))
    assert trimmed.kept_turn_ids == ("paste",)
    assert trimmed.byte_length <= limit


# The fold -----------------------------------------------------------------------------


def test_the_fold_is_sent_as_a_labelled_part_and_replaces_what_it_covers() -> None:
    fold = WindowFold("f1", "They agreed on ORCHID-17.", covered_turn_ids=("t1", "t2"))
    result = window([turn("t3")], policy(), fold=fold)
    messages = json.loads(result.body)["messages"]
    assert messages[1] == {
        "role": "system",
        "content": FOLD_LABEL + "They agreed on ORCHID-17.",
    }
    assert result.kept_turn_ids == ("t3",)
    assert [(d.turn_id, d.reason) for d in result.dropped] == [
        ("t1", "fold"),
        ("t2", "fold"),
    ]
    assert result.fold_sent and result.fold_id == "f1"


def test_the_fold_has_its_own_token_budget() -> None:
    fold = WindowFold("f1", "s" * 8_000, covered_turn_ids=("t1",))
    result = window([turn("t2")], policy(fold_max_tokens=500), fold=fold)
    # 2,000 tokens; 250 kept at each end (half the fold's budget).
    assert [(t.part, t.omitted_tokens) for t in result.trimmed] == [("fold", 1_500)]
    assert result.fold_sent


def test_a_fold_that_does_not_fit_the_bytes_is_reported_not_sent() -> None:
    fold = WindowFold("f1", "s" * 5_000, covered_turn_ids=("t0", "t1"))
    result = window([turn("t2")], policy(max_bytes=1_000), fold=fold)
    assert not result.fold_sent and result.fold_id == "f1"
    assert result.kept_turn_ids == ("t2",)
    assert b"Summary of the earlier" not in result.body
    # The caller learns that older context is missing, and why.
    assert result.fold_dropped_reason == "bytes"
    assert [(d.turn_id, d.reason) for d in result.dropped] == [
        ("t0", "fold_dropped"),
        ("t1", "fold_dropped"),
    ]
    assert result.omitted
    report = result.report()
    assert report["fold_sent"] is False and report["fold_dropped_reason"] == "bytes"
    assert report["dropped_counts"] == {"fold_dropped": 2}
    assert report["dropped_spans"] == [
        {
            "reason": "fold_dropped",
            "count": 2,
            "newest_turn_id": "t1",
            "first_position": None,
            "last_position": None,
        }
    ]


# The report ---------------------------------------------------------------------------


def test_nothing_omitted_when_everything_fits() -> None:
    result = window([turn("t1"), turn("t2")], policy())
    assert not result.omitted and len(result.dropped) == 0
    assert result.report()["dropped"] == []


def test_the_report_carries_sizes_and_tokens_but_no_text() -> None:
    secret = "ORCHID-17 is the secret code"
    result = window(
        [WindowTurn("t1", secret, secret), turn("t2", 4_000, 8)], policy(max_tokens=100)
    )
    report = result.report()
    assert report["body_bytes"] == len(result.body)
    assert report["estimated_tokens"] == result.estimated_tokens
    assert report["dropped"] == [
        {"turn_id": "t1", "reason": "tokens"},
        {"turn_id": "t2", "reason": "tokens"},
    ]
    assert "ORCHID" not in json.dumps(report)


def test_windows_compare_by_content_including_dropped_turns() -> None:
    turns = [turn("t1"), turn("t2")]
    first = window(turns, policy(max_pairs=1))
    again = window(turns, policy(max_pairs=1))
    assert first == again and hash(first) == hash(again)
    assert first != window(turns, policy(max_pairs=2))
    other = window([turn("t0"), turn("t2")], policy(max_pairs=1))
    assert first.dropped != other.dropped
