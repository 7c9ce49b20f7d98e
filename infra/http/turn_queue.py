"""Turn writes of one service process gathered on its event loop and handed
to the write pool in groups.

Each turn write used to take its own worker thread: a hop from the event
loop, its own token lookup, its own call into the group committer, a wake-up
when its batch had committed and a hop back. Under load that was about 27
context switches a request, and a third of the service's CPU time was the
kernel's. Here requests queue on the event loop; whenever no group is being
written, the queue is handed to a pool thread as one group, which looks up
every token of the group at once (`DeviceRegistry.authenticate_many`) and
writes every authenticated turn with one `Conversations.record_turns` call
(shared transactions, each turn refused or recorded on its own). A lone
request is sent at once, as before: a group forms only from requests that
arrive while another group is being written.

One group at a time, not two: with a second slot, a request arriving while
a group was being written went on alone, as a transaction of its own, and
kept the rest waiting behind it (8 devices: 1,220-1,350 turns/s with two
slots against 1,530-1,680 with one, alternating runs).

Each request still gets its own outcome: its device, receipt and position,
or the error that refused it (an unknown token, a conflict), raised to its
own route. A failure of the whole group (the database is down) is every
request's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, cast

from turnledger.domain.application import Conversations
from turnledger.domain.results import TurnReceipt, TurnRequest
from turnledger.infra.devices import Device, DeviceRegistry
from turnledger.infra.http.reads import ReadRouter

# What a write hands back: the device that wrote, its receipt, and the
# primary's position after the write (for the TurnLedger-Position header).
Written = tuple[Device, TurnReceipt, int]
# Makes the ledger's request once the token's device (its owner) is known.
RequestFor = Callable[[Device], TurnRequest]


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
        self._queued: list[_Queued] = []
        self._writing = False

    async def write(self, token: str | None, request_for: RequestFor) -> Written:
        """Authenticate `token` and write the turn `request_for` makes for
        its device; raises what refused it. Call from the event loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Written] = loop.create_future()
        self._queued.append(_Queued(token, request_for, future))
        self._dispatch(loop)
        return await future

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        while self._queued and not self._writing:
            group = self._queued[: self._max_group]
            del self._queued[: self._max_group]
            try:
                written = loop.run_in_executor(self._executor(), self._write, group)
            except RuntimeError as error:  # the pool is shut down: stopping
                _settle(group, error)
                continue
            self._writing = True
            written.add_done_callback(
                lambda done, group=group: self._finished(loop, group, done)
            )

    def _finished(
        self,
        loop: asyncio.AbstractEventLoop,
        group: list[_Queued],
        done: asyncio.Future[list[Written | Exception]],
    ) -> None:
        self._writing = False
        if done.cancelled():
            _settle(group, asyncio.CancelledError())
        elif (error := done.exception()) is not None:
            _settle(group, error)
        else:
            for queued, outcome in zip(group, done.result(), strict=True):
                _settle([queued], outcome)
        self._dispatch(loop)

    def _write(self, group: Sequence[_Queued]) -> list[Written | Exception]:
        """On a pool thread: the group's tokens, then its turns."""
        devices = self._registry.authenticate_many([q.token for q in group])
        outcomes: list[Written | Exception | None] = [None] * len(group)
        writes: list[tuple[int, Device, TurnRequest]] = []
        for index, (queued, device) in enumerate(zip(group, devices, strict=True)):
            if isinstance(device, Exception):
                outcomes[index] = device
                continue
            try:
                writes.append((index, device, queued.request_for(device)))
            except Exception as error:  # malformed parts: this request's error
                outcomes[index] = error
        receipts = (
            self._ledger.record_turns([request for _, _, request in writes])
            if writes
            else []
        )
        at = self._reads.primary_position()
        for (index, device, _), receipt in zip(writes, receipts, strict=True):
            outcomes[index] = (
                receipt if isinstance(receipt, Exception) else (device, receipt, at)
            )
        return _filled(outcomes)


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
