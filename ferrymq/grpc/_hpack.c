/*
 * ferrymq.grpc._hpack: HPACK (RFC 7541) decoding, compiled: a whole header block in one call,
 * and Huffman-coded strings (section 5.2, Appendix B) on their own.
 *
 * The specification is ferrymq/grpc/hpack.py, which stays the fallback: Decoder.py_decode for a
 * header block, py_huffman_decode for a Huffman string (the same nibble-wise machine, built here
 * at import from the same code lengths). Both give the same header lists, the same errors and
 * the same dynamic tables; tests/grpc/test_hpack.py holds them to it.
 *
 *   register(error: type, too_large: type, static_table: tuple) -> None
 *       once, at hpack.py's import: HpackError and HeaderListTooLarge, the classes decode_block
 *       raises, and STATIC_TABLE (Appendix A: 61 (name, value) tuples of str, index 1 first),
 *       whose tuples indexed static fields then decode to as they are
 *   decode_block(decoder: hpack.Decoder, block: bytes-like, max_list_bytes: int)
 *       -> [(name, value)], names and values str as Latin-1
 *       reads and updates the decoder's dynamic table: decoder._entries (a list of (name, value),
 *       oldest first: index 62 is the last), decoder.table_size and decoder.table_capacity,
 *       within decoder._max_table_size. HpackError for a malformed block, with the Python
 *       decoder's messages; HeaderListTooLarge once the whole block was read, when its list is
 *       above max_list_bytes. Either way the table is left as the fields read made it.
 *   huffman_decode(data: bytes-like) -> bytes
 *       ValueError: "EOS symbol in a Huffman string", "Huffman padding longer than 7 bits",
 *       "Huffman padding not all ones"
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#define EOS 256
#define STATES 256 /* the code tree's inner nodes; 0 is the root */

/* Appendix B: each symbol's code length in bits, 0-255 then EOS. The code is canonical. */
static const uint8_t code_lengths[257] = {
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    30,
};

/* One step from a state on a nibble: the next state, and the symbol it completes. */
#define STEP_NONE 256
#define STEP_FAIL 257
typedef struct {
    uint8_t next;
    uint16_t symbol; /* 0-255, STEP_NONE or STEP_FAIL (EOS) */
} Step;

enum { END_OK, END_TOO_LONG, END_NOT_ONES };

static Step steps[STATES][16];
static uint8_t ends[STATES];

static int
build_machine(void)
{
    int16_t children[STATES][2]; /* an inner node > 0, a leaf as -1 - symbol, 0 for none yet */
    uint8_t depth[STATES], ones[STATES];
    uint32_t codes[257];
    int nodes = 1;

    /* canonical codes: by length, then by symbol */
    uint32_t code = 0;
    int previous = 0;
    for (int length = 1; length <= 30; length++) {
        for (int symbol = 0; symbol <= EOS; symbol++) {
            if (code_lengths[symbol] != length)
                continue;
            code <<= length - previous;
            codes[symbol] = code++;
            previous = length;
        }
    }

    memset(children, 0, sizeof(children));
    depth[0] = 0;
    ones[0] = 1;
    for (int symbol = 0; symbol <= EOS; symbol++) {
        int length = code_lengths[symbol], node = 0;
        for (int shift = length - 1; shift > 0; shift--) {
            int bit = (codes[symbol] >> shift) & 1;
            if (children[node][bit] == 0) {
                if (nodes == STATES)
                    return -1;
                children[node][bit] = (int16_t)nodes;
                depth[nodes] = depth[node] + 1;
                ones[nodes] = ones[node] && bit;
                nodes++;
            }
            if (children[node][bit] < 0)
                return -1;
            node = children[node][bit];
        }
        children[node][codes[symbol] & 1] = (int16_t)(-1 - symbol);
    }
    if (nodes != STATES)
        return -1;

    for (int state = 0; state < STATES; state++) {
        for (int nibble = 0; nibble < 16; nibble++) {
            int node = state, symbol = STEP_NONE;
            for (int shift = 3; shift >= 0; shift--) {
                int child = children[node][(nibble >> shift) & 1];
                if (child > 0) {
                    node = child;
                } else {
                    symbol = -1 - child == EOS ? STEP_FAIL : -1 - child;
                    node = 0;
                }
            }
            steps[state][nibble].next = (uint8_t)node;
            steps[state][nibble].symbol = (uint16_t)symbol;
        }
        ends[state] = state == 0 || (ones[state] && depth[state] <= 7) ? END_OK
                      : !ones[state] ? END_NOT_ONES : END_TOO_LONG;
    }
    return 0;
}

