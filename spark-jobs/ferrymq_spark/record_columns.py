"""Pull bodies to Arrow columns in bulk, without a Python object per message.

A pull body is CommitLog records back to back (the layout in ``ferrymq.common.message``).
One Python pass reads only each record's TOTALSIZE to find where records start; every other
field is then gathered for all records at once with numpy (fixed fields, at the positions
the record codec's own struct gives) and Arrow kernels (bodies, topics and properties are
copied out of the body buffer by a list-view flatten, properties split into the map column).
Anything that does not add up falls back to the record codec, whose error says what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ferrymq.common.message import (
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    RECORD_HEADER,
    SysFlag,
    decode_records,
    fixed_field_positions,
)

# The four layouts a record can have: born host IPv6 or not x store host IPv6 or not.
_LAYOUTS = [fixed_field_positions(bool(v & 2), bool(v & 1)) for v in range(4)]
_FIXED_SIZE = np.array([sum(w for _, w in layout.values()) for layout in _LAYOUTS], dtype=np.int64)
_SYS_FLAG_POS = _LAYOUTS[0]["sys_flag"][0]  # the same in every layout: before both hosts
assert all(layout["sys_flag"] == _LAYOUTS[0]["sys_flag"] for layout in _LAYOUTS)


@dataclass
class RecordColumns:
    """Per-record fields of one or more pull bodies, as numpy arrays and Arrow arrays."""

    start: np.ndarray  # where the record starts in the decoded bytes
    queue_id: np.ndarray
    queue_offset: np.ndarray
    phys_offset: np.ndarray
    sys_flag: np.ndarray
    born_ts: np.ndarray
    store_ts: np.ndarray
    store_ip: list[bytes]  # only what the offset msgId needs, for rows without UNIQ_KEY
    store_port: np.ndarray
    topic: pa.Array  # string
    body: pa.Array  # binary
    properties: pa.Array  # string, the encoded form

    def __len__(self) -> int:
        return len(self.queue_offset)

    def take(self, rows: np.ndarray) -> "RecordColumns":
        idx = pa.array(rows)
        return RecordColumns(
            self.start[rows], self.queue_id[rows], self.queue_offset[rows], self.phys_offset[rows], self.sys_flag[rows],
            self.born_ts[rows], self.store_ts[rows], [self.store_ip[i] for i in rows], self.store_port[rows],
            self.topic.take(idx), self.body.take(idx), self.properties.take(idx))


def _starts(data: bytes) -> np.ndarray | None:
    """Where each record starts, or None when the walk finds no well-formed record chain."""
    starts: list[int] = []
    pos, n = 0, len(data)
    unpack = RECORD_HEADER.unpack_from
    while pos < n:
        if n - pos < RECORD_HEADER.size:
            return None
        total, magic = unpack(data, pos)
        if magic != MESSAGE_MAGIC or total < MIN_RECORD_SIZE or pos + total > n:
            return None
        starts.append(pos)
        pos += total
    return np.array(starts, dtype=np.int64)


def _gather(raw: np.ndarray, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """The big-endian integer of ``width`` bytes at each of ``pos``."""
    return raw[pos[:, None] + np.arange(width)].view(dtype).reshape(len(pos)).astype(np.int64)


def _field(raw: np.ndarray, starts: np.ndarray, layout: np.ndarray, name: str, dtype: str = "") -> np.ndarray:
    pos = np.array([lay[name][0] for lay in _LAYOUTS], dtype=np.int64)[layout] + starts
    width = _LAYOUTS[0][name][1]
    return _gather(raw, pos, width, dtype or f">i{width}")


def _slices(values: pa.Array, pos: np.ndarray, length: np.ndarray, type_: pa.DataType) -> pa.Array:
    """binary/string array of ``values[pos:pos+length]`` per row (one copy, in Arrow)."""
    view = pa.ListViewArray.from_arrays(pa.array(pos, pa.int32()), pa.array(length, pa.int32()), values)
    flat = pc.list_flatten(view)
    offsets = np.zeros(len(pos) + 1, dtype=np.int32)
    np.cumsum(length, out=offsets[1:])
    data = flat.buffers()[1]
    if flat.offset:
        data = data.slice(flat.offset)
    return pa.Array.from_buffers(type_, len(pos), [None, pa.py_buffer(offsets), data])


def _text(values: pa.Array, pos: np.ndarray, length: np.ndarray) -> pa.Array:
    """UTF-8 text as the record codec reads it: invalid sequences become U+FFFD (rare: per row)."""
    raw = _slices(values, pos, length, pa.binary())
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([str(b, "utf-8", "replace") for b in raw.to_pylist()], pa.string())


def decode_columns(data: bytes) -> RecordColumns:
    """Every record of ``data`` (pull bodies, concatenated). Raises ValueError as
    ``decode_records`` does when the records are malformed."""
    starts = _starts(data)
    if starts is None:
        decode_records(data)  # raises, saying what is wrong
        raise ValueError("malformed records in pull body")  # a blank record mid-body
    raw = np.frombuffer(data, dtype=np.uint8)
    n = len(starts)
    if n == 0:
        starts = np.zeros(0, dtype=np.int64)
    total = _gather(raw, starts, 4, ">i4")
    sys_flag = _gather(raw, starts + _SYS_FLAG_POS, 4, ">i4")
    layout = (((sys_flag & SysFlag.BORNHOST_V6) != 0) * 2 + ((sys_flag & SysFlag.STOREHOST_V6) != 0)).astype(np.int64)
    body_pos = starts + _FIXED_SIZE[layout]
    body_len = _field(raw, starts, layout, "body_len")
    topic_len_pos = body_pos + np.maximum(body_len, 0)
    end = starts + total
    if n and (np.any(body_len < 0) or np.any(topic_len_pos + 3 > end)):
        decode_records(data)
        raise ValueError("malformed records in pull body")
    topic_len = raw[topic_len_pos].astype(np.int64)
    props_len_pos = topic_len_pos + 1 + topic_len
    props_pos = props_len_pos + 2
    if n and (np.any(props_pos > end)
              or np.any(props_pos + _gather(raw, np.minimum(props_len_pos, len(raw) - 2), 2, ">u2") != end)):
        decode_records(data)
        raise ValueError("malformed records in pull body")
    store_ip_pos = np.array([lay["store_ip"][0] for lay in _LAYOUTS], dtype=np.int64)[layout] + starts
    store_ip_len = np.array([lay["store_ip"][1] for lay in _LAYOUTS], dtype=np.int64)[layout]
    values = pa.array(raw)
    return RecordColumns(
        start=starts,
        queue_id=_field(raw, starts, layout, "queue_id"),
        queue_offset=_field(raw, starts, layout, "queue_offset"),
        phys_offset=_field(raw, starts, layout, "phys_offset"),
        sys_flag=sys_flag,
        born_ts=_field(raw, starts, layout, "born_ts"),
        store_ts=_field(raw, starts, layout, "store_ts"),
        store_ip=[data[p:p + w] for p, w in zip(store_ip_pos.tolist(), store_ip_len.tolist())],
        store_port=_field(raw, starts, layout, "store_port"),
        topic=_text(values, topic_len_pos + 1, topic_len),
        body=_slices(values, body_pos, body_len, pa.binary()),
        properties=_text(values, props_pos, end - props_pos),
    )


def properties_map(encoded: pa.Array, map_type: pa.DataType, leave_out: tuple[str, ...] = ()) -> pa.MapArray:
    """Encoded properties (``name 0x01 value 0x02 ...``) as a map column, parsed as
    ``decode_properties`` parses one: empty names or values dropped, a trailing 0x02 accepted."""
    items = pc.split_pattern(encoded, PROPERTY_SEPARATOR)
    rows = pc.list_parent_indices(items)
    pairs = pc.split_pattern(pc.list_flatten(items), NAME_VALUE_SEPARATOR, max_splits=1)
    whole = pc.equal(pc.list_value_length(pairs), 2)
    pairs, rows = pairs.filter(whole), rows.filter(whole)
    names, values = pc.list_element(pairs, 0), pc.list_element(pairs, 1)
    keep = pc.and_(pc.not_equal(names, ""), pc.not_equal(values, ""))
    if leave_out:
        keep = pc.and_(keep, pc.invert(pc.is_in(names, value_set=pa.array(leave_out, pa.string()))))
    names, values, rows = names.filter(keep), values.filter(keep), rows.filter(keep)
    counts = np.bincount(rows.to_numpy(zero_copy_only=False), minlength=len(encoded))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), names, values, type=map_type)
