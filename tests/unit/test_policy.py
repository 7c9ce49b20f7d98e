"""The window policy and the settings that build it refuse bad configurations."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy


def test_defaults_follow_the_seeds() -> None:
    policy = WindowPolicy()
    assert policy.max_tokens == 4_000
    assert policy.max_messages == 25
    assert policy.floor_messages == 10
    assert policy.max_message_tokens == 1_000
    assert policy.fold_threshold_tokens == 2_000
    assert policy.max_pairs_total == 12  # 25 messages hold 12 whole pairs
    assert policy.floor_pairs == 5


def test_an_odd_floor_rounds_up_to_whole_pairs() -> None:
    assert WindowPolicy(floor_messages=3).floor_pairs == 2


def test_the_pair_limit_is_the_tighter_of_both_counts() -> None:
    assert WindowPolicy(max_messages=25, max_pairs=6).max_pairs_total == 6
    assert WindowPolicy(max_messages=None, max_pairs=None).max_pairs_total is None


def test_a_token_budget_under_twice_the_fold_threshold_is_refused_with_the_reason() -> (
    None
):
    with pytest.raises(ValidationError) as raised:
        WindowPolicy(max_tokens=3_999, fold_threshold_tokens=2_000)
    message = str(raised.value)
    assert "3999" in message and "2x the fold threshold (2000)" in message
    assert "gap" in message
    WindowPolicy(max_tokens=4_000, fold_threshold_tokens=2_000)  # exactly 2x is fine


def test_a_floor_over_the_message_limit_is_refused() -> None:
    with pytest.raises(ValidationError, match="floor_messages"):
        WindowPolicy(floor_messages=26, max_messages=25)


def test_the_output_reserve_must_leave_room_in_the_context() -> None:
    with pytest.raises(ValidationError, match="reserved_output_tokens"):
        WindowPolicy(context_tokens=1_000, reserved_output_tokens=1_000)


def test_unknown_fields_and_formats_are_refused() -> None:
    with pytest.raises(ValidationError):
        WindowPolicy(max_byte=10)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        WindowPolicy(wire_format="openai-completions")  # type: ignore[arg-type]


def test_bytes_only_switches_every_other_limit_off() -> None:
    policy = WindowPolicy.bytes_only(500)
    assert policy.max_bytes == 500
    assert policy.max_tokens is None and policy.max_pairs_total is None
    assert policy.floor_pairs == 0 and policy.max_message_tokens is None


def test_settings_refuse_to_start_below_twice_the_fold_threshold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TURNLEDGER_FOLD_THRESHOLD_TOKENS", "4000")
    with pytest.raises(ValidationError) as raised:
        Settings(_env_file=None, persistence="memory")
    assert "must be >= 2x the fold threshold (4000)" in str(raised.value)
    monkeypatch.setenv("TURNLEDGER_WINDOW_MAX_TOKENS", "8000")
    settings = Settings(_env_file=None, persistence="memory")
    assert settings.window_policy().max_tokens == 8_000


def test_settings_check_every_policy_rule_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TURNLEDGER_WINDOW_FLOOR_MESSAGES", "30")
    with pytest.raises(ValidationError, match="floor_messages"):
        Settings(_env_file=None, persistence="memory")


def test_settings_build_the_policy_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TURNLEDGER_WINDOW_FORMAT", "gemini-contents")
    monkeypatch.setenv("TURNLEDGER_WINDOW_MAX_BYTES", "9000")
    monkeypatch.setenv("TURNLEDGER_WINDOW_MAX_PAIRS", "6")
    policy = Settings(_env_file=None, persistence="memory").window_policy()
    assert policy.wire_format == "gemini-contents"
    assert policy.max_bytes == 9_000
    assert policy.max_pairs_total == 6
