"""A file the user sent with the question: a reference, or small inline bytes."""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from turnledger.domain.errors import InvalidInputError
from turnledger.domain.part_checks import check_str
from turnledger.domain.text import check_text

MAX_INLINE_ATTACHMENT_BYTES = 65_536
"""Largest attachment kept inline in the turn (64 KiB); larger ones are references.

Inline bytes are sealed with the turn's key and destroyed with it, like its
text; they also count towards the turn's byte limit.
"""

_MEDIA_TYPE = re.compile(
    r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}"
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00]+")
_FILE_ID = re.compile(r"[A-Za-z0-9][^\s\x00]*")
_MAX_REFERENCE = 2048


def _check_dimension(field_name: str, value: Any) -> int | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= 100_000
    ):
        raise InvalidInputError(
            field_name, "pixels: an integer from 1 to 100000, or None"
        )
    return value


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file the user sent with the question: a reference, or small inline bytes.

    Exactly one of `uri` (https:, gs:, s3:, data is not allowed: inline it),
    `file_id` (a provider's file id, e.g. "file-abc123") or `data` (at most
    MAX_INLINE_ATTACHMENT_BYTES) is given. `byte_size` is the file's size;
    with `data` it must equal len(data). `digest` ("sha256:<64 hex>") is
    checked against `data` when both are given. `width`/`height` (pixels) let
    image tokens be counted by the providers' documented formulas; without
    them they are estimated (docs/tools.md).
    """

    media_type: str
    byte_size: int
    uri: str | None = None
    file_id: str | None = None
    data: bytes | None = field(default=None, repr=False)
    digest: str | None = None
    name: str | None = None
    width: int | None = None
    height: int | None = None

    def __post_init__(self) -> None:
        check_str(
            "attachment.media_type",
            self.media_type,
            _MEDIA_TYPE,
            "a lower-case media type such as image/png",
        )
        size = self.byte_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidInputError(
                "attachment.byte_size", "a non-negative integer (bytes)"
            )
        given = [n for n in ("uri", "file_id", "data") if getattr(self, n) is not None]
        if len(given) != 1:
            raise InvalidInputError(
                "attachment",
                "give exactly one of uri, file_id or data, not "
                + (", ".join(given) or "none"),
            )
        if self.uri is not None:
            _check_uri(self.uri)
        if self.file_id is not None:
            _check_file_id(self.file_id)
        if self.data is not None:
            _check_data(self.data, size)
        if self.digest is not None:
            _check_digest(self.digest, self.data)
        if self.name is not None:
            check_text("attachment.name", self.name)
            if len(self.name) > 255:
                raise InvalidInputError("attachment.name", "longer than 255 characters")
        _check_dimension("attachment.width", self.width)
        _check_dimension("attachment.height", self.height)
        if (self.width is None) != (self.height is None):
            raise InvalidInputError(
                "attachment.width", "give both width and height, or neither"
            )

    @property
    def inline(self) -> bool:
        return self.data is not None

    @property
    def is_image(self) -> bool:
        return self.media_type.startswith("image/")

    def data_base64(self) -> str:
        """The inline bytes as base64 (standard alphabet, padded)."""
        assert self.data is not None
        return base64.b64encode(self.data).decode("ascii")

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "kind": "attachment",
            "media_type": self.media_type,
            "byte_size": self.byte_size,
        }
        for name in ("uri", "file_id", "digest", "name", "width", "height"):
            value = getattr(self, name)
            if value is not None:
                document[name] = value
        if self.data is not None:
            document["data"] = self.data_base64()
        return document


def _check_uri(uri: str) -> None:
    check_str("attachment.uri", uri, _URI, "an absolute URI without spaces")
    if len(uri) > _MAX_REFERENCE:
        raise InvalidInputError(
            "attachment.uri", f"longer than {_MAX_REFERENCE} characters"
        )
    if uri.lower().startswith("data:"):
        raise InvalidInputError(
            "attachment.uri", "a data: URI is inline bytes: pass them as data"
        )


def _check_file_id(file_id: str) -> None:
    check_str("attachment.file_id", file_id, _FILE_ID, "a provider file id (no spaces)")
    if len(file_id) > _MAX_REFERENCE:
        raise InvalidInputError(
            "attachment.file_id", f"longer than {_MAX_REFERENCE} characters"
        )


def _check_data(data: bytes, size: int) -> None:
    if not isinstance(data, bytes):
        raise InvalidInputError(
            "attachment.data", f"expected bytes, got {type(data).__name__}"
        )
    if len(data) > MAX_INLINE_ATTACHMENT_BYTES:
        raise InvalidInputError(
            "attachment.data",
            f"{len(data)} bytes, over the inline limit of "
            f"{MAX_INLINE_ATTACHMENT_BYTES}: store the file and pass its uri",
        )
    if len(data) != size:
        raise InvalidInputError(
            "attachment.byte_size", f"is {size} but data holds {len(data)} bytes"
        )


def _check_digest(digest: str, data: bytes | None) -> None:
    check_str(
        "attachment.digest",
        digest,
        _DIGEST,
        'expected "sha256:" and 64 lower-case hex digits',
    )
    if data is not None and digest != sha256_digest(data):
        raise InvalidInputError("attachment.digest", "does not match the inline data")


def sha256_digest(data: bytes) -> str:
    """The digest form Attachment.digest takes: "sha256:<hex>"."""
    return "sha256:" + hashlib.sha256(data).hexdigest()
