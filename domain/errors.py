"""Every error turnledger raises on purpose, in one tree.

    TurnLedgerError
    ├── InvalidInputError            bad argument: wrong type, malformed id, bad text
    │   ├── TurnTooLargeError        a turn's text exceeds the per-turn byte limit
    │   ├── WindowMismatchError      a window handed to confirm_turn is not this turn's
    │   └── CursorExpiredError       a sync cursor from before a restore of the store
    ├── ConversationNotFoundError    unknown conversation, or not the caller's
    ├── TurnNotFoundError            a named turn is not in the conversation
    ├── TurnConflictError            a turn id is reused for different content
    │   └── TurnDeletedError         a write or read names a turn that was deleted
    ├── VersionConflictError         the caller's expected version is stale
    ├── TextUnavailableError         sealed text whose key has been destroyed
    │   ├── TurnKeyDamagedError      a turn's stored (wrapped) key was altered: that
    │   │                            turn cannot be read, the others can
    │   └── SealMismatchError        sealed text does not open where it is read:
    │                                altered, moved, or read for another owner
    ├── DeviceNotFoundError          unknown device, or another user's
    ├── UnauthenticatedError         missing, unknown or revoked device token
    │   └── CredentialRevokedError   a write's device was revoked before it committed
    ├── FoldConflictError            a fold id is reused, or a fold would cover less
    ├── PurgeIncompleteError         a deletion is recorded but its purge must be re-run
    ├── CheckpointError              a checkpoint, signing key or proof cannot be used
    │   └── LogInconsistentError     the log does not extend a checkpoint
    │                                (infra.checkpoint)
    ├── ReadSideMismatchError        a read-side row contradicts the log
    ├── DatabaseUnavailableError     the database cannot be reached now: retry later
    ├── LongPollLimitError           a device or user has the most long-polls allowed
    ├── MasterKeyError               the master key is missing, malformed or another one
    │                                (infra.vault)
    ├── SchemaTooNewError            the store's schema is newer than this code
    │                                (infra.migrations)
    ├── DeletionRecordError          a store is behind its deletion record, or the
    │   │                            record cannot be read (infra.deletion_record)
    │   └── DeletionRecordLostError  the record is missing, altered or behind the store
    ├── ServiceError                 the HTTP client got an error it has no class for
    │                                (infra.client)
    ├── ServiceUnreachableError      the HTTP client could not reach the service on any
    │                                attempt (infra.client)
    └── WindowError                  a request window cannot be built
        ├── MandatoryInputTooLargeError     system + current question exceed max_bytes
        └── MandatoryInputOverContextError  ... or, with the reply, context_tokens

Outside the tree (none is a caller's mistake to correct):

    TokenizerUnavailableError (RuntimeError)  a bundled vocabulary is missing or altered
    ChainFormatError (ValueError)       stored bytes lack a well-formed chain seal (an
                                        audit reports it as a finding; domain.chain)
    ProofError (ValueError)             a proof asked for positions the tree does not
                                        have (domain.merkle)
    TurnIdsUnavailableError (LookupError)  a dropped span's ids were not kept and no
                                        lister was given (projections.dropped)
    PoolNotServingError (Exception)     a service pool has no working connection yet;
                                        never leaves the service (infra.http.database)

Limits and settings that break a rule raise pydantic's ValidationError
(`WindowPolicy`, `Settings`); the CLI prints it as one line naming the variable.

Each error carries the identifying data as attributes, and its message says
what was wrong and why, without quoting conversation text.
"""

from __future__ import annotations

from uuid import UUID


class TurnLedgerError(Exception):
    """Base class of every error turnledger raises on purpose."""


class InvalidInputError(TurnLedgerError, ValueError):
    """Raised when an argument has the wrong type, shape or encoding."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"invalid {field}: {reason}")


class TurnTooLargeError(InvalidInputError):
    """Raised when a turn's text is larger than the per-turn byte limit."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            "turn",
            f"its text is {size} UTF-8 bytes, over the per-turn limit of {limit} "
            "(TURNLEDGER_MAX_TURN_BYTES)",
        )


