// When a request is sent again, and after how long: the Python client's rules
// (infra/client/retry.py, docs/client.md).
//
// - No connection could be made: nothing was sent, any call is sent again.
// - A 503 database_unavailable / purge_incomplete, a 429, or a connection that
//   broke after the request left: the work may or may not have been done, so
//   only an idempotent call (a turn id, a client key, a read) is sent again.
// - The wait is at least the answer's Retry-After, else exponential backoff.
export const DEFAULT_RETRY = {
    attempts: 6,
    initialDelay: 0.2,
    maxDelay: 10,
    maxElapsed: 60,
};
export const NO_RETRIES = { ...DEFAULT_RETRY, attempts: 1 };
const RETRY_CODES = new Set(["database_unavailable", "purge_incomplete"]);
/** Retry-After in seconds (the service sends seconds, never a date). */
export function retryAfterSeconds(header) {
    if (header === null || header.trim() === "")
        return null;
    const seconds = Number(header);
    return Number.isFinite(seconds) && seconds >= 0 ? seconds : null;
}
/** The retry state of one call. */
export class Attempts {
    policy;
    idempotent;
    sent = 0;
    waited = 0;
    constructor(policy, idempotent) {
        this.policy = policy;
        this.idempotent = idempotent;
    }
    /** Seconds to wait before sending again, or null: this answer is final. */
    afterResponse(status, code, retryAfter) {
        this.sent += 1;
        if (!this.idempotent || (status !== 429 && status !== 503))
            return null;
        if (status === 503 && (code === null || !RETRY_CODES.has(code)))
            return null;
        return this.nextWait(retryAfter);
    }
    /** Seconds to wait after a network error, or null: give up. `neverSent`:
     * the connection could not be made, so the request did not leave. */
    afterNetworkError(neverSent) {
        this.sent += 1;
        if (!neverSent && !this.idempotent)
            return null;
        return this.nextWait(null);
    }
    get count() {
        return this.sent;
    }
    nextWait(atLeast) {
        const { attempts, initialDelay, maxDelay, maxElapsed } = this.policy;
        if (this.sent >= attempts)
            return null;
        const backoff = Math.min(maxDelay, initialDelay * 2 ** (this.sent - 1));
        const wait = Math.max(backoff, atLeast ?? 0);
        if (this.waited + wait > maxElapsed)
            return null;
        this.waited += wait;
        return wait;
    }
}
