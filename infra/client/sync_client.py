"""`Client`: the HTTP API over a blocking httpx client.

Every method builds its request in `calls` and sends it through `_run`, which
applies the retry policy (`retry`); `AsyncClient` does the same with awaits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from uuid import UUID

import httpx

from turnledger.domain.parts import TurnParts
from turnledger.infra.client import calls
from turnledger.infra.client.calls import Call, TurnStatusName
from turnledger.infra.client.cursors import CursorStore
from turnledger.infra.client.retry import Attempts, RetryPolicy
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

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)


def request_options(call: Call[Any], timeout: httpx.Timeout) -> dict[str, Any]:
    """The httpx arguments of a call (shared with AsyncClient)."""
    options: dict[str, Any] = {"json": call.json, "params": call.params}
    read = timeout.read
    if call.read_timeout is not None and read is not None and call.read_timeout > read:
        # A long-poll waits longer than a read may take otherwise.
        options["timeout"] = httpx.Timeout(
            connect=timeout.connect,
            read=call.read_timeout,
            write=timeout.write,
            pool=timeout.pool,
        )
    return options


def auth_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def with_position(headers: dict[str, str], position: str | None) -> dict[str, str]:
    """The request's headers, with the last position the service sent (docs/sync.md:
    reads on a replica)."""
    return headers if position is None else {**headers, POSITION_HEADER: position}


class Client:
    """A device's view of the service: `token` is its bearer token.

    `http` lets the caller bring its own configured httpx.Client (proxies,
    TLS, a transport); it is then the caller's to close.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        http: httpx.Client | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._timeout = timeout
        self._owned = http is None
        self._http = http or httpx.Client(timeout=timeout)
        self._base_url = base_url.rstrip("/")
        self._headers = auth_headers(token)
        self.position: str | None = None
        """The last `TurnLedger-Position` the service sent, sent back with every
        request: reads served by a replica then include this client's writes."""

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        attempts = Attempts(self.retry, idempotent=call.idempotent)
        while True:
            try:
                response = self._http.request(
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
            time.sleep(wait)

    # Service ------------------------------------------------------------------

    def health(self) -> HealthOut:
        return self._run(calls.health())

    def ready(self) -> ReadyOut:
        return self._run(calls.ready())

    def purge_status(self) -> PurgeStateOut:
        return self._run(calls.purge_status())

    # Conversations --------------------------------------------------------------

    def start_conversation(
        self, *, client_key: str | None = None
    ) -> ConversationCreatedOut:
        return self._run(calls.start_conversation(client_key))

    def list_conversations(self) -> ConversationListOut:
        return self._run(calls.list_conversations())

    def get_conversation(self, conversation_id: UUID) -> ConversationOut:
        return self._run(calls.get_conversation(conversation_id))

    def get_history(
        self, conversation_id: UUID, *, offset: int = 0, limit: int = 50
    ) -> HistoryPageOut:
        return self._run(calls.get_history(conversation_id, offset=offset, limit=limit))

    def put_turn(
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
        return self._run(
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

    def project_window(
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
        return self._run(
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

    def delete_history(
        self,
        conversation_id: UUID,
        *,
        turn_ids: list[str] | None = None,
        expected_version: int | None = None,
    ) -> DeletionOut:
        return self._run(
            calls.delete_history(
                conversation_id, turn_ids=turn_ids, expected_version=expected_version
            )
        )

    def record_fold(
        self,
        conversation_id: UUID,
        *,
        covers_through_turn_id: str,
        summary: str,
        summarized_version: int,
        fold_id: str | None = None,
        expected_version: int | None = None,
    ) -> FoldOut:
        return self._run(
            calls.record_fold(
                conversation_id,
                covers_through_turn_id=covers_through_turn_id,
                summary=summary,
                summarized_version=summarized_version,
                fold_id=fold_id,
                expected_version=expected_version,
            )
        )

    def get_fold(
        self, conversation_id: UUID, *, threshold_tokens: int | None = None
    ) -> FoldStatusOut:
        return self._run(
            calls.get_fold(conversation_id, threshold_tokens=threshold_tokens)
        )

    def export(self) -> list[dict[str, Any]]:
        return self._run(calls.export())

    # Sync -------------------------------------------------------------------------

    def sync(
        self, *, since: str | None = None, timeout: float = 0.0, limit: int = 100
    ) -> SyncOut:
        return self._run(calls.sync(since=since, timeout=timeout, limit=limit))

    def pull(
        self,
        store: CursorStore,
        handle: Callable[[Sequence[Change]], None],
        *,
        timeout: float = 0.0,
        limit: int = 100,
    ) -> int:
        """Hand every change after the stored cursor to `handle`, batch by
        batch, saving the cursor after each; the number of changes handed.

        With `timeout`, waits that long for a first change if none is there."""
        step = SyncStep(store)
        while step.wanted:
            page = self.sync(since=step.cursor, timeout=step.wait(timeout), limit=limit)
            if page.changes:
                handle(page.changes)
            step.done(page)
        return step.handed

    def follow(
        self,
        store: CursorStore,
        handle: Callable[[Sequence[Change]], None],
        *,
        stop: Callable[[], bool],
        timeout: float = 25.0,
        limit: int = 100,
    ) -> None:
        """`pull` with long-polls of `timeout` seconds until `stop()` is true."""
        while not stop():
            self.pull(store, handle, timeout=timeout, limit=limit)

    # Devices ----------------------------------------------------------------------

    def list_devices(self) -> DeviceListOut:
        return self._run(calls.list_devices())

    def add_device(self, name: str) -> DeviceIssuedOut:
        return self._run(calls.add_device(name))

    def revoke_device(self, device_id: str) -> DeviceOut:
        return self._run(calls.revoke_device(device_id))
