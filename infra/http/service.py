"""What the routes share: the ledger, the change feed, devices, cursors, wake-ups."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Annotated
from uuid import UUID

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from turnledger.domain.application import Conversations
from turnledger.domain.feed import ConversationFeed
from turnledger.infra.devices import Device, DeviceRegistry
from turnledger.infra.http.cursor import CursorCodec
from turnledger.infra.http.notifier import UserSignals
from turnledger.infra.settings import Settings
from turnledger.infra.tokenizers import token_counter
from turnledger.projections.tokens import TokenCounter


class ConversationLocks:
    """Serialises this process's writes to one conversation.

    The ledger already survives racing writers by reloading and retrying, but
    with many devices writing to one conversation most attempts would lose the
    race; queueing them here turns that into one attempt each. Writers in other
    processes still race and are still retried by the ledger.
    """

    def __init__(self, stripes: int = 256) -> None:
        self._locks = [threading.Lock() for _ in range(stripes)]

    def __call__(self, conversation_id: UUID) -> threading.Lock:
        return self._locks[conversation_id.int % len(self._locks)]


@dataclass
class Service:
    settings: Settings
    ledger: Conversations
    registry: DeviceRegistry
    cursors: CursorCodec
    feed: ConversationFeed = field(init=False)
    signals: UserSignals = field(init=False)
    locks: ConversationLocks = field(default_factory=ConversationLocks)

    _counters: dict[str, TokenCounter] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.feed = ConversationFeed(self.ledger)
        self.signals = UserSignals(
            per_device=self.settings.http_max_long_polls_per_device,
            per_user=self.settings.http_max_long_polls_per_user,
        )

    def token_counter(self, name: str) -> TokenCounter:
        """The named counter, loaded once (tiktoken encodings take a while)."""
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = token_counter(name)
        return counter


def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


_bearer = HTTPBearer(
    auto_error=False,
    description="a device token from `turnledger device add` or POST /v1/devices",
)


def current_device(
    service: Annotated[Service, Depends(get_service)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Device:
    """The calling device; 401 for a missing, unknown or revoked token."""
    return service.registry.authenticate(
        credentials.credentials if credentials else None
    )
