// The signed-in device: its token lives in this tab's sessionStorage (never a
// cookie, never localStorage), its copy of the user's conversations in memory.

import { Client, type Change } from "../src/client.js";
import { follow, LocalCopy, MemoryCursorStore, pull } from "../src/sync.js";

const TOKEN_KEY = "turnledger.token";
const LONG_POLL_SECONDS = 25;

export type Listener = () => void;

export class Session {
  readonly client: Client;
  readonly copy = new LocalCopy();
  private readonly stop = new AbortController();
  private readonly listeners: Listener[] = [];
  lastError: string | null = null;
  synced = false;

  constructor(token: string) {
    this.client = new Client("", token);
  }

  static stored(): string | null {
    return window.sessionStorage.getItem(TOKEN_KEY);
  }

  static remember(token: string): void {
    window.sessionStorage.setItem(TOKEN_KEY, token);
  }

  static forget(): void {
    window.sessionStorage.removeItem(TOKEN_KEY);
  }

  onChange(listener: Listener): void {
    this.listeners.push(listener);
  }

  /** Checks the token with one read, then follows the feed from the start. */
  async start(): Promise<void> {
    const cursor = new MemoryCursorStore();
    const handle = (changes: Change[]) => this.applied(changes);
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

  close(): void {
    this.stop.abort();
  }

  private applied(changes: Change[]): void {
    this.copy.apply(changes);
    this.lastError = null;
    this.notify();
  }

  notify(): void {
    for (const listener of this.listeners) listener();
  }
}
