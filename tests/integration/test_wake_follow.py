"""The long-polls' follower of the log (SQLite and memory services) starts at
the log's head and names the owners of what was written since its last look."""

from __future__ import annotations

from collections.abc import Callable

from tests.integration.test_audit import run_turns
from turnledger.infra.http.wake_follow import LogFollower
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import ConversationFeed


def test_the_wake_up_follower_starts_at_the_head_and_names_new_owners(
    open_ledger: Callable[[], Conversations],
) -> None:
    ledger = open_ledger()
    run_turns(ledger, "alice", turns=1)
    follower = LogFollower(ledger, ConversationFeed(ledger))
    assert follower.changed_owners() == set()  # what came before is not news
    run_turns(ledger, "bob", turns=1)
    run_turns(ledger, "carol", turns=1)
    assert follower.changed_owners() == {"bob", "carol"}
    assert follower.changed_owners() == set()  # each change is named once
    ledger.start_conversation("alice")
    assert follower.changed_owners() == {"alice"}
