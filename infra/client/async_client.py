"""`AsyncClient`: the HTTP API over an asyncio httpx client.

The same `calls` and the same retry policy as `Client`; only the transport,
the sleeping and the awaiting differ.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from uuid import UUID

import httpx

from turnledger.domain.parts import TurnParts
from turnledger.infra.client import calls
from turnledger.infra.client.calls import Call, TurnStatusName
from turnledger.infra.client.cursors import CursorStore
from turnledger.infra.client.retry import Attempts, RetryPolicy
from turnledger.infra.client.sync_client import (
    DEFAULT_TIMEOUT,
    auth_headers,
    request_options,
    with_position,
)
from turnledger.infra.client.sync_loop import Change, SyncStep
from turnledger.infra.wire.schemas import (
    ConversationCreatedOut,
    ConversationListOut,
    ConversationOut,
    DeletionOut,
    DeviceIssuedOut,
    DeviceListOut,
    DeviceOut,
    HistoryPageOut,
    SyncOut,
    TurnReceiptOut,
    WindowOut,
)
from turnledger.infra.wire.status import (
    POSITION_HEADER,
    FoldOut,
    FoldStatusOut,
    HealthOut,
    PurgeStateOut,
    ReadyOut,
)
from turnledger.projections.policy import WindowPolicy

T = TypeVar("T")

Handler = Callable[[Sequence[Change]], Awaitable[None] | None]


class AsyncClient:
    """A device's view of the service, for asyncio applications."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._timeout = timeout
        self._owned = http is None
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self._base_url = base_url.rstrip("/")
        self._headers = auth_headers(token)
        self.position: str | None = None
        """The last `TurnLedger-Position` the service sent, sent back with every
        request: reads served by a replica then include this client's writes."""

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self, call: Call[T]) -> T:
        attempts = Attempts(self.retry, idempotent=call.idempotent)
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    self._base_url + call.path,
                    headers=with_position(self._headers, self.position),
                    **request_options(call, self._timeout),
                )
            except httpx.TransportError as error:
                wait = attempts.after_error(error)
            else:
                self.position = response.headers.get(POSITION_HEADER, self.position)
                retry_in = attempts.after_response(response)
                if retry_in is None:
                    return call.result(response)
                wait = retry_in
            await asyncio.sleep(wait)

    # Service ------------------------------------------------------------------

    async def health(self) -> HealthOut:
        return await self._run(calls.health())

    async def ready(self) -> ReadyOut:
        return await self._run(calls.ready())

    async def purge_status(self) -> PurgeStateOut:
        return await self._run(calls.purge_status())

    # Conversations --------------------------------------------------------------

    async def start_conversation(
        self, *, client_key: str | None = None
    ) -> ConversationCreatedOut:
        return await self._run(calls.start_conversation(client_key))

    async def list_conversations(self) -> ConversationListOut:
        return await self._run(calls.list_conversations())

    async def get_conversation(self, conversation_id: UUID) -> ConversationOut:
        return await self._run(calls.get_conversation(conversation_id))

    async def get_history(
        self, conversation_id: UUID, *, offset: int = 0, limit: int = 50
    ) -> HistoryPageOut:
        return await self._run(
            calls.get_history(conversation_id, offset=offset, limit=limit)
        )

    async def put_turn(
        self,
        conversation_id: UUID,
        turn_id: str,
        *,
        question: str | None = None,
        answer: str = "",
        parts: TurnParts | None = None,
        status: TurnStatusName = "confirmed",
        expected_version: int | None = None,
    ) -> TurnReceiptOut:
        return await self._run(
            calls.put_turn(
                conversation_id,
                turn_id,
                question=question,
                answer=answer,
                parts=parts,
                status=status,
                expected_version=expected_version,
            )
        )

    async def project_window(
        self,
        conversation_id: UUID,
        *,
        question: str,
        model: str,
        system: str = "",
        max_bytes: int | None = None,
        policy: WindowPolicy | None = None,
        tokenizer: str | None = None,
    ) -> WindowOut:
        return await self._run(
            calls.project_window(
                conversation_id,
                question=question,
                model=model,
                system=system,
                max_bytes=max_bytes,
                policy=policy,
                tokenizer=tokenizer,
            )
        )

    async def delete_history(
        self,
        conversation_id: UUID,
        *,
        turn_ids: list[str] | None = None,
        expected_version: int | None = None,
    ) -> DeletionOut:
        return await self._run(
            calls.delete_history(
                conversation_id, turn_ids=turn_ids, expected_version=expected_version
            )
        )

    async def record_fold(
        self,
        conversation_id: UUID,
        *,
        covers_through_turn_id: str,
        summary: str,
        summarized_version: int,
        fold_id: str | None = None,
        expected_version: int | None = None,
    ) -> FoldOut:
        return await self._run(
            calls.record_fold(
                conversation_id,
                covers_through_turn_id=covers_through_turn_id,
                summary=summary,
                summarized_version=summarized_version,
                fold_id=fold_id,
                expected_version=expected_version,
            )
        )

    async def get_fold(
        self, conversation_id: UUID, *, threshold_tokens: int | None = None
    ) -> FoldStatusOut:
        return await self._run(
            calls.get_fold(conversation_id, threshold_tokens=threshold_tokens)
        )

    async def export(self) -> list[dict[str, Any]]:
        return await self._run(calls.export())

    # Sync -------------------------------------------------------------------------

    async def sync(
        self, *, since: str | None = None, timeout: float = 0.0, limit: int = 100
    ) -> SyncOut:
        return await self._run(calls.sync(since=since, timeout=timeout, limit=limit))

    async def pull(
        self,
        store: CursorStore,
        handle: Handler,
        *,
        timeout: float = 0.0,
        limit: int = 100,
    ) -> int:
        """`Client.pull`; `handle` may be a coroutine function."""
        step = SyncStep(store)
        while step.wanted:
            page = await self.sync(
                since=step.cursor, timeout=step.wait(timeout), limit=limit
            )
            if page.changes:
                handled = handle(page.changes)
                if inspect.isawaitable(handled):
                    await handled
            step.done(page)
        return step.handed

    async def follow(
        self,
        store: CursorStore,
        handle: Handler,
        *,
        stop: Callable[[], bool],
        timeout: float = 25.0,
        limit: int = 100,
    ) -> None:
        """`pull` with long-polls of `timeout` seconds until `stop()` is true."""
        while not stop():
            await self.pull(store, handle, timeout=timeout, limit=limit)

    # Devices ----------------------------------------------------------------------

    async def list_devices(self) -> DeviceListOut:
        return await self._run(calls.list_devices())

    async def add_device(self, name: str) -> DeviceIssuedOut:
        return await self._run(calls.add_device(name))

    async def revoke_device(self, device_id: str) -> DeviceOut:
        return await self._run(calls.revoke_device(device_id))
