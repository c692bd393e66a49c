"""HPACK (RFC 7541), the header compression of HTTP/2, for the gRPC endpoint's own HTTP/2 server.

``Decoder`` reads the header blocks a peer sends, with everything RFC 7541 allows: the static
and dynamic tables, the three literal kinds, table size updates and Huffman-coded strings.
``Encoder`` writes ours the simplest way a peer must accept: indexed static entries and
literals never added to the dynamic table, without Huffman, so it holds no state and never
needs the peer's table size. Names and values are ``str`` read and written as Latin-1, which
maps every octet to one character and back.

Huffman decoding walks a nibble-wise state machine built once at import from the code lengths
of Appendix B. The compiled twin (ferrymq/grpc/_hpack.c, through ferrymq/common/speedups.py)
decodes a whole header block in one call, Huffman strings with the same machine; here
``Decoder.py_decode`` and ``py_huffman_decode`` are its specification and the fallback.
"""

from __future__ import annotations

from ferrymq.common import speedups

__all__ = ["Decoder", "Encoder", "HeaderListTooLarge", "HpackError", "huffman_decode", "py_huffman_decode"]


class HpackError(Exception):
    """A header block that cannot be decoded: HTTP/2's COMPRESSION_ERROR, fatal to the connection."""


class HeaderListTooLarge(HpackError):
    """The block decoded, and the dynamic table is in step with the peer's, but its header list
    is larger than allowed: the stream can be refused while the connection goes on."""


# Appendix A: the static table, index 1 first.
STATIC_TABLE: tuple[tuple[str, str], ...] = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"), (":path", "/index.html"),
    (":scheme", "http"), (":scheme", "https"), (":status", "200"), (":status", "204"), (":status", "206"),
    (":status", "304"), (":status", "400"), (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""), ("accept", ""),
    ("access-control-allow-origin", ""), ("age", ""), ("allow", ""), ("authorization", ""),
    ("cache-control", ""), ("content-disposition", ""), ("content-encoding", ""), ("content-language", ""),
    ("content-length", ""), ("content-location", ""), ("content-range", ""), ("content-type", ""),
    ("cookie", ""), ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""), ("max-forwards", ""),
    ("proxy-authenticate", ""), ("proxy-authorization", ""), ("range", ""), ("referer", ""), ("refresh", ""),
    ("retry-after", ""), ("server", ""), ("set-cookie", ""), ("strict-transport-security", ""),
    ("transfer-encoding", ""), ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
)
_STATIC_COUNT = len(STATIC_TABLE)
_STATIC_EXACT = {field: index for index, field in enumerate(STATIC_TABLE, 1)}
_STATIC_NAME: dict[str, int] = {}
for _index, (_name, _value) in enumerate(STATIC_TABLE, 1):
    _STATIC_NAME.setdefault(_name, _index)

ENTRY_OVERHEAD = 32  # octets counted for each entry besides its name and value (section 4.1)

# Appendix B: the length in bits of each symbol's code, symbols 0-255 and EOS (256). The code is
# canonical: codes of one length are consecutive in symbol order, shorter ones first, so the
# lengths alone define it.
HUFFMAN_CODE_LENGTHS: tuple[int, ...] = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,   # 0-15
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,   # 16-31
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,           # ' ' to '/'
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,                # '0' to '?'
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,                  # '@' to 'O'
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,               # 'P' to '_'
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,                  # '`' to 'o'
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,              # 'p' to 127
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,   # 128-143
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,   # 144-159
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,   # 160-175
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,   # 176-191
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,   # 192-207
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,   # 208-223
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,   # 224-239
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,   # 240-255
    30,                                                               # EOS
)
EOS = 256


