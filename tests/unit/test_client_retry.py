"""Which failures the client retries, after how long, and when it stops."""

from __future__ import annotations

from uuid import uuid4

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnledger.infra.client import calls
from turnledger.infra.client.errors import ServiceError
from turnledger.infra.client.retry import Attempts, RetryPolicy, ServiceUnreachableError
from turnledger.infra.client.sync_client import request_options

POLICY = RetryPolicy(attempts=4, initial_delay=0.1, max_delay=1.0, max_elapsed=10)
REQUEST = httpx.Request("PUT", "http://service/v1/x")


def _answer(
    status: int, code: str = "x", retry_after: str | None = None
) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(
        status, json={"error": {"code": code, "message": "m"}}, headers=headers
    )


def test_a_503_of_an_idempotent_call_waits_its_retry_after() -> None:
    attempts = Attempts(POLICY, idempotent=True)
    assert attempts.after_response(_answer(503, "database_unavailable", "2")) == 2.0
    assert attempts.after_response(_answer(429, "too_many_long_polls", "1")) == 1.0


def test_without_retry_after_the_waits_grow_exponentially_up_to_max_delay() -> None:
    attempts = Attempts(
        RetryPolicy(attempts=10, initial_delay=0.1, max_delay=0.5), idempotent=True
    )
    waits = [
        attempts.after_response(_answer(503, "database_unavailable")) for _ in range(5)
    ]
    assert waits == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_a_non_idempotent_call_is_not_retried_after_a_503() -> None:
    attempts = Attempts(POLICY, idempotent=False)
    assert attempts.after_response(_answer(503, "database_unavailable", "1")) is None


def test_answers_that_will_not_change_are_not_retried() -> None:
    attempts = Attempts(POLICY, idempotent=True)
    for status, code in [
        (200, "x"),
        (409, "turn_conflict"),
        (503, "read_side_mismatch"),
    ]:
        assert attempts.after_response(_answer(status, code)) is None


def test_a_refused_connection_is_retried_for_any_call() -> None:
    attempts = Attempts(POLICY, idempotent=False)
    assert attempts.after_error(httpx.ConnectError("refused", request=REQUEST)) == 0.1


def test_a_connection_lost_mid_request_is_retried_only_when_idempotent() -> None:
    lost = httpx.RemoteProtocolError("closed", request=REQUEST)
    assert Attempts(POLICY, idempotent=True).after_error(lost) == 0.1
    with pytest.raises(httpx.RemoteProtocolError):
        Attempts(POLICY, idempotent=False).after_error(lost)


@given(
    st.lists(
        st.one_of(st.none(), st.floats(min_value=0, max_value=5)),
        min_size=1,
        max_size=30,
    )
)
def test_attempts_and_total_wait_are_bounded(retry_afters: list[float | None]) -> None:
    attempts = Attempts(POLICY, idempotent=True)
    waited, sent = 0.0, 0
    for retry_after in retry_afters:
        sent += 1
        header = None if retry_after is None else str(retry_after)
        wait = attempts.after_response(_answer(503, "database_unavailable", header))
        if wait is None:
            break
        assert wait >= (retry_after or 0)
        waited += wait
    assert sent <= POLICY.attempts and waited <= POLICY.max_elapsed


def test_connection_errors_end_in_service_unreachable() -> None:
    attempts = Attempts(RetryPolicy(attempts=2, initial_delay=0), idempotent=True)
    refused = httpx.ConnectError("refused", request=REQUEST)
    assert attempts.after_error(refused) == 0
    with pytest.raises(ServiceUnreachableError) as unreachable:
        attempts.after_error(refused)
    assert unreachable.value.attempts == 2


def test_an_export_without_its_end_record_is_incomplete() -> None:
    broken = httpx.Response(200, text='{"record": "export"}\n{"record": "turn"}\n')
    with pytest.raises(ServiceError) as incomplete:
        calls.export().result(broken)
    assert incomplete.value.code == "export_incomplete"


def test_ready_answers_503_as_a_state_not_an_error() -> None:
    down = httpx.Response(
        503,
        json={
            "status": "unavailable",
            "database": "unavailable",
            "database_since": "2026-01-01T00:00:00Z",
            "reason": "no answer within 1 s",
        },
    )
    assert calls.ready().result(down).status == "unavailable"


def test_which_calls_may_be_sent_again_after_an_ambiguous_failure() -> None:
    conversation = uuid4()
    retried = [
        calls.start_conversation(None),
        calls.put_turn(
            conversation, "t1", question="q", answer="a", parts=None,
            status="confirmed", expected_version=3,
        ),
        calls.delete_history(conversation, turn_ids=["t1"], expected_version=None),
        calls.revoke_device("d1"),
        calls.get_history(conversation, offset=0, limit=5),
        calls.sync(since=None, timeout=0, limit=10),
    ]  # fmt: skip
    not_retried = [
        calls.add_device("tablet"),
        calls.record_fold(
            conversation, covers_through_turn_id="t1", summary="s",
            summarized_version=2, fold_id="f1", expected_version=None,
        ),
        calls.delete_history(conversation, turn_ids=None, expected_version=4),
    ]  # fmt: skip
    assert all(call.idempotent for call in retried)
    assert not any(call.idempotent for call in not_retried)
    # An unkeyed start is keyed by the client, so its retry names the same one.
    key = calls.start_conversation(None).json["client_key"]
    assert (
        isinstance(key, str)
        and key != calls.start_conversation(None).json["client_key"]
    )


def test_a_long_poll_gets_a_read_deadline_longer_than_its_wait() -> None:
    timeout = httpx.Timeout(30.0, connect=5.0)
    assert "timeout" not in request_options(
        calls.sync(since=None, timeout=0, limit=1), timeout
    )
    options = request_options(calls.sync(since=None, timeout=60, limit=1), timeout)
    assert options["timeout"].read > 60 and options["timeout"].connect == 5.0
