"""Two browser contexts as two devices of one user: turns appear live,
deletions remove the text at once and for good, abandoned turns are marked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Service
from tests.browser.pages import DESKTOP, Api, Device

LIVE_SECONDS = 1.0


@pytest.fixture
def devices(browser: Any, service: Service) -> Iterator[tuple[Device, Device]]:
    a = Device(browser, service, service.tokens["a"], DESKTOP)
    b = Device(browser, service, service.tokens["b"], DESKTOP)
    yield a, b
    problems = a.problems + b.problems
    a.close()
    b.close()
    assert not problems, problems


def test_turn_from_a_page_appears_on_b_without_reload(
    devices: tuple[Device, Device],
) -> None:
    a, b = devices
    a.page.click("#new-conversation")
    b.page.wait_for_selector("#conversation-list button", timeout=5_000)
    a.page.wait_for_selector("#conversation-list button[aria-current=true]")
    a.page.fill("#turn-question", "What is on the agenda?")
    a.page.fill("#turn-answer", "Budget review at ten.")
    a.page.click("#send-turn")
    a.status(r"^Turn .* recorded", line="action-status")
    confirmed = time.monotonic()
    b.page.wait_for_selector(
        "#turn-list li:has-text('Budget review at ten.')",
        timeout=LIVE_SECONDS * 1000,
    )
    assert time.monotonic() - confirmed < LIVE_SECONDS


def test_api_turn_and_deletion_reach_b_live_and_for_good(
    devices: tuple[Device, Device], service: Service
) -> None:
    a, b = devices
    api = Api(service, service.tokens["a"])
    try:
        conversation = api.start()
        api.put(conversation, "t1", "my secret plan", "shred it")
        confirmed = time.monotonic()
        b.turn("t1").filter(has_text="my secret plan").wait_for(
            timeout=LIVE_SECONDS * 1000
        )
        assert time.monotonic() - confirmed < LIVE_SECONDS
        api.put(conversation, "t2", "half an answer", "partial", status="failed")
        b.turn("t2").wait_for(timeout=LIVE_SECONDS * 1000)
        assert b.turn("t2").get_attribute("data-state") == "abandoned"
        assert "abandoned (failed)" in b.turn("t2").inner_text()
        # Deleted on A's page: gone from B's page at once, and after a reload.
        a.turn("t1").get_by_role("button", name="Delete turn t1").click()
        b.page.wait_for_selector(
            '#turn-list li[data-turn-id="t1"][data-state="deleted"]',
            timeout=LIVE_SECONDS * 1000,
        )
        assert "my secret plan" not in b.page.content()
        assert "shred it" not in b.page.content()
        b.page.reload()
        b.wait_synced()
        b.turn("t1").wait_for()
        assert b.turn("t1").get_attribute("data-state") == "deleted"
        html = b.page.content()
        assert "my secret plan" not in html and "shred it" not in html
        assert "half an answer" in html
    finally:
        api.close()


def test_token_is_kept_in_session_storage_only(
    devices: tuple[Device, Device], service: Service
) -> None:
    a, _ = devices
    stored = a.page.evaluate(
        "() => [document.cookie, localStorage.length,"
        " sessionStorage.getItem('turnledger.token')]"
    )
    assert stored == ["", 0, service.tokens["a"]]
    assert a.context.cookies() == []
    a.page.click("#signout")
    a.page.wait_for_selector("#signin:not([hidden])")
    assert a.page.evaluate("() => sessionStorage.length") == 0
