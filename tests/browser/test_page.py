"""The page itself: hostile turn texts stay text, the Content-Security-Policy
is strict and nothing is inlined or fetched elsewhere, the controls are
labelled and work by keyboard; screenshots of both views at two widths."""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path
from typing import Any

import httpx

from tests.browser.conftest import SCREENSHOTS, Service
from tests.browser.pages import DESKTOP, PHONE, Api, Device
from turnledger.infra.http.web_routes import WEB_ROOT

HOSTILE = [
    "<script>window.__pwned = 'script'</script>",
    "<img src=x onerror=\"window.__pwned = 'img'\">",
    "<svg onload=\"window.__pwned = 'svg'\"></svg>",
    '"><iframe srcdoc="<script>parent.__pwned = \'iframe\'</script>"></iframe>',
    "javascript:window.__pwned='link' <a href=\"javascript:alert(1)\">x</a>",
]


def test_hostile_texts_render_as_text(browser: Any, service: Service) -> None:
    api = Api(service, service.tokens["a"])
    conversation = api.start()
    for n, text in enumerate(HOSTILE):
        api.put(conversation, f"h{n}", text, text)
    device = Device(browser, service, service.tokens["b"], DESKTOP)
    try:
        page = device.page
        for n, text in enumerate(HOSTILE):
            shown = device.turn(f"h{n}").locator(".question .text")
            shown.wait_for()
            assert shown.text_content() == text
        page.click("#tab-inspector")
        page.select_option("#inspector-conversation", conversation)
        page.click("#show-window")
        device.status(r"^Window of", line="inspector-status")
        body = page.locator("#window-body").text_content() or ""
        assert all(text.replace('"', '\\"') in body for text in HOSTILE)
        page.wait_for_timeout(300)
        found = page.evaluate(
            "() => [window.__pwned ?? null,"
            " document.querySelectorAll('main img, main svg, main iframe, main a,"
            " main script').length]"
        )
        assert found == [None, 0]
        assert not device.problems, device.problems
    finally:
        device.close()
        api.close()


def test_strict_content_security_policy_and_nothing_inline(service: Service) -> None:
    page = httpx.get(f"{service.url}/app/")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "unsafe" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(f"{service.url}/app/../pyproject.toml").status_code == 404
    assert httpx.get(f"{service.url}/app/js/../../app.py").status_code == 404
    html = page.text
    for script in re.findall(r"<script\b[^>]*>(.*?)</script>", html, re.S):
        assert script.strip() == "", "inline script"
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    assert "style=" not in html
    shipped = [
        p.read_text()
        for p in WEB_ROOT.rglob("*")
        if p.suffix in {".html", ".js", ".css"}
    ]
    for text in shipped:
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), (
            "an outside URL"
        )
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text
        assert not re.search(r"localStorage\s*[.\[]|document\.cookie", text)


def test_controls_are_labelled_and_work_by_keyboard(
    browser: Any, service: Service
) -> None:
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    try:
        page.goto(f"{service.url}/app/")
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll('input, select, textarea')]
                .filter((c) => !document.querySelector(`label[for="${c.id}"]`))
                .map((c) => c.id || c.outerHTML)"""
        )
        assert unlabelled == []
        page.get_by_label("Device token").focus()
        page.keyboard.type(service.tokens["a"])
        page.keyboard.press("Enter")
        page.locator("#main:not([hidden])").wait_for()
        page.locator("#new-conversation").focus()
        page.keyboard.press("Enter")
        page.locator("#conversation-list button").wait_for()
        page.get_by_label("Question", exact=True).focus()
        page.keyboard.type("typed by keyboard")
        page.keyboard.press("Tab")
        page.keyboard.type("an answer")
        for _ in range(2):  # status, send
            page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.id") == "send-turn"
        page.keyboard.press("Enter")
        page.locator("#turn-list li", has_text="typed by keyboard").wait_for()
        page.locator("#tab-inspector").focus()
        page.keyboard.press("Enter")
        page.locator("#inspector-view:not([hidden])").wait_for()
        page.get_by_label("Policy").select_option("count")
        page.get_by_role("button", name="Show window").press("Enter")
        page.locator("#window-turns tr").first.wait_for()
    finally:
        context.close()


def png_width(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int(struct.unpack(">I", data[16:20])[0])


def test_screenshots_of_both_views(browser: Any, service: Service) -> None:
    """Saved under build/screenshots (TURNLEDGER_TEST_SCREENSHOT_DIR); the
    README and docs/web.md show docs/images/web-inspector-desktop.png, a copy
    of sqlite-inspector-desktop.png."""
    api = Api(service, service.tokens["a"])
    conversation = api.start()
    api.put(conversation, "t1", "Where did we leave the budget?", "At 12,400 EUR.")
    api.put(
        conversation, "t2", "Draft the email to Ana.", "Hi Ana, ...", status="stopped"
    )
    api.put(conversation, "t3", "My account number is 1234", "Noted.")
    api.put(conversation, "t4", "Summarise the plan", "1. Review 2. Approve 3. Send")
    api.delete(conversation, ["t3"])
    asked = {"question": "What is next?", "model": "m", "max_bytes": 4096}
    window = api.window(conversation, asked)
    receipt = api.put(
        conversation,
        "t5",
        "What is next?",
        "Send the email.",
        window={
            "model": "m",
            "max_bytes": 4096,
            "ledger_version": window["ledger_version"],
            "body_sha256": hashlib.sha256(window["body"].encode()).hexdigest(),
        },
    )
    api.wait_for_proof(conversation, receipt["version"])
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        device = Device(browser, service, service.tokens["b"], viewport)
        try:
            page = device.page
            device.turn("t5").wait_for()
            sync_shot = SCREENSHOTS / f"{service.store}-sync-{name}.png"
            page.screenshot(path=str(sync_shot), full_page=True)
            page.click("#tab-inspector")
            page.select_option("#inspector-conversation", conversation)
            page.select_option("#window-preset", "count")
            page.fill("#limit-max_messages", "4")
            page.click("#show-window")
            device.status(r"^Window of", line="inspector-status")
            page.select_option("#proof-turn", str(receipt["version"]))
            page.click("#verify-proof")
            page.locator('#proof-result[data-result="verified"]').wait_for()
            page.locator('#checkpoint-check[data-result="verified"]').wait_for()
            page.select_option("#receipt-turn", "t5")
            page.click("#show-receipt")
            page.locator('#stored-receipt[data-turn-id="t5"]').wait_for()
            inspector_shot = SCREENSHOTS / f"{service.store}-inspector-{name}.png"
            page.screenshot(path=str(inspector_shot), full_page=True)
            for shot in (sync_shot, inspector_shot):
                assert png_width(shot) == viewport["width"]
            assert not device.problems, device.problems
        finally:
            device.close()
    api.close()
