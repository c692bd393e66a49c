import os

import pytest

from ferrymq.store import mapped_file
from ferrymq.store.mapped_file import MappedFile, MappedFileQueue, segment_name


def test_segment_is_created_at_full_size_sparse_and_named_by_offset(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 1 << 20)
    seg = queue.create_next()
    assert os.path.basename(seg.path) == "00000000000000000000"
    assert os.path.getsize(seg.path) == 1 << 20
    assert os.stat(seg.path).st_blocks * 512 < 1 << 20  # sparse: nothing allocated yet
    second = queue.create_next()
    assert os.path.basename(second.path) == segment_name(1 << 20) == "00000000000001048576"
    queue.close()


def test_append_read_and_write_position(tmp_path):
    seg = MappedFile(str(tmp_path / segment_name(0)), 0, 4096, create=True)
    assert seg.append(b"abc") == 0
    assert seg.append(b"defg") == 3
    assert seg.write_position == 7 and seg.remaining == 4089
    assert seg.read(0, 7) == b"abcdefg"
    assert seg.read(5, 100) == b"fg"  # never past the written data
    assert seg.read(7, 1) == b""
    assert seg.read_raw(5, 4) == b"fg\x00\x00"
    with pytest.raises(ValueError):
        seg.append(b"x" * 4090)
    seg.close()


def test_truncate_zeroes_the_tail(tmp_path):
    seg = MappedFile(str(tmp_path / segment_name(0)), 0, 4096, create=True)
    seg.append(b"x" * 100)
    seg.flush()
    seg.truncate(40)
    assert seg.write_position == 40 and seg.flushed_position == 40
    assert seg.read_raw(0, 100) == b"x" * 40 + bytes(60)
    assert os.path.getsize(seg.path) == 4096
    seg.close()


def test_queue_find_min_max(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 100)
    assert queue.find(0) is None and queue.min_offset == 0 and queue.max_offset == 0
    first, second = queue.create_next(), queue.create_next()
    first.append(b"a" * 100)
    second.append(b"b" * 30)
    assert queue.find(0) is first and queue.find(99) is first
    assert queue.find(100) is second and queue.find(199) is second
    assert queue.find(200) is None
    assert (queue.min_offset, queue.max_offset) == (0, 130)
    queue.close()


def test_queue_can_start_past_zero(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 100)
    seg = queue.create_next(250)
    assert seg.start_offset == 200 and os.path.basename(seg.path) == segment_name(200)
    assert queue.find(199) is None and queue.find(250) is seg
    queue.close()


def test_load_marks_segments_full_and_truncate_dirty(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 100)
    for _ in range(3):
        queue.create_next().append(b"z" * 100)
    queue.flush()
    queue.close()
    (tmp_path / "not-a-segment.tmp").write_bytes(b"ignored")

    loaded = MappedFileQueue(str(tmp_path), 100)
    loaded.load()
    assert [s.start_offset for s in loaded.segments] == [0, 100, 200]
    assert loaded.max_offset == 300
    loaded.truncate_dirty(150)
    assert [s.start_offset for s in loaded.segments] == [0, 100]
    assert not os.path.exists(tmp_path / segment_name(200))
    assert loaded.max_offset == 150
    assert loaded.segments[1].read_raw(0, 100) == b"z" * 50 + bytes(50)
    loaded.close()


def test_load_rejects_oversized_segments_and_gaps(tmp_path):
    (tmp_path / segment_name(0)).write_bytes(bytes(150))
    with pytest.raises(ValueError, match="expected 100"):
        MappedFileQueue(str(tmp_path), 100).load()
    (tmp_path / segment_name(0)).write_bytes(bytes(100))
    (tmp_path / segment_name(200)).write_bytes(bytes(100))
    with pytest.raises(ValueError, match="gap"):
        MappedFileQueue(str(tmp_path), 100).load()


def test_delete_keeps_readers_safe(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 100)
    first, second = queue.create_next(), queue.create_next()
    first.append(b"a" * 100)
    queue.delete(first)
    assert queue.segments == [second] and queue.min_offset == 100
    assert not os.path.exists(first.path)
    assert first.read(0, 3) == b"aaa"  # an in-flight reader still holding it can finish
    queue.close()


def test_flush_reports_durable_offset(tmp_path):
    queue = MappedFileQueue(str(tmp_path), 100)
    seg = queue.create_next()
    seg.append(b"abc")
    assert queue.flush() == 3
    assert seg.flushed_position == 3
    queue.close()


def test_a_segment_cut_short_reads_as_zeros_after_its_end(tmp_path, caplog):
    (tmp_path / segment_name(0)).write_bytes(b"q" * 60)  # as a crash while the file grew could leave it
    queue = MappedFileQueue(str(tmp_path), 100)
    queue.load()
    assert os.path.getsize(tmp_path / segment_name(0)) == 100
    assert queue.segments[0].read_raw(0, 100) == b"q" * 60 + bytes(40)
    assert "is 60 bytes, expected 100" in caplog.text
    queue.close()