/* ------------------------------------------------------------------ Huffman strings (section 5.2) */

/* Room for a Huffman string's octets: the shortest code has 5 bits, so at most 8/5 octets out
 * per octet in. */
#define HUFFMAN_ROOM(n) ((n) + (n) * 3 / 5 + 1)

/* The octets the n Huffman-coded octets at p stand for, into out (HUFFMAN_ROOM(n) octets), their
 * count in *written: NULL, or what is wrong with the string. */
static const char *
huffman_run(const unsigned char *p, Py_ssize_t n, unsigned char *out, Py_ssize_t *written)
{
    const unsigned char *end = p + n;
    unsigned char *o = out;
    unsigned state = 0;
    for (; p < end; p++) {
        const Step *step = &steps[state][*p >> 4];
        if (step->symbol < STEP_NONE)
            *o++ = (unsigned char)step->symbol;
        else if (step->symbol == STEP_FAIL)
            return "EOS symbol in a Huffman string";
        step = &steps[step->next][*p & 15];
        if (step->symbol < STEP_NONE)
            *o++ = (unsigned char)step->symbol;
        else if (step->symbol == STEP_FAIL)
            return "EOS symbol in a Huffman string";
        state = step->next;
    }
    *written = o - out;
    if (ends[state] == END_TOO_LONG)
        return "Huffman padding longer than 7 bits";
    if (ends[state] == END_NOT_ONES)
        return "Huffman padding not all ones";
    return NULL;
}

static PyObject *
huffman_decode(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, HUFFMAN_ROOM(view.len));
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t written = 0;
    const char *error = huffman_run(view.buf, view.len, (unsigned char *)PyBytes_AS_STRING(out), &written);
    PyBuffer_Release(&view);
    if (error != NULL) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    if (_PyBytes_Resize(&out, written) < 0)
        return NULL;
    return out;
}

/* ------------------------------------------------------------------ header blocks */

#define STATIC_COUNT 61            /* Appendix A's entries */
#define ENTRY_OVERHEAD 32          /* octets an entry counts besides its name and value (section 4.1) */
#define MAX_INTEGER 0x100000000ULL /* 2**32: the largest integer accepted, as hpack.py's _MAX_INTEGER */
#define MAX_CONTINUATION 8         /* an integer's continuation octets at most, as _MAX_CONTINUATION */

typedef struct {
    PyObject *error;        /* hpack.HpackError */
    PyObject *too_large;    /* hpack.HeaderListTooLarge */
    PyObject *static_table; /* hpack.STATIC_TABLE, checked by register */
    /* the Decoder's attributes, interned */
    PyObject *entries_name, *size_name, *capacity_name, *limit_name;
} State;

/* One header block being decoded, and the decoder's dynamic table (section 2.3.2) it updates. */
typedef struct {
    State *st;
    const unsigned char *p, *end; /* the next octet of the block, and its end */
    PyObject *entries;            /* the table: a list of (name, value), oldest first */
    long long size;               /* its size: names, values and 32 octets an entry (section 4.1) */
    long long capacity;           /* its maximum size, as the peer last set it (section 4.2) */
    long long limit;              /* the most the peer may set: our SETTINGS_HEADER_TABLE_SIZE */
} Block;

static int
fail(Block *b, const char *message)
{
    PyErr_SetString(b->st->error, message);
    return -1;
}

/* A field's size as an entry (section 4.1): its name's and value's octets, Latin-1 strings
 * having one octet a character, and 32 more. Only for fields known to be (str, str). */
#define FIELD_SIZE(field) \
    (PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(field, 0)) + PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(field, 1)) + \
     ENTRY_OVERHEAD)

