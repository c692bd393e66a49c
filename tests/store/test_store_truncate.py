"""A live store cut back to an earlier record boundary (MessageStore.truncate): what a broker
does when it rejoins its group after a failover and must drop what it wrote after the epoch it
shares with the new master. The CommitLog, the ConsumeQueues and the IndexFile all forget the
dropped records (through recovery's trim step), new data continues at the cut, and a restart,
clean or not, finds the same store."""

from __future__ import annotations

import os
import shutil

from store_helpers import make_msg

from ferrymq.store.replica import read_for_transfer

TOPICS = [("TopicA", 3), ("TopicB", 2)]


def fill(store, count: int, prefix: str) -> list:
    results = []
    for i in range(count):
        topic, queues = TOPICS[i % 2]
        msg = make_msg(topic, queue_id=(i // 2) % queues, body=f"{prefix}-{i}".encode() * 40, KEYS=f"{prefix}-{i}")
        result = store.put_message(msg)
        assert result.ok
        results.append((topic, msg.queue_id, result))
    return results


def keys_found(store, prefix: str, count: int) -> int:
    return sum(bool(store.query_message(topic, f"{prefix}-{i}", 5, 0, 2**62).records)
               for i, (topic, _) in zip(range(count), [TOPICS[i % 2] for i in range(count)]))


def test_truncate_drops_records_queue_entries_and_keys_past_the_cut_across_files(open_store, tmp_path):
    store = open_store()
    kept = fill(store, 120, "kept")
    cut = store.commit_log.max_offset
    first_file = store.commit_log.segments[-1].start_offset
    dropped = fill(store, 200, "dropped")
    assert len(store.commit_log.segments) > 2 and store.commit_log.segments[-1].start_offset > first_file
    counts = {(t, q): store.get_max_offset_in_queue(t, q) for t, n in TOPICS for q in range(n)}
    assert keys_found(store, "dropped", 200) == 200

    assert store.truncate(cut) == cut
    assert store.commit_log.max_offset == cut and store.commit_log.segments[-1].start_offset == first_file
    assert max(os.listdir(store.config.commit_log_dir)) == f"{first_file:020d}"  # later files deleted
    for (topic, q), before in counts.items():
        expected = sum(1 for t, qq, _ in kept if (t, qq) == (topic, q))
        assert store.get_max_offset_in_queue(topic, q) == expected < before
        got = store.get_messages("g", topic, q, 0, 10_000)
        assert len(got.records) == expected
    assert keys_found(store, "dropped", 200) == 0 and keys_found(store, "kept", 120) == 120
    assert read_for_transfer(store.commit_log, cut, 4096) is None
    assert dropped  # what was dropped had been stored

    # New data continues at the cut, with queue offsets continuing the kept entries.
    topic, q, result = fill(store, 1, "after")[0]
    assert result.wrote_offset == cut
    assert result.queue_offset == sum(1 for t, qq, _ in kept if (t, qq) == (topic, q))


def test_a_truncated_store_is_the_same_after_a_clean_restart_and_after_a_crash(open_store, tmp_path):
    store = open_store(tmp_path / "a")
    fill(store, 60, "kept")
    cut = store.commit_log.max_offset
    fill(store, 60, "dropped")
    store.truncate(cut)
    fill(store, 10, "after")
    end = store.commit_log.max_offset
    store.shutdown()

    again = open_store(tmp_path / "a")
    assert again.commit_log.max_offset == end
    assert keys_found(again, "dropped", 60) == 0 and keys_found(again, "after", 10) == 10
    total = sum(again.get_max_offset_in_queue(t, q) for t, n in TOPICS for q in range(n))
    assert total == 70

    # A crash right after a truncation (copied while running: no clean-exit marker): recovery
    # finds the cut, not the dropped records.
    running = open_store(tmp_path / "store")
    fill(running, 60, "kept")
    cut = running.commit_log.max_offset
    fill(running, 60, "dropped")
    running.flush()
    running.truncate(cut)
    fill(running, 5, "after")
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "store", crashed)
    assert (crashed / "abort").exists()
    recovered = open_store(crashed)
    assert not recovered.last_exit_clean
    assert keys_found(recovered, "dropped", 60) == 0 and keys_found(recovered, "after", 5) == 5
    assert sum(recovered.get_max_offset_in_queue(t, q) for t, n in TOPICS for q in range(n)) == 65


def test_records_past_the_visible_limit_are_stored_but_not_consumable_until_it_covers_them(open_store):
    """A controller-mode master sets the limit to what its in-sync slaves hold: a consumer must
    not read a message a failover could take back, and must read it once the slaves hold it."""
    store = open_store()
    fill(store, 4, "visible")
    limit = store.commit_log.max_offset
    store.set_visible_limit(limit)
    before = {(t, q): store.get_max_offset_in_queue(t, q) for t, n in TOPICS for q in range(n)}
    held = fill(store, 6, "held")
    assert store.commit_log.max_offset > limit and store.visible_end == limit
    for topic, q, result in held:
        assert store.get_max_offset_in_queue(topic, q) == before[(topic, q)]  # only what came before
        assert result.queue_offset >= before[(topic, q)]
    assert keys_found(store, "held", 6) == 0 and keys_found(store, "visible", 4) == 4

    # The slaves acknowledge part of it: exactly the messages they hold become consumable.
    third = held[2][2]
    store.set_visible_limit(third.wrote_offset + third.wrote_bytes)
    assert store.dispatch_pending()
    assert keys_found(store, "held", 3) == 3 and not store.query_message("TopicB", "held-3", 5, 0, 2**62).records
    store.set_visible_limit(None)
    assert store.dispatch_pending() and store.visible_end == store.commit_log.max_offset
    assert keys_found(store, "held", 6) == 6


def test_truncating_a_master_drops_what_it_held_back_past_the_cut_and_shows_the_rest(open_store):
    """Demoted, the old master cuts back to what the group shares: held-back records before the
    cut become consumable, those after it never do (not even for a moment)."""
    store = open_store()
    fill(store, 2, "before")
    store.set_visible_limit(store.commit_log.max_offset)
    shared = fill(store, 4, "shared")
    cut = store.commit_log.max_offset
    fill(store, 4, "lost")
    assert store.truncate(cut) == cut
    assert keys_found(store, "shared", 4) == 4 and keys_found(store, "lost", 4) == 0
    counts = {(t, q): store.get_max_offset_in_queue(t, q) for t, n in TOPICS for q in range(n)}
    assert sum(counts.values()) == 6 and shared
    topic, q, result = fill(store, 1, "next")[0]  # no limit any more: consumable at once
    assert result.queue_offset == counts[(topic, q)] and store.get_max_offset_in_queue(topic, q) == counts[(topic, q)] + 1


def test_a_cut_inside_a_held_back_batch_keeps_the_batch_records_before_it(open_store):
    store = open_store()
    store.set_visible_limit(0)
    batch = [make_msg("TopicA", 0, body=f"b{i}".encode() * 30, KEYS=f"b-{i}") for i in range(5)]
    result = store.put_messages(batch)
    assert result.ok and store.get_max_offset_in_queue("TopicA", 0) == 0
    sizes = [m.store_size for m in batch]
    cut = result.wrote_offset + sum(sizes[:2])
    assert store.truncate(cut) == cut
    got = store.get_messages("g", "TopicA", 0, 0, 10)
    assert len(got.records) == 2 and store.get_max_offset_in_queue("TopicA", 0) == 2


def test_the_confirm_offset_survives_a_restart_and_limits_lookups_by_id_and_key(open_store, tmp_path):
    """A master's visibility limit is the confirm offset its checkpoint keeps: reopened, the
    store knows it, and with lookups limited to it (a controller-mode broker before its role)
    a record past it is found neither by its offset nor by its key; lifting the limit shows it."""
    store = open_store()
    kept = fill(store, 2, "kept")
    limit = store.commit_log.max_offset
    store.set_visible_limit(limit)
    held = fill(store, 1, "held")[0][2]
    assert store.look_message_by_offset(held.wrote_offset) is None  # a live master: not by id either
    store.shutdown()

    again = open_store(tmp_path / "store")
    assert again.recorded_confirm_offset == limit
    again.limit_lookups(again.recorded_confirm_offset)
    assert again.look_message_by_offset(held.wrote_offset) is None and keys_found(again, "held", 1) == 0
    assert again.look_message_by_offset(kept[1][2].wrote_offset) is not None and keys_found(again, "kept", 2) == 2
    again.limit_lookups(None)
    assert again.look_message_by_offset(held.wrote_offset) is not None and keys_found(again, "held", 1) == 1
