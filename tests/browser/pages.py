"""Helpers for driving the web page as a device: sign in, wait for the feed,
write turns through the API as another device would."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx

from tests.browser.conftest import Service

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


class Device:
    """One browser context signed in with one device's token."""

    def __init__(
        self, browser: Any, service: Service, token: str, viewport: dict[str, int]
    ) -> None:
        self.context = browser.new_context(viewport=viewport)
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(str(error)))
        self.page.on("dialog", lambda dialog: self._dialog(dialog))
        self.page.on(
            "console",
            lambda message: (
                self.problems.append(message.text) if message.type == "error" else None
            ),
        )
        self.page.goto(f"{service.url}/app/")
        self.page.fill("#token", token)
        self.page.press("#token", "Enter")
        self.wait_synced()

    def _dialog(self, dialog: Any) -> None:
        self.problems.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    def wait_synced(self) -> None:
        self.page.wait_for_selector("#main:not([hidden])", timeout=10_000)
        self.status(r"^Live", timeout=10_000)

    def status(
        self, pattern: str, timeout: float = 5_000, line: str = "sync-status"
    ) -> None:
        """Waits until a status line of the page matches `pattern`."""
        self.page.locator(f"#{line}").filter(has_text=re.compile(pattern)).wait_for(
            timeout=timeout
        )

    def turn(self, turn_id: str) -> Any:
        return self.page.locator(f'#turn-list li[data-turn-id="{turn_id}"]')

    def close(self) -> None:
        self.context.close()


class Api:
    """The HTTP API as another device of the same user uses it."""

    def __init__(self, service: Service, token: str) -> None:
        self.http = httpx.Client(
            base_url=service.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    def start(self) -> str:
        response = self.http.post("/v1/conversations", json={})
        assert response.status_code == 201, response.text
        return str(response.json()["conversation_id"])

    def put(
        self, conversation: str, turn_id: str, question: str, answer: str, **extra: Any
    ) -> dict[str, Any]:
        response = self.http.put(
            f"/v1/conversations/{conversation}/turns/{turn_id}",
            json={"question": question, "answer": answer, **extra},
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def delete(self, conversation: str, turn_ids: list[str]) -> None:
        response = self.http.post(
            f"/v1/conversations/{conversation}/deletions", json={"turn_ids": turn_ids}
        )
        assert response.status_code == 200, response.text

    def window(self, conversation: str, request: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(
            f"/v1/conversations/{conversation}/window", json=request
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def receipt(self, conversation: str, turn_id: str) -> dict[str, Any]:
        response = self.http.get(
            f"/v1/conversations/{conversation}/turns/{turn_id}/receipt"
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def wait_for_proof(self, conversation: str, version: int) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            response = self.http.get(
                f"/v1/conversations/{conversation}/events/{version}/proof"
            )
            if response.status_code == 200:
                return dict(response.json())
            assert response.json()["error"]["code"] == "proof_unavailable"
            assert time.monotonic() < deadline, response.text
            time.sleep(0.2)

    def close(self) -> None:
        self.http.close()
