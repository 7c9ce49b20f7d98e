"""`GET /v1/sync`: every change of the caller's conversations after a cursor.

Modelled on Matrix's `/sync?since=`: the response carries the changes in log
order and the cursor to pass next time. With `timeout`, a request that finds
nothing new waits for up to that many seconds and returns as soon as one of
the user's changes is committed, by this process or any other. A service that
is stopping answers its waiting long-polls at once, with what they have, and
a long-poll whose client has gone away stops waiting at once (it no longer
counts against the device's and user's caps).
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import TypeAdapter
from starlette.types import Receive

from turnledger.domain.errors import InvalidInputError, UnauthenticatedError
from turnledger.infra.devices import Device
from turnledger.infra.http.errors import ERROR_RESPONSES
from turnledger.infra.http.reads import Source
from turnledger.infra.http.service import (
    ClientPosition,
    Service,
    current_device,
    get_service,
)
from turnledger.infra.restore import advance_served, epoch_of, mark_served
from turnledger.infra.service_layer.feed import (
    Change,
    ChangeBatch,
    ConversationStartedChange,
    HistoryDeletedChange,
    OtherChange,
    TurnRecordedChange,
)
from turnledger.infra.wire.schemas import (
    SYNC_LIMIT_MAX,
    ChangeOut,
    ConversationStartedOut,
    HistoryDeletedOut,
    OtherChangeOut,
    SyncOut,
    TurnRecordedOut,
    parts_out,
)

T = TypeVar("T")

router = APIRouter(prefix="/v1", tags=["sync"], responses=ERROR_RESPONSES)

# The schema's ceiling; the service's own (TURNLEDGER_SYNC_MAX_WAIT_SECONDS) may
# be lower, and a longer timeout is shortened to it rather than refused.
TIMEOUT_CEILING_SECONDS = 300.0

# The changes of a read, rendered once: the long-polls sharing a read share
# its JSON too, and only the cursor differs between their answers.
_CHANGES_JSON = TypeAdapter(list[ChangeOut])


@dataclass(frozen=True, slots=True)
class _Read:
    batch: ChangeBatch
    at: int
    """The WAL position the read was served at (0: no replica)."""
    changes_json: bytes
    checked: frozenset[bytes] = frozenset()
    """Token digests whose devices were looked up after the read, in its
    worker call: those of the user's long-polls waiting when it started."""
    usable: frozenset[bytes] = frozenset()
    """Those of `checked` whose device was known and not revoked then."""

    def after(self, position: int) -> _Read:
        """The changes of this read after log `position` (a later cursor's
        share of a read another long-poll started)."""
        batch = self.batch.after(position)
        if batch is self.batch:
            return self
        return _Read(batch, self.at, _render(batch.changes), self.checked, self.usable)


@router.get("/sync", response_model=SyncOut)
async def sync(
    request: Request,
    device: Annotated[Device, Depends(current_device)],
    service: Annotated[Service, Depends(get_service)],
    since: Annotated[
        str | None,
        Query(
            max_length=200,
            description="the next_cursor of the previous response; "
            "omit to start from the beginning",
        ),
    ] = None,
    timeout: Annotated[
        float,
        Query(
            ge=0,
            le=TIMEOUT_CEILING_SECONDS,
            description="seconds to wait when nothing is new (0: answer at once)",
        ),
    ] = 0.0,
    limit: Annotated[int, Query(ge=1, le=SYNC_LIMIT_MAX)] = 100,
    wal_position: ClientPosition = None,
) -> Response:
    # Well-formed requests are answered before routing (SyncReadPath), by
    # the same function; this route answers the others and documents them.
    return await answer_sync(
        service,
        device,
        SyncQuery(since, timeout, limit, wal_position),
        request.receive,
    )


@dataclass(frozen=True, slots=True)
class SyncQuery:
    since: str | None
    timeout: float
    limit: int
    wal_position: str | None


async def answer_sync(
    service: Service,
    device: Device,
    query: SyncQuery,
    receive: Receive,
    credential: bytes | None = None,
) -> Response:
    """The answer to a sync request of `device` (both ways in).

    `credential`, the digest of the token the request was sent with, says
    that the device was not looked up for this request (the short path keeps
    the device of each token it has seen): it is then looked up after each
    read, in the read's worker call, and a revoked or unknown one is refused
    before anything is answered. Without it the device was checked when the
    request came, and again after each wait (a revocation wakes the wait)."""
    user_id = device.user_id
    position, wal = (0, 0)
    epoch = epoch_of(service.ledger)  # a restore voids older cursors
    if query.since is not None:
        position, wal = service.cursors.decode_at(user_id, query.since, epoch)
    wal = max(wal, service.required_position(device, query.wal_position))
    wait = min(query.timeout, service.settings.sync_max_wait_seconds)
    limit = query.limit
    if wait > 0 and not service.signals.closing:
        with service.signals.waiting(user_id, device.device_id, credential):
            read = await _read_or_wait(
                service, device, position, wal, wait, limit, receive, credential
            )
    else:
        checked = frozenset() if credential is None else frozenset({credential})
        read = await in_thread(
            service, _pull, service, user_id, position, wal, limit, checked
        )
        await _check_device(service, device, read, credential, waited=False)
    # A SyncOut, spliced from the changes' JSON (the response_model above
    # documents it; tests/integration/test_shared_reads.py compares the two).
    if mark_served(service.ledger, read.batch.position):
        # Durable beside the deletion record before any cursor names it, so
        # that a restore to a shorter log is found (infra/restore_seen.py).
        await in_thread(service, advance_served, service.ledger, read.batch.position)
    cursor = service.cursors.encode(user_id, read.batch.position, read.at, epoch)
    body = b"".join(
        (
            b'{"changes":',
            read.changes_json,
            b',"next_cursor":',
            json.dumps(cursor).encode(),
            b',"has_more":',
            b"false" if read.batch.caught_up else b"true",
            b"}",
        )
    )
    return Response(body, media_type="application/json")