def huffman_codes(lengths: tuple[int, ...] = HUFFMAN_CODE_LENGTHS) -> list[tuple[int, int]]:
    """(code, length) of every symbol, the canonical code of these lengths."""
    codes = [(0, 0)] * len(lengths)
    code, previous = 0, 0
    for length, symbol in sorted((length, symbol) for symbol, length in enumerate(lengths)):
        code <<= length - previous
        codes[symbol] = (code, length)
        code, previous = code + 1, length
    return codes


# The decoding machine. Its states are the Huffman tree's 256 inner nodes (0 is the root): the
# bits read since the last whole symbol. One step reads a nibble; a nibble holds at most one
# whole symbol, since the shortest code has 5 bits.
_NONE, _FAIL = 256, 257  # a step's symbol when it completes none, and when it completes EOS
# End of a string in a state: fine, padding longer than 7 bits, padding that is not all ones.
_END_OK, _END_TOO_LONG, _END_NOT_ONES = 0, 1, 2
_END_ERRORS = {_END_TOO_LONG: "Huffman padding longer than 7 bits",
               _END_NOT_ONES: "Huffman padding not all ones"}


def _build_machine() -> tuple[list[tuple[int, int]], list[int]]:
    children = [[0, 0]]  # per inner node, per bit: an inner node >= 0, or a leaf as ~symbol
    depth, ones = [0], [True]
    for symbol, (code, length) in enumerate(huffman_codes()):
        node = 0
        for shift in range(length - 1, 0, -1):
            bit = (code >> shift) & 1
            if children[node][bit] == 0:
                children[node][bit] = len(children)
                children.append([0, 0])
                depth.append(depth[node] + 1)
                ones.append(ones[node] and bit == 1)
            node = children[node][bit]
        children[node][code & 1] = ~symbol
    assert len(children) == 256, "the Huffman code lengths do not make a full tree"
    steps = []
    for state in range(256):
        for nibble in range(16):
            node, symbol = state, _NONE
            for shift in (3, 2, 1, 0):
                child = children[node][(nibble >> shift) & 1]
                if child >= 0:
                    node = child
                else:
                    symbol, node = (_FAIL if ~child == EOS else ~child), 0
            steps.append((node * 16, symbol))  # the next state premultiplied, to index steps
    ends = [_END_OK if state == 0 or (ones[state] and depth[state] <= 7)
            else _END_NOT_ONES if not ones[state] else _END_TOO_LONG for state in range(256)]
    return steps, ends


_STEPS, _ENDS = _build_machine()


def py_huffman_decode(data: bytes) -> bytes:
    """The octets a Huffman-coded string stands for; ValueError for EOS or bad padding."""
    out = bytearray()
    append, steps, state = out.append, _STEPS, 0
    for byte in data:
        state, symbol = steps[state + (byte >> 4)]
        if symbol < 256:
            append(symbol)
        elif symbol == _FAIL:
            raise ValueError("EOS symbol in a Huffman string")
        state, symbol = steps[state + (byte & 15)]
        if symbol < 256:
            append(symbol)
        elif symbol == _FAIL:
            raise ValueError("EOS symbol in a Huffman string")
    if _ENDS[state >> 4]:
        raise ValueError(_END_ERRORS[_ENDS[state >> 4]])
    return bytes(out)


_native = speedups.load("ferrymq.grpc._hpack")
huffman_decode = _native.huffman_decode if _native is not None else py_huffman_decode
_decode_block = None  # the compiled Decoder.decode
if _native is not None:
    _native.register(HpackError, HeaderListTooLarge, STATIC_TABLE)
    _decode_block = _native.decode_block

_MAX_INTEGER = 2**32
_MAX_CONTINUATION = 8


def _integer_rest(block: bytes, pos: int, value: int) -> tuple[int, int]:
    """An integer whose prefix was full (``value``): its continuation octets from ``pos``."""
    shift, end = 0, len(block)
    for _ in range(_MAX_CONTINUATION):
        if pos >= end:
            raise HpackError("header block ends inside an integer")
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if value > _MAX_INTEGER:
            raise HpackError("integer larger than 2**32")
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise HpackError(f"integer longer than {_MAX_CONTINUATION} continuation octets")


