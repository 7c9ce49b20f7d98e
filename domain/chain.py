"""Tamper evidence: each conversation's events form a SHA-256 hash chain.

The chain is computed over what is stored, byte for byte, not over decoded
objects. Every stored event's state is compact JSON whose last two keys are
added here when the event is written::

    {...the event's fields...,"previous_digest":"<64 hex>","digest":"<64 hex>"}

``digest`` is SHA-256 over a header naming the row (originator id, version,
topic) followed by every stored byte that precedes the digest's own hex, so it
covers the event's fields and its link to the previous event. ``previous_digest``
is the digest of the event before it in the same conversation (``GENESIS`` for
version 1). A verifier therefore needs nothing but the raw rows: no decoding,
no keys, so the chain still verifies after deletion has destroyed turn keys.

Events written since the second release use a binary envelope instead of
plain JSON (`encode_envelope`): sealed text is stored as raw bytes, not as
base64 inside JSON, and the two digests as 32 raw bytes each at fixed offsets::

    b"\x00TL\x01" | previous digest (32) | digest (32) | timestamp (8) |
    class version (1) | blob count (1) | per blob: field index (1), length (4) |
    blobs | JSON rest

Its ``digest`` is SHA-256 over a header naming the row (tag v2) followed by
every stored byte except the digest's own 32. Both formats verify from the raw
row alone.

What the chain shows: a changed byte anywhere in an event (its own digest no
longer matches), a removed or inserted event (a version gap, and the next
event's link no longer matches), reordered or renumbered events and events
moved between conversations (the header binds the id and version). What it
cannot show alone: removal of a conversation's newest events, since nothing
after them commits to them; the read side's conversation rows, signed
checkpoints and earlier audit reports are the anchors for that (see docs/audit.md).
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from eventsourcing.persistence import StoredEvent

CHAIN_FORMAT = 2
GENESIS = "0" * 64
"""The `previous_digest` of a conversation's first event."""

_HEADER_TAG = b"turnledger/chain/v1\n"
_ENVELOPE_TAG = b"turnledger/chain/v2\n"
ENVELOPE_MAGIC = b"\x00TL\x01"
# Bytes fields an envelope may carry, by index (append only: stored rows name
# their fields by position in this tuple).
BLOB_FIELDS = (
    "sealed_question",
    "sealed_answer",
    "sealed_system",
    "sealed_summary",
    "sealed_parts",
)
_PREVIOUS_SLICE = slice(4, 36)
_DIGEST_SLICE = slice(36, 68)
_TIMESTAMP_SLICE = slice(68, 76)
_CLASS_VERSION_AT = 76
_BLOB_COUNT_AT = 77
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PREVIOUS_KEY = b',"previous_digest":"'
_DIGEST_KEY = b'","digest":"'
_END = b'"}'
_HEX = re.compile(rb"[0-9a-f]{64}")
# Byte length of the sealed suffix: ,"previous_digest":"<64>","digest":"<64>"}
_SUFFIX_LENGTH = len(_PREVIOUS_KEY) + 64 + len(_DIGEST_KEY) + 64 + len(_END)


class ChainFormatError(ValueError):
    """Raised when stored bytes do not end in a well-formed chain seal."""


@dataclass(frozen=True, slots=True)
class ChainLink:
    """What one stored event says about itself and what its bytes hash to."""

    previous_digest: str
    recorded_digest: str
    computed_digest: str

    @property
    def intact(self) -> bool:
        return self.recorded_digest == self.computed_digest


def _header(originator_id: UUID | str, version: int, topic: str) -> bytes:
    identifier = (
        originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
    )
    return b"".join(
        (
            _HEADER_TAG,
            identifier.bytes,
            version.to_bytes(8, "big", signed=True),
            topic.encode("utf-8"),
            b"\n",
        )
    )


