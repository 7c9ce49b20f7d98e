// The sync view: the user's conversations and turns as this device's copy
// holds them, redrawn whenever the feed brings a change.
import { byId, el, replaceChildren, shortId } from "./dom.js";
export function conversationsInOrder(session) {
    return [...session.copy.conversations.values()];
}
export function renderSyncView(session, selection, select) {
    const conversations = conversationsInOrder(session);
    if (selection.conversationId === null && conversations.length > 0) {
        selection.conversationId = conversations[0].conversationId;
    }
    replaceChildren(byId("conversation-list"), ...conversations.map((conversation) => {
        const current = conversation.conversationId === selection.conversationId;
        const button = el("button", {
            type: "button",
            class: "conversation",
            "data-conversation-id": conversation.conversationId,
            "aria-current": current ? "true" : undefined,
        }, `${shortId(conversation.conversationId)} · ${conversation.turns.size} turn(s)`);
        button.addEventListener("click", () => select(conversation.conversationId));
        return el("li", {}, button);
    }));
    const conversation = selection.conversationId === null
        ? undefined
        : session.copy.conversations.get(selection.conversationId);
    byId("conversation-title").textContent = conversation
        ? `Conversation ${conversation.conversationId}`
        : "No conversation yet";
    byId("turn-form-fields").disabled = conversation === undefined;
    replaceChildren(byId("turn-list"), ...(conversation ? [...conversation.turns.values()].map((turn) => turnItem(session, conversation, turn)) : []));
    byId("sync-status").textContent = session.lastError
        ? `Sync interrupted, retrying: ${session.lastError}`
        : session.synced
            ? `Live: ${conversations.length} conversation(s)`
            : "Syncing…";
}
function turnItem(session, conversation, turn) {
    const abandoned = turn.status !== "confirmed";
    const state = turn.deleted ? "deleted" : abandoned ? "abandoned" : "confirmed";
    const item = el("li", {
        class: `turn ${state}`,
        "data-turn-id": turn.turnId,
        "data-state": state,
        "data-version": String(turn.version),
    });
    const badge = turn.deleted
        ? "deleted"
        : abandoned
            ? `abandoned (${turn.status})`
            : "confirmed";
    item.append(el("div", { class: "turn-head" }, el("span", { class: "turn-id" }, turn.turnId), el("span", { class: `badge ${state}` }, badge)));
    if (turn.deleted) {
        item.append(el("p", { class: "gone" }, "This turn was deleted; its text is gone from this device."));
        return item;
    }
    item.append(el("p", { class: "question" }, el("span", { class: "role" }, "Question: "), el("span", { class: "text" }, turn.question ?? "")), el("p", { class: "answer" }, el("span", { class: "role" }, "Answer: "), el("span", { class: "text" }, turn.answer ?? "")));
    const remove = el("button", { type: "button", class: "delete", "aria-label": `Delete turn ${turn.turnId}` }, "Delete");
    remove.addEventListener("click", () => {
        remove.disabled = true;
        session.client.deleteHistory(conversation.conversationId, [turn.turnId]).catch((error) => {
            byId("action-status").textContent = `Delete failed: ${String(error)}`;
            remove.disabled = false;
        });
    });
    item.append(remove);
    return item;
}
/** Wires the "new conversation" button and the turn form. */
export function wireSyncControls(current, selection, select) {
    byId("new-conversation").addEventListener("click", () => {
        current()
            ?.client
            .startConversation()
            .then((created) => select(created.conversation_id))
            .catch((error) => {
            byId("action-status").textContent = `Could not start a conversation: ${String(error)}`;
        });
    });
    const form = byId("turn-form");
    form.addEventListener("submit", (event) => {
        event.preventDefault();
        const conversationId = selection.conversationId;
        const session = current();
        if (conversationId === null || session === null)
            return;
        const question = byId("turn-question");
        const answer = byId("turn-answer");
        const status = byId("turn-status").value;
        // A new id per turn: the key that makes a resent PUT write nothing twice.
        const turnId = `web-${crypto.randomUUID()}`;
        session.client
            .putTurn(conversationId, turnId, { question: question.value, answer: answer.value, status })
            .then(() => {
            question.value = "";
            answer.value = "";
            byId("action-status").textContent = `Turn ${turnId} recorded`;
        })
            .catch((error) => {
            byId("action-status").textContent = `Turn not recorded: ${String(error)}`;
        });
    });
}
