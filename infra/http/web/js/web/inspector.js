// The inspector: the window the service would send for a conversation under
// a chosen format, budget and policy, why each turn is in or out, the fold,
// what each part of the request spends, the receipt the service stored with a
// turn, and the audit side (checkpoint, inclusion proof verified here with
// WebCrypto).
import { ProofUnavailableError, ReceiptNotFoundError, ServiceError } from "../src/errors.js";
import { verifyCheckpoint, verifyInclusionProof } from "../src/proof.js";
import { byId, el, replaceChildren } from "./dom.js";
/** Presets fill the budget fields; every field can then be changed. */
const PRESETS = {
    default: {
        max_bytes: 1_048_576, max_tokens: 4000, max_messages: 25, context_tokens: null,
        floor_messages: 10, fold_threshold_tokens: 2000, reserved_output_tokens: 1000,
    },
    tokens: {
        max_bytes: 1_048_576, max_tokens: 60, max_messages: null, context_tokens: null,
        floor_messages: 0, fold_threshold_tokens: 30, reserved_output_tokens: 16,
    },
    count: {
        max_bytes: 1_048_576, max_tokens: null, max_messages: 4, context_tokens: null,
        floor_messages: 0, fold_threshold_tokens: 2000, reserved_output_tokens: 16,
    },
    bytes: {
        max_bytes: 900, max_tokens: null, max_messages: null, context_tokens: null,
        floor_messages: 0, fold_threshold_tokens: 2000, reserved_output_tokens: 16,
    },
    context: {
        max_bytes: 1_048_576, max_tokens: null, max_messages: null, context_tokens: 150,
        floor_messages: 0, fold_threshold_tokens: 2000, reserved_output_tokens: 50,
    },
};
const LIMIT_FIELDS = Object.keys(PRESETS.default);
function input(id) {
    return byId(id);
}
export function applyPreset(name) {
    const preset = PRESETS[name] ?? PRESETS.default;
    for (const field of LIMIT_FIELDS) {
        const value = preset[field];
        input(`limit-${field}`).value = value === null ? "" : String(value);
    }
}
/** The policy the fields describe; an empty field switches its limit off. */
export function policyFromFields() {
    const policy = {
        wire_format: byId("window-format").value,
    };
    for (const field of LIMIT_FIELDS) {
        const text = input(`limit-${field}`).value.trim();
        policy[field] = text === "" ? null : Number.parseInt(text, 10);
    }
    return policy;
}
export function renderInspectorChoices(session, selection) {
    const select = byId("inspector-conversation");
    const ids = [...session.copy.conversations.keys()];
    const current = select.value || selection.conversationId || "";
    replaceChildren(select, ...ids.map((id) => el("option", { value: id }, id)));
    if (ids.includes(current))
        select.value = current;
    const proofTurn = byId("proof-turn");
    const before = proofTurn.value;
    const conversation = session.copy.conversations.get(select.value);
    const turns = conversation ? [...conversation.turns.values()] : [];
    replaceChildren(proofTurn, ...turns.map((turn) => el("option", { value: String(turn.version), "data-turn-id": turn.turnId }, `${turn.turnId} (version ${turn.version})`)));
    if (turns.some((turn) => String(turn.version) === before))
        proofTurn.value = before;
    const receiptTurn = byId("receipt-turn");
    const chosen = receiptTurn.value;
    replaceChildren(receiptTurn, ...turns.map((turn) => el("option", { value: turn.turnId }, turn.turnId)));
    if (turns.some((turn) => turn.turnId === chosen))
        receiptTurn.value = chosen;
}
export async function showWindow(session) {
    const conversationId = byId("inspector-conversation").value;
    const status = byId("inspector-status");
    if (!conversationId) {
        status.textContent = "Pick a conversation first.";
        return;
    }
    const policy = policyFromFields();
    status.textContent = "Projecting…";
    try {
        const window = await session.client.projectWindow(conversationId, {
            question: byId("window-question").value,
            system: byId("window-system").value,
            model: input("window-model").value,
            tokenizer: byId("window-tokenizer").value,
            policy,
        });
        const conversation = session.copy.conversations.get(conversationId);
        const turns = conversation ? [...conversation.turns.values()] : [];
        renderWindow(window, turns, policy);
        renderSent(window, policy);
        const fold = await session.client.getFold(conversationId, policy.fold_threshold_tokens ?? undefined);
        replaceChildren(byId("fold-status"), el("li", {}, `Fold: ${fold.fold_id ?? "none"}${fold.covers_through_turn_id ? `, covers through ${fold.covers_through_turn_id}` : ""}`), el("li", {}, `Sent in this window: ${window.fold_sent ? "yes" : "no"}`), el("li", {}, `Unfolded tokens: ${fold.unfolded_tokens} of a ${fold.threshold_tokens}-token threshold`), el("li", { "data-fold-due": String(fold.due) }, fold.due ? "A new fold is due." : "No fold is due."));
        status.textContent = `Window of ${window.byte_length} bytes, ${window.kept_turn_ids.length} turn(s) kept.`;
    }
    catch (error) {
        status.textContent = `No window: ${describe(error)}`;
    }
}
function renderWindow(window, turns, policy) {
    byId("window-body").textContent = window.body;
    const kept = new Set(window.kept_turn_ids);
    const dropped = new Map();
    for (const item of (window.report.dropped ?? [])) {
        dropped.set(item.turn_id, item.reason);
    }
    const rows = turns.map((turn) => {
        const [state, reason] = kept.has(turn.turnId)
            ? ["kept", ""]
            : dropped.has(turn.turnId)
                ? ["dropped", dropped.get(turn.turnId) ?? ""]
                : turn.deleted
                    ? ["dropped", "deleted"]
                    : turn.status !== "confirmed"
                        ? ["dropped", "abandoned"]
                        : ["not-seen", "newer than the window"];
        return el("tr", { "data-turn-id": turn.turnId, "data-state": state, "data-reason": reason }, el("td", {}, turn.turnId), el("td", {}, state), el("td", {}, reason));
    });
    replaceChildren(byId("window-turns"), ...rows);
    const limits = byId("window-budgets");
    const keptMessages = window.kept_turn_ids.length * 2;
    const reserve = policy.reserved_output_tokens ?? 0;
    replaceChildren(limits, budget("bytes", "Body bytes (hard limit)", window.byte_length, window.max_bytes), budget("tokens", "History tokens", window.history_tokens, policy.max_tokens ?? null), budget("messages", "History messages", keptMessages, policy.max_messages ?? null), budget("context", "Context: body tokens + reply reserve", window.estimated_tokens + reserve, policy.context_tokens ?? null));
    renderParts(window);
}
const PART_LABELS = {
    envelope: "Envelope (model, keys, reply reserve)",
    system: "System instructions",
    fold: "Fold (summary of older turns)",
    history: "History (kept turns)",
    question: "Question",
};
/** A bar per part of the request: its bytes against the byte limit, and its
 * estimated tokens; the parts add up to the body exactly. */