def _string(block: bytes, pos: int) -> tuple[str, int]:
    """The string literal at ``pos`` and the position after it."""
    if pos >= len(block):
        raise HpackError("header block ends before a string literal")
    first = block[pos]
    length = first & 0x7F
    pos += 1
    if length == 0x7F:
        length, pos = _integer_rest(block, pos, length)
    end = pos + length
    if end > len(block):
        raise HpackError(f"string literal of {length} octets runs past the header block's end")
    if first & 0x80:
        try:
            return str(huffman_decode(block[pos:end]), "latin-1"), end
        except ValueError as exc:
            raise HpackError(str(exc)) from None
    return str(block[pos:end], "latin-1"), end  # bytes, bytearray or memoryview alike


class Decoder:
    """One connection's decoding context: the dynamic table the peer's encoder keeps in step with.

    ``max_table_size`` is the limit we advertised (SETTINGS_HEADER_TABLE_SIZE); the peer moves
    the table's size within it with size updates. Lowering it shrinks the table at once, as the
    peer's next block must.

    ``decode`` is one call of the compiled ``decode_block`` (ferrymq/grpc/_hpack.c, through
    ferrymq/common/speedups.py) where it was built, else ``py_decode``, its specification. Both
    read and update the same state: ``_entries`` (the dynamic table, oldest first, so a new
    entry is appended and evicted ones are cut from the front), ``table_size``,
    ``table_capacity`` and ``_max_table_size``.
    """

    def __init__(self, max_table_size: int = 4096) -> None:
        self._max_table_size = max_table_size
        self.table_capacity = max_table_size  # the size the peer chose, at most max_table_size
        self.table_size = 0  # octets in the dynamic table, entry overheads included
        self._entries: list[tuple[str, str]] = []  # oldest first: index 62 is _entries[-1]

    @property
    def max_table_size(self) -> int:
        return self._max_table_size

    @max_table_size.setter
    def max_table_size(self, size: int) -> None:
        self._max_table_size = size
        if self.table_capacity > size:
            self.table_capacity = size
            self._evict()

    @property
    def dynamic_table(self) -> list[tuple[str, str]]:
        """The dynamic table's entries, newest (index 62) first."""
        return self._entries[::-1]

    def _evict(self, room: int = 0) -> None:
        """Evict the oldest entries until the table's size is at most its capacity less ``room``."""
        entries, size, drop = self._entries, self.table_size, 0
        while size > self.table_capacity - room and drop < len(entries):
            name, value = entries[drop]
            size -= len(name) + len(value) + ENTRY_OVERHEAD
            drop += 1
        if drop:
            del entries[:drop]
            self.table_size = 0 if not entries else size

    def _add(self, field: tuple[str, str]) -> None:
        size = len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
        if size > self.table_capacity:  # larger than the whole table: it empties it (section 4.4)
            self._entries.clear()
            self.table_size = 0
            return
        self._evict(size)  # older entries only: room for the new one
        self._entries.append(field)
        self.table_size += size

    def _literal(self, block, pos: int, index: int, prefix_max: int) -> tuple[tuple[str, str], int]:
        """A literal field after its first byte: its name (indexed when ``index`` > 0, the
        prefix's value continued when it is ``prefix_max``) and its value."""
        if index == prefix_max:
            index, pos = _integer_rest(block, pos, index)
        if index:
            name = self._field(index)[0]
        else:
            name, pos = _string(block, pos)
        value, pos = _string(block, pos)
        return (name, value), pos

    def _field(self, index: int) -> tuple[str, str]:
        if index <= _STATIC_COUNT:
            if index == 0:
                raise HpackError("index 0")
            return STATIC_TABLE[index - 1]
        if index - _STATIC_COUNT > len(self._entries):
            raise HpackError(f"index {index} beyond the tables "
                             f"({_STATIC_COUNT} static, {len(self._entries)} dynamic entries)")
        return self._entries[_STATIC_COUNT - index]  # 62 is the last

    def py_decode(self, block: bytes | bytearray | memoryview, max_list_bytes: int = 65536) -> list[tuple[str, str]]:
        """The header list of one whole header block (HEADERS and its CONTINUATIONs joined).

        A list larger than ``max_list_bytes`` (names, values and 32 octets per field, as
        SETTINGS_MAX_HEADER_LIST_SIZE counts) is decoded to the end all the same, to keep the
        dynamic table in step, and then refused with HeaderListTooLarge. In Python: the
        specification of the compiled ``decode``, and ``decode`` itself where that was not built.
        """
        headers: list[tuple[str, str]] = []
        list_size = 0  # above 0 once a field was read: every field counts 32 octets at least
        pos, end = 0, len(block)
        static, entries = STATIC_TABLE, self._entries
        while pos < end:
            first = block[pos]
            pos += 1
            if first & 0x80:  # indexed field
                index = first & 0x7F
                if index == 0x7F:
                    index, pos = _integer_rest(block, pos, index)
                if 0 < index <= _STATIC_COUNT:
                    field = static[index - 1]
                elif _STATIC_COUNT < index <= _STATIC_COUNT + len(entries):
                    field = entries[_STATIC_COUNT - index]
                else:
                    field = self._field(index)  # to raise the error
            elif first & 0x40:  # literal with incremental indexing
                field, pos = self._literal(block, pos, first & 0x3F, 0x3F)
                self._add(field)
            elif first & 0x20:  # dynamic table size update
                if list_size:
                    raise HpackError("dynamic table size update after a header field")
                size = first & 0x1F
                if size == 0x1F:
                    size, pos = _integer_rest(block, pos, size)
                if size > self._max_table_size:
                    raise HpackError(f"dynamic table size update to {size}, above the limit of {self._max_table_size}")
                self.table_capacity = size
                self._evict()
                continue
            else:  # literal without indexing (0000) or never indexed (0001)
                field, pos = self._literal(block, pos, first & 0x0F, 0x0F)
            list_size += len(field[0]) + len(field[1]) + ENTRY_OVERHEAD
            if list_size <= max_list_bytes:
                headers.append(field)
        if list_size > max_list_bytes:
            raise HeaderListTooLarge(f"header list of {list_size} octets, above the limit of {max_list_bytes}")
        return headers

    if _decode_block is not None:
        def decode(self, block: bytes | bytearray | memoryview, max_list_bytes: int = 65536) -> list[tuple[str, str]]:
            """``py_decode`` in one compiled call: the same header list, errors and table."""
            return _decode_block(self, block, max_list_bytes)
    else:
        decode = py_decode


def _put_integer(out: bytearray, value: int, prefix_bits: int, flags: int) -> None:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        out.append(flags | value)
        return
    out.append(flags | limit)
    value -= limit
    while value >= 0x80:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)


def _put_string(out: bytearray, text: str) -> None:
    raw = text.encode("latin-1")
    _put_integer(out, len(raw), 7, 0)
    out += raw


class Encoder:
    """Header blocks for a peer, stateless: a field of the static table is indexed, any other
    is a literal without indexing (its name indexed when the static table has it)."""

    def encode(self, headers: list[tuple[str, str]]) -> bytes:
        out = bytearray()
        for name, value in headers:
            index = _STATIC_EXACT.get((name, value))
            if index is not None:
                out.append(0x80 | index)  # all static indexes fit in the 7-bit prefix
                continue
            if name != name.lower():
                raise ValueError(f"header name {name!r} is not lowercase")
            index = _STATIC_NAME.get(name)
            if index is not None:
                _put_integer(out, index, 4, 0)
            else:
                out.append(0)
                _put_string(out, name)
            _put_string(out, value)
        return bytes(out)
