"""Wire models of the audit routes: the newest signed checkpoint and a turn's
inclusion proof (formats in docs/transparency.md)."""

from __future__ import annotations

from uuid import UUID

from pydantic import BaseModel, Field


class DeletionRecordHeadOut(BaseModel):
    format: str = Field(description='"turnledger-deletion-record-head/v1"')
    record_id: str = Field(description="the deletion record's id")
    entries: int = Field(description="how many destroyed keys the record held")
    head: str = Field(description="hex of the record's chained head after them")
    signature: str = Field(
        description="base64 of the Ed25519 signature, by the checkpoint's key, "
        "over the record head bound to this checkpoint's signed tree head "
        "(docs/transparency.md)"
    )


class CheckpointOut(BaseModel):
    format: str = Field(description='"turnledger-checkpoint/v1"')
    origin: str
    tree_size: int = Field(description="how many events of the log it commits to")
    root_hash: str = Field(description="hex of the Merkle tree's root")
    timestamp: str = Field(description="when it was signed (UTC, ISO 8601)")
    public_key: str = Field(description="base64 of the 32-byte Ed25519 public key")
    key_id: str
    signature: str = Field(description="base64 of the 64-byte Ed25519 signature")
    deletion_record: DeletionRecordHeadOut | None = Field(
        default=None,
        description="the deletion record's head signed with this checkpoint; "
        "null for a checkpoint taken without a record (memory store) or "
        "signed before records were",
    )


class ProvedEventOut(BaseModel):
    originator_id: UUID
    originator_version: int
    notification_id: int
    topic: str | None
    state_sha256: str = Field(description="hex SHA-256 of the stored state bytes")
    leaf_input: str = Field(description="hex of the leaf's input bytes")


class InclusionProofOut(BaseModel):
    format: str = Field(description='"turnledger-inclusion-proof/v1"')
    checkpoint: CheckpointOut
    leaf_index: int
    event: ProvedEventOut
    leaf_hash: str
    audit_path: list[str] = Field(description="RFC 6962 PATH, hex, leaf upwards")