/* The size of an entry of the dynamic table, a list Python code can reach: checked to be a
 * (str, str) tuple first (exactly those types, as decoding makes them: no subclass with a __del__
 * to run when it is evicted), or -1 with TypeError. */
static Py_ssize_t
entry_size(PyObject *entry)
{
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 ||
        !PyUnicode_CheckExact(PyTuple_GET_ITEM(entry, 0)) || !PyUnicode_CheckExact(PyTuple_GET_ITEM(entry, 1))) {
        PyErr_SetString(PyExc_TypeError, "a dynamic table entry is not a (str, str) tuple");
        return -1;
    }
    return FIELD_SIZE(entry);
}

/* Section 5.1: an integer on an N-bit prefix, from the first octet's prefix bits (prefix_max, 2**N
 * - 1, masks them). A prefix below prefix_max is the value; a full one is followed by continuation
 * octets of 7 bits each, least significant first, the high bit set on all but the last. Capped as
 * hpack.py's _integer_rest caps it: at most 8 continuation octets, a value of at most 2**32 (so
 * 64 bits never overflow: 2**32 + 127 << 49 < 2**57). */
static int
read_integer(Block *b, unsigned first, unsigned prefix_max, uint64_t *out)
{
    uint64_t value = first & prefix_max;
    if (value == prefix_max) {
        for (int shift = 0;; shift += 7) {
            if (shift == 7 * MAX_CONTINUATION)
                return fail(b, "integer longer than 8 continuation octets");
            if (b->p >= b->end)
                return fail(b, "header block ends inside an integer");
            unsigned octet = *b->p++;
            value += (uint64_t)(octet & 0x7F) << shift;
            if (value > MAX_INTEGER)
                return fail(b, "integer larger than 2**32");
            if (!(octet & 0x80))
                break;
        }
    }
    *out = value;
    return 0;
}

/* Section 5.2: a string literal, H (Huffman-coded) and its length in octets on a 7-bit prefix,
 * then its octets: a new str of them (or of the octets they code) as Latin-1. */
static PyObject *
read_string(Block *b)
{
    if (b->p >= b->end) {
        fail(b, "header block ends before a string literal");
        return NULL;
    }
    unsigned first = *b->p++;
    uint64_t length;
    if (read_integer(b, first, 0x7F, &length) < 0)
        return NULL;
    if (length > (uint64_t)(b->end - b->p)) {
        PyErr_Format(b->st->error, "string literal of %llu octets runs past the header block's end",
                     (unsigned long long)length);
        return NULL;
    }
    const unsigned char *start = b->p;
    Py_ssize_t n = (Py_ssize_t)length;
    b->p += n;
    if (!(first & 0x80))
        return PyUnicode_DecodeLatin1((const char *)start, n, NULL);

    unsigned char small[256], *out = small; /* the usual header value fits on the stack */
    if (HUFFMAN_ROOM(n) > (Py_ssize_t)sizeof(small) && (out = PyMem_Malloc(HUFFMAN_ROOM(n))) == NULL)
        return PyErr_NoMemory();
    Py_ssize_t written = 0;
    const char *error = huffman_run(start, n, out, &written);
    PyObject *text = NULL;
    if (error != NULL)
        fail(b, error);
    else
        text = PyUnicode_DecodeLatin1((const char *)out, written, NULL);
    if (out != small)
        PyMem_Free(out);
    return text;
}

/* Section 2.3.3: the field at an index, static entries from 1, then the dynamic table's from 62,
 * newest first (the list's last): a borrowed reference, or NULL with HpackError. */
static PyObject *
field_at(Block *b, uint64_t index)
{
    if (index == 0) {
        fail(b, "index 0");
        return NULL;
    }
    if (index <= STATIC_COUNT)
        return PyTuple_GET_ITEM(b->st->static_table, index - 1);
    Py_ssize_t count = PyList_GET_SIZE(b->entries);
    if (index - STATIC_COUNT > (uint64_t)count) {
        PyErr_Format(b->st->error, "index %llu beyond the tables (%d static, %zd dynamic entries)",
                     (unsigned long long)index, STATIC_COUNT, count);
        return NULL;
    }
    PyObject *field = PyList_GET_ITEM(b->entries, count - (Py_ssize_t)(index - STATIC_COUNT));
    return entry_size(field) < 0 ? NULL : field;
}

