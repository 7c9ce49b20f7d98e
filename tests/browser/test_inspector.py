"""The inspector against the API: the same kept and dropped turns with the
same reasons, a byte-identical body, a bar per part of the body equal to the
report's, the receipt the service stored with a turn shown as served, and the
inclusion proof checked in the browser (a real one verifies, a tampered one
fails)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import pytest

from tests.browser.conftest import Service
from tests.browser.pages import DESKTOP, Api, Device
from turnledger.infra.persistence import open_conversations
from turnledger.infra.service_layer.application import Conversations

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
    receipt = json.loads(page.locator("#window-sent").text_content() or "{}")
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
            assert shown_parts(device) == window["report"]["by_part"]
            assert sum(p["bytes"] for p in window["report"]["by_part"]) == len(
                window["body"].encode()
            )


def shown_parts(device: Device) -> list[dict[str, Any]]:
    """The page's bars by part: name, bytes and tokens, in the page's order."""
    parts = []
    for bar in device.page.locator("#window-parts [data-part]").all():
        name = bar.get_attribute("data-part")
        meter = bar.locator("meter")
        assert meter.get_attribute("value") == bar.get_attribute("data-bytes")
        label = bar.locator("label").text_content() or ""
        assert f"{bar.get_attribute('data-bytes')} bytes" in label
        parts.append(
            {
                "part": name,
                "bytes": int(bar.get_attribute("data-bytes") or -1),
                "tokens": int(bar.get_attribute("data-tokens") or -1),
            }
        )
    return parts


def test_bars_by_part_match_the_report_with_a_system_and_a_fold(
    device: Device, api: Api
) -> None:
    conversation = history(api)
    version = api.http.get(f"/v1/conversations/{conversation}").json()["version"]
    folded = api.http.post(
        f"/v1/conversations/{conversation}/folds",
        json={
            "covers_through_turn_id": "t3",
            "summary": "The user measured string; the answers were all halves.",
            "summarized_version": version,
            "fold_id": "f1",
        },
    )
    assert folded.status_code == 201, folded.text
    open_inspector(device, conversation)
    page = device.page
    page.fill("#window-system", "You answer in one sentence.")
    page.select_option("#window-preset", "default")
    _, sent, body = shown_window(device)
    window = api.window(
        conversation,
        {
            "question": "What next?",
            "system": "You answer in one sentence.",
            "model": "gpt-4o",
            "tokenizer": "char4",
            "policy": sent["policy"],
        },
    )
    assert window["fold_sent"] is True
    parts = shown_parts(device)
    assert parts == window["report"]["by_part"]
    by_name = {part["part"]: part for part in parts}
    assert all(by_name[name]["bytes"] > 0 for name in ("system", "fold", "history"))
    assert sum(part["bytes"] for part in parts) == len(body.encode())
    assert sum(part["tokens"] for part in parts) == window["estimated_tokens"]


@contextmanager
def opened_ledger(service: Service) -> Iterator[Conversations]:
    """The service's own store, opened beside it (as the CLI does)."""
    ledger = open_conversations(service.settings)
    try:
        yield ledger
    finally:
        ledger.close()


def test_the_inspector_shows_the_stored_receipt_as_the_api_serves_it(
    device: Device, api: Api, service: Service
) -> None:
    conversation = history(api)
    with opened_ledger(service) as ledger:
        window = ledger.project_window(
            "alice",
            UUID(conversation),
            question="And now?",
            system="Be brief.",
            model="gpt-4o",
            max_bytes=600,
        )
        ledger.confirm_turn(
            "alice",
            UUID(conversation),
            turn_id="t10",
            question="And now?",
            answer="Now we stop.",
            window=window,
        )
    open_inspector(device, conversation)
    page = device.page
    page.locator('#receipt-turn option[value="t10"]').wait_for(state="attached")
    page.select_option("#receipt-turn", "t10")
    page.click("#show-receipt")
    shown = page.locator('#stored-receipt[data-turn-id="t10"]')
    shown.wait_for()
    served = api.receipt(conversation, "t10")
    assert json.loads(shown.text_content() or "{}") == served
    receipt = served["receipt"]
    assert receipt["receipt_format"] == 2 and len(receipt["body_mac"]) == 64
    assert receipt["turn_ids"] == list(window.window.kept_turn_ids)
    assert receipt["ledger_version"] == window.ledger_version
    assert "t10" in (page.locator("#receipt-status").text_content() or "")
    # A turn put without its window has no receipt: the page says so.
    seen = len(device.problems)
    page.select_option("#receipt-turn", "t9")
    page.click("#show-receipt")
    device.status(r"^No stored receipt", line="receipt-status")
    # The browser logs the 404 it was answered; nothing else may go wrong.
    assert all("404" in problem for problem in device.problems[seen:])
    del device.problems[seen:]
    assert page.locator("#stored-receipt").text_content() == ""


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


def test_the_checkpoint_and_its_deletion_record_verify_in_the_browser(
    device: Device, api: Api
) -> None:
    """The checkpoint's signatures, the deletion record head's included, are
    checked by the page; a record head altered on its way fails, for the
    checkpoint shown and for a proof's checkpoint."""
    conversation = api.start()
    receipt = api.put(conversation, "t9", "prove me", "I am in the log")
    api.wait_for_proof(conversation, receipt["version"])
    open_inspector(device, conversation)
    page = device.page
    page.click("#refresh-checkpoint")
    page.locator('#checkpoint-check[data-result="verified"]').wait_for()
    assert "deletion record head" in (page.text_content("#checkpoint-check") or "")
    assert (
        page.get_attribute(
            "#checkpoint-info li[data-record-entries]", "data-record-entries"
        )
        != ""
    )

    def bump(document: dict[str, Any]) -> dict[str, Any]:
        record = document["deletion_record"]
        return {
            **document,
            "deletion_record": {**record, "entries": record["entries"] + 1},
        }

    page.route(
        "**/v1/audit/checkpoint",
        lambda route: route.fulfill(json=bump(route.fetch().json())),
    )
    page.click("#refresh-checkpoint")
    page.locator('#checkpoint-check[data-result="failed"]').wait_for()

    def tampered_proof(route: Any) -> None:
        proof = route.fetch().json()
        route.fulfill(json={**proof, "checkpoint": bump(proof["checkpoint"])})

    page.route("**/events/*/proof", tampered_proof)
    page.select_option("#proof-turn", str(receipt["version"]))
    page.click("#verify-proof")
    result = page.locator('#proof-result[data-result="failed"]')
    result.wait_for()
    assert "signature does not verify" in (result.text_content() or "")
