"""The window policy and the settings that build it refuse bad configurations."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from turnledger.domain.errors import InvalidInputError
from turnledger.infra.http.app import create_app
from turnledger.infra.settings import Settings
from turnledger.projections.policy import WindowPolicy
from turnledger.projections.receipt import parse_receipt_policy, receipt_policy


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


# Strict numbers: a boolean, a numeric string or a float is not a limit ---------------

INTEGER_LIMITS = [
    "max_bytes",
    "max_tokens",
    "reserved_output_tokens",
    "context_tokens",
    "max_messages",
    "max_pairs",
    "floor_messages",
    "max_message_tokens",
    "fold_max_tokens",
    "fold_threshold_tokens",
]
LOOSE_NUMBERS = [True, False, "4096", "1", 4096.0, 1.0]


@pytest.mark.parametrize("limit", INTEGER_LIMITS)
@pytest.mark.parametrize("value", LOOSE_NUMBERS, ids=repr)
def test_every_integer_limit_refuses_booleans_strings_and_floats(
    limit: str, value: object
) -> None:
    with pytest.raises(ValidationError) as raised:
        WindowPolicy(**{limit: value})  # type: ignore[arg-type]
    assert raised.value.errors()[0]["loc"] == (limit,)
    with pytest.raises(ValidationError):
        WindowPolicy.model_validate({limit: value})
    with pytest.raises(ValidationError):
        WindowPolicy.model_validate_json(json.dumps({limit: value}))


def test_bytes_only_refuses_a_boolean_byte_limit() -> None:
    with pytest.raises(ValidationError):
        WindowPolicy.bytes_only(True)


def test_a_stored_policy_document_still_loads_strictly() -> None:
    """Receipts keep `model_dump(mode="json")` and load it back: that round trip
    must survive strict validation, through Python objects and through JSON."""
    policy = WindowPolicy(
        context_tokens=8_000, max_pairs=4, wire_format="gemini-contents"
    )
    document = policy.model_dump(mode="json")
    assert WindowPolicy.model_validate(document) == policy
    assert WindowPolicy.model_validate(json.loads(json.dumps(document))) == policy
    assert WindowPolicy.model_validate_json(policy.model_dump_json()) == policy


def test_settings_still_read_limits_from_environment_strings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The environment only has strings: settings parse them, the policy is
    built from the parsed integers."""
    monkeypatch.setenv("TURNLEDGER_WINDOW_MAX_TOKENS", "4096")
    monkeypatch.setenv("TURNLEDGER_WINDOW_CONTEXT_TOKENS", "8192")
    monkeypatch.setenv("TURNLEDGER_WINDOW_MAX_PAIRS", "3")
    policy = Settings(_env_file=None, persistence="memory").window_policy()
    assert (policy.max_tokens, policy.context_tokens, policy.max_pairs) == (
        4_096,
        8_192,
        3,
    )


def test_a_loose_number_over_http_is_a_422_naming_the_field() -> None:
    app = create_app(Settings(_env_file=None, persistence="memory"))
    with TestClient(app) as http:
        token = app.state.service.registry.add("alice", "phone").token
        auth = {"Authorization": f"Bearer {token}"}
        conversation = http.post("/v1/conversations", headers=auth).json()[
            "conversation_id"
        ]
        url = f"/v1/conversations/{conversation}/window"
        request = {"question": "Q?", "model": "m"}
        for loose in (
            {"max_pairs": True},
            {"max_bytes": "4096"},
            {"max_tokens": 4096.0},
        ):
            response = http.post(url, headers=auth, json={**request, "policy": loose})
            assert response.status_code == 422, (loose, response.text)
            error = response.json()["error"]
            assert error["code"] == "invalid_request"
            field = next(iter(loose))
            assert any(field in detail["location"] for detail in error["details"])
        exact = {"max_pairs": 1, "max_bytes": 4096, "max_tokens": 4096}
        response = http.post(url, headers=auth, json={**request, "policy": exact})
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("loose", [True, "4096", 4096.0])
def test_a_receipt_policy_is_reapplied_strictly(loose: object) -> None:
    """The audit re-applies the policy a receipt stored: a tampered number is
    refused as invalid input, never coerced into another window."""
    stored = receipt_policy(model="m", policy=WindowPolicy(), counter="char/4")
    assert parse_receipt_policy(json.loads(json.dumps(stored)))[1] == WindowPolicy()
    tampered = {**stored, "policy": {**stored["policy"], "max_pairs": loose}}
    with pytest.raises(InvalidInputError, match="max_pairs"):
        parse_receipt_policy(tampered)
    first_format = {"format": "openai-chat", "model": "m", "max_bytes": loose}
    with pytest.raises(InvalidInputError):
        parse_receipt_policy(first_format)
