"""The chain's seam with the library: the mapper that stores events in the
chained envelope (turnledger.domain.chain), and the cache of recent digests."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import get_topic

from turnledger.domain.chain import (
    BLOB_FIELDS,
    ENVELOPE_MAGIC,
    ChainFormatError,
    decode_envelope,
    encode_envelope,
)


class RecentDigests:
    """Digests of events this process recorded, by (conversation, version).

    A stored event never changes, so the digest it was written with is the
    right link for its successor; remembering it saves reading the row back
    on the next write to the same conversation. Bounded, thread-safe.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._digests: OrderedDict[tuple[UUID, int], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, originator_id: UUID, version: int) -> str | None:
        with self._lock:
            digest = self._digests.get((originator_id, version))
            if digest is not None:
                self._digests.move_to_end((originator_id, version))
            return digest

    def put(self, originator_id: UUID, version: int, digest: str) -> None:
        with self._lock:
            self._digests[(originator_id, version)] = digest
            self._digests.move_to_end((originator_id, version))
            while len(self._digests) > self._capacity:
                self._digests.popitem(last=False)


class ChainSealingMapper(Mapper[UUID]):
    """Stores events in the chained binary envelope; reads both formats.

    The application sets `previous_digest` on each new event just before it is
    recorded (see `Conversations.save`). Fields holding bytes go into the
    envelope raw; optional fields at their default (None) are left out and
    read back as the default. Events of the first release (JSON, base64 text)
    are decoded as they were stored.
    """

    # The application maps each new event once to learn its digest, and the
    # event store maps it again to store it: the second time is served from
    # here (keyed by the event object, which is frozen once it is sealed).
    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        sealed: dict[int, tuple[object, StoredEvent]] = self.__dict__.setdefault(
            "_sealed", {}
        )
        remembered = sealed.pop(id(domain_event), None)
        if remembered is not None and remembered[0] is domain_event:
            return remembered[1]
        stored = self._to_stored_event(domain_event)
        if getattr(domain_event, "previous_digest", None) is not None:
            if len(sealed) > 10_000:  # events mapped but never stored
                sealed.clear()
            sealed[id(domain_event)] = (domain_event, stored)
        return stored

    def _to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        event_state: dict[str, Any] = dict(vars(domain_event))
        previous_digest = event_state.pop("previous_digest", None)
        if previous_digest is None:
            return super().to_stored_event(domain_event)
        if self.cipher is not None or self.compressor is not None:
            raise ChainFormatError(
                "the hash chain is computed over the stored bytes; the ledger seals "
                "turn text itself, so no library cipher or compressor is configured"
            )
        event_state.pop("digest", None)
        originator_id = event_state.pop("originator_id")
        originator_version = event_state.pop("originator_version")
        timestamp = event_state.pop("timestamp")
        cls = type(domain_event)
        blobs = {}
        for name in BLOB_FIELDS:
            value = event_state.get(name)
            if isinstance(value, bytes):
                blobs[name] = event_state.pop(name)
        for name, value in list(event_state.items()):
            if value is None and getattr(cls, name, ...) is None:
                del event_state[name]
        class_version = getattr(cls, "class_version", 1)
        topic = get_topic(cls)
        sealed, _ = encode_envelope(
            originator_id=originator_id,
            version=originator_version,
            topic=topic,
            previous_digest=previous_digest,
            timestamp=timestamp,
            blobs=blobs,
            json=self.transcoder.encode(event_state),
            class_version=class_version,
        )
        return StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=topic,
            state=sealed,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        state = stored_event.state
        if state[:4] != ENVELOPE_MAGIC:
            return super().to_domain_event(stored_event)
        envelope = decode_envelope(state)
        rest = envelope.json
        if envelope.class_version > 1:
            # The library upcasts by the state's "class_version" key; the
            # envelope keeps it in its header, one byte instead of seventeen.
            marker = b'{"class_version":%d' % envelope.class_version
            rest = marker + (b"}" if rest == b"{}" else b"," + rest[1:])
        domain_event = super().to_domain_event(
            StoredEvent(
                originator_id=stored_event.originator_id,
                originator_version=stored_event.originator_version,
                topic=stored_event.topic,
                state=rest,
            )
        )
        # Events are frozen: the envelope's parts are set once, as decoding would.
        fields = {
            **envelope.blobs,
            "timestamp": envelope.timestamp,
            "previous_digest": envelope.previous_digest,
            "digest": envelope.digest,
        }
        for name, value in fields.items():
            object.__setattr__(domain_event, name, value)
        return domain_event
