"""A typed Python client for turnledger's HTTP API (docs/client.md).

`Client` (blocking) and `AsyncClient` (asyncio) send the same requests
(`calls`), retry the same way (`retry`), and raise the library's own
exceptions (`errors`). Needs the `client` extra (httpx).
"""

from turnledger.infra.client.async_client import AsyncClient
from turnledger.infra.client.calls import parts_of
from turnledger.infra.client.cursors import (
    CursorStore,
    FileCursorStore,
    MemoryCursorStore,
    VersionFilter,
)
from turnledger.infra.client.errors import ServiceError
from turnledger.infra.client.retry import (
    NO_RETRIES,
    RetryPolicy,
    ServiceUnreachableError,
)
from turnledger.infra.client.sync_client import Client
from turnledger.infra.client.sync_loop import Change

__all__ = [
    "NO_RETRIES",
    "AsyncClient",
    "Change",
    "Client",
    "CursorStore",
    "FileCursorStore",
    "MemoryCursorStore",
    "RetryPolicy",
    "ServiceError",
    "ServiceUnreachableError",
    "VersionFilter",
    "parts_of",
]