def seal_state(
    *,
    originator_id: UUID | str,
    version: int,
    topic: str,
    state: bytes,
    previous_digest: str,
) -> tuple[bytes, str]:
    """Append the chain keys to compact JSON `state`; return (sealed, digest)."""
    if not _HEX.fullmatch(previous_digest.encode("ascii")):
        raise ChainFormatError("previous_digest must be 64 lowercase hex digits")
    if not state.startswith(b"{") or not state.endswith(b"}"):
        raise ChainFormatError("only a JSON object state can be sealed")
    separator = b"" if state == b"{}" else b","
    prefix = b"".join(
        (
            state[:-1],
            separator + _PREVIOUS_KEY[1:],
            previous_digest.encode("ascii"),
            _DIGEST_KEY,
        )
    )
    digest = hashlib.sha256(_header(originator_id, version, topic) + prefix).hexdigest()
    return prefix + digest.encode("ascii") + _END, digest


def read_link(stored: StoredEvent) -> ChainLink:
    """The link a raw stored event records, and the digest its bytes hash to."""
    return read_link_parts(
        originator_id=stored.originator_id,
        version=stored.originator_version,
        topic=stored.topic,
        state=stored.state,
    )


def read_link_parts(
    *, originator_id: UUID | str, version: int, topic: str, state: bytes
) -> ChainLink:
    identifier = (
        originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
    )
    return ChainLink(*raw_link(identifier.bytes, version, topic, state))


_PREVIOUS_AT = len(_PREVIOUS_KEY)
_DIGEST_KEY_AT = _PREVIOUS_AT + 64
_DIGEST_AT = _DIGEST_KEY_AT + len(_DIGEST_KEY)
_EMPTY_OBJECT_PREVIOUS_KEY = b"{" + _PREVIOUS_KEY[1:]


def raw_link(
    identity: bytes, version: int, topic: str, state: bytes
) -> tuple[str, str, str]:
    """(previous, recorded, computed) digests of one stored row, as hex text.

    The audit's inner loop: `identity` is the originator id's 16 bytes. No
    hex validation is needed: a recorded digest that is not hex can never
    equal a computed one, nor a previous digest the one before it.
    """
    if isinstance(state, str):  # a hand-edited SQLite row may come back as TEXT
        state = state.encode("utf-8")
    if state[:4] == ENVELOPE_MAGIC:
        return _envelope_link(identity, version, topic, state)
    length = len(state)
    base = length - _SUFFIX_LENGTH
    if (
        base < 0
        or state[length - 2 :] != _END
        or state[base + _DIGEST_KEY_AT : base + _DIGEST_AT] != _DIGEST_KEY
        or (
            state[base : base + _PREVIOUS_AT] != _PREVIOUS_KEY
            and state[base : base + _PREVIOUS_AT] != _EMPTY_OBJECT_PREVIOUS_KEY
        )
    ):
        raise ChainFormatError("stored state does not end in a chain seal")
    digest = hashlib.sha256(
        b"".join(
            (
                _HEADER_TAG,
                identity,
                version.to_bytes(8, "big", signed=True),
                topic.encode("utf-8"),
                b"\n",
            )
        )
    )
    digest.update(memoryview(state)[: length - 64 - len(_END)])
    return (
        state[base + _PREVIOUS_AT : base + _DIGEST_KEY_AT].decode("latin-1"),
        state[base + _DIGEST_AT : length - 2].decode("latin-1"),
        digest.hexdigest(),
    )


# The verifying side's fast path (infra/service_layer/audit.py) checks a row without
# slicing its digests out: these name where the seal's parts sit.
SEAL_SUFFIX_LENGTH = _SUFFIX_LENGTH
"""Bytes a JSON seal takes at the end of a state (its keys and two digests)."""
SEAL_PREVIOUS_KEY = _PREVIOUS_KEY
"""What a sealed JSON state holds `SEAL_SUFFIX_LENGTH` bytes from its end."""
SEAL_DIGEST_KEY = _DIGEST_KEY
SEAL_END = _END
SEAL_DIGEST_COVERS = -(64 + len(_END))
"""A JSON seal's digest covers the state up to here (a negative index)."""
ENVELOPE_PREVIOUS_AT = _PREVIOUS_SLICE.start
ENVELOPE_DIGEST_AT = _DIGEST_SLICE.start
ENVELOPE_DIGEST_END = _DIGEST_SLICE.stop
ENVELOPE_MIN_LENGTH = _BLOB_COUNT_AT + 1
"""The shortest envelope `raw_link` accepts."""


