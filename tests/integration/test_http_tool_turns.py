"""PUT turn with parts; history and sync return them; bad parts are a 422."""

from __future__ import annotations

import base64
import json

import pytest

from tests.integration import test_http_api as base
from tests.integration.test_http_api import JSON, Api, turn_url
from tests.tool_pairing import pairing_problems

# The same fixture: a service with one conversation holding a text-only turn.
api = base.api

PNG = b"\x89PNG\r\n\x1a\n"
PARTS = [
    {
        "kind": "attachment",
        "media_type": "image/png",
        "byte_size": len(PNG),
        "data": base64.b64encode(PNG).decode(),
    },
    {"kind": "assistant_text", "text": "Looking it up."},
    {
        "kind": "tool_call",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Paris"}',
    },
    {"kind": "tool_result", "call_id": "call_1", "content": "18C", "is_error": False},
]


def without_nulls(parts: list[dict[str, object]]) -> list[dict[str, object]]:
    """Optional fields a part does not use are shown as null."""
    return [{k: v for k, v in part.items() if v is not None} for part in parts]


TURN = {"question": "Weather?", "answer": "18C in Paris.", "parts": PARTS}


def test_a_turn_with_parts_is_recorded_read_back_and_synced(api: Api) -> None:
    put = api.http.put(turn_url(api), headers=api.auth, json=TURN)
    assert put.status_code == 200, put.text
    again = api.http.put(turn_url(api), headers=api.auth, json=TURN)
    assert again.json() == put.json()
    items = api.http.get(
        f"/v1/conversations/{api.conversation}/turns", headers=api.auth
    ).json()["items"]
    assert items[0]["parts"] == []  # the text-only turn of the fixture
    assert without_nulls(items[1]["parts"]) == PARTS
    assert (items[1]["question"], items[1]["answer"]) == ("Weather?", "18C in Paris.")
    changes = api.http.get("/v1/sync", headers=api.auth).json()["changes"]
    recorded = [c for c in changes if c["kind"] == "turn_recorded"]
    assert without_nulls(recorded[-1]["parts"]) == PARTS
    window = api.http.post(
        f"/v1/conversations/{api.conversation}/window",
        headers=api.auth,
        json={
            "question": "And now?",
            "model": "m",
            "policy": {"wire_format": "anthropic-messages", "max_bytes": 50_000},
        },
    ).json()
    assert window["kept_turn_ids"] == ["t1", "t2"]
    assert pairing_problems("anthropic-messages", window["body"].encode()) == []
    assert "tool_use" in window["body"]


def test_a_stopped_turn_may_end_mid_tool_and_is_never_sent(api: Api) -> None:
    stopped = {
        "question": "Weather?",
        "status": "stopped",
        "parts": PARTS[:3],
    }
    put = api.http.put(turn_url(api, "t3"), headers=api.auth, json=stopped)
    assert put.status_code == 200, put.text
    window = api.http.post(
        f"/v1/conversations/{api.conversation}/window",
        headers=api.auth,
        json={"question": "And now?", "model": "m", "max_bytes": 50_000},
    ).json()
    assert window["kept_turn_ids"] == ["t1"] and "call_1" not in window["body"]


BAD_PARTS = [
    ("invalid_request", [{"kind": "video", "text": "x"}]),
    ("invalid_request", [{"kind": "tool_call", "call_id": "c", "name": "f"}]),
    ("invalid_request", [{"kind": "tool_result", "call_id": "c", "content": 5}]),
    ("invalid_input", PARTS[1:3]),  # a confirmed turn's call without a result
    ("invalid_input", [{**PARTS[2], "arguments": "{not json"}]),
    ("invalid_input", [{**PARTS[0], "data": "***"}]),
    ("invalid_input", [{**PARTS[0], "byte_size": 99}]),
    ("invalid_input", [PARTS[1], PARTS[0]]),  # attachments come first
    # Arguments no body can carry: a lone surrogate escape; nesting past the
    # parser's recursion (2,000 deep: the fixture's request limit is 16 KiB).
    ("invalid_input", [{**PARTS[2], "arguments": '{"x":"\\ud800"}'}, PARTS[3]]),
    (
        "invalid_input",
        [{**PARTS[2], "arguments": "[" * 2_000 + "]" * 2_000}, PARTS[3]],
    ),
]


@pytest.mark.parametrize(("code", "parts"), BAD_PARTS)
def test_bad_parts_are_a_422_and_write_nothing(
    api: Api, code: str, parts: list[object]
) -> None:
    before = api.head()
    body = json.dumps({"question": "q", "answer": "a", "parts": parts})
    response = api.http.put(turn_url(api), headers={**api.auth, **JSON}, content=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == code
    assert api.head() == before


@pytest.mark.parametrize(
    ("parts", "field"),
    [
        ([PARTS[0], PARTS[1], PARTS[2]], "parts"),  # the call has no result
        ([PARTS[0], PARTS[3]], "parts[1]"),  # a result answering no call
        ([PARTS[0], {**PARTS[2], "arguments": "[]"}, PARTS[3]], "parts[1].arguments"),
    ],
)
def test_a_bad_part_is_named_as_the_client_sent_it(
    api: Api, parts: list[object], field: str
) -> None:
    before = api.head()
    response = api.http.put(
        turn_url(api),
        headers=api.auth,
        json={"question": "q", "answer": "a", "parts": parts},
    )
    assert response.status_code == 422, response.text
    assert f"invalid {field}:" in response.json()["error"]["message"]
    assert api.head() == before