function renderParts(window) {
    const parts = (window.report.by_part ?? []);
    replaceChildren(byId("window-parts"), ...parts.map((part) => {
        const id = `part-${part.part}`;
        const share = window.byte_length === 0 ? 0 : (100 * part.bytes) / window.byte_length;
        return el("div", {
            class: "budget",
            "data-part": part.part,
            "data-bytes": String(part.bytes),
            "data-tokens": String(part.tokens),
        }, el("label", { for: id }, `${PART_LABELS[part.part] ?? part.part}: ${part.bytes} bytes (${share.toFixed(1)} % of the body), ${part.tokens} tokens`), el("meter", { id, min: "0", max: String(window.max_bytes), value: String(part.bytes) }));
    }));
}
function budget(name, label, used, limit) {
    const id = `budget-${name}`;
    const text = limit === null ? `${used} (no limit)` : `${used} of ${limit}`;
    return el("div", { class: "budget", "data-budget": name }, el("label", { for: id }, `${label}: ${text}`), el("meter", {
        id,
        min: "0",
        max: String(limit ?? Math.max(used, 1)),
        value: String(used),
        high: String(limit === null ? used + 1 : limit * 0.9),
    }));
}
/** What this window is, as a receipt would name it; a receipt is stored only
 * when an answer is recorded with its window (see the stored receipt). */
