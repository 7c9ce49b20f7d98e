// The HTTP API as typed calls over `fetch` (browsers and Node 20). The types
// are the service's own, generated from its OpenAPI document (src/schema.ts);
// retries follow src/retry.ts, errors src/errors.ts.

import { errorFromResponse, ServiceUnreachableError } from "./errors.js";
import { Attempts, DEFAULT_RETRY, type RetryPolicy, retryAfterSeconds } from "./retry.js";
import type { components } from "./schema.js";

type Schemas = components["schemas"];
export type CheckpointOut = Schemas["CheckpointOut"];
export type ConversationCreatedOut = Schemas["ConversationCreatedOut"];
export type ConversationListOut = Schemas["ConversationListOut"];
export type ConversationOut = Schemas["ConversationOut"];
export type DeletionOut = Schemas["DeletionOut"];
export type DeviceIssuedOut = Schemas["DeviceIssuedOut"];
export type DeviceListOut = Schemas["DeviceListOut"];
export type DeviceOut = Schemas["DeviceOut"];
export type FoldIn = Schemas["FoldIn"];
export type FoldOut = Schemas["FoldOut"];
export type FoldStatusOut = Schemas["FoldStatusOut"];
export type HealthOut = Schemas["HealthOut"];
export type HistoryPageOut = Schemas["HistoryPageOut"];
export type InclusionProofOut = Schemas["InclusionProofOut"];
export type PurgeStateOut = Schemas["PurgeStateOut"];
export type ReadyOut = Schemas["ReadyOut"];
export type StoredReceiptOut = Schemas["StoredReceiptOut"];
export type SyncOut = Schemas["SyncOut"];
export type Change = SyncOut["changes"][number];
export type TurnIn = Schemas["TurnIn"];
export type TurnReceiptOut = Schemas["TurnReceiptOut"];
export type TurnWindowIn = Schemas["TurnWindowIn"];
export type WindowIn = Schemas["WindowIn"];
export type WindowOut = Schemas["WindowOut"];
export type WindowPolicy = Schemas["WindowPolicy"];
export type WindowReceiptOut = Schemas["WindowReceiptOut"];

/** The `window` of a turn write (`TurnIn.window`), from the window request a
 * device sent and the answer it got: the request but its question (the turn's
 * own), the answer's ledger version, and the SHA-256 of the body that was
 * sent to the model. A confirmed turn put with it keeps the window's receipt
 * (`getReceipt`), as the Python library's `confirm_turn(..., window=)` does;
 * the service projects the window again and refuses a body that differs. */
export async function windowSent(request: WindowIn, window: WindowOut): Promise<TurnWindowIn> {
  const digest = await globalThis.crypto.subtle.digest(
    "SHA-256",
    new TextEncoder().encode(window.body) as BufferSource,
  );
  const named: TurnWindowIn = {
    model: request.model,
    system: request.system ?? "",
    ledger_version: window.ledger_version,
    body_sha256: Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join(""),
  };
  if (request.max_bytes !== undefined) named.max_bytes = request.max_bytes;
  if (request.policy !== undefined) named.policy = request.policy;
  if (request.tokenizer !== undefined) named.tokenizer = request.tokenizer;
  return named;
}

/** The header that carries the log position for read-your-writes (docs/sync.md). */
export const POSITION_HEADER = "TurnLedger-Position";
// A long-poll is answered within its timeout; leave room for the round trips.
const LONG_POLL_SLACK_MS = 15_000;

export interface ClientOptions {
  retry?: RetryPolicy;
  /** ms a request may take before it is aborted (long-polls get their timeout on top) */
  timeoutMs?: number;
  fetch?: typeof fetch;
  sleep?: (seconds: number) => Promise<void>;
}

interface Call {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  body?: unknown;
  query?: Record<string, string | number | undefined>;
  idempotent?: boolean;
  expected?: number[];
  timeoutMs?: number;
  signal?: AbortSignal;
}

const defaultSleep = (seconds: number) =>
  new Promise<void>((resolve) => setTimeout(resolve, seconds * 1000));

function segment(value: string): string {
  return encodeURIComponent(value);
}