def digest_prefixes(identity: bytes) -> tuple[bytes, bytes]:
    """The constant start of every digest input of one conversation's rows.

    (JSON seal, envelope): each is followed by the version (8 bytes, signed
    big-endian), the topic's UTF-8 and a newline, then the covered bytes.
    """
    return _HEADER_TAG + identity, _ENVELOPE_TAG + identity


def _envelope_digest(
    identity: bytes, version: int, topic: str, state: bytes | bytearray
) -> bytes:
    digest = hashlib.sha256(
        b"".join(
            (
                _ENVELOPE_TAG,
                identity,
                version.to_bytes(8, "big", signed=True),
                topic.encode("utf-8"),
                b"\n",
            )
        )
    )
    view = memoryview(state)
    digest.update(view[: _DIGEST_SLICE.start])
    digest.update(view[_DIGEST_SLICE.stop :])
    return digest.digest()


def _envelope_link(
    identity: bytes, version: int, topic: str, state: bytes
) -> tuple[str, str, str]:
    if len(state) < _BLOB_COUNT_AT + 1:
        raise ChainFormatError("stored envelope is too short")
    return (
        state[_PREVIOUS_SLICE].hex(),
        state[_DIGEST_SLICE].hex(),
        _envelope_digest(identity, version, topic, state).hex(),
    )


@dataclass(frozen=True, slots=True)
class Envelope:
    """A stored event's parts: chain link, timestamp, raw blobs and JSON rest."""

    previous_digest: str
    digest: str
    timestamp: datetime
    blobs: dict[str, bytes]
    json: bytes
    class_version: int = 1


def encode_envelope(
    *,
    originator_id: UUID,
    version: int,
    topic: str,
    previous_digest: str,
    timestamp: datetime,
    blobs: dict[str, bytes],
    json: bytes,
    class_version: int = 1,
) -> tuple[bytes, str]:
    """The sealed stored state of one event, and its digest (hex)."""
    if not _HEX.fullmatch(previous_digest.encode("ascii")):
        raise ChainFormatError("previous_digest must be 64 lowercase hex digits")
    if not json.startswith(b"{") or not json.endswith(b"}"):
        raise ChainFormatError("the envelope's rest must be a JSON object")
    micros = (timestamp - _EPOCH) // timedelta(microseconds=1)
    head = [
        ENVELOPE_MAGIC,
        bytes.fromhex(previous_digest),
        bytes(32),  # the digest's place, filled in below
        struct.pack(">q", micros),
        struct.pack(">BB", class_version, len(blobs)),
    ]
    for name, blob in blobs.items():
        head.append(struct.pack(">BI", BLOB_FIELDS.index(name), len(blob)))
    state = bytearray(b"".join([*head, *blobs.values(), json]))
    digest = _envelope_digest(originator_id.bytes, version, topic, state)
    state[_DIGEST_SLICE] = digest
    return bytes(state), digest.hex()


def decode_envelope(state: bytes) -> Envelope:
    """The parts of an enveloped state (ChainFormatError if it is malformed)."""
    try:
        if state[:4] != ENVELOPE_MAGIC:
            raise ChainFormatError("not an envelope")
        (micros,) = struct.unpack(">q", state[_TIMESTAMP_SLICE])
        class_version = state[_CLASS_VERSION_AT]
        count = state[_BLOB_COUNT_AT]
        at = _BLOB_COUNT_AT + 1
        sizes = []
        for _ in range(count):
            index, size = struct.unpack(">BI", state[at : at + 5])
            sizes.append((BLOB_FIELDS[index], size))
            at += 5
        blobs = {}
        for name, size in sizes:
            blobs[name] = state[at : at + size]
            if len(blobs[name]) != size:
                raise ChainFormatError("a blob runs past the end of the envelope")
            at += size
    except (struct.error, IndexError) as error:
        raise ChainFormatError(f"malformed envelope: {error}") from None
    return Envelope(
        previous_digest=state[_PREVIOUS_SLICE].hex(),
        digest=state[_DIGEST_SLICE].hex(),
        timestamp=_EPOCH + timedelta(microseconds=micros),
        blobs=blobs,
        json=state[at:],
        class_version=class_version,
    )
