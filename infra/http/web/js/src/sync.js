// The sync loop, with the Python client's semantics (docs/client.md): a pull
// asks for the changes after the stored cursor, hands each batch to the
// handler and only then saves the cursor that follows it, until the service
// says `has_more: false`. Only a pull's first request long-polls.
/** A cursor kept as long as the object lives. */
export class MemoryCursorStore {
    cursor;
    constructor(cursor = null) {
        this.cursor = cursor;
    }
    load() {
        return this.cursor;
    }
    save(cursor) {
        this.cursor = cursor;
    }
}
/** Pulls every change after the stored cursor; the number handed over. */
export async function pull(client, store, handle, options = {}) {
    let cursor = await store.load();
    let first = true;
    let handed = 0;
    for (;;) {
        const page = await client.sync({
            since: cursor,
            timeout: first ? (options.timeout ?? 0) : 0,
            limit: options.limit,
            signal: options.signal,
        });
        if (page.changes.length > 0)
            await handle(page.changes);
        // Without changes the cursor only moved past other users' events: not
        // worth a durable write, the next pull skips them again.
        if (page.changes.length > 0 || page.has_more)
            await store.save(page.next_cursor);
        cursor = page.next_cursor;
        handed += page.changes.length;
        first = false;
        if (!page.has_more)
            return handed;
    }
}
/** Pulls with long-polls until `signal` aborts. Errors other than the abort
 * go to `onError` (default: rethrow) and the loop waits `errorDelay` s. */
export async function follow(client, store, handle, options) {
    const timeout = options.timeout ?? 30;
    while (!options.signal.aborted) {
        try {
            await pull(client, store, handle, { ...options, timeout });
        }
        catch (error) {
            if (options.signal.aborted)
                return;
            if (!options.onError)
                throw error;
            options.onError(error);
            await new Promise((resolve) => setTimeout(resolve, (options.errorDelay ?? 1) * 1000));
        }
    }
}
/** Whether a change is new, by (conversation, version): versions are
 * contiguous per conversation, so a batch handed over again is skipped. */
export class VersionFilter {
    applied = new Map();
    isNew(change) {
        const seen = this.applied.get(change.conversation_id) ?? 0;
        if (change.version <= seen)
            return false;
        this.applied.set(change.conversation_id, change.version);
        return true;
    }
}
/** A device's copy of its user's conversations, kept by applying changes:
 * a deletion drops the turns' text from the copy at once. */
export class LocalCopy {
    conversations = new Map();
    filter = new VersionFilter();
    apply(changes) {
        for (const change of changes) {
            if (!this.filter.isNew(change))
                continue;
            const conversation = this.conversation(change.conversation_id);
            conversation.version = change.version;
            switch (change.kind) {
                case "conversation_started":
                    conversation.startedAt = change.at;
                    break;
                case "turn_recorded":
                    conversation.turns.set(change.turn_id, {
                        turnId: change.turn_id,
                        version: change.version,
                        status: change.status,
                        deleted: change.deleted,
                        question: change.deleted ? null : change.question,
                        answer: change.deleted ? null : change.answer,
                        at: change.at,
                    });
                    break;
                case "history_deleted":
                    this.forget(conversation, change.whole_history ? null : change.turn_ids);
                    break;
                default:
                    break;
            }
        }
    }
    forget(conversation, turnIds) {
        const ids = turnIds ?? [...conversation.turns.keys()];
        for (const id of ids) {
            const turn = conversation.turns.get(id);
            if (turn === undefined)
                continue;
            turn.deleted = true;
            turn.question = null;
            turn.answer = null;
        }
    }
    conversation(id) {
        let conversation = this.conversations.get(id);
        if (conversation === undefined) {
            conversation = { conversationId: id, startedAt: null, version: 0, turns: new Map() };
            this.conversations.set(id, conversation);
        }
        return conversation;
    }
}