function renderSent(window, policy) {
    const sent = {
        ledger_version: window.ledger_version,
        policy,
        token_counter: window.token_counter,
        turn_ids: window.kept_turn_ids,
        fold_id: window.fold_sent ? window.fold_id : null,
        body_bytes: window.byte_length,
    };
    byId("window-sent").textContent = JSON.stringify(sent, null, 2);
}
/** The receipt the service stored with the chosen turn, exactly as served. */
export async function showStoredReceipt(session) {
    const conversationId = byId("inspector-conversation").value;
    const turnId = byId("receipt-turn").value;
    const status = byId("receipt-status");
    const target = byId("stored-receipt");
    target.removeAttribute("data-turn-id");
    target.textContent = "";
    if (!conversationId || !turnId) {
        status.textContent = "Pick a conversation and a turn first.";
        return;
    }
    status.textContent = "Reading the stored receipt…";
    try {
        const stored = await session.client.getReceipt(conversationId, turnId);
        target.dataset.turnId = turnId;
        target.textContent = JSON.stringify(stored, null, 2);
        const receipt = stored.receipt;
        status.textContent =
            `Stored with turn ${turnId}: a window of ledger version ${receipt.ledger_version} ` +
                `that sent ${receipt.turn_ids.length} turn(s)` +
                (stored.deleted ? "; the turn is deleted, so its body can no longer be checked." : ".");
    }
    catch (error) {
        status.textContent =
            error instanceof ReceiptNotFoundError
                ? `No stored receipt: turn ${turnId} was recorded without a window.`
                : `No receipt: ${describe(error)}`;
    }
}
export async function showCheckpoint(session) {
    const target = byId("checkpoint-info");
    try {
        const checkpoint = await session.client.getCheckpoint();
        const ageSeconds = Math.max(0, Math.round((Date.now() - Date.parse(checkpoint.timestamp)) / 1000));
        // The whole checkpoint is checked here, the deletion record's head with it.
        const check = await verifyCheckpoint(checkpoint, input("pinned-key").value || null);
        const record = checkpoint.deletion_record;
        replaceChildren(target, el("li", { "data-tree-size": String(checkpoint.tree_size) }, `Size: ${checkpoint.tree_size} events`), el("li", { "data-age-seconds": String(ageSeconds) }, `Age: ${ageSeconds} s (signed ${checkpoint.timestamp})`), el("li", {}, `Key id: ${checkpoint.key_id}`), el("li", { "data-record-entries": record ? String(record.entries) : "" }, record
            ? `Deletion record: ${record.entries} destroyed key(s), head ${record.head.slice(0, 16)}…`
            : "Deletion record: none signed with this checkpoint"), el("li", { id: "checkpoint-check", "data-result": check.ok ? "verified" : "failed" }, check.ok
            ? `Signature verified in this browser${check.coversDeletionRecord ? " (tree head and deletion record head)" : ""}${check.keyPinned ? ", by the pinned key" : ", by the key written in it"}.`
            : `Checkpoint verification FAILED: ${check.reason}.`));
    }
    catch (error) {
        replaceChildren(target, el("li", {}, error instanceof ProofUnavailableError ? `No checkpoint: ${error.message}` : String(error)));
    }
}
export async function verifyProof(session) {
    const result = byId("proof-result");
    const conversationId = byId("inspector-conversation").value;
    const version = Number.parseInt(byId("proof-turn").value, 10);
    result.removeAttribute("data-result");
    if (!conversationId || Number.isNaN(version)) {
        result.textContent = "Pick a conversation and a turn first.";
        return;
    }
    result.textContent = "Verifying…";
    try {
        const proof = await session.client.getInclusionProof(conversationId, version);
        const check = await verifyInclusionProof(proof, input("pinned-key").value || null);
        result.dataset.result = check.ok ? "verified" : "failed";
        result.textContent = check.ok
            ? `Verified in this browser: event ${version} is leaf ${proof.leaf_index} of the ${proof.checkpoint.tree_size}-event checkpoint, signed by key ${proof.checkpoint.key_id}${check.keyPinned ? " (pinned)" : " (the key written in the checkpoint: pin one to check who signed)"}.`
            : `Verification FAILED: ${check.reason}.`;
    }
    catch (error) {
        result.dataset.result = "unavailable";
        result.textContent = `No proof: ${String(error)}`;
    }
}
/** An error with the fields the service named, for the status line. */
export function describe(error) {
    if (!(error instanceof ServiceError) || !error.details)
        return String(error);
    const fields = error.details.map((d) => `${d.location.slice(1).join(".")}: ${d.message}`);
    return `${error.message} (${fields.join("; ")})`;
}