/* Section 4.4: evict the oldest entries (the list's front) until the table's size is at most
 * its capacity less room. */
static int
evict(Block *b, long long room)
{
    Py_ssize_t count = PyList_GET_SIZE(b->entries), drop = 0;
    long long size = b->size;
    while (size > b->capacity - room && drop < count) {
        Py_ssize_t entry = entry_size(PyList_GET_ITEM(b->entries, drop));
        if (entry < 0)
            return -1;
        size -= entry;
        drop++;
    }
    if (drop == 0)
        return 0;
    if (PyList_SetSlice(b->entries, 0, drop, NULL) < 0)
        return -1;
    b->size = drop == count ? 0 : size;
    return 0;
}

/* Section 4.4: a new entry, made room for by evicting older ones; one larger than the table's
 * capacity empties it and is not added. */
static int
add_entry(Block *b, PyObject *field)
{
    Py_ssize_t size = FIELD_SIZE(field);
    if (size > b->capacity) {
        b->size = 0;
        return PyList_SetSlice(b->entries, 0, PyList_GET_SIZE(b->entries), NULL);
    }
    if (evict(b, size) < 0 || PyList_Append(b->entries, field) < 0)
        return -1;
    b->size += size; /* at most the capacity: evict left room for it */
    return 0;
}

/* Section 6.2: a literal field after its first octet, whose prefix (prefix_max masks it) holds
 * the name's index, or 0 for a name given as a string literal; then the value, a string
 * literal. A new (name, value) tuple. */
