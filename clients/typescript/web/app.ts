// The page's entry point: sign-in, the two views, and redrawing on changes.

import { byId } from "./dom.js";
import {
  applyPreset,
  renderInspectorChoices,
  showCheckpoint,
  showStoredReceipt,
  showWindow,
  verifyProof,
} from "./inspector.js";
import { Session } from "./session.js";
import { renderSyncView, type Selection, wireSyncControls } from "./sync_view.js";

let session: Session | null = null;
const selection: Selection = { conversationId: null };

function render(): void {
  if (session === null) return;
  renderSyncView(session, selection, select);
  renderInspectorChoices(session, selection);
}

function select(conversationId: string): void {
  selection.conversationId = conversationId;
  byId<HTMLSelectElement>("inspector-conversation").value = conversationId;
  render();
}

async function signIn(token: string): Promise<void> {
  const status = byId("signin-status");
  status.textContent = "Signing in…";
  const candidate = new Session(token);
  try {
    await candidate.start();
  } catch (error) {
    candidate.close();
    Session.forget();
    status.textContent = `Sign-in failed: ${String(error)}`;
    return;
  }
  Session.remember(token);
  session = candidate;
  session.onChange(render);
  status.textContent = "";
  byId("signin").hidden = true;
  byId("main").hidden = false;
  render();
  showView(location.hash === "#inspector" ? "inspector" : "sync");
}

function signOut(): void {
  session?.close();
  session = null;
  Session.forget();
  location.reload();
}

function showView(name: "sync" | "inspector"): void {
  byId("sync-view").hidden = name !== "sync";
  byId("inspector-view").hidden = name !== "inspector";
  byId("tab-sync").setAttribute("aria-pressed", String(name === "sync"));
  byId("tab-inspector").setAttribute("aria-pressed", String(name === "inspector"));
  if (name === "inspector" && session !== null) void showCheckpoint(session);
}

function wire(): void {
  byId<HTMLFormElement>("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = byId<HTMLInputElement>("token");
    const token = field.value.trim();
    field.value = "";
    if (token) void signIn(token);
  });
  byId("signout").addEventListener("click", signOut);
  byId("tab-sync").addEventListener("click", () => {
    history.replaceState(null, "", "#sync");
    showView("sync");
  });
  byId("tab-inspector").addEventListener("click", () => {
    history.replaceState(null, "", "#inspector");
    showView("inspector");
  });
  wireSyncControls(() => session, selection, select);
  byId("window-preset").addEventListener("change", (event) => {
    applyPreset((event.target as HTMLSelectElement).value);
  });
  byId("inspector-conversation").addEventListener("change", (event) => {
    select((event.target as HTMLSelectElement).value);
  });
  byId<HTMLFormElement>("window-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (session !== null) void showWindow(session);
  });
  byId("refresh-checkpoint").addEventListener("click", () => {
    if (session !== null) void showCheckpoint(session);
  });
  byId("show-receipt").addEventListener("click", () => {
    if (session !== null) void showStoredReceipt(session);
  });
  byId("verify-proof").addEventListener("click", () => {
    if (session !== null) void verifyProof(session);
  });
  applyPreset("default");
}

wire();
const stored = Session.stored();
if (stored !== null) void signIn(stored);
