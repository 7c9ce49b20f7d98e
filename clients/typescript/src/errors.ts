// Typed errors by the service's documented error codes (docs/sync.md,
// infra/wire/errors.py): every error body `{"error": {"code", "message", ...}}`
// becomes the class named for its code; a code without a class of its own is
// a ServiceError with that code.

export interface ErrorDetail {
  location: (string | number)[];
  message: string;
  type: string;
}

/** The fields of an error body, as the service sends them. */
export interface ErrorFields {
  code: string;
  message: string;
  field?: string | null;
  current_version?: number | null;
  details?: ErrorDetail[] | null;
}

/** Base of every error this client raises. */
export class TurnLedgerError extends Error {
  override name = "TurnLedgerError";
}

/** An error answer of the service: its HTTP status, code and message. */
export class ServiceError extends TurnLedgerError {
  override name = "ServiceError";
  readonly status: number;
  readonly code: string;
  readonly field: string | null;
  readonly details: ErrorDetail[] | null;
  readonly retryAfter: number | null;

  constructor(status: number, body: ErrorFields, retryAfter: number | null = null) {
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
  override name = "InvalidInputError";
}
/** 413 turn_too_large: one turn over the service's size limit. */
/** 422 cursor_expired: the cursor predates a restore of the store from an
 * older backup; sync again from the beginning and replace the local copy. */
export class CursorExpiredError extends InvalidInputError {
  override name = "CursorExpiredError";
}
export class TurnTooLargeError extends InvalidInputError {
  override name = "TurnTooLargeError";
}
/** 401 unauthenticated: a missing, unknown or revoked device token. */
export class UnauthenticatedError extends ServiceError {
  override name = "UnauthenticatedError";
}
/** 404 conversation_not_found, turn_not_found, device_not_found,
 * receipt_not_found, proof_unavailable, not_found. */
export class NotFoundError extends ServiceError {
  override name = "NotFoundError";
}
export class ConversationNotFoundError extends NotFoundError {
  override name = "ConversationNotFoundError";
}
export class TurnNotFoundError extends NotFoundError {
  override name = "TurnNotFoundError";
}
export class DeviceNotFoundError extends NotFoundError {
  override name = "DeviceNotFoundError";
}
/** 404 proof_unavailable: no checkpoint yet, or the event is newer than it. */
export class ProofUnavailableError extends NotFoundError {
  override name = "ProofUnavailableError";
}
/** 404 receipt_not_found: the turn was recorded without a window, so no
 * window receipt was stored with it. */
export class ReceiptNotFoundError extends NotFoundError {
  override name = "ReceiptNotFoundError";
}
/** 409 turn_conflict, turn_deleted, fold_conflict, log_inconsistent. */
export class ConflictError extends ServiceError {
  override name = "ConflictError";
}
export class TurnConflictError extends ConflictError {
  override name = "TurnConflictError";
}
export class TurnDeletedError extends ConflictError {
  override name = "TurnDeletedError";
}
export class FoldConflictError extends ConflictError {
  override name = "FoldConflictError";
}
/** 409 version_conflict; `currentVersion` is the conversation's version now. */
export class VersionConflictError extends ConflictError {
  override name = "VersionConflictError";
  readonly currentVersion: number | null;
  constructor(status: number, body: ErrorFields, retryAfter: number | null = null) {
    super(status, body, retryAfter);
    this.currentVersion = body.current_version ?? null;
  }
}
/** 410 text_unavailable: the turn's key was destroyed meanwhile. */
export class TextUnavailableError extends ServiceError {
  override name = "TextUnavailableError";
}
/** 410 turn_key_damaged: the turn's stored key was altered; other turns read. */
export class TurnKeyDamagedError extends TextUnavailableError {
  override name = "TurnKeyDamagedError";
}
/** 410 seal_mismatch: the text does not open here (altered, moved, or not
 * sealed for this owner); nothing of it is served. */
export class SealMismatchError extends TextUnavailableError {
  override name = "SealMismatchError";
}
/** 422 window_error: the window cannot be built under this policy. */
export class WindowError extends ServiceError {
  override name = "WindowError";
}
/** 429 too_many_long_polls. */
export class LongPollLimitError extends ServiceError {
  override name = "LongPollLimitError";
}
/** 503 database_unavailable, purge_incomplete, read_side_mismatch,
 * tokenizer_unavailable: not now; `retryAfter` says when to ask again. */
export class UnavailableError extends ServiceError {
  override name = "UnavailableError";
}
export class DatabaseUnavailableError extends UnavailableError {
  override name = "DatabaseUnavailableError";
}
export class PurgeIncompleteError extends UnavailableError {
  override name = "PurgeIncompleteError";
}

/** No connection could be made (or it broke) on every attempt allowed. */
export class ServiceUnreachableError extends TurnLedgerError {
  override name = "ServiceUnreachableError";
  readonly attempts: number;
  override readonly cause: unknown;
  constructor(attempts: number, cause: unknown) {
    super(`the service could not be reached after ${attempts} attempt(s): ${String(cause)}`);
    this.attempts = attempts;
    this.cause = cause;
  }
}

type ErrorClass = new (
  status: number,
  body: ErrorFields,
  retryAfter: number | null,
) => ServiceError;

/** Every documented code and the class it becomes. */
export const ERROR_CLASSES: Readonly<Record<string, ErrorClass>> = {
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
export function errorFromResponse(
  status: number,
  payload: unknown,
  retryAfter: number | null,
): ServiceError {
  const body = readErrorBody(payload) ?? {
    code: `http_${status}`,
    message: typeof payload === "string" ? payload.slice(0, 200) : `HTTP ${status}`,
  };
  const Kind = ERROR_CLASSES[body.code] ?? ServiceError;
  return new Kind(status, body, retryAfter);
}

function readErrorBody(payload: unknown): ErrorFields | null {
  if (typeof payload !== "object" || payload === null) return null;
  const error = (payload as { error?: unknown }).error;
  if (typeof error !== "object" || error === null) return null;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code !== "string" || typeof message !== "string") return null;
  return error as ErrorFields;
}
