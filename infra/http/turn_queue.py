"""Turn writes of one service process gathered on its event loop and handed
to the write pool in groups.

Each turn write used to take its own worker thread: a hop from the event
loop, its own token lookup, its own call into the group committer, a wake-up
when its batch had committed and a hop back. Under load that was about 27
context switches a request, and a third of the service's CPU time was the
kernel's. Here requests queue as the event loop receives them; the write
thread takes the whole queue as one group, looks up every token of the
group at once (`DeviceRegistry.authenticate_many`) and writes every
authenticated turn with one `Conversations.record_turns` call (shared
transactions, each turn refused or recorded on its own), hands the outcomes
back to the event loop and takes the queue again, until it finds it empty.
A lone request is sent at once, as before: a group forms only from requests
that arrive while another group is being written. The thread takes the next
group itself rather than waiting for the event loop to hand it over: that
hand-over was a fifth of each group's cycle (docs/benchmarks.md, issue 12).

One group at a time, not two: with a second slot, a request arriving while
a group was being written went on alone, as a transaction of its own, and
kept the rest waiting behind it (8 devices: 1,220-1,350 turns/s with two
slots against 1,530-1,680 with one, alternating runs).

Each request still gets its own outcome: its device, receipt and position,
or the error that refused it (an unknown token, a conflict), raised to its
own route. A failure of the whole group (the database is down) is every
request's error.

On PostgreSQL the token lookup is not repeated for every group. The store
checks each write's device in the write's own transaction (the write
function counts the group's devices that are not revoked, in the statement
that writes: `TurnRequest.credential`), so this process keeps the devices
of tokens it has looked up and writes with them directly; a device revoked
since then has its write refused by that check, and its token is looked up
again next time. A token not kept (new, unknown, or forgotten) is looked up
as before. This is stricter than a lookup ahead of the write, which a
revocation committed in between would not stop, and saves a round trip and
the lookup's CPU on every group (docs/benchmarks.md, issue 12).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any, cast

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


@dataclass(frozen=True, slots=True)
class _Queued:
    token: str | None
    request_for: RequestFor
    future: asyncio.Future[Written]


class TurnWriteQueue:
    def __init__(
        self,
        registry: DeviceRegistry,
        ledger: Conversations,
        reads: ReadRouter,
        executor: Callable[[], Executor],
        *,
        max_group: int = 64,
    ) -> None:
        """`max_group` is the group committer's own batch limit."""
        self._registry = registry
        self._ledger = ledger
        self._reads = reads
        self._executor = executor
        self._max_group = max_group
        self._lock = threading.Lock()
        self._queued: list[_Queued] = []  # under the lock
        self._writing = False  # under the lock: a writer is draining the queue
        # Only the one thread draining the queue touches this.
        self._known: OrderedDict[bytes, Device] = OrderedDict()

    async def write(self, token: str | None, request_for: RequestFor) -> Written:
        """Authenticate `token` and write the turn `request_for` makes for
        its device; raises what refused it. Call from the event loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Written] = loop.create_future()
        with self._lock:
            self._queued.append(_Queued(token, request_for, future))
            start = not self._writing
            self._writing = True
        if start:
            try:
                self._executor().submit(self._drain, loop)
            except RuntimeError as error:  # the pool is shut down: stopping
                with self._lock:
                    group, self._queued, self._writing = self._queued, [], False
                _settle(group, error)
        return await future

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """On a pool thread: write groups until the queue is empty, each
        group's outcomes handed to the event loop as soon as it is written."""
        while True:
            with self._lock:
                group = self._queued[: self._max_group]
                del self._queued[: self._max_group]
                if not group:
                    self._writing = False
                    return
            outcomes: list[Written | Exception] | Exception
            try:
                outcomes = self._write(group)
            except Exception as error:  # the whole group's: the database is down
                outcomes = error
            try:
                loop.call_soon_threadsafe(_deliver, group, outcomes)
            except RuntimeError:  # the loop is closed: nobody waits any more
                with self._lock:
                    self._queued.clear()
                    self._writing = False
                return

    def _write(self, group: Sequence[_Queued]) -> list[Written | Exception]:
        """On a pool thread: the group's tokens, then its turns."""
        checked = self._ledger.checks_credentials
        digests: list[bytes | None] = []
        if checked:
            digests = [token_digest(q.token) if q.token else None for q in group]
            devices = self._devices(group, digests)
        else:
            devices = self._registry.authenticate_many([q.token for q in group])
        outcomes: list[Written | Exception | None] = [None] * len(group)
        writes: list[tuple[int, Device, TurnRequest]] = []
        for index, (queued, device) in enumerate(zip(group, devices, strict=True)):
            if isinstance(device, Exception):
                outcomes[index] = device
                continue
            try:
                request = queued.request_for(device)
            except Exception as error:  # malformed parts: this request's error
                outcomes[index] = error
                continue
            if checked:
                request = replace(request, credential=device.device_id)
            writes.append((index, device, request))
        receipts = (
            self._ledger.record_turns([request for _, _, request in writes])
            if writes
            else []
        )
        at = self._reads.primary_position()
        for (index, device, _), receipt in zip(writes, receipts, strict=True):
            if checked and isinstance(receipt, CredentialRevokedError):
                digest = digests[index]
                if digest is not None:
                    self._known.pop(digest, None)
            outcomes[index] = (
                receipt if isinstance(receipt, Exception) else (device, receipt, at)
            )
        return _filled(outcomes)

    def _devices(
        self, group: Sequence[_Queued], digests: Sequence[bytes | None]
    ) -> list[Device | UnauthenticatedError]:
        """Each request's device: kept, or looked up (and then kept)."""
        devices: list[Device | UnauthenticatedError | None] = []
        for digest in digests:
            device = None
            if digest is not None:
                device = self._known.get(digest)
                if device is not None:
                    self._known.move_to_end(digest)
            devices.append(device)
        missing = [index for index, device in enumerate(devices) if device is None]
        if missing:
            found = self._registry.authenticate_many([group[i].token for i in missing])
            for index, device in zip(missing, found, strict=True):
                devices[index] = device
                digest = digests[index]
                if isinstance(device, Device) and digest is not None:
                    self._known[digest] = device
                    if len(self._known) > KEPT_DEVICES:
                        self._known.popitem(last=False)
        return cast(list[Device | UnauthenticatedError], devices)  # all filled


def _deliver(
    group: Sequence[_Queued], outcomes: list[Written | Exception] | Exception
) -> None:
    """On the event loop: each request's outcome, or the group's error."""
    if isinstance(outcomes, Exception):
        _settle(group, outcomes)
        return
    for queued, outcome in zip(group, outcomes, strict=True):
        _settle([queued], outcome)


def _filled(outcomes: list[Written | Exception | None]) -> list[Written | Exception]:
    assert all(outcome is not None for outcome in outcomes)
    return cast(list[Written | Exception], outcomes)


def _settle(group: Sequence[_Queued], outcome: Any) -> None:
    """Hand each request of `group` its outcome (a request whose client went
    away meanwhile has a cancelled future: nobody waits for it)."""
    for queued in group:
        if queued.future.done():
            continue
        if isinstance(outcome, BaseException):
            queued.future.set_exception(outcome)
        else:
            queued.future.set_result(outcome)
