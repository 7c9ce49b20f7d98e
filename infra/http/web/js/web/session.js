// The signed-in device: its token lives in this tab's sessionStorage (never a
// cookie, never localStorage), its copy of the user's conversations in memory.
import { Client } from "../src/client.js";
import { follow, LocalCopy, MemoryCursorStore, pull } from "../src/sync.js";
const TOKEN_KEY = "turnledger.token";
const LONG_POLL_SECONDS = 25;
export class Session {
    client;
    copy = new LocalCopy();
    stop = new AbortController();
    listeners = [];
    lastError = null;
    synced = false;
    constructor(token) {
        this.client = new Client("", token);
    }
    static stored() {
        return window.sessionStorage.getItem(TOKEN_KEY);
    }
    static remember(token) {
        window.sessionStorage.setItem(TOKEN_KEY, token);
    }
    static forget() {
        window.sessionStorage.removeItem(TOKEN_KEY);
    }
    onChange(listener) {
        this.listeners.push(listener);
    }
    /** Checks the token with one read, then follows the feed from the start. */
    async start() {
        const cursor = new MemoryCursorStore();
        const handle = (changes) => this.applied(changes);
        await pull(this.client, cursor, handle);
        this.synced = true;
        this.notify();
        void follow(this.client, cursor, handle, {
            signal: this.stop.signal,
            timeout: LONG_POLL_SECONDS,
            onError: (error) => {
                this.lastError = String(error);
                this.notify();
            },
        });
    }
    close() {
        this.stop.abort();
    }
    applied(changes) {
        this.copy.apply(changes);
        this.lastError = null;
        this.notify();
    }
    notify() {
        for (const listener of this.listeners)
            listener();
    }
}
