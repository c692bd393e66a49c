import threading

from store_helpers import make_msg

from ferrymq.common.message import decode_record, decode_records
from ferrymq.store import GetStatus, PutStatus

WRITERS = 4
PER_WRITER = 400


def run_threads(targets):
    errors: list[BaseException] = []

    def guard(target):
        try:
            target()
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=guard, args=(t,), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]


def test_concurrent_puts_and_pulls(open_store):
    store = open_store()
    done = threading.Event()
    put_results: dict[int, list] = {q: [] for q in range(WRITERS + 1)}
    results_lock = threading.Lock()
    pulled_while_writing = [0]

    def writer(queue_id, shared_queue):
        def run():
            for i in range(PER_WRITER):
                target = shared_queue if i % 4 == 0 else queue_id  # some puts contend for one queue
                result = store.put_message(make_msg(queue_id=target, body=b"%d-%d" % (queue_id, i) * 30))
                assert result.status is PutStatus.PUT_OK
                with results_lock:
                    put_results[target].append(result)

        return run

    def reader():
        offsets = dict.fromkeys(range(WRITERS + 1), 0)
        while not done.is_set() or any(offsets[q] < store.get_max_offset_in_queue("TopicTest", q) for q in offsets):
            for queue_id, offset in offsets.items():
                result = store.get_messages("g", "TopicTest", queue_id, offset, 32)
                if result.status is GetStatus.FOUND:
                    decoded = decode_records(result.body(), check_crc=True)  # only complete records are visible
                    assert [m.queue_offset for m in decoded] == list(range(offset, offset + len(decoded)))
                    offsets[queue_id] = result.next_begin_offset
                    pulled_while_writing[0] += len(decoded)
                else:
                    assert result.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE), result

    remaining = [WRITERS]

    def last_one_out(run):
        def wrapped():
            try:
                run()
            finally:
                with results_lock:
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        done.set()

        return wrapped

    run_threads([last_one_out(writer(q, WRITERS)) for q in range(WRITERS)] + [reader])
    assert pulled_while_writing[0] == WRITERS * PER_WRITER

    # Queue offsets: contiguous from 0 per queue, no gaps, no duplicates.
    spans = []
    for queue_id, results in put_results.items():
        assert sorted(r.queue_offset for r in results) == list(range(len(results)))
        assert store.get_max_offset_in_queue("TopicTest", queue_id) == len(results)
        spans += [(r.wrote_offset, r.wrote_bytes) for r in results]
    # Physical offsets: the records tile the CommitLog (apart from blank tails at file ends).
    spans.sort()
    for (start, size), (next_start, _) in zip(spans, spans[1:]):
        assert next_start >= start + size
        assert next_start == start + size or next_start % store.commit_log.segment_size == 0
    assert len(spans) == WRITERS * PER_WRITER
    for start, _ in spans[:: 97]:
        assert decode_record(store.look_message_by_offset(start), check_crc=True)[0].commit_log_offset == start


def test_concurrent_sync_flush_puts_share_fsyncs(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH")
    results = []
    lock = threading.Lock()

    def writer(queue_id):
        def run():
            for _ in range(50):
                r = store.put_message(make_msg(queue_id=queue_id))
                with lock:
                    results.append(r)

        return run

    run_threads([writer(q) for q in range(4)])
    assert len(results) == 200 and all(r.status is PutStatus.PUT_OK for r in results)
    assert store.commit_log.flushed_offset == store.max_phy_offset