static PyObject *
read_literal(Block *b, unsigned first, unsigned prefix_max)
{
    uint64_t index;
    PyObject *name, *value, *field;
    if (read_integer(b, first, prefix_max, &index) < 0)
        return NULL;
    if (index != 0) {
        PyObject *named = field_at(b, index);
        if (named == NULL)
            return NULL;
        name = Py_NewRef(PyTuple_GET_ITEM(named, 0)); /* the table's str, shared */
    } else if ((name = read_string(b)) == NULL) {
        return NULL;
    }
    if ((value = read_string(b)) == NULL) {
        Py_DECREF(name);
        return NULL;
    }
    if ((field = PyTuple_New(2)) == NULL) {
        Py_DECREF(name);
        Py_DECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(field, 0, name);
    PyTuple_SET_ITEM(field, 1, value);
    return field;
}

/* Section 3.2: the block's fields in order, the table updated as they go. Fields past
 * max_list_bytes (names, values and 32 octets each, as SETTINGS_MAX_HEADER_LIST_SIZE counts) are
 * still read, to keep the table in step, and then the list is refused with HeaderListTooLarge. */
static PyObject *
decode_fields(Block *b, long long max_list_bytes)
{
    PyObject *headers = PyList_New(0);
    if (headers == NULL)
        return NULL;
    long long list_size = 0; /* above 0 once a field was read: each counts 32 octets at least */
    while (b->p < b->end) {
        unsigned first = *b->p++;
        uint64_t index;
        PyObject *field; /* a new reference */
        if (first & 0x80) {
            /* 6.1 indexed field: 1, the index on a 7-bit prefix; the table's tuple itself */
            if (read_integer(b, first, 0x7F, &index) < 0 || (field = field_at(b, index)) == NULL)
                goto error;
            Py_INCREF(field);
        } else if (first & 0x40) {
            /* 6.2.1 literal with incremental indexing: 01, the name's index on a 6-bit prefix */
            if ((field = read_literal(b, first, 0x3F)) == NULL)
                goto error;
            if (add_entry(b, field) < 0) {
                Py_DECREF(field);
                goto error;
            }
        } else if (first & 0x20) {
            /* 6.3 dynamic table size update: 001, the new capacity on a 5-bit prefix; only at the
             * block's start (section 4.2), within our limit */
            uint64_t capacity;
            if (list_size) {
                fail(b, "dynamic table size update after a header field");
                goto error;
            }
            if (read_integer(b, first, 0x1F, &capacity) < 0)
                goto error;
            if ((long long)capacity > b->limit) { /* at most 2**32: no overflow */
                PyErr_Format(b->st->error, "dynamic table size update to %llu, above the limit of %lld",
                             (unsigned long long)capacity, b->limit);
                goto error;
            }
            b->capacity = (long long)capacity;
            if (evict(b, 0) < 0)
                goto error;
            continue;
        } else {
            /* 6.2.2 literal without indexing (0000) and 6.2.3 never indexed (0001): the name's
             * index on a 4-bit prefix; neither goes into the table */
            if ((field = read_literal(b, first, 0x0F)) == NULL)
                goto error;
        }
        long long size = FIELD_SIZE(field);
        list_size = list_size > LLONG_MAX - size ? LLONG_MAX : list_size + size;
        if (list_size <= max_list_bytes && PyList_Append(headers, field) < 0) {
            Py_DECREF(field);
            goto error;
        }
        Py_DECREF(field);
    }
    if (list_size > max_list_bytes) {
        PyErr_Format(b->st->too_large, "header list of %lld octets, above the limit of %lld", list_size,
                     max_list_bytes);
        goto error;
    }
    return headers;
error:
    Py_DECREF(headers);
    return NULL;
}

/* An int as a long long, a larger one saturated (as good as unlimited, or as refusing all). */
static int
as_long_long(PyObject *number, long long *out)
{
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (value == -1 && PyErr_Occurred())
        return -1;
    *out = overflow > 0 ? LLONG_MAX : overflow < 0 ? LLONG_MIN : value;
    return 0;
}

/* One of the decoder's sizes: table_size and table_capacity must fit (they only ever get
 * added to below a capacity), _max_table_size is saturated. */
static int
get_size(PyObject *decoder, PyObject *name, int saturate, long long *out)
{
    PyObject *number = PyObject_GetAttr(decoder, name);
    if (number == NULL)
        return -1;
    int rc;
    if (saturate) {
        rc = as_long_long(number, out);
    } else {
        *out = PyLong_AsLongLong(number);
        rc = *out == -1 && PyErr_Occurred() ? -1 : 0;
    }
    Py_DECREF(number);
    return rc;
}

static int
set_size(PyObject *decoder, PyObject *name, long long size)
{
    PyObject *number = PyLong_FromLongLong(size);
    if (number == NULL)
        return -1;
    int rc = PyObject_SetAttr(decoder, name, number);
    Py_DECREF(number);
    return rc;
}

/* The table's sizes back into the decoder when the block changed them, keeping the exception a
 * malformed block raised (the table stays as far as the block got, as in Python). */
static int
put_sizes(PyObject *decoder, const Block *b, long long size, long long capacity)
{
    if (b->size == size && b->capacity == capacity)
        return 0;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *raised = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
#endif
    int rc = 0;
    if (b->size != size)
        rc = set_size(decoder, b->st->size_name, b->size);
    if (rc == 0 && b->capacity != capacity)
        rc = set_size(decoder, b->st->capacity_name, b->capacity);
#if PY_VERSION_HEX >= 0x030C0000
    if (rc < 0)
        Py_XDECREF(raised); /* the new error wins */
    else if (raised != NULL)
        PyErr_SetRaisedException(raised);
#else
    if (rc < 0) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
    } else if (type != NULL) {
        PyErr_Restore(type, value, traceback);
    }
#endif
    return rc;
}

static PyObject *
decode_block(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = PyModule_GetState(module);
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "decode_block(decoder, block, max_list_bytes) takes 3 arguments");
        return NULL;
    }
    if (st->error == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ferrymq.grpc._hpack.register was not called");
        return NULL;
    }
    PyObject *decoder = args[0], *headers = NULL;
    long long max_list_bytes, size, capacity;
    Block b = {.st = st};
    Py_buffer view;
    if (as_long_long(args[2], &max_list_bytes) < 0 || (b.entries = PyObject_GetAttr(decoder, st->entries_name)) == NULL)
        return NULL;
    if (!PyList_Check(b.entries)) {
        PyErr_SetString(PyExc_TypeError, "the decoder's _entries is not a list");
    } else if (get_size(decoder, st->size_name, 0, &b.size) == 0 &&
               get_size(decoder, st->capacity_name, 0, &b.capacity) == 0 &&
               get_size(decoder, st->limit_name, 1, &b.limit) == 0 &&
               PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) == 0) {
        b.p = view.buf;
        b.end = b.p + view.len;
        size = b.size;
        capacity = b.capacity;
        headers = decode_fields(&b, max_list_bytes);
        PyBuffer_Release(&view);
        if (put_sizes(decoder, &b, size, capacity) < 0)
            Py_CLEAR(headers);
    }
    Py_DECREF(b.entries);
    return headers;
}

