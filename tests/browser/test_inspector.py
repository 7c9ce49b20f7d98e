"""The inspector against the API: the same kept and dropped turns with the
same reasons, a byte-identical body, and the inclusion proof checked in the
browser (a real one verifies, a tampered one fails)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Service
from tests.browser.pages import DESKTOP, Api, Device

FORMATS = ["openai-chat", "anthropic-messages"]
# Presets of the page (clients/typescript/web/inspector.ts) that drop turns.
POLICIES = ["tokens", "count", "bytes", "context"]


@pytest.fixture
def api(service: Service) -> Iterator[Api]:
    client = Api(service, service.tokens["a"])
    yield client
    client.close()


@pytest.fixture
def device(browser: Any, service: Service) -> Iterator[Device]:
    signed_in = Device(browser, service, service.tokens["b"], DESKTOP)
    yield signed_in
    problems = signed_in.problems
    signed_in.close()
    assert not problems, problems


def history(api: Api) -> str:
    conversation = api.start()
    for n in range(1, 9):
        api.put(
            conversation,
            f"t{n}",
            f"Question {n}: " + "how long is a piece of string? " * n,
            f"Answer {n}: " + "twice half its length. " * n,
        )
    api.put(conversation, "stopped", "cut short", "half", status="stopped")
    api.put(conversation, "t9", "Last question", "Last answer")
    api.delete(conversation, ["t2"])
    return conversation


def open_inspector(device: Device, conversation: str) -> None:
    page = device.page
    page.click("#tab-inspector")
    page.locator(f'#inspector-conversation option[value="{conversation}"]').wait_for(
        state="attached"
    )
    page.select_option("#inspector-conversation", conversation)
    page.locator('#proof-turn option[data-turn-id="t9"]').wait_for(state="attached")


def shown_window(device: Device) -> tuple[dict[str, str], dict[str, Any], str]:
    page = device.page
    page.evaluate(
        "() => { document.getElementById('inspector-status').textContent = '' }"
    )
    page.click("#show-window")
    device.status(r"^(Window of|No window)", line="inspector-status")
    assert (page.locator("#inspector-status").text_content() or "").startswith(
        "Window of"
    ), page.locator("#inspector-status").text_content()
    rows = page.locator("#window-turns tr").all()
    states = {
        row.get_attribute("data-turn-id") or "": (
            f"{row.get_attribute('data-state')}:{row.get_attribute('data-reason')}"
        )
        for row in rows
    }
    receipt = json.loads(page.locator("#window-receipt").text_content() or "{}")
    return states, receipt, page.locator("#window-body").text_content() or ""


def test_kept_and_dropped_equal_the_api_report(device: Device, api: Api) -> None:
    conversation = history(api)
    open_inspector(device, conversation)
    for wire_format in FORMATS:
        for policy in POLICIES:
            device.page.select_option("#window-format", wire_format)
            device.page.select_option("#window-preset", policy)
            states, receipt, body = shown_window(device)
            assert receipt["policy"]["wire_format"] == wire_format
            window = api.window(
                conversation,
                {
                    "question": "What next?",
                    "system": "",
                    "model": "gpt-4o",
                    "tokenizer": "char4",
                    "policy": receipt["policy"],
                },
            )
            expected = {turn: "kept:" for turn in window["kept_turn_ids"]}
            expected.update(
                {
                    d["turn_id"]: f"dropped:{d['reason']}"
                    for d in window["report"]["dropped"]
                }
            )
            expected["t2"] = "dropped:deleted"
            expected["stopped"] = "dropped:abandoned"
            assert states == expected, (wire_format, policy)
            assert window["report"]["dropped"], f"{policy} dropped nothing"
            assert body.encode() == window["body"].encode()
            assert receipt["body_bytes"] == window["byte_length"]
            assert receipt["ledger_version"] == window["ledger_version"]
            meter = device.page.locator("#budget-bytes")
            assert meter.get_attribute("value") == str(window["byte_length"])


def test_inclusion_proof_verifies_in_the_browser_and_tampering_fails(
    device: Device, api: Api
) -> None:
    conversation = api.start()
    receipt = api.put(conversation, "t9", "prove me", "I am in the log")
    real = api.wait_for_proof(conversation, receipt["version"])
    open_inspector(device, conversation)
    page = device.page
    page.click("#refresh-checkpoint")
    size = page.locator("#checkpoint-info li[data-tree-size]")
    size.wait_for()
    assert int(size.get_attribute("data-tree-size") or 0) >= real["leaf_index"] + 1
    page.select_option("#proof-turn", str(receipt["version"]))
    page.click("#verify-proof")
    page.locator('#proof-result[data-result="verified"]').wait_for()

    def tampered(route: Any) -> None:
        proof = route.fetch().json()
        digest = proof["event"]["state_sha256"]
        proof["event"]["state_sha256"] = ("1" if digest[0] == "0" else "0") + digest[1:]
        route.fulfill(json=proof)

    page.route("**/events/*/proof", tampered)
    page.click("#verify-proof")
    result = page.locator('#proof-result[data-result="failed"]')
    result.wait_for()
    assert "do not hash to the proof's leaf" in (result.text_content() or "")
    page.unroute("**/events/*/proof")
    page.fill("#pinned-key", "B" * 43 + "=")
    page.click("#verify-proof")
    page.locator('#proof-result[data-result="failed"]').wait_for()
    page.fill("#pinned-key", real["checkpoint"]["public_key"])
    page.click("#verify-proof")
    verified = page.locator('#proof-result[data-result="verified"]')
    verified.wait_for()
    assert "(pinned)" in (verified.text_content() or "")
