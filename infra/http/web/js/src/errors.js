// Typed errors by the service's documented error codes (docs/sync.md,
// infra/wire/errors.py): every error body `{"error": {"code", "message", ...}}`
// becomes the class named for its code; a code without a class of its own is
// a ServiceError with that code.
/** Base of every error this client raises. */
export class TurnLedgerError extends Error {
    name = "TurnLedgerError";
}
/** An error answer of the service: its HTTP status, code and message. */
export class ServiceError extends TurnLedgerError {
    name = "ServiceError";
    status;
    code;
    field;
    details;
    retryAfter;
    constructor(status, body, retryAfter = null) {
        super(body.message);
        this.status = status;
        this.code = body.code;
        this.field = body.field ?? null;
        this.details = body.details ?? null;
        this.retryAfter = retryAfter;
    }
}
/** 422 invalid_input, invalid_request, malformed_json; 413 body_too_large. */
export class InvalidInputError extends ServiceError {
    name = "InvalidInputError";
}
/** 413 turn_too_large: one turn over the service's size limit. */
/** 422 cursor_expired: the cursor predates a restore of the store from an
 * older backup; sync again from the beginning and replace the local copy. */
export class CursorExpiredError extends InvalidInputError {
    name = "CursorExpiredError";
}
export class TurnTooLargeError extends InvalidInputError {
    name = "TurnTooLargeError";
}
/** 401 unauthenticated: a missing, unknown or revoked device token. */
export class UnauthenticatedError extends ServiceError {
    name = "UnauthenticatedError";
}
/** 404 conversation_not_found, turn_not_found, device_not_found,
 * receipt_not_found, proof_unavailable, not_found. */
export class NotFoundError extends ServiceError {
    name = "NotFoundError";
}
export class ConversationNotFoundError extends NotFoundError {
    name = "ConversationNotFoundError";
}
export class TurnNotFoundError extends NotFoundError {
    name = "TurnNotFoundError";
}
export class DeviceNotFoundError extends NotFoundError {
    name = "DeviceNotFoundError";
}
/** 404 proof_unavailable: no checkpoint yet, or the event is newer than it. */
export class ProofUnavailableError extends NotFoundError {
    name = "ProofUnavailableError";
}
/** 404 receipt_not_found: the turn was recorded without a window, so no
 * window receipt was stored with it. */
export class ReceiptNotFoundError extends NotFoundError {
    name = "ReceiptNotFoundError";
}
/** 409 turn_conflict, turn_deleted, fold_conflict, log_inconsistent. */
export class ConflictError extends ServiceError {
    name = "ConflictError";
}
export class TurnConflictError extends ConflictError {
    name = "TurnConflictError";
}
export class TurnDeletedError extends ConflictError {
    name = "TurnDeletedError";
}
export class FoldConflictError extends ConflictError {
    name = "FoldConflictError";
}
/** 409 version_conflict; `currentVersion` is the conversation's version now. */
export class VersionConflictError extends ConflictError {
    name = "VersionConflictError";
    currentVersion;
    constructor(status, body, retryAfter = null) {
        super(status, body, retryAfter);
        this.currentVersion = body.current_version ?? null;
    }
}
/** 410 text_unavailable: the turn's key was destroyed meanwhile. */
export class TextUnavailableError extends ServiceError {
    name = "TextUnavailableError";
}
/** 410 turn_key_damaged: the turn's stored key was altered; other turns read. */
export class TurnKeyDamagedError extends TextUnavailableError {
    name = "TurnKeyDamagedError";
}
/** 410 seal_mismatch: the text does not open here (altered, moved, or not
 * sealed for this owner); nothing of it is served. */
export class SealMismatchError extends TextUnavailableError {
    name = "SealMismatchError";
}
/** 422 window_error: the window cannot be built under this policy. */
export class WindowError extends ServiceError {
    name = "WindowError";
}
/** 429 too_many_long_polls. */
export class LongPollLimitError extends ServiceError {
    name = "LongPollLimitError";
}
/** 503 database_unavailable, purge_incomplete, read_side_mismatch,
 * tokenizer_unavailable: not now; `retryAfter` says when to ask again. */
export class UnavailableError extends ServiceError {
    name = "UnavailableError";
}
export class DatabaseUnavailableError extends UnavailableError {
    name = "DatabaseUnavailableError";
}
export class PurgeIncompleteError extends UnavailableError {
    name = "PurgeIncompleteError";
}
/** No connection could be made (or it broke) on every attempt allowed. */
export class ServiceUnreachableError extends TurnLedgerError {
    name = "ServiceUnreachableError";
    attempts;
    cause;
    constructor(attempts, cause) {
        super(`the service could not be reached after ${attempts} attempt(s): ${String(cause)}`);
        this.attempts = attempts;
        this.cause = cause;
    }
}
/** Every documented code and the class it becomes. */
export const ERROR_CLASSES = {
    turn_too_large: TurnTooLargeError,
    invalid_input: InvalidInputError,
    cursor_expired: CursorExpiredError,
    invalid_request: InvalidInputError,
    malformed_json: InvalidInputError,
    body_too_large: InvalidInputError,
    unauthenticated: UnauthenticatedError,
    not_found: NotFoundError,
    conversation_not_found: ConversationNotFoundError,
    turn_not_found: TurnNotFoundError,
    device_not_found: DeviceNotFoundError,
    proof_unavailable: ProofUnavailableError,
    receipt_not_found: ReceiptNotFoundError,
    turn_deleted: TurnDeletedError,
    turn_conflict: TurnConflictError,
    version_conflict: VersionConflictError,
    fold_conflict: FoldConflictError,
    log_inconsistent: ConflictError,
    text_unavailable: TextUnavailableError,
    turn_key_damaged: TurnKeyDamagedError,
    seal_mismatch: SealMismatchError,
    window_error: WindowError,
    too_many_long_polls: LongPollLimitError,
    database_unavailable: DatabaseUnavailableError,
    purge_incomplete: PurgeIncompleteError,
    read_side_mismatch: UnavailableError,
    tokenizer_unavailable: UnavailableError,
};
/** The error an answer stands for; a body that is not an error body still
 * gives a ServiceError (code `http_<status>`). */
export function errorFromResponse(status, payload, retryAfter) {
    const body = readErrorBody(payload) ?? {
        code: `http_${status}`,
        message: typeof payload === "string" ? payload.slice(0, 200) : `HTTP ${status}`,
    };
    const Kind = ERROR_CLASSES[body.code] ?? ServiceError;
    return new Kind(status, body, retryAfter);
}
function readErrorBody(payload) {
    if (typeof payload !== "object" || payload === null)
        return null;
    const error = payload.error;
    if (typeof error !== "object" || error === null)
        return null;
    const { code, message } = error;
    if (typeof code !== "string" || typeof message !== "string")
        return null;
    return error;
}
