"""A device's local copy, built only from what /v1/sync hands it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx


def pull(
    http: httpx.Client,
    since: str | None = None,
    *,
    limit: int = 1000,
    timeout: float = 0,
) -> tuple[list[dict[str, Any]], str]:
    """Every change after `since` (following has_more), and the cursor after them."""
    changes: list[dict[str, Any]] = []
    while True:
        params: dict[str, Any] = {"limit": limit, "timeout": timeout}
        if since is not None:
            params["since"] = since
        response = http.get("/v1/sync", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        changes.extend(body["changes"])
        since = body["next_cursor"]
        if not body["has_more"]:
            return changes, since


@dataclass
class Replica:
    """Conversations as a device keeps them: turns in order, purged on deletion."""

    cursor: str | None = None
    versions: dict[str, int] = field(default_factory=dict)
    turns: dict[str, dict[str, tuple[str | None, str | None]]] = field(
        default_factory=dict
    )

    def sync(self, http: httpx.Client) -> list[dict[str, Any]]:
        changes, self.cursor = pull(http, self.cursor)
        for change in changes:
            self.apply(change)
        return changes

    def apply(self, change: dict[str, Any]) -> None:
        conversation = change["conversation_id"]
        # The log hands each conversation's versions over in order, none skipped.
        assert change["version"] == self.versions.get(conversation, 0) + 1, change
        self.versions[conversation] = change["version"]
        turns = self.turns.setdefault(conversation, {})
        if change["kind"] == "turn_recorded":
            turns[change["turn_id"]] = (change["question"], change["answer"])
        elif change["kind"] == "history_deleted":
            for turn_id in change["turn_ids"]:
                turns[turn_id] = (None, None)
