"""Turn writes of one service process, posted from its event loop to the
ledger's one batching layer (the group committer,
`infra/service_layer/group_commit.py`) and answered on the event loop.

A turn write takes no thread of its own: the route posts it and awaits a
future (no hop to a worker thread and back per request: with one, a third of
the service's CPU time was the kernel's, about 27 context switches a
request). The group committer queues it with every other caller's writes.
When a batch must start and no thread caller waits to lead it, the service's
write thread leads: a lone request is sent at once, and the requests that
arrive while a batch is written form the next one, which the same thread
takes as soon as it is done (one batch at a time: docs/benchmarks.md,
issue 12). For each batch this module is called twice on the leading
thread: `requests` looks up every token of the batch's requests at once
(`DeviceRegistry.authenticate_many`) and makes their turns, and `deliver`
hands all their outcomes to the event loop with one call.

Each request gets its own outcome: its device, receipt and position, or the
error that refused it (an unknown token, a conflict), raised to its own
route. A failure of the whole batch (the database is down) is every
request's error.

On PostgreSQL the token lookup is not repeated for every batch. The store
checks each write's device in the write's own transaction (the write
function counts the batch's devices that are not revoked, in the statement
that writes: `TurnRequest.credential`), so this process keeps the devices
of tokens it has looked up and writes with them directly; a device revoked
since then has its write refused by that check, and its token is looked up
again next time. A token not kept (new, unknown, or forgotten) is looked up
as before. This is stricter than a lookup ahead of the write, which a
revocation committed in between would not stop, and saves a round trip and
the lookup's CPU on every batch (docs/benchmarks.md, issue 12).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any
from uuid import UUID

from turnledger.domain.errors import CredentialRevokedError, UnauthenticatedError
from turnledger.infra.devices import Device, DeviceRegistry, token_digest
from turnledger.infra.http.reads import ReadRouter
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.results import TurnReceipt, TurnRequest

# What a write hands back: the device that wrote, its receipt, and the
# primary's position after the write (for the TurnLedger-Position header).
Written = tuple[Device, TurnReceipt, int]
# Makes the ledger's request once the token's device (its owner) is known.
RequestFor = Callable[[Device], TurnRequest]
# Devices kept by token digest (a few hundred bytes each), least recently
# used dropped first.
KEPT_DEVICES = 10_000


class _Posted:
    """One request on its way: what it asks, who waits, who wrote it."""

    __slots__ = ("token", "request_for", "future", "device", "digest")

    def __init__(
        self, token: str | None, request_for: RequestFor, future: asyncio.Future[Any]
    ) -> None:
        self.token = token
        self.request_for = request_for
        self.future = future
        self.device: Device | None = None
        self.digest: bytes | None = None


class LoopTurnWrites:
    """The event loop's way to wait for the group committer (a
    `TurnDelivery` of `Conversations.posted_turns`)."""

    def __init__(
        self,
        registry: DeviceRegistry,
        ledger: Conversations,
        reads: ReadRouter,
        executor: Callable[[], Executor],
    ) -> None:
        """`executor`: the service's write thread, which leads batches."""
        self._registry = registry
        self._ledger = ledger
        self._reads = reads
        self._executor = executor
        self._posted = ledger.posted_turns(self)
        self._known: OrderedDict[bytes, Device] = OrderedDict()
        self._known_lock = threading.Lock()  # leaders may take turns

    async def write(
        self, token: str | None, conversation_id: UUID, request_for: RequestFor
    ) -> Written:
        """Authenticate `token` and write the turn `request_for` makes for
        its device, in `conversation_id`; raises what refused it. Call from
        the event loop."""
        future: asyncio.Future[Written] = asyncio.get_running_loop().create_future()
        self._posted.post(conversation_id, _Posted(token, request_for, future))
        return await future

    # The TurnDelivery, called on the thread leading a batch.

    def lend(self, lead: Callable[[], None]) -> None:
        self._executor().submit(lead)

    def requests(self, items: Sequence[_Posted]) -> list[TurnRequest | Exception]:
        """The batch's tokens, looked up at once, then its turns."""
        checked = self._ledger.checks_credentials
        if checked:
            for item in items:
                item.digest = token_digest(item.token) if item.token else None
            devices = self._devices(items)
        else:
            devices = self._registry.authenticate_many([item.token for item in items])
        made: list[TurnRequest | Exception] = []
        for item, device in zip(items, devices, strict=True):
            if isinstance(device, Exception):
                made.append(device)
                continue
            item.device = device
            try:
                request = item.request_for(device)
            except Exception as error:  # malformed parts: this request's error
                made.append(error)
                continue
            if checked:
                request = replace(request, credential=device.device_id)
            made.append(request)
        return made

    def deliver(
        self, items: Sequence[_Posted], outcomes: Sequence[TurnReceipt | Exception]
    ) -> None:
        """Each request's outcome, handed to its event loop in one call."""
        results: list[Written | Exception] | Exception
        try:
            at = self._reads.primary_position()
        except Exception as error:  # the whole batch's: the database is down
            results = error
        else:
            results = [
                self._written(item, outcome, at)
                for item, outcome in zip(items, outcomes, strict=True)
            ]
        loops: dict[asyncio.AbstractEventLoop, list[int]] = {}
        for index, item in enumerate(items):
            loops.setdefault(item.future.get_loop(), []).append(index)
        for loop, places in loops.items():
            # A closed loop raises RuntimeError: nobody waits any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, items, results, places)

    def _written(
        self, item: _Posted, outcome: TurnReceipt | Exception, at: int
    ) -> Written | Exception:
        if isinstance(outcome, Exception):
            if isinstance(outcome, CredentialRevokedError) and item.digest:
                with self._known_lock:
                    self._known.pop(item.digest, None)
            return outcome
        assert item.device is not None  # it wrote
        return item.device, outcome, at

    def _devices(self, items: Sequence[_Posted]) -> list[Device | UnauthenticatedError]:
        """Each request's device: kept, or looked up (and then kept)."""
        devices: list[Device | UnauthenticatedError | None] = []
        with self._known_lock:
            for item in items:
                device = None
                if item.digest is not None:
                    device = self._known.get(item.digest)
                    if device is not None:
                        self._known.move_to_end(item.digest)
                devices.append(device)
        missing = [index for index, device in enumerate(devices) if device is None]
        if missing:
            found = self._registry.authenticate_many([items[i].token for i in missing])
            with self._known_lock:
                for index, device in zip(missing, found, strict=True):
                    devices[index] = device
                    digest = items[index].digest
                    if isinstance(device, Device) and digest is not None:
                        self._known[digest] = device
                        if len(self._known) > KEPT_DEVICES:
                            self._known.popitem(last=False)
        return [device for device in devices if device is not None]  # all filled


def _settle(
    items: Sequence[_Posted],
    results: list[Written | Exception] | Exception,
    places: Sequence[int],
) -> None:
    """On the event loop: each request's outcome (a request whose client went
    away meanwhile has a cancelled future: nobody waits for it)."""
    for place in places:
        future = items[place].future
        if future.done():
            continue
        outcome = results if isinstance(results, Exception) else results[place]
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