class WindowMismatchError(InvalidInputError):
    """Raised when the window passed to confirm_turn did not ask this question."""

    def __init__(self, conversation_id: UUID, reason: str) -> None:
        self.conversation_id = conversation_id
        super().__init__("window", f"cannot be kept as this turn's receipt: {reason}")


class CursorExpiredError(InvalidInputError):
    """Raised when a sync cursor was issued before the store was restored from
    an older backup and names a log position the restored log does not hold:
    the device must sync again from the beginning."""

    def __init__(self) -> None:
        # No position in the message: cursors are sealed so that nobody
        # learns how far the whole log has grown.
        super().__init__(
            "since",
            "was issued before the store was restored from an older backup: "
            "sync again from the beginning (omit 'since') and replace what "
            "this device holds",
        )


class ConversationNotFoundError(TurnLedgerError, LookupError):
    """Raised for an unknown conversation or one owned by somebody else."""

    def __init__(self, conversation_id: UUID | str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"conversation {conversation_id} not found")


class TurnNotFoundError(TurnLedgerError, LookupError):
    """Raised when a command names turns the conversation does not hold."""

    def __init__(self, conversation_id: UUID, turn_ids: list[str]) -> None:
        self.conversation_id = conversation_id
        self.turn_ids = turn_ids
        super().__init__(
            f"conversation {conversation_id} has no turn(s) {', '.join(turn_ids)}"
        )


class TurnConflictError(TurnLedgerError):
    """Raised when a turn id already holds a different turn."""

    def __init__(self, conversation_id: UUID, turn_id: str, reason: str) -> None:
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        super().__init__(f"turn {turn_id} of conversation {conversation_id}: {reason}")


class TurnDeletedError(TurnConflictError):
    """Raised when a command names a turn that the user has deleted."""

    def __init__(self, conversation_id: UUID, turn_id: str) -> None:
        super().__init__(
            conversation_id,
            turn_id,
            "was deleted by its owner; a deleted turn is never written again",
        )


class VersionConflictError(TurnLedgerError):
    """Raised when the caller's expected version is not the current one."""

    def __init__(
        self, conversation_id: UUID, expected_version: int, current_version: int
    ) -> None:
        self.conversation_id = conversation_id
        self.expected_version = expected_version
        self.current_version = current_version
        super().__init__(
            f"conversation {conversation_id} is at version {current_version}, "
            f"not {expected_version}: read the new changes and retry"
        )


class TextUnavailableError(TurnLedgerError):
    """Raised when sealed text is asked for after its key was destroyed."""

    def __init__(self, conversation_id: UUID, turn_id: str) -> None:
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        super().__init__(
            f"text of turn {turn_id} in conversation {conversation_id} "
            "cannot be read: its key has been destroyed"
        )


class TurnKeyDamagedError(TextUnavailableError):
    """Raised when turns' wrapped data keys no longer unwrap under the store's
    master key (checked when the store opens): those key rows were altered, so
    those turns' texts cannot be read; every other turn still can."""

    def __init__(self, conversation_id: UUID, turn_ids: tuple[str, ...]) -> None:
        self.conversation_id = conversation_id
        self.turn_ids = tuple(turn_ids)
        self.turn_id = self.turn_ids[0]
        TurnLedgerError.__init__(
            self,
            f"the stored key of turn(s) {', '.join(self.turn_ids)} in conversation "
            f"{conversation_id} is damaged (its key row was altered): that text "
            "cannot be read; the conversation's other turns are unaffected "
            "(`turnledger audit` locates every damaged key)",
        )


class SealMismatchError(TextUnavailableError):
    """Raised when a sealed text does not open where it is read: its bytes
    were altered, it was moved from another turn, field or conversation, or
    it is read for an owner other than the one it was sealed for (the
    read side rewritten to name another owner)."""

    def __init__(
        self, conversation_id: UUID, turn_id: str, field: str, reason: str
    ) -> None:
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        self.field = field
        self.reason = reason
        TurnLedgerError.__init__(
            self,
            f"the sealed {field} of turn {turn_id} in conversation "
            f"{conversation_id} does not open here: {reason}; nothing of it is "
            "served (`turnledger audit` reports what was changed)",
        )


