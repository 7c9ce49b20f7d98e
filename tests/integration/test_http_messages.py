"""HTTP error messages name what is actually wrong, and the request writes nothing."""

from __future__ import annotations

import pytest

from tests.integration import test_http_api
from tests.integration.test_http_api import JSON, Api, turn_url

api = test_http_api.api  # the same service on every store


@pytest.mark.parametrize(
    ("body", "says", "never"),
    [
        (b'{"question": "caf\xe9", "answer": "a"}', "not UTF-8", "nested"),
        (b"[" * 5_000 + b"]" * 5_000, "nested too deeply", "UTF-8"),
        (
            b'{"question": "q", "answer": "a", "expected_version": '
            + b"9" * 5000
            + b"}",
            "a number too long",
            "nested",
        ),
    ],
)
def test_an_unparsable_body_is_blamed_on_its_real_fault(
    api: Api,
    body: bytes,
    says: str,
    never: str,
) -> None:
    before = api.head()
    response = api.http.put(turn_url(api), headers={**api.auth, **JSON}, content=body)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert says in message and never not in message
    assert api.head() == before


def test_a_missing_answer_is_not_called_empty(api: Api) -> None:
    before = api.head()
    missing = api.http.put(turn_url(api), headers=api.auth, json={"question": "q"})
    assert missing.status_code == 422
    assert "answer is missing" in missing.text and "empty" not in missing.text
    empty = api.http.put(
        turn_url(api), headers=api.auth, json={"question": "q", "answer": ""}
    )
    assert empty.status_code == 422 and "must not be empty" in empty.text
    # A stopped turn may have no answer at all.
    stopped = api.http.put(
        turn_url(api), headers=api.auth, json={"question": "q", "status": "stopped"}
    )
    assert stopped.status_code == 200, stopped.text
    assert api.head() == before + 1


def test_an_empty_deletion_asks_what_to_delete(api: Api) -> None:
    url = f"/v1/conversations/{api.conversation}/deletions"
    before = api.head()
    empty = api.http.post(url, headers=api.auth, json={})
    assert empty.status_code == 422
    assert "say what to delete" in empty.text and "not both" not in empty.text
    both = api.http.post(
        url, headers=api.auth, json={"turn_ids": ["t1"], "whole_history": True}
    )
    assert both.status_code == 422 and "not both" in both.text
    assert api.head() == before


def test_a_long_poll_over_300_seconds_is_refused(api: Api) -> None:
    """docs/sync.md: the schema's ceiling, whatever the setting says."""
    over = api.http.get("/v1/sync", headers=api.auth, params={"timeout": 301})
    assert over.status_code == 422 and "timeout" in over.text
    at_once = api.http.get("/v1/sync", headers=api.auth, params={"timeout": 0})
    assert at_once.status_code == 200