async def in_thread(
    service: Service, function: Callable[..., T], *arguments: object
) -> T:
    """`function(*arguments)` on the service's sync read threads."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        service.sync_threads(), functools.partial(function, *arguments)
    )


async def _check_device(
    service: Service,
    device: Device,
    read: _Read,
    credential: bytes | None,
    *,
    waited: bool,
) -> None:
    """Refuse the device if it is revoked (or gone) by the end of `read`:
    from the read's own lookup when it covered the device's token, else with
    a lookup of its own (without `credential`, only after a wait)."""
    if credential is not None and credential in read.checked:
        usable = credential in read.usable
    elif credential is not None or waited:
        usable = not await in_thread(
            service, service.registry.is_revoked, device.device_id
        )
    else:
        return
    if not usable:
        raise UnauthenticatedError("this device token has been revoked")


def _pull(
    service: Service,
    user_id: str,
    position: int,
    wal: int,
    limit: int,
    checked: frozenset[bytes] = frozenset(),
) -> _Read:
    """The user's changes after `position`, from a database that has replayed
    `wal` and every commit this process knows of (docs/scaling.md), rendered;
    then, after the read, which of the `checked` token digests still name a
    device that is not revoked."""

    def changes(source: Source) -> ChangeBatch:
        try:
            return source.feed.changes_since(user_id, position, limit=limit)
        except InvalidInputError:
            # A cursor past the replica's log (one it could only have got from
            # a database further ahead): the primary has every position.
            if not source.on_replica:
                raise
            return service.feed.changes_since(user_id, position, limit=limit)

    batch, at = service.reads.read(wal, changes)
    rendered = _render(batch.changes)
    usable = frozenset(service.registry.usable_digests(checked)) if checked else None
    return _Read(batch, at, rendered, checked, usable or frozenset())


def _render(changes: Sequence[Change]) -> bytes:
    return _CHANGES_JSON.dump_json([_change_out(c) for c in changes])


async def _read_or_wait(
    service: Service,
    device: Device,
    position: int,
    wal: int,
    wait: float,
    limit: int,
    receive: Receive,
    credential: bytes | None,
) -> _Read:
    """The next batch of the user's changes, waiting up to `wait` s for one.

    Wakes only for this user's changes, for a revocation of one of the user's
    devices, when the service stops, and when the client goes away (then
    whatever is returned is dropped). After each wake-up the device is
    checked again, after the read, so a device revoked while it waited is
    answered 401 and never handed a change committed after its revocation.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    waited = False
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        while True:
            # Take the wake-up event before reading, so a commit landing
            # between the read and the wait is not missed.
            woken = service.signals.current(device.user_id)
            # A wake-up comes after the commit's position is known to this
            # process, so a read on a replica waits until it has replayed it.
            # The user's other long-polls share this read (notifier.SharedReads).
            read = await _shared_read(service, device, position, wal, limit, woken)
            await _check_device(service, device, read, credential, waited=waited)
            remaining = deadline - loop.time()
            batch = read.batch
            if batch.changes or not batch.caught_up or remaining <= 0 or gone.done():
                return read
            wake = asyncio.ensure_future(woken.wait())
            try:
                await asyncio.wait(
                    (wake, gone),
                    timeout=remaining,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                wake.cancel()
            waited = True
            if service.signals.closing or gone.done():
                return read
    finally:
        gone.cancel()


async def _shared_read(
    service: Service,
    device: Device,
    position: int,
    wal: int,
    limit: int,
    woken: asyncio.Event,
) -> _Read:
    """The user's changes after `position`, read once for the long-polls of
    the user that ask at the same time: from a read of another of them in
    flight if it started at or before this cursor and holds something newer,
    else from a read exact for this one (one it may wait after)."""
    shared = service.signals.shared_reads
    # The read looks up the devices of every long-poll of the user waiting
    # now, after reading: those that join it need no lookup of their own.
    start = functools.partial(
        in_thread,
        service,
        _pull,
        service,
        device.user_id,
        position,
        wal,
        limit,
        service.signals.credentials(device.user_id),
    )
    key = (device.user_id, limit)
    read, exact = await shared.read(
        key, position=position, wal=wal, woken=woken, start=start, any_cursor=True
    )
    if exact:
        return read
    read = read.after(position)
    if read.batch.changes:
        return read
    read, _ = await shared.read(
        key, position=position, wal=wal, woken=woken, start=start
    )
    return read


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has gone away (the body is read already, so
    the next message is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _change_out(
    change: Change,
) -> ConversationStartedOut | TurnRecordedOut | HistoryDeletedOut | OtherChangeOut:
    common = {
        "conversation_id": change.conversation_id,
        "version": change.version,
        "at": change.at,
    }
    match change:
        case ConversationStartedChange():
            return ConversationStartedOut(**common)
        case TurnRecordedChange():
            return TurnRecordedOut(
                **common,
                turn_id=change.turn_id,
                status=change.status.value,
                deleted=change.deleted,
                question=change.question,
                answer=change.answer,
                parts=parts_out(change.parts),
                unreadable=change.unreadable,  # type: ignore[arg-type]
            )
        case HistoryDeletedChange():
            return HistoryDeletedOut(
                **common,
                turn_ids=list(change.turn_ids),
                whole_history=change.whole_history,
                deleted_by=change.deleted_by,
            )
        case OtherChange():
            return OtherChangeOut(**common, event_type=change.event_type)