function newKey(): string {
  return globalThis.crypto.randomUUID().replaceAll("-", "");
}

/** A device's view of the API. */
export class Client {
  /** The last log position the service sent; sent back with every request. */
  position: string | null = null;
  private readonly baseUrl: string;
  private readonly retry: RetryPolicy;
  private readonly timeoutMs: number;
  private readonly fetchImpl: typeof fetch;
  private readonly sleep: (seconds: number) => Promise<void>;

  constructor(
    baseUrl: string,
    private readonly token: string,
    options: ClientOptions = {},
  ) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.retry = options.retry ?? DEFAULT_RETRY;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.sleep = options.sleep ?? defaultSleep;
  }

  health(): Promise<HealthOut> {
    return this.send({ method: "GET", path: "/v1/health" });
  }

  /** 503 is an answer here (status "unavailable"), not a failure to retry. */
  ready(): Promise<ReadyOut> {
    return this.send({ method: "GET", path: "/v1/ready", expected: [200, 503] });
  }

  /** Always keyed, so a retry names the same conversation instead of a second. */
  startConversation(clientKey: string = newKey()): Promise<ConversationCreatedOut> {
    return this.send({
      method: "POST",
      path: "/v1/conversations",
      body: { client_key: clientKey },
      expected: [201],
    });
  }

  listConversations(): Promise<ConversationListOut> {
    return this.send({ method: "GET", path: "/v1/conversations" });
  }

  getConversation(conversationId: string): Promise<ConversationOut> {
    return this.send({ method: "GET", path: conversationPath(conversationId) });
  }

  getHistory(conversationId: string, offset = 0, limit = 50): Promise<HistoryPageOut> {
    return this.send({
      method: "GET",
      path: conversationPath(conversationId, "turns"),
      query: { offset, limit },
    });
  }

  /** The turn id is the idempotency key: the same PUT again returns the first
   * receipt and writes nothing, so an unknown outcome is simply sent again. */
  putTurn(conversationId: string, turnId: string, turn: TurnIn): Promise<TurnReceiptOut> {
    return this.send({
      method: "PUT",
      path: conversationPath(conversationId, "turns", turnId),
      body: turn,
    });
  }

  projectWindow(conversationId: string, request: WindowIn): Promise<WindowOut> {
    return this.send({
      method: "POST",
      path: conversationPath(conversationId, "window"),
      body: request,
    });
  }

  /** The window receipt stored with a turn (recorded with the window its
   * answer replied to): policy, ledger version, turns sent and the body's MAC.
   * ReceiptNotFoundError when the turn was recorded without a window. */
  getReceipt(conversationId: string, turnId: string): Promise<StoredReceiptOut> {
    return this.send({
      method: "GET",
      path: conversationPath(conversationId, "turns", turnId, "receipt"),
    });
  }

  /** `turnIds` null: the whole history. Retried only without expectedVersion
   * (deleting deleted turns deletes nothing; a stale version would be a 409). */
  deleteHistory(
    conversationId: string,
    turnIds: string[] | null,
    expectedVersion?: number,
  ): Promise<DeletionOut> {
    const body =
      turnIds === null ? { whole_history: true } : { turn_ids: turnIds };
    return this.send({
      method: "POST",
      path: conversationPath(conversationId, "deletions"),
      body: expectedVersion === undefined ? body : { ...body, expected_version: expectedVersion },
      idempotent: expectedVersion === undefined,
    });
  }

  /** Not retried: a second attempt would be a 409 fold_conflict (read getFold). */
  recordFold(conversationId: string, fold: FoldIn): Promise<FoldOut> {
    return this.send({
      method: "POST",
      path: conversationPath(conversationId, "folds"),
      body: fold,
      idempotent: false,
      expected: [201],
    });
  }

  getFold(conversationId: string, thresholdTokens?: number): Promise<FoldStatusOut> {
    return this.send({
      method: "GET",
      path: conversationPath(conversationId, "fold"),
      query: { threshold_tokens: thresholdTokens },
    });
  }

  /** The changes after `since`; with `timeout` (s) a long-poll. */
  sync(
    options: { since?: string | null; timeout?: number; limit?: number; signal?: AbortSignal } = {},
  ): Promise<SyncOut> {
    const timeout = options.timeout ?? 0;
    return this.send({
      method: "GET",
      path: "/v1/sync",
      query: { since: options.since ?? undefined, timeout, limit: options.limit },
      timeoutMs: this.timeoutMs + timeout * 1000 + LONG_POLL_SLACK_MS,
      signal: options.signal,
    });
  }

  listDevices(): Promise<DeviceListOut> {
    return this.send({ method: "GET", path: "/v1/devices" });
  }

  /** Not retried: a second attempt would mint a second token. */
  addDevice(name: string): Promise<DeviceIssuedOut> {
    return this.send({
      method: "POST",
      path: "/v1/devices",
      body: { name },
      idempotent: false,
      expected: [201],
    });
  }

  revokeDevice(deviceId: string): Promise<DeviceOut> {
    return this.send({ method: "DELETE", path: `/v1/devices/${segment(deviceId)}` });
  }

  purgeStatus(): Promise<PurgeStateOut> {
    return this.send({ method: "GET", path: "/v1/purge" });
  }

  /** The newest signed checkpoint (404 proof_unavailable when there is none). */
  getCheckpoint(): Promise<CheckpointOut> {
    return this.send({ method: "GET", path: "/v1/audit/checkpoint" });
  }

  /** The inclusion proof of the event at `version` (a sync change's version). */
  getInclusionProof(conversationId: string, version: number): Promise<InclusionProofOut> {
    return this.send({
      method: "GET",
      path: conversationPath(conversationId, "events", String(version), "proof"),
    });
  }

  /** Sends `call`, retrying as src/retry.ts says; the parsed answer or the
   * error its code names. */
  async send<T>(call: Call): Promise<T> {
    const attempts = new Attempts(this.retry, call.idempotent ?? true);
    for (;;) {
      let response: Response;
      try {
        response = await this.fetchOnce(call);
      } catch (error) {
        if (call.signal?.aborted) throw error;
        const wait = attempts.afterNetworkError(neverSent(error));
        if (wait === null) throw new ServiceUnreachableError(attempts.count, error);
        await this.sleep(wait);
        continue;
      }
      this.position = response.headers.get(POSITION_HEADER) ?? this.position;
      const payload = await readPayload(response);
      if ((call.expected ?? [200]).includes(response.status)) return payload as T;
      const retryAfter = retryAfterSeconds(response.headers.get("Retry-After"));
      const error = errorFromResponse(response.status, payload, retryAfter);
      const wait = attempts.afterResponse(response.status, error.code, retryAfter);
      if (wait === null) throw error;
      await this.sleep(wait);
    }
  }

  private async fetchOnce(call: Call): Promise<Response> {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(call.query ?? {})) {
      if (value !== undefined) params.set(name, String(value));
    }
    const query = params.toString();
    // baseUrl "" sends same-origin requests (the web page).
    const target = this.baseUrl + call.path + (query ? `?${query}` : "");
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.token}`,
      Accept: "application/json",
    };
    if (call.body !== undefined) headers["Content-Type"] = "application/json";
    if (this.position !== null) headers[POSITION_HEADER] = this.position;
    const timeout = AbortSignal.timeout(call.timeoutMs ?? this.timeoutMs);
    const signal = call.signal ? AbortSignal.any([call.signal, timeout]) : timeout;
    return this.fetchImpl(target, {
      method: call.method,
      headers,
      body: call.body === undefined ? undefined : JSON.stringify(call.body),
      signal,
      credentials: "omit",
      cache: "no-store",
    });
  }
}

function conversationPath(conversationId: string, ...rest: string[]): string {
  return ["/v1/conversations", conversationId, ...rest].map((part, index) =>
    index === 0 ? part : segment(part),
  ).join("/");
}

async function readPayload(response: Response): Promise<unknown> {
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Whether a fetch error means the connection was never made (Node's undici
 * says so in `cause.code`; a browser does not say, so it counts as unknown). */
function neverSent(error: unknown): boolean {
  const cause = (error as { cause?: { code?: unknown } } | null)?.cause;
  const code = typeof cause?.code === "string" ? cause.code : "";
  return ["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"].includes(code);
}