/* register(error, too_large, static_table): the classes to raise and Appendix A's table, from
 * hpack.py; the table is checked here, as decode_block then trusts it. */
static PyObject *
register_hpack(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    State *st = PyModule_GetState(module);
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "register(error, too_large, static_table) takes 3 arguments");
        return NULL;
    }
    if (!PyExceptionClass_Check(args[0]) || !PyExceptionClass_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "register: error and too_large must be exception classes");
        return NULL;
    }
    PyObject *table = args[2];
    int good = PyTuple_CheckExact(table) && PyTuple_GET_SIZE(table) == STATIC_COUNT;
    for (Py_ssize_t i = 0; good && i < STATIC_COUNT; i++) {
        PyObject *entry = PyTuple_GET_ITEM(table, i);
        good = PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 2 &&
               PyUnicode_CheckExact(PyTuple_GET_ITEM(entry, 0)) && PyUnicode_CheckExact(PyTuple_GET_ITEM(entry, 1));
    }
    if (!good) {
        PyErr_SetString(PyExc_TypeError, "register: static_table must be a tuple of 61 (str, str) tuples");
        return NULL;
    }
    Py_XSETREF(st->error, Py_NewRef(args[0]));
    Py_XSETREF(st->too_large, Py_NewRef(args[1]));
    Py_XSETREF(st->static_table, Py_NewRef(table));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ the module */

static PyMethodDef methods[] = {
    {"register", (PyCFunction)(void (*)(void))register_hpack, METH_FASTCALL,
     "register(error, too_large, static_table): hpack.py's exception classes and STATIC_TABLE"},
    {"decode_block", (PyCFunction)(void (*)(void))decode_block, METH_FASTCALL,
     "decode_block(decoder, block, max_list_bytes) -> the header list of one header block"},
    {"huffman_decode", huffman_decode, METH_O, "the octets of a Huffman-coded HPACK string"},
    {NULL, NULL, 0, NULL},
};

static int
module_exec(PyObject *module)
{
    State *st = PyModule_GetState(module);
    if ((st->entries_name = PyUnicode_InternFromString("_entries")) == NULL ||
        (st->size_name = PyUnicode_InternFromString("table_size")) == NULL ||
        (st->capacity_name = PyUnicode_InternFromString("table_capacity")) == NULL ||
        (st->limit_name = PyUnicode_InternFromString("_max_table_size")) == NULL)
        return -1;
    return 0;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    State *st = PyModule_GetState(module);
    Py_VISIT(st->error);
    Py_VISIT(st->too_large);
    Py_VISIT(st->static_table);
    return 0;
}

static int
module_clear(PyObject *module)
{
    State *st = PyModule_GetState(module);
    Py_CLEAR(st->error);
    Py_CLEAR(st->too_large);
    Py_CLEAR(st->static_table);
    Py_CLEAR(st->entries_name);
    Py_CLEAR(st->size_name);
    Py_CLEAR(st->capacity_name);
    Py_CLEAR(st->limit_name);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ferrymq.grpc._hpack",
    .m_doc = "HPACK decoding, compiled: header blocks and Huffman strings (see ferrymq/grpc/hpack.py).",
    .m_size = sizeof(State),
    .m_methods = methods,
    .m_slots = slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__hpack(void)
{
    if (build_machine() < 0) {
        PyErr_SetString(PyExc_ImportError, "ferrymq.grpc._hpack: the Huffman code lengths do not make a full tree");
        return NULL;
    }
    return PyModuleDef_Init(&module_def);
}