@pytest.mark.parametrize("hole_punching", [True, False])
def test_a_mapped_segment_is_truncated_without_shrinking_and_its_readers_see_zeros(tmp_path, monkeypatch, hole_punching):
    if not hole_punching:  # a file system (or platform) without FALLOC_FL_PUNCH_HOLE: zeros are written
        monkeypatch.setattr(mapped_file, "_fallocate", None)
    seg = MappedFile(str(tmp_path / segment_name(0)), 0, 1 << 20, create=True)
    seg.append(b"x" * 300_000)
    view = seg.view()  # a reader's mapping, held across the cut
    assert view[299_990:300_000] == b"x" * 10
    sizes = []
    real_ftruncate = os.ftruncate
    monkeypatch.setattr(mapped_file.os, "ftruncate", lambda fd, n: (sizes.append(n), real_ftruncate(fd, n)))
    seg.truncate(1000)
    assert sizes == [] and os.path.getsize(seg.path) == 1 << 20  # never shorter than the mapping
    assert bytes(view[990:300_010]) == b"x" * 10 + bytes(299_010)  # what a reader sees now: zeros, no SIGBUS
    seg.append(b"new")
    assert bytes(view[1000:1003]) == b"new" == seg.read(1000, 3)
    seg.close()
    assert bytes(view[1000:1003]) == b"new"  # still mapped for whoever holds it
    with pytest.raises(ValueError):
        seg.view()


def test_an_unmapped_segment_without_hole_punching_is_shrunk_and_regrown_sparse(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped_file, "_fallocate", None)
    seg = MappedFile(str(tmp_path / segment_name(0)), 0, 1 << 20, create=True)
    seg.append(b"x" * 300_000)
    seg.flush()
    seg.truncate(1000)
    assert os.path.getsize(seg.path) == 1 << 20 and seg.read_raw(990, 20) == b"x" * 10 + bytes(10)
    assert os.stat(seg.path).st_blocks * 512 < 100_000  # the dropped tail holds no blocks
    seg.close()


def test_appends_go_into_blocks_allocated_a_chunk_ahead_never_the_whole_segment(tmp_path):
    size = 64 << 20
    seg = MappedFile(str(tmp_path / segment_name(0)), 0, size, create=True)
    seg.append(b"r" * 1200)
    allocated = os.stat(seg.path).st_blocks * 512
    if allocated < mapped_file.RESERVE_AHEAD and not mapped_file.allocate_blocks(seg.fd, 0, 4096):
        pytest.skip("this file system allocates no blocks ahead (no fallocate)")
    assert mapped_file.RESERVE_AHEAD <= allocated < 2 * mapped_file.RESERVE_AHEAD
    seg.append(b"s" * mapped_file.RESERVE_AHEAD)  # past the chunk: the next one is allocated
    assert os.stat(seg.path).st_blocks * 512 >= mapped_file.RESERVE_AHEAD + 1200
    assert os.stat(seg.path).st_blocks * 512 < size // 4
    assert seg.read(0, 1201) == b"r" * 1200 + b"s"
    assert seg.read_raw(seg.write_position, 8) == bytes(8)  # allocated ahead, still zeros
    seg.truncate(600)  # the tail's blocks go (a hole) and are allocated again as appends come
    seg.append(b"t" * 100)
    assert seg.read(0, 700) == b"r" * 600 + b"t" * 100
    seg.close()


def test_a_refused_allocation_leaves_appends_to_allocate_as_they_go(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped_file, "allocate_blocks", lambda fd, pos, length: False)  # a full disk's answer
    seg = MappedFile(str(tmp_path / segment_name(0)), 0, 16 << 20, create=True)
    for i in range(100):
        seg.append(b"%04d" % i * 300)
    assert seg.read(0, 1200) == b"0000" * 300 and seg.write_position == 120_000
    assert os.stat(seg.path).st_blocks * 512 < 1 << 20  # sparse as before
    seg.close()


def test_page_cache_holds_tells_cached_pages_from_pages_on_disk(tmp_path, monkeypatch):
    """What the broker asks before copying records out of a mapping on its event loop: every
    page of the range cached, or not (then it reads in its pool); where the kernel cannot tell,
    always "not"."""
    from tests.support import evict_from_page_cache
    path = tmp_path / "f"
    path.write_bytes(os.urandom(64 * 4096))
    fd = os.open(path, os.O_RDONLY)
    try:
        evict_from_page_cache(tmp_path)
        assert not mapped_file.page_cache_holds(fd, 0, 4096)
        os.pread(fd, 3 * 4096, 8 * 4096)  # pages 8-10 (and maybe some read ahead)
        assert mapped_file.page_cache_holds(fd, 8 * 4096 + 100, 2 * 4096)  # touches pages 8-10
        evict_from_page_cache(tmp_path)
        os.pread(fd, 1, 8 * 4096)
        assert not mapped_file.page_cache_holds(fd, 0, 64 * 4096)  # not the whole file
        os.pread(fd, 64 * 4096, 0)
        assert mapped_file.page_cache_holds(fd, 0, 64 * 4096)
        monkeypatch.setattr(mapped_file, "_cachestat", None)
        assert not mapped_file.page_cache_holds(fd, 0, 4096)
    finally:
        os.close(fd)
