"""CommitLog segments get their blocks when created (fallocate), when the file system has room
to spare; ConsumeQueue segments and a nearly full file system stay sparse."""

import os

from ferrymq.store.mapped_file import MappedFile, MappedFileQueue, preallocate


def allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def test_a_preallocated_segment_has_its_blocks_and_a_default_one_is_sparse(tmp_path):
    size = 4 << 20
    dense = MappedFileQueue(str(tmp_path / "cl"), size, preallocate_below=0.99).create_next()
    sparse = MappedFileQueue(str(tmp_path / "cq"), size).create_next()
    assert allocated(dense.path) >= size
    assert allocated(sparse.path) < size // 8
    dense.append(b"x" * 1000)
    assert dense.read(0, 1000) == b"x" * 1000 and dense.read(1000, 10) == b""
    # a truncate (recovery, a returning master) zeros the tail and gives it its blocks again
    dense.truncate(500)
    assert os.pread(dense.fd, 600, 0) == b"x" * 500 + bytes(100)
    assert allocated(dense.path) >= size
    dense.close()
    sparse.close()


def test_no_preallocation_past_the_used_ratio(tmp_path):
    st = os.statvfs(tmp_path)
    used = 1 - st.f_bfree / st.f_blocks
    seg = MappedFile(str(tmp_path / "seg"), 0, 4 << 20, create=True, preallocate_below=max(used - 0.01, 0.001))
    assert allocated(seg.path) < (4 << 20) // 8  # would pass the ratio: left sparse
    seg.close()
    fd = os.open(tmp_path / "other", os.O_RDWR | os.O_CREAT)
    try:
        assert not preallocate(fd, str(tmp_path), 0, 1 << 20, None)  # never asked
        assert preallocate(fd, str(tmp_path), 0, 1 << 20, 0.999)
    finally:
        os.close(fd)