class DeviceNotFoundError(TurnLedgerError, LookupError):
    """Raised for an unknown device id, or a device of another user."""

    def __init__(self, device_id: str) -> None:
        self.device_id = device_id
        super().__init__(f"device {device_id} not found")


class UnauthenticatedError(TurnLedgerError):
    """Raised when a request carries no device token, or an unknown or revoked one."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"not authenticated: {reason}")


class CredentialRevokedError(UnauthenticatedError):
    """Raised for writes whose credentials (`TurnRequest.credential`) the
    store found not all valid in their own transaction (a device revoked since
    its token was checked); nothing of that transaction is stored."""

    def __init__(self, credentials: tuple[str, ...]) -> None:
        self.credentials = credentials
        super().__init__("this device token has been revoked")


class FoldConflictError(TurnLedgerError):
    """Raised when a fold id is taken or a new fold would cover fewer turns."""

    def __init__(self, conversation_id: UUID, fold_id: str, reason: str) -> None:
        self.conversation_id = conversation_id
        self.fold_id = fold_id
        super().__init__(f"fold {fold_id} of conversation {conversation_id}: {reason}")


class PurgeIncompleteError(TurnLedgerError):
    """Raised when a deletion was recorded but destroying its keys failed."""

    def __init__(self, conversation_id: UUID) -> None:
        self.conversation_id = conversation_id
        super().__init__(
            f"the deletion in conversation {conversation_id} is recorded and its text "
            "is no longer served, but destroying its keys failed; the purge completes "
            "on the next deletion, `turnledger purge` or start-up"
        )


class CheckpointError(TurnLedgerError):
    """Raised when a checkpoint file, the audit signing key or a proof request
    cannot be used (missing, malformed, badly signed, or naming no event)."""


class ReadSideMismatchError(TurnLedgerError):
    """Raised when a conversation's read-side row does not match its log, so a
    write will not build on it (run `turnledger audit`, then `rebuild`)."""

    def __init__(self, conversation_id: UUID, version: int) -> None:
        self.conversation_id = conversation_id
        self.version = version
        super().__init__(
            f"conversation {conversation_id}: its read-side row names version "
            f"{version} with a chain digest the stored event does not have; "
            "writes refuse it until `turnledger rebuild` (audit first)"
        )


class DatabaseUnavailableError(TurnLedgerError):
    """Raised when the database cannot be reached or does not answer in time."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the database is unavailable ({reason}): retry later")


class WindowError(TurnLedgerError):
    """Raised when a request window cannot be built."""


class MandatoryInputTooLargeError(WindowError):
    """Raised when system instructions and the current question exceed max_bytes."""

    def __init__(self, required_bytes: int, max_bytes: int) -> None:
        self.required_bytes = required_bytes
        self.max_bytes = max_bytes
        super().__init__(
            f"the system instructions and current question alone serialize to "
            f"{required_bytes} bytes, over the {max_bytes}-byte budget; "
            "nothing was trimmed and nothing was changed"
        )


class MandatoryInputOverContextError(WindowError):
    """Raised when system instructions, the current question and the output
    reserve exceed the model's context (`context_tokens`)."""

    def __init__(
        self,
        *,
        input_tokens: int,
        reserved_output_tokens: int,
        context_tokens: int,
        token_counter: str,
    ) -> None:
        self.input_tokens = input_tokens
        self.reserved_output_tokens = reserved_output_tokens
        self.context_tokens = context_tokens
        self.token_counter = token_counter
        super().__init__(
            f"the system instructions and current question alone are {input_tokens} "
            f"tokens ({token_counter}); with {reserved_output_tokens} reserved for "
            f"the reply that is over the model's {context_tokens}-token context; "
            "nothing was trimmed and nothing was changed"
        )


class LongPollLimitError(TurnLedgerError):
    """Raised when a device or user already has the most long-polls allowed."""

    def __init__(self, scope: str, limit: int, setting: str) -> None:
        self.scope = scope
        self.limit = limit
        super().__init__(
            f"this {scope} already has {limit} long-polls waiting ({setting}); "
            "close one, or sync with timeout=0"
        )


class TokenizerUnavailableError(RuntimeError):
    """Raised when a bundled vocabulary is missing or does not match its hash."""
