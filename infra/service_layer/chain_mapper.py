"""The chain's seam with the library: the mapper that stores events in the
chained envelope (turnledger.domain.chain), the event store that links each
new event to the stored one before it, and the cache of recent digests.

Events are never changed after they are created: the link is an argument of
the mapping (`ChainSealingMapper.seal`), worked out by the event store as it
stores the events, and decoding builds each event from its whole state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import (
    AggregateRecorder,
    EventStore,
    Mapper,
    Notification,
    Recording,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import get_topic

from turnledger.domain.chain import (
    BLOB_FIELDS,
    ENVELOPE_MAGIC,
    GENESIS,
    ChainFormatError,
    decode_envelope,
    encode_envelope,
    read_link,
)

Event = DomainEventProtocol[UUID]
# What a save also gives the recorder once its events' digests are known (the
# read-side rows name each conversation's head digest): new keyword arguments.
WithDigests = Callable[[Sequence[Event], Mapping[UUID, list[str]]], Mapping[str, Any]]


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
        self.put_many([(originator_id, version, digest)])

    def put_many(self, digests: Sequence[tuple[UUID, int, str]]) -> None:
        """Remember each (conversation, version, digest), under one lock."""
        with self._lock:
            for originator_id, version, digest in digests:
                self._digests[(originator_id, version)] = digest
                self._digests.move_to_end((originator_id, version))
            while len(self._digests) > self._capacity:
                self._digests.popitem(last=False)


class ChainSealingMapper(Mapper[UUID]):
    """Stores events in the chained binary envelope; reads both formats.

    `seal` maps a new event with the digest of the stored event before it
    (its link). Fields holding bytes go into the envelope raw; optional fields
    at their default (None) are left out and read back as the default. Events
    of the first release (JSON, base64 text) are decoded as they were stored.
    """

    def seal(
        self, domain_event: Event, previous_digest: str
    ) -> tuple[StoredEvent, str]:
        """The stored form of a new event linked to `previous_digest`, and
        the digest it is stored with."""
        if self.cipher is not None or self.compressor is not None:
            raise ChainFormatError(
                "the hash chain is computed over the stored bytes; the ledger seals "
                "turn text itself, so no library cipher or compressor is configured"
            )
        event_state: dict[str, Any] = dict(vars(domain_event))
        # A decoded event carries the link it was stored with: never stored.
        event_state.pop("previous_digest", None)
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
        topic = get_topic(cls)
        sealed, digest = encode_envelope(
            originator_id=originator_id,
            version=originator_version,
            topic=topic,
            previous_digest=previous_digest,
            timestamp=timestamp,
            blobs=blobs,
            json=self.transcoder.encode(event_state),
            class_version=getattr(cls, "class_version", 1),
        )
        stored = StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=topic,
            state=sealed,
        )
        return stored, digest

    def to_domain_event(self, stored_event: StoredEvent) -> Event:
        state = stored_event.state
        if state[:4] != ENVELOPE_MAGIC:
            return super().to_domain_event(stored_event)
        envelope = decode_envelope(state)
        event_state: dict[str, Any] = self.transcoder.decode(envelope.json)
        if envelope.class_version > 1:
            # The library upcasts by the state's "class_version" key; the
            # envelope keeps it in its header.
            event_state["class_version"] = envelope.class_version
        event_state.update(envelope.blobs)
        event_state["timestamp"] = envelope.timestamp
        event_state["previous_digest"] = envelope.previous_digest
        event_state["digest"] = envelope.digest
        # The library builds the event (id type, upcasting) from the whole
        # state, decoded here: nothing is set on the event afterwards.
        builder = Mapper[UUID](transcoder=_Decoded(event_state))
        return builder.to_domain_event(
            StoredEvent(
                originator_id=stored_event.originator_id,
                originator_version=stored_event.originator_version,
                topic=stored_event.topic,
                state=b"",
            )
        )


class _Decoded(Transcoder):
    """A transcoder that hands over a state already decoded (from an envelope)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError("only for decoding one envelope")

    def decode(self, data: bytes) -> Any:
        return self.state


class ChainedEventStore(EventStore[UUID]):
    """The library's event store, storing each new event chained: linked to
    the digest of the stored event before it in its conversation.

    The predecessor's digest is the one it was stored with: the head a caller
    names (`heads`, from the read side), remembered if this process stored
    it, else read from the stored row, never taken from an aggregate.
    """

    mapper: ChainSealingMapper

    def __init__(self, mapper: ChainSealingMapper, recorder: AggregateRecorder) -> None:
        super().__init__(mapper=mapper, recorder=recorder)
        self.recent = RecentDigests()

    def stored_digest(self, originator_id: UUID, version: int) -> str:
        """The digest the event at `version` was stored with (GENESIS before 1)."""
        if version < 1:
            return GENESIS
        remembered = self.recent.get(originator_id, version)
        if remembered is not None:
            return remembered
        rows = self.recorder.select_events(originator_id, gt=version - 1, lte=version)
        if not rows:
            # The predecessor is not stored: saving this event will fail the
            # version check, so any link will do; the genesis keeps it well-formed.
            return GENESIS
        return read_link(rows[0]).recorded_digest

    def put(
        self,
        domain_events: Sequence[Event],
        *,
        heads: Mapping[UUID, tuple[int, str]] | None = None,
        with_digests: WithDigests | None = None,
        **kwargs: Any,
    ) -> list[Recording[UUID]]:
        """Store the events chained. `heads`: (version, digest) of stored
        events the caller knows; `with_digests`: more for the recorder, made
        from the events' digests."""
        links: dict[UUID, tuple[int, str]] = {}
        digests: dict[UUID, list[str]] = {}
        stored_events = []
        for domain_event in domain_events:
            originator_id = domain_event.originator_id
            version = domain_event.originator_version
            link = links.get(originator_id)
            if link is None and heads is not None:
                link = heads.get(originator_id)
            previous = (
                link[1]
                if link is not None and link[0] == version - 1
                else self.stored_digest(originator_id, version - 1)
            )
            stored, digest = self.mapper.seal(domain_event, previous)
            stored_events.append(stored)
            links[originator_id] = (version, digest)
            digests.setdefault(originator_id, []).append(digest)
        if with_digests is not None:
            kwargs.update(with_digests(domain_events, digests))
        notification_ids = self.recorder.insert_events(stored_events, **kwargs)
        self.recent.put_many(
            [(originator_id, *link) for originator_id, link in links.items()]
        )
        if not notification_ids:
            return []
        return [
            Recording(
                domain_event,
                Notification(
                    originator_id=stored.originator_id,
                    originator_version=stored.originator_version,
                    topic=stored.topic,
                    state=stored.state,
                    id=notification_id,
                ),
            )
            for domain_event, stored, notification_id in zip(
                domain_events, stored_events, notification_ids, strict=True
            )
        ]
