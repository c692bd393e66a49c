import os

import pytest

from ferrymq.store.consume_queue import CQ_ENTRY, CQ_ENTRY_SIZE, ConsumeQueue


def entries(first_phys: int, count: int, size: int = 100, tags: int = 7) -> bytes:
    return b"".join(CQ_ENTRY.pack(first_phys + i * size, size, tags) for i in range(count))


def new_queue(tmp_path, per_file: int = 10) -> ConsumeQueue:
    return ConsumeQueue(str(tmp_path), "T", 3, per_file * CQ_ENTRY_SIZE)


def test_entry_layout_and_files(tmp_path):
    cq = new_queue(tmp_path)
    cq.append(0, entries(0, 25), 2500)
    assert (cq.min_offset, cq.max_offset, cq.max_phys_end) == (0, 25, 2500)
    directory = tmp_path / "T" / "3"
    assert sorted(os.listdir(directory)) == ["00000000000000000000", "00000000000000000200", "00000000000000000400"]
    raw = (directory / "00000000000000000200").read_bytes()
    assert len(raw) == 200
    assert raw[:20] == (1000).to_bytes(8, "big") + (100).to_bytes(4, "big") + (7).to_bytes(8, "big")
    assert cq.entry(10) == (1000, 100, 7)
    assert cq.entry(25) is None
    cq.close()


def test_read_entries_stays_within_one_file(tmp_path):
    cq = new_queue(tmp_path)
    cq.append(0, entries(0, 25), 2500)
    assert len(cq.read_entries(3, 100)) == 7 * CQ_ENTRY_SIZE
    assert len(cq.read_entries(20, 100)) == 5 * CQ_ENTRY_SIZE  # only what is written
    assert cq.read_entries(30, 1) is None
    assert cq.roll_next_file(3) == 10 and cq.roll_next_file(10) == 20
    cq.close()


def test_duplicate_appends_are_skipped_and_holes_refused(tmp_path):
    cq = new_queue(tmp_path)
    cq.append(0, entries(0, 3), 300)
    cq.append(1, entries(100, 3), 400)  # offsets 1, 2 exist: only 3 is new
    assert cq.max_offset == 4 and cq.entry(3) == (300, 100, 7)
    with pytest.raises(ValueError):
        cq.append(9, entries(900, 1), 1000)
    cq.close()


def test_load_finds_the_end_and_min(tmp_path):
    cq = new_queue(tmp_path)
    cq.append(0, entries(0, 23), 2300)
    cq.close()
    loaded = new_queue(tmp_path)
    loaded.load()
    assert (loaded.min_offset, loaded.max_offset, loaded.max_phys_end) == (0, 23, 2300)
    loaded.append(23, entries(2300, 1), 2400)
    assert loaded.entry(23) == (2300, 100, 7)
    loaded.close()


@pytest.mark.parametrize("count", [0, 1, 9, 10, 11, 20])
def test_load_at_file_boundaries(tmp_path, count):
    cq = new_queue(tmp_path)
    if count:
        cq.append(0, entries(0, count), count * 100)
    else:
        os.makedirs(tmp_path / "T" / "3")
    cq.close()
    loaded = new_queue(tmp_path)
    loaded.load()
    assert loaded.max_offset == count
    loaded.close()


def test_queue_starting_past_zero(tmp_path):
    cq = new_queue(tmp_path)
    cq.append(15, entries(5000, 3), 5300)  # earlier records are gone
    assert (cq.min_offset, cq.max_offset) == (15, 18)
    assert sorted(os.listdir(tmp_path / "T" / "3")) == ["00000000000000000200"]
    cq.close()
    loaded = new_queue(tmp_path)
    loaded.load()
    assert (loaded.min_offset, loaded.max_offset) == (15, 18)
    loaded.close()


def test_truncate_beyond_and_correct_min(tmp_path):
    cq = new_queue(tmp_path)
    cq.append(0, entries(0, 25), 2500)
    cq.truncate_beyond(1250)  # entry 12 (1200..1300) is only half in the CommitLog
    assert cq.max_offset == 12 and cq.max_phys_end == 1200
    assert not os.path.exists(tmp_path / "T" / "3" / "00000000000000000400")
    cq.correct_min_offset(450)  # CommitLog lost everything before 450
    assert cq.min_offset == 5
    cq.truncate_beyond(0)
    assert cq.max_offset == cq.min_offset and cq.max_phys_end == 0
    cq.close()


def test_torn_last_entry_is_dropped_on_load(tmp_path):
    cq = new_queue(tmp_path)
    cq.append(0, entries(0, 4), 400)
    cq.close()
    path = tmp_path / "T" / "3" / "00000000000000000000"
    with open(path, "r+b") as f:
        f.seek(4 * CQ_ENTRY_SIZE)
        f.write(b"\x00\x00\x00\x00\x00\x00\x01\x90")  # half an entry: offset 400, no size
    loaded = new_queue(tmp_path)
    loaded.load()
    assert loaded.max_offset == 4
    assert path.read_bytes()[80:100] == bytes(20)
    loaded.close()
