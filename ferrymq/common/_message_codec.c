/*
 * ferrymq.common._message_codec: compiled versions of the per-message codecs the broker runs
 * for every message it stores (issue 11).
 *
 * The specification of each function is its pure-Python twin, which stays the reference
 * and the fallback (ferrymq/common/speedups.py loads it; FERRYMQ_NO_EXTENSIONS=1 forces
 * Python): tests/common/test_speedups.py runs both over the same byte vectors and random
 * input and requires identical results, errors included.
 *
 *   java_string_hash(s)        ferrymq.common.java_hash.py_java_string_hash
 *   decode_properties(s)       ferrymq.common.message.py_decode_properties
 *   encode_properties(d)       ferrymq.common.message.py_encode_properties (dicts only)
 *   decode_batch_body(b)       ferrymq.common.message.py_decode_batch_body
 *   pack_record(...)           ferrymq.common.message.py_pack_record
 *   index_entries(...)         ferrymq.store.index_file.py_index_entries
 *   link_slots(...)            ferrymq.store.index_file.py_link_slots
 *   encode_records(...)        ferrymq.common.message.py_encode_records
 *   stamp_records(...)         ferrymq.common.message.py_stamp_records
 *   place_records(...)         ferrymq.common.message.py_place_records
 *   queue_entries(...)         ferrymq.store.dispatch.py_queue_entries
 *   index_postings(...)        ferrymq.store.index_service.py_index_postings
 *   decode_run(...)            ferrymq.common.message.py_decode_run
 *   batch_messages(...)        ferrymq.common.message.py_batch_messages
 *
 * The last four are a put's whole run of messages in one call each (encode the records, stamp
 * their offsets, give the messages their place, make their ConsumeQueue entries): a batch of 32
 * is one call, not 32 trips through the interpreter (issue 11, batch32). decode_run is the way
 * back: the well-formed records of a pull body or a CommitLog read, as MessageExt, in one call.
 *
 * Plain CPython C API, no dependency beyond the interpreter's headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#ifndef Py_T_OBJECT_EX  /* the member types' names before Python 3.12 */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

#define NAME_VALUE_SEP 0x01
#define PROPERTY_SEP 0x02

/* ------------------------------------------------------------------ Java String.hashCode */

static int32_t
java_hash_of(PyObject *arg)  /* arg: a str */
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    int kind = PyUnicode_KIND(arg);
    const void *data = PyUnicode_DATA(arg);
    uint32_t h = 0;
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)data;
        for (Py_ssize_t i = 0; i < n; i++)
            h = 31u * h + p[i];
    } else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *p = (const Py_UCS2 *)data;
        for (Py_ssize_t i = 0; i < n; i++)
            h = 31u * h + p[i];
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c >= 0x10000) {  /* two UTF-16 units, as the JVM holds it */
                c -= 0x10000;
                h = 31u * h + (0xD800u + (c >> 10));
                h = 31u * h + (0xDC00u + (c & 0x3FFu));
            } else {
                h = 31u * h + c;
            }
        }
    }
    return (int32_t)h;
}

static PyObject *
java_string_hash(PyObject *module, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "java_string_hash() needs a str, not %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    return PyLong_FromLong((long)java_hash_of(arg));
}

/* ------------------------------------------------------------------ properties */

/* name 0x01 value 0x02 ... -> dict; empty names or values are dropped, a later name wins. */
static int
decode_properties_into(PyObject *s, PyObject *out)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    Py_ssize_t start = 0;
    while (start <= n) {
        Py_ssize_t end = start, sep = -1;
        while (end < n) {
            Py_UCS4 c = PyUnicode_READ(kind, data, end);
            if (c == PROPERTY_SEP)
                break;
            if (c == NAME_VALUE_SEP && sep < 0)
                sep = end;
            end++;
        }
        if (sep > start && end > sep + 1) {
            PyObject *name = PyUnicode_Substring(s, start, sep);
            if (name == NULL)
                return -1;
            PyObject *value = PyUnicode_Substring(s, sep + 1, end);
            if (value == NULL) {
                Py_DECREF(name);
                return -1;
            }
            int rc = PyDict_SetItem(out, name, value);
            Py_DECREF(name);
            Py_DECREF(value);
            if (rc < 0)
                return -1;
        }
        start = end + 1;
    }
    return 0;
}

static PyObject *
decode_properties(PyObject *module, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "decode_properties() needs a str, not %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    if (PyUnicode_GET_LENGTH(arg) > 0 && decode_properties_into(arg, out) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* dict -> "name 0x01 value 0x02 ..." (no trailing 0x02). Returns NotImplemented for
 * anything but a dict of str to str, so the caller's Python version raises its own error. */
static PyObject *
encode_properties(PyObject *module, PyObject *arg)
{
    if (!PyDict_CheckExact(arg))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t count = PyDict_GET_SIZE(arg);
    if (count == 0)
        return PyUnicode_New(0, 0);
    Py_ssize_t pos = 0, length = 2 * count - 1;
    Py_UCS4 maxchar = 0x7F;
    PyObject *key, *value;
    while (PyDict_Next(arg, &pos, &key, &value)) {
        if (!PyUnicode_Check(key) || !PyUnicode_Check(value))
            Py_RETURN_NOTIMPLEMENTED;
        length += PyUnicode_GET_LENGTH(key) + PyUnicode_GET_LENGTH(value);
        Py_UCS4 mk = PyUnicode_MAX_CHAR_VALUE(key), mv = PyUnicode_MAX_CHAR_VALUE(value);
        if (mk > maxchar)
            maxchar = mk;
        if (mv > maxchar)
            maxchar = mv;
    }
    PyObject *out = PyUnicode_New(length, maxchar);
    if (out == NULL)
        return NULL;
    Py_ssize_t at = 0, i = 0;
    pos = 0;
    while (PyDict_Next(arg, &pos, &key, &value)) {
        if (i++ > 0)
            PyUnicode_WRITE(PyUnicode_KIND(out), PyUnicode_DATA(out), at++, PROPERTY_SEP);
        Py_ssize_t kn = PyUnicode_GET_LENGTH(key), vn = PyUnicode_GET_LENGTH(value);
        if (PyUnicode_CopyCharacters(out, at, key, 0, kn) < 0)
            goto fail;
        at += kn;
        PyUnicode_WRITE(PyUnicode_KIND(out), PyUnicode_DATA(out), at++, NAME_VALUE_SEP);
        if (PyUnicode_CopyCharacters(out, at, value, 0, vn) < 0)
            goto fail;
        at += vn;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ big-endian helpers */

static inline int32_t
get_i32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int64_t
get_i64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)(uint32_t)get_i32(p) << 32) | (uint32_t)get_i32(p + 4));
}

static inline unsigned char *
put_i32(unsigned char *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
    return p + 4;
}

static inline unsigned char *
put_i64(unsigned char *p, long long v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)u;
        u >>= 8;
    }
    return p + 8;
}

/* ------------------------------------------------------------------ SEND_BATCH_MESSAGE body */

#define BATCH_HEAD 20 /* TOTALSIZE, MAGIC(0), BODYCRC(0), FLAG, BODY length: five i32 */

/* One element of a batch body from *pos: its flag, where its body and properties lie; *pos moves
 * past it. 0, or -1 with ValueError set (the texts of py_decode_batch_body's errors). */
typedef struct { int32_t flag; Py_ssize_t body_at, body_len, props_at, props_len; } batch_element;

static int
next_batch_element(const unsigned char *buf, Py_ssize_t n, Py_ssize_t *pos, batch_element *e)
{
    Py_ssize_t at = *pos;
    if (n - at < BATCH_HEAD + 2) {
        PyErr_Format(PyExc_ValueError, "truncated batch element at %zd", at);
        return -1;
    }
    int32_t total = get_i32(buf + at), body_len = get_i32(buf + at + 16);
    Py_ssize_t p = at + BATCH_HEAD;
    if (body_len < 0 || p + body_len + 2 > n) {
        PyErr_Format(PyExc_ValueError, "bad body length %d in batch element at %zd", (int)body_len, at);
        return -1;
    }
    e->flag = get_i32(buf + at + 12);
    e->body_at = p;
    e->body_len = body_len;
    p += body_len;
    e->props_len = ((Py_ssize_t)buf[p] << 8) | buf[p + 1];
    e->props_at = p + 2;
    if ((Py_ssize_t)total != e->props_at + e->props_len - at || e->props_at + e->props_len > n) {
        PyErr_Format(PyExc_ValueError, "batch element at %zd: fields add up to %zd bytes, TOTALSIZE says %d",
                     at, e->props_at + e->props_len - at, (int)total);
        return -1;
    }
    *pos = e->props_at + e->props_len;
    return 0;
}

/* A new dict of an element's properties (invalid UTF-8 replaced), or NULL with an error set. */
static PyObject *
batch_element_properties(const unsigned char *buf, const batch_element *e)
{
    PyObject *props = PyDict_New();
    if (props == NULL || e->props_len == 0)
        return props;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)buf + e->props_at, e->props_len, "replace");
    if (text == NULL || decode_properties_into(text, props) < 0)
        Py_CLEAR(props);
    Py_XDECREF(text);
    return props;
}

static PyObject *
decode_batch_body(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0;
    batch_element e;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    while (pos < view.len) {
        if (next_batch_element(buf, view.len, &pos, &e) < 0)
            goto fail;
        PyObject *props = batch_element_properties(buf, &e);
        if (props == NULL)
            goto fail;
        PyObject *item = Py_BuildValue("(iy#N)", (int)e.flag, (const char *)buf + e.body_at, e.body_len, props);
        if (item == NULL)
            goto fail;
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0)
            goto fail;
    }
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* ------------------------------------------------------------------ CommitLog record */

#define MESSAGE_MAGIC ((int32_t)0xDAA320A7)
#define MIN_RECORD_SIZE 91  /* IPv4 hosts; empty body, topic and properties */

/* pack_record(topic, body, props, crc, queue_id, flag, queue_offset, commit_log_offset,
 *             sys_flag, born_timestamp, born_ip, born_port, store_timestamp, store_ip,
 *             store_port, reconsume_times, prepared_transaction_offset) -> bytearray
 * The record's bytes in the layout of ferrymq/common/message.py (docs/wire-format.md#commitlog-record). Field
 * values out of their Java type's range raise OverflowError; an IP of other than 4 or
 * 16 bytes, a topic over 255 or properties over 65535 bytes raise ValueError. */
static PyObject *
pack_record(PyObject *module, PyObject *args)
{
    Py_buffer topic, body, props, born_ip, store_ip;
    int crc, queue_id, flag, sys_flag, born_port, store_port, reconsume;
    long long queue_offset, phys_offset, born_ts, store_ts, prepared;
    if (!PyArg_ParseTuple(args, "y*y*y*iiiLLiLy*iLy*iiL:pack_record", &topic, &body, &props, &crc, &queue_id,
                          &flag, &queue_offset, &phys_offset, &sys_flag, &born_ts, &born_ip, &born_port,
                          &store_ts, &store_ip, &store_port, &reconsume, &prepared))
        return NULL;
    PyObject *out = NULL;
    if ((born_ip.len != 4 && born_ip.len != 16) || (store_ip.len != 4 && store_ip.len != 16)) {
        PyErr_SetString(PyExc_ValueError, "an IP address is 4 or 16 bytes");
        goto done;
    }
    if (topic.len > 255 || props.len > 65535 || body.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "topic, body or properties too long for a record");
        goto done;
    }
    Py_ssize_t fixed = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born_ip.len + 4 + 8 + store_ip.len + 4 + 4 + 8 + 4;
    Py_ssize_t total = fixed + body.len + 1 + topic.len + 2 + props.len;
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "record too long");
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(out);
    p = put_i32(p, (int32_t)total);
    p = put_i32(p, MESSAGE_MAGIC);
    p = put_i32(p, crc);
    p = put_i32(p, queue_id);
    p = put_i32(p, flag);
    p = put_i64(p, queue_offset);
    p = put_i64(p, phys_offset);
    p = put_i32(p, sys_flag);
    p = put_i64(p, born_ts);
    memcpy(p, born_ip.buf, born_ip.len);
    p += born_ip.len;
    p = put_i32(p, born_port);
    p = put_i64(p, store_ts);
    memcpy(p, store_ip.buf, store_ip.len);
    p += store_ip.len;
    p = put_i32(p, store_port);
    p = put_i32(p, reconsume);
    p = put_i64(p, prepared);
    p = put_i32(p, (int32_t)body.len);
    if (body.len)
        memcpy(p, body.buf, body.len);
    p += body.len;
    *p++ = (unsigned char)topic.len;
    if (topic.len)
        memcpy(p, topic.buf, topic.len);
    p += topic.len;
    *p++ = (unsigned char)(props.len >> 8);
    *p++ = (unsigned char)props.len;
    if (props.len)
        memcpy(p, props.buf, props.len);
done:
    PyBuffer_Release(&topic);
    PyBuffer_Release(&body);
    PyBuffer_Release(&props);
    PyBuffer_Release(&born_ip);
    PyBuffer_Release(&store_ip);
    return out;
}

/* ------------------------------------------------------------------ IndexFile entries */

static inline void
put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* index_entries(postings, slots, slot_num, first, begin_ts, store_ts) -> (entries, linked, new_slots):
 * postings a list of (str key, int CommitLog offset), slots the writer's array('i') of the file's
 * slot table (updated in place). NotImplemented (nothing changed) for any other shape. */
static PyObject *
index_entries(PyObject *module, PyObject *args)
{
    PyObject *postings, *slots_obj;
    long long slot_num, first, begin_ts, store_ts;
    if (!PyArg_ParseTuple(args, "O!OLLLL", &PyList_Type, &postings, &slots_obj, &slot_num, &first, &begin_ts, &store_ts))
        return NULL;
    Py_buffer slots;
    if (PyObject_GetBuffer(slots_obj, &slots, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t count = PyList_GET_SIZE(postings);
    if (slots.itemsize != 4 || slots.format == NULL || strcmp(slots.format, "i") != 0 || slot_num <= 0
            || slots.len / 4 < slot_num || first < 0 || first + count > INT32_MAX) {
        PyBuffer_Release(&slots);
        Py_RETURN_NOTIMPLEMENTED;
    }
    /* First pass: read every posting, so an odd one leaves everything untouched. */
    int32_t *hashes = PyMem_Malloc(sizeof(int32_t) * (count ? count : 1));
    long long *offsets = PyMem_Malloc(sizeof(long long) * (count ? count : 1));
    if (hashes == NULL || offsets == NULL) {
        PyMem_Free(hashes); PyMem_Free(offsets); PyBuffer_Release(&slots);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(postings, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))
                || !PyLong_Check(PyTuple_GET_ITEM(item, 1))) {
            goto not_implemented;
        }
        int overflow = 0;
        long long offset = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(item, 1), &overflow);
        if (overflow || (offset == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            goto not_implemented;
        }
        int32_t h = java_hash_of(PyTuple_GET_ITEM(item, 0));
        hashes[i] = h == INT32_MIN ? 0 : (h < 0 ? -h : h);  /* Math.abs, with MIN_VALUE as 0 */
        offsets[i] = offset;
    }
    PyObject *entries = PyBytes_FromStringAndSize(NULL, count * 20);
    PyObject *linked = PyList_New(count);
    if (entries == NULL || linked == NULL) {
        Py_XDECREF(entries); Py_XDECREF(linked);
        PyMem_Free(hashes); PyMem_Free(offsets); PyBuffer_Release(&slots);
        return NULL;
    }
    int32_t *table = (int32_t *)slots.buf;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(entries);
    long long n = first, new_slots = 0;
    for (Py_ssize_t i = 0; i < count; i++, n++, out += 20) {
        long long slot = hashes[i] % slot_num;
        int32_t previous = table[slot];
        int32_t slot_value = previous;
        if (slot_value <= 0 || slot_value > n) {  /* (a key of this record may have linked it already) */
            slot_value = 0;
            new_slots++;
        }
        long long time_diff = 0;
        if (begin_ts > 0) {
            long long d = store_ts - begin_ts;
            time_diff = d <= 0 ? 0 : d / 1000;
            if (time_diff > INT32_MAX)
                time_diff = INT32_MAX;
        }
        if (n <= 1)
            begin_ts = store_ts;
        put_be32(out, (uint32_t)hashes[i]);
        put_be32(out + 4, (uint32_t)((unsigned long long)offsets[i] >> 32));
        put_be32(out + 8, (uint32_t)offsets[i]);
        put_be32(out + 12, (uint32_t)time_diff);
        put_be32(out + 16, (uint32_t)slot_value);
        PyObject *pair = Py_BuildValue("(Li)", slot, previous);
        if (pair == NULL) {  /* undo the slots moved so far: the caller sees no change */
            for (Py_ssize_t j = i - 1; j >= 0; j--) {
                PyObject *done = PyList_GET_ITEM(linked, j);
                table[PyLong_AsLongLong(PyTuple_GET_ITEM(done, 0))] = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(done, 1));
            }
            Py_DECREF(entries); Py_DECREF(linked);
            PyMem_Free(hashes); PyMem_Free(offsets); PyBuffer_Release(&slots);
            return NULL;
        }
        PyList_SET_ITEM(linked, i, pair);
        table[slot] = (int32_t)n;
    }
    PyMem_Free(hashes); PyMem_Free(offsets); PyBuffer_Release(&slots);
    return Py_BuildValue("(NNL)", entries, linked, new_slots);

not_implemented:
    PyMem_Free(hashes); PyMem_Free(offsets); PyBuffer_Release(&slots);
    Py_RETURN_NOTIMPLEMENTED;
}

/* link_slots(slot_map, base, linked, first): the i-th slot of linked (index_entries' (slot, previous)
 * pairs) set to entry number first + i in the writable big-endian slot table at base. Checks every
 * pair before writing any; NotImplemented (nothing written) for any other shape or a slot outside
 * the buffer, where the Python version writes what it can and raises. */
static PyObject *
link_slots(PyObject *module, PyObject *args)
{
    PyObject *map_obj, *linked;
    Py_ssize_t base;
    long long first;
    if (!PyArg_ParseTuple(args, "OnO!L:link_slots", &map_obj, &base, &PyList_Type, &linked, &first))
        return NULL;
    Py_buffer map;
    if (PyObject_GetBuffer(map_obj, &map, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t count = PyList_GET_SIZE(linked);
    int fits = base >= 0 && first >= 0 && first + count - 1 <= INT32_MAX;
    for (Py_ssize_t i = 0; fits && i < count; i++) {
        PyObject *item = PyList_GET_ITEM(linked, i);
        Py_ssize_t slot = -1;
        if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 && PyLong_Check(PyTuple_GET_ITEM(item, 0)))
            slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
        if (slot == -1 && PyErr_Occurred())
            PyErr_Clear();
        fits = slot >= 0 && slot <= (map.len - base) / 4 - 1;
    }
    if (!fits) {
        PyBuffer_Release(&map);
        Py_RETURN_NOTIMPLEMENTED;
    }
    unsigned char *table = (unsigned char *)map.buf + base;
    for (Py_ssize_t i = 0; i < count; i++)
        put_be32(table + 4 * PyLong_AsSsize_t(PyTuple_GET_ITEM(PyList_GET_ITEM(linked, i), 0)), (uint32_t)(first + i));
    PyBuffer_Release(&map);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ a put's run of records */

static PyObject *s_topic, *s_body, *s_properties, *s_queue_id, *s_flag, *s_queue_offset, *s_commit_log_offset,
    *s_sys_flag, *s_born_timestamp, *s_born_host, *s_store_timestamp, *s_store_host, *s_reconsume_times,
    *s_prepared_transaction_offset, *s_body_crc, *s_store_size, *s_tags, *s_crc32, *s_uniq_key, *s_keys, *s_hash,
    *s_space, *s_wait;
static PyObject *crc32_fn;  /* ferrymq.common.crc.crc32: the Python codec's own, so both agree by construction */
static PyObject *pack_ip_fn;  /* ferrymq.common.message_id.pack_ip (cached IP literal -> bytes), on first use */

#define SYSFLAG_BORNHOST_V6 0x10
#define SYSFLAG_STOREHOST_V6 0x20
#define MAX_TOPIC_BYTES 127
#define MAX_PROPERTIES_BYTES 32767

static int
init_names(void)
{
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return -1
    INTERN(s_topic, "topic"); INTERN(s_body, "body"); INTERN(s_properties, "properties");
    INTERN(s_queue_id, "queue_id"); INTERN(s_flag, "flag"); INTERN(s_queue_offset, "queue_offset");
    INTERN(s_commit_log_offset, "commit_log_offset"); INTERN(s_sys_flag, "sys_flag");
    INTERN(s_born_timestamp, "born_timestamp"); INTERN(s_born_host, "born_host");
    INTERN(s_store_timestamp, "store_timestamp"); INTERN(s_store_host, "store_host");
    INTERN(s_reconsume_times, "reconsume_times"); INTERN(s_prepared_transaction_offset, "prepared_transaction_offset");
    INTERN(s_body_crc, "body_crc"); INTERN(s_store_size, "store_size"); INTERN(s_tags, "TAGS");
    INTERN(s_crc32, "crc32"); INTERN(s_uniq_key, "UNIQ_KEY"); INTERN(s_keys, "KEYS"); INTERN(s_hash, "#");
    INTERN(s_space, " "); INTERN(s_wait, "WAIT");
#undef INTERN
    PyObject *crc_module = PyImport_ImportModule("ferrymq.common.crc");
    if (crc_module == NULL)
        return -1;
    crc32_fn = PyObject_GetAttr(crc_module, s_crc32);
    Py_DECREF(crc_module);
    return crc32_fn == NULL ? -1 : 0;
}

/* MessageExt's fields in its constructor's order (its __match_args__). */
enum { F_TOPIC, F_BODY, F_FLAG, F_PROPERTIES, F_QUEUE_ID, F_QUEUE_OFFSET, F_COMMIT_LOG_OFFSET, F_SYS_FLAG,
       F_BORN_TIMESTAMP, F_BORN_HOST, F_STORE_TIMESTAMP, F_STORE_HOST, F_RECONSUME_TIMES, F_PREPARED_OFFSET,
       F_BODY_CRC, F_STORE_SIZE, MESSAGE_EXT_FIELDS };

/* MessageExt is a slots dataclass: decode_run allocates an instance and stores each field in its
 * slot, where the class's member descriptors say it lives (learnt on first use). For records of
 * 1 KiB that is 0.63 us a record; calling the class positionally (its dataclass __init__) 0.82,
 * with keywords 1.32, setting the attributes by name 0.77. */
static PyTypeObject *message_ext_type;
static Py_ssize_t message_ext_offsets[MESSAGE_EXT_FIELDS];

static int
load_message_ext(void)
{
    PyObject *names[MESSAGE_EXT_FIELDS] = {
        s_topic, s_body, s_flag, s_properties, s_queue_id, s_queue_offset, s_commit_log_offset, s_sys_flag,
        s_born_timestamp, s_born_host, s_store_timestamp, s_store_host, s_reconsume_times,
        s_prepared_transaction_offset, s_body_crc, s_store_size};
    PyObject *module = PyImport_ImportModule("ferrymq.common.message");
    if (module == NULL)
        return -1;
    PyObject *cls = PyObject_GetAttrString(module, "MessageExt");
    Py_DECREF(module);
    if (cls == NULL)
        return -1;
    /* Only the fields named here, in this order, each in a writable object slot: anything else
     * (a field added to MessageExt, slots=False) would make instances this code cannot fill. */
    PyObject *match_args = PyType_Check(cls) ? PyObject_GetAttrString(cls, "__match_args__") : NULL;
    int ok = match_args != NULL && PyTuple_Check(match_args) && PyTuple_GET_SIZE(match_args) == MESSAGE_EXT_FIELDS;
    for (int i = 0; ok && i < MESSAGE_EXT_FIELDS; i++) {
        int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(match_args, i), names[i], Py_EQ);
        PyObject *descr = same == 1 ? PyObject_GetAttr(cls, names[i]) : NULL;
        ok = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)
             && ((PyMemberDescrObject *)descr)->d_member->type == Py_T_OBJECT_EX
             && !(((PyMemberDescrObject *)descr)->d_member->flags & Py_READONLY);
        if (ok)
            message_ext_offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_XDECREF(descr);
    }
    Py_XDECREF(match_args);
    if (!ok) {
        Py_DECREF(cls);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "the codec needs MessageExt as the slots dataclass it was written for");
        return -1;
    }
    message_ext_type = (PyTypeObject *)cls;
    return 0;
}

/* A field of a message (a new reference): straight from its slot for a MessageExt, where
 * load_message_ext found it, by name for anything else (and for an empty slot, which raises the
 * AttributeError the name gives). The per-message codecs read and write a record's fields so:
 * by name, the 18 of encode_records cost 0.4 us a message. */
static inline PyObject *
get_field(PyObject *m, int field, PyObject *name)
{
    if (Py_TYPE(m) == message_ext_type) {
        PyObject *v = *(PyObject **)((char *)m + message_ext_offsets[field]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(m, name);
}

static inline int
set_field(PyObject *m, int field, PyObject *name, PyObject *value)
{
    if (Py_TYPE(m) == message_ext_type) {
        Py_XSETREF(*(PyObject **)((char *)m + message_ext_offsets[field]), Py_NewRef(value));
        return 0;
    }
    return PyObject_SetAttr(m, name, value);
}

/* An int attribute of a message, in a C long long; -1 with an error set on failure. */
static int
attr_ll(PyObject *m, int field, PyObject *name, long long *out)
{
    PyObject *v = get_field(m, field, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
set_attr_ll(PyObject *m, int field, PyObject *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int rc = set_field(m, field, name, v);
    Py_DECREF(v);
    return rc;
}

/* A (host, port) pair: its packed IP (through the caller's pack_ip, reusing the previous answer
 * for the same host object) and its port. 0, or -1 with an error set. */
typedef struct { PyObject *host; PyObject *ip; } ip_memo;

static int
host_ip(PyObject *pair, PyObject *pack_ip, ip_memo *memo, PyObject **ip, long long *port)
{
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_ValueError, "a host is a (host, port) pair");
        return -1;
    }
    PyObject *host = PyTuple_GET_ITEM(pair, 0);
    if (host != memo->host) {
        PyObject *packed = PyObject_CallOneArg(pack_ip, host);
        if (packed == NULL)
            return -1;
        if (!PyBytes_Check(packed) || (PyBytes_GET_SIZE(packed) != 4 && PyBytes_GET_SIZE(packed) != 16)) {
            Py_DECREF(packed);
            PyErr_SetString(PyExc_ValueError, "an IP address is 4 or 16 bytes");
            return -1;
        }
        Py_XSETREF(memo->ip, packed);
        Py_INCREF(host);
        Py_XSETREF(memo->host, host);
    }
    *ip = memo->ip;
    *port = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
    return (*port == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
fits_i32(long long v)
{
    return v >= INT32_MIN && v <= INT32_MAX;
}

/* encode_records(msgs, store_host, max_body_size) -> (bytearray, [sizes]) | (index, "body" | "properties") */
static PyObject *
encode_records(PyObject *module, PyObject *args)
{
    PyObject *msgs, *store_host;
    long long max_body;
    if (!PyArg_ParseTuple(args, "OOL:encode_records", &msgs, &store_host, &max_body))
        return NULL;
    if (message_ext_type == NULL && load_message_ext() < 0)  /* (its slots: get_field) */
        return NULL;
    if (pack_ip_fn == NULL) {
        PyObject *ids = PyImport_ImportModule("ferrymq.common.message_id");
        if (ids == NULL)
            return NULL;
        pack_ip_fn = PyObject_GetAttrString(ids, "pack_ip");
        Py_DECREF(ids);
        if (pack_ip_fn == NULL)
            return NULL;
    }
    PyObject *pack_ip = pack_ip_fn;
    PyObject *seq = PySequence_Fast(msgs, "encode_records() needs a sequence of messages");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    /* One buffer for the run, sized for the bodies plus room for their headers up front. */
    Py_ssize_t guess = 0, used = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *body = get_field(PySequence_Fast_GET_ITEM(seq, i), F_BODY, s_body);
        if (body == NULL) {
            Py_DECREF(seq);
            return NULL;
        }
        Py_ssize_t n = PyObject_Length(body);
        Py_DECREF(body);
        if (n < 0)
            PyErr_Clear();  /* the main pass reports it */
        else if (n <= max_body)
            guess += n + 256;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, guess), *sizes = PyList_New(0), *result = NULL;
    ip_memo born_memo = {NULL, NULL}, store_memo = {NULL, NULL};
    PyObject *store_ip;
    long long store_port;
    if (out == NULL || sizes == NULL || host_ip(store_host, pack_ip, &store_memo, &store_ip, &store_port) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *body = NULL, *props = NULL, *props_text = NULL, *topic = NULL, *born = NULL, *crc_obj = NULL;
        Py_buffer bview = {0};
        int ok = 0;
        long long queue_id, flag, queue_offset, phys, sys_flag, born_ts, store_ts, reconsume, prepared, born_port, crc;
        PyObject *born_ip;
        if ((body = get_field(m, F_BODY, s_body)) == NULL || PyObject_GetBuffer(body, &bview, PyBUF_SIMPLE) < 0)
            goto next;
        if (bview.len > max_body) {
            result = Py_BuildValue("(ns)", i, "body");
            goto next;
        }
        if ((props = get_field(m, F_PROPERTIES, s_properties)) == NULL)
            goto next;
        props_text = encode_properties(module, props);
        if (props_text == Py_NotImplemented) {
            PyErr_SetString(PyExc_TypeError, "message properties must be a dict of str to str");
            goto next;
        }
        if (props_text == NULL)
            goto next;
        Py_ssize_t props_len;
        const char *props_utf8 = PyUnicode_AsUTF8AndSize(props_text, &props_len);
        if (props_utf8 == NULL)
            goto next;
        if (props_len > MAX_PROPERTIES_BYTES) {
            result = Py_BuildValue("(ns)", i, "properties");
            goto next;
        }
        if (set_field(m, F_STORE_HOST, s_store_host, store_host) < 0)
            goto next;
        Py_ssize_t topic_len;
        if ((topic = get_field(m, F_TOPIC, s_topic)) == NULL)
            goto next;
        const char *topic_utf8 = PyUnicode_AsUTF8AndSize(topic, &topic_len);
        if (topic_utf8 == NULL)
            goto next;
        if (topic_len > MAX_TOPIC_BYTES) {
            PyErr_Format(PyExc_ValueError, "topic is %zd bytes, at most %d allowed", topic_len, MAX_TOPIC_BYTES);
            goto next;
        }
        if ((born = get_field(m, F_BORN_HOST, s_born_host)) == NULL || host_ip(born, pack_ip, &born_memo, &born_ip, &born_port) < 0)
            goto next;
        if (attr_ll(m, F_QUEUE_ID, s_queue_id, &queue_id) < 0 || attr_ll(m, F_FLAG, s_flag, &flag) < 0
                || attr_ll(m, F_QUEUE_OFFSET, s_queue_offset, &queue_offset) < 0 || attr_ll(m, F_COMMIT_LOG_OFFSET, s_commit_log_offset, &phys) < 0
                || attr_ll(m, F_SYS_FLAG, s_sys_flag, &sys_flag) < 0 || attr_ll(m, F_BORN_TIMESTAMP, s_born_timestamp, &born_ts) < 0
                || attr_ll(m, F_STORE_TIMESTAMP, s_store_timestamp, &store_ts) < 0 || attr_ll(m, F_RECONSUME_TIMES, s_reconsume_times, &reconsume) < 0
                || attr_ll(m, F_PREPARED_OFFSET, s_prepared_transaction_offset, &prepared) < 0) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "record field out of range");
            }
            goto next;
        }
        sys_flag &= ~(long long)(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
        if (PyBytes_GET_SIZE(born_ip) == 16)
            sys_flag |= SYSFLAG_BORNHOST_V6;
        if (PyBytes_GET_SIZE(store_ip) == 16)
            sys_flag |= SYSFLAG_STOREHOST_V6;
        if (!fits_i32(queue_id) || !fits_i32(flag) || !fits_i32(sys_flag) || !fits_i32(born_port)
                || !fits_i32(store_port) || !fits_i32(reconsume)) {
            PyErr_SetString(PyExc_ValueError, "record field out of range");
            goto next;
        }
        if ((crc_obj = PyObject_CallOneArg(crc32_fn, body)) == NULL)
            goto next;
        crc = PyLong_AsLongLong(crc_obj) & 0x7FFFFFFF;
        Py_ssize_t born_len = PyBytes_GET_SIZE(born_ip), store_len = PyBytes_GET_SIZE(store_ip);
        Py_ssize_t fixed = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born_len + 4 + 8 + store_len + 4 + 4 + 8 + 4;
        Py_ssize_t total = fixed + bview.len + 1 + topic_len + 2 + props_len;
        if (total > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "record too long");
            goto next;
        }
        if (used + total > PyByteArray_GET_SIZE(out)) {  /* room for this record and as much again */
            if (PyByteArray_Resize(out, 2 * (used + total)) < 0)
                goto next;
        }
        unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(out) + used;
        used += total;
        p = put_i32(p, (int32_t)total);
        p = put_i32(p, MESSAGE_MAGIC);
        p = put_i32(p, (int32_t)crc);
        p = put_i32(p, (int32_t)queue_id);
        p = put_i32(p, (int32_t)flag);
        p = put_i64(p, queue_offset);
        p = put_i64(p, phys);
        p = put_i32(p, (int32_t)sys_flag);
        p = put_i64(p, born_ts);
        memcpy(p, PyBytes_AS_STRING(born_ip), born_len);
        p += born_len;
        p = put_i32(p, (int32_t)born_port);
        p = put_i64(p, store_ts);
        memcpy(p, PyBytes_AS_STRING(store_ip), store_len);
        p += store_len;
        p = put_i32(p, (int32_t)store_port);
        p = put_i32(p, (int32_t)reconsume);
        p = put_i64(p, prepared);
        p = put_i32(p, (int32_t)bview.len);
        if (bview.len)
            memcpy(p, bview.buf, bview.len);
        p += bview.len;
        *p++ = (unsigned char)topic_len;
        memcpy(p, topic_utf8, topic_len);
        p += topic_len;
        *p++ = (unsigned char)(props_len >> 8);
        *p++ = (unsigned char)props_len;
        if (props_len)
            memcpy(p, props_utf8, props_len);
        if (set_attr_ll(m, F_SYS_FLAG, s_sys_flag, sys_flag) < 0 || set_attr_ll(m, F_BODY_CRC, s_body_crc, crc) < 0
                || set_attr_ll(m, F_STORE_SIZE, s_store_size, total) < 0)
            goto next;
        PyObject *size = PyLong_FromSsize_t(total);
        if (size == NULL || PyList_Append(sizes, size) < 0) {
            Py_XDECREF(size);
            goto next;
        }
        Py_DECREF(size);
        ok = 1;
    next:
        if (bview.obj != NULL)
            PyBuffer_Release(&bview);
        Py_XDECREF(body); Py_XDECREF(props); Py_XDECREF(props_text); Py_XDECREF(topic); Py_XDECREF(born);
        Py_XDECREF(crc_obj);
        if (!ok)
            goto done;  /* an error is set, or result holds the refusal */
    }
    if (PyByteArray_Resize(out, used) == 0)
        result = PyTuple_Pack(2, out, sizes);
done:
    Py_DECREF(seq);
    Py_XDECREF(out); Py_XDECREF(sizes);
    Py_XDECREF(born_memo.host); Py_XDECREF(born_memo.ip); Py_XDECREF(store_memo.host); Py_XDECREF(store_memo.ip);
    return result;
}

#define QUEUE_OFFSET_POS 20
#define SYS_FLAG_POS 36
#define BORN_HOST_POS 48

/* stamp_records(data, sizes, queue_offset, phys, store_ts): the three fields only known under the
 * store's lock, in every record of a run (queue_offset < 0: not dispatched, 0 in every record). */
static PyObject *
stamp_records(PyObject *module, PyObject *args)
{
    PyObject *data_obj, *sizes;
    long long queue_offset, phys, store_ts;
    if (!PyArg_ParseTuple(args, "OOLLL:stamp_records", &data_obj, &sizes, &queue_offset, &phys, &store_ts))
        return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(data_obj, &data, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(sizes, "stamp_records() needs a sequence of sizes");
    if (seq == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), pos = 0;
    unsigned char *buf = (unsigned char *)data.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (size == -1 && PyErr_Occurred())
            goto fail;
        if (size < BORN_HOST_POS + 28 || pos + size > data.len) {
            PyErr_Format(PyExc_ValueError, "record %zd of %zd bytes at %zd does not fit the data", i, size, pos);
            goto fail;
        }
        unsigned char *r = buf + pos;
        put_i64(r + QUEUE_OFFSET_POS, queue_offset >= 0 ? queue_offset + i : 0);
        put_i64(r + QUEUE_OFFSET_POS + 8, phys + pos);
        put_i64(r + BORN_HOST_POS + ((get_i32(r + SYS_FLAG_POS) & SYSFLAG_BORNHOST_V6) ? 20 : 8), store_ts);
        pos += size;
    }
    Py_DECREF(seq);
    PyBuffer_Release(&data);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    PyBuffer_Release(&data);
    return NULL;
}

/* A run's messages and their record sizes as fast sequences; returns how many pairs (as zip()),
 * or -1 with an error set and nothing held. */
static Py_ssize_t
run_sequences(PyObject *msgs, PyObject *sizes, PyObject **mseq, PyObject **sseq)
{
    *mseq = PySequence_Fast(msgs, "a run's messages must be a sequence");
    if (*mseq == NULL)
        return -1;
    *sseq = PySequence_Fast(sizes, "a run's sizes must be a sequence");
    if (*sseq == NULL) {
        Py_CLEAR(*mseq);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(*mseq);
    return PySequence_Fast_GET_SIZE(*sseq) < n ? PySequence_Fast_GET_SIZE(*sseq) : n;
}

/* place_records(msgs, sizes, phys, queue_offset, store_ts, id_prefix) -> [offset msgIds]: each
 * message learns its CommitLog offset, queue offset (queue_offset < 0: 0) and store time. */
static PyObject *
place_records(PyObject *module, PyObject *args)
{
    PyObject *msgs, *sizes, *prefix;
    long long phys, queue_offset, store_ts;
    if (!PyArg_ParseTuple(args, "OOLLLU:place_records", &msgs, &sizes, &phys, &queue_offset, &store_ts, &prefix))
        return NULL;
    if (message_ext_type == NULL && load_message_ext() < 0)  /* (its slots: get_field) */
        return NULL;
    if (!PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_ValueError, "an offset msgId prefix is hex digits");
        return NULL;
    }
    Py_ssize_t prefix_len = PyUnicode_GET_LENGTH(prefix);
    PyObject *mseq, *sseq;
    Py_ssize_t n = run_sequences(msgs, sizes, &mseq, &sseq);
    if (n < 0)
        return NULL;
    PyObject *ids = PyList_New(n), *ts = PyLong_FromLongLong(store_ts);
    if (ids == NULL || ts == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(mseq, i);
        if (phys < 0) {
            PyErr_Format(PyExc_ValueError, "negative physical offset %lld", phys);
            goto fail;
        }
        if (set_attr_ll(m, F_COMMIT_LOG_OFFSET, s_commit_log_offset, phys) < 0
                || set_attr_ll(m, F_QUEUE_OFFSET, s_queue_offset, queue_offset >= 0 ? queue_offset + i : 0) < 0
                || set_field(m, F_STORE_TIMESTAMP, s_store_timestamp, ts) < 0)
            goto fail;
        PyObject *id = PyUnicode_New(prefix_len + 16, 127);
        if (id == NULL)
            goto fail;
        Py_UCS1 *chars = PyUnicode_1BYTE_DATA(id);
        memcpy(chars, PyUnicode_1BYTE_DATA(prefix), prefix_len);
        unsigned long long v = (unsigned long long)phys;
        for (int d = 15; d >= 0; d--, v >>= 4)
            chars[prefix_len + d] = "0123456789ABCDEF"[v & 0xF];
        PyList_SET_ITEM(ids, i, id);
        Py_ssize_t size = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(sseq, i));
        if (size == -1 && PyErr_Occurred())
            goto fail;
        phys += size;
    }
    Py_DECREF(mseq); Py_DECREF(sseq); Py_DECREF(ts);
    return ids;
fail:
    Py_DECREF(mseq); Py_DECREF(sseq); Py_XDECREF(ts); Py_XDECREF(ids);
    return NULL;
}

/* queue_entries(msgs, sizes, phys) -> bytes: the ConsumeQueue entries (CommitLog offset i64, size
 * i32, tagsCode i64 = Java hash of TAGS or 0) of contiguous records starting at phys. */
static PyObject *
queue_entries(PyObject *module, PyObject *args)
{
    PyObject *msgs, *sizes;
    long long phys;
    if (!PyArg_ParseTuple(args, "OOL:queue_entries", &msgs, &sizes, &phys))
        return NULL;
    if (message_ext_type == NULL && load_message_ext() < 0)  /* (its slots: get_field) */
        return NULL;
    PyObject *mseq, *sseq;
    Py_ssize_t n = run_sequences(msgs, sizes, &mseq, &sseq);
    if (n < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 20);
    if (out == NULL)
        goto fail;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *props = get_field(PySequence_Fast_GET_ITEM(mseq, i), F_PROPERTIES, s_properties);
        if (props == NULL)
            goto fail;
        long long tags_code = 0;
        PyObject *tags = PyDict_Check(props) ? PyDict_GetItemWithError(props, s_tags) : PyObject_GetItem(props, s_tags);
        if (tags == NULL && PyErr_Occurred()) {
            if (PyDict_Check(props) || !PyErr_ExceptionMatches(PyExc_KeyError)) {
                Py_DECREF(props);
                goto fail;
            }
            PyErr_Clear();
        }
        if (tags != NULL && PyUnicode_Check(tags) && PyUnicode_GET_LENGTH(tags) > 0)
            tags_code = java_hash_of(tags);
        if (!PyDict_Check(props))
            Py_XDECREF(tags);  /* PyObject_GetItem gave a new reference */
        Py_DECREF(props);
        Py_ssize_t size = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(sseq, i));
        if (size == -1 && PyErr_Occurred())
            goto fail;
        p = put_i64(p, phys);
        p = put_i32(p, (int32_t)size);
        p = put_i64(p, tags_code);
        phys += size;
    }
    Py_DECREF(mseq); Py_DECREF(sseq);
    return out;
fail:
    Py_DECREF(mseq); Py_DECREF(sseq); Py_XDECREF(out);
    return NULL;
}

/* Append (topic#key, phys) to out for a non-empty key. */
static int
add_posting(PyObject *out, PyObject *topic_hash, PyObject *key, PyObject *phys)
{
    if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "message properties must be a dict of str to str");
        return -1;
    }
    if (PyUnicode_GET_LENGTH(key) == 0)
        return 0;
    PyObject *full = PyUnicode_Concat(topic_hash, key);
    if (full == NULL)
        return -1;
    PyObject *pair = PyTuple_Pack(2, full, phys);
    Py_DECREF(full);
    if (pair == NULL)
        return -1;
    int rc = PyList_Append(out, pair);
    Py_DECREF(pair);
    return rc;
}

/* index_postings(topic, msgs, sizes, phys, out): append (topic#UNIQ_KEY, offset) and (topic#k,
 * offset) for each KEYS value of every record of a run but rolled-back transaction records. */
static PyObject *
index_postings(PyObject *module, PyObject *args)
{
    PyObject *topic, *msgs, *sizes, *out;
    long long phys;
    if (!PyArg_ParseTuple(args, "UOOLO!:index_postings", &topic, &msgs, &sizes, &phys, &PyList_Type, &out))
        return NULL;
    if (message_ext_type == NULL && load_message_ext() < 0)  /* (its slots: get_field) */
        return NULL;
    PyObject *topic_hash = PyUnicode_Concat(topic, s_hash);
    if (topic_hash == NULL)
        return NULL;
    PyObject *mseq, *sseq;
    Py_ssize_t n = run_sequences(msgs, sizes, &mseq, &sseq);
    if (n < 0) {
        Py_DECREF(topic_hash);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(mseq, i);
        long long sys_flag;
        if (attr_ll(m, F_SYS_FLAG, s_sys_flag, &sys_flag) < 0)
            goto fail;
        if ((sys_flag & 0xC) != 0xC) {  /* not a rolled-back transaction record */
            PyObject *props = get_field(m, F_PROPERTIES, s_properties), *offset = NULL;
            if (props == NULL)
                goto fail;
            if (!PyDict_Check(props)) {
                Py_DECREF(props);
                PyErr_SetString(PyExc_TypeError, "message properties must be a dict of str to str");
                goto fail;
            }
            if ((offset = PyLong_FromLongLong(phys)) == NULL) {
                Py_DECREF(props);
                goto fail;
            }
            PyObject *uniq = PyDict_GetItemWithError(props, s_uniq_key), *keys = NULL, *parts = NULL;
            int rc = 0;
            if (uniq == NULL && PyErr_Occurred())
                rc = -1;
            else if (uniq != NULL)
                rc = add_posting(out, topic_hash, uniq, offset);
            if (rc == 0) {
                keys = PyDict_GetItemWithError(props, s_keys);
                if (keys == NULL && PyErr_Occurred())
                    rc = -1;
                else if (keys != NULL) {
                    if (!PyUnicode_Check(keys)) {
                        PyErr_SetString(PyExc_TypeError, "message properties must be a dict of str to str");
                        rc = -1;
                    } else if ((parts = PyUnicode_Split(keys, s_space, -1)) == NULL) {
                        rc = -1;
                    } else {
                        for (Py_ssize_t k = 0; rc == 0 && k < PyList_GET_SIZE(parts); k++)
                            rc = add_posting(out, topic_hash, PyList_GET_ITEM(parts, k), offset);
                        Py_DECREF(parts);
                    }
                }
            }
            Py_DECREF(offset);
            Py_DECREF(props);
            if (rc < 0)
                goto fail;
        }
        Py_ssize_t size = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(sseq, i));
        if (size == -1 && PyErr_Occurred())
            goto fail;
        phys += size;
    }
    Py_DECREF(mseq); Py_DECREF(sseq); Py_DECREF(topic_hash);
    Py_RETURN_NONE;
fail:
    Py_DECREF(mseq); Py_DECREF(sseq); Py_DECREF(topic_hash);
    return NULL;
}

/* ------------------------------------------------------------------ a run of records read back */

/* A new MessageExt of the field values v (new references, NULL where making one failed) appended
 * to list out: its empty slots take v's references. 0, or -1 with an error set (v released). */
static int
append_message_ext(PyObject *out, PyObject *v[MESSAGE_EXT_FIELDS])
{
    PyObject *m = NULL;
    int i, complete = 1;
    for (i = 0; i < MESSAGE_EXT_FIELDS; i++)
        complete &= v[i] != NULL;
    if (complete)
        m = message_ext_type->tp_alloc(message_ext_type, 0);
    if (m == NULL) {
        for (i = 0; i < MESSAGE_EXT_FIELDS; i++)
            Py_XDECREF(v[i]);
        return -1;
    }
    for (i = 0; i < MESSAGE_EXT_FIELDS; i++)
        *(PyObject **)((char *)m + message_ext_offsets[i]) = v[i];
    int rc = PyList_Append(out, m);
    Py_DECREF(m);
    return rc;
}

/* The last (host, port) pair a run decoded for one of its two hosts, and its IP's bytes: the
 * records of a run mostly share their hosts, so their pairs are one object. */
typedef struct { unsigned char ip[16]; int ip_len; int32_t port; PyObject *pair; } host_memo;

/* A new reference to the (host, port) pair of an IP of 4 or 16 bytes, its text as unpack_ip's
 * (socket.inet_ntop is this inet_ntop); NULL with an error set. */
static PyObject *
host_pair(host_memo *memo, const unsigned char *ip, int ip_len, int32_t port)
{
    if (memo->pair != NULL && memo->ip_len == ip_len && memo->port == port && memcmp(memo->ip, ip, ip_len) == 0)
        return Py_NewRef(memo->pair);
    PyObject *host;
    if (memo->pair != NULL && memo->ip_len == ip_len && memcmp(memo->ip, ip, ip_len) == 0) {
        host = Py_NewRef(PyTuple_GET_ITEM(memo->pair, 0));
    } else {
        char text[INET6_ADDRSTRLEN];
        if (inet_ntop(ip_len == 16 ? AF_INET6 : AF_INET, ip, text, sizeof text) == NULL)
            return PyErr_SetFromErrno(PyExc_OSError);
        if ((host = PyUnicode_FromString(text)) == NULL)
            return NULL;
    }
    PyObject *pair = Py_BuildValue("(Ni)", host, (int)port);
    if (pair == NULL)
        return NULL;
    memcpy(memo->ip, ip, ip_len);
    memo->ip_len = ip_len;
    memo->port = port;
    Py_XSETREF(memo->pair, Py_NewRef(pair));
    return pair;
}

/* decode_run(buf, pos, limit) -> (stop, [MessageExt]): the message records back to back from pos
 * that lie wholly before limit (clamped to the buffer), each as check_record accepts it (no CRC)
 * and _decode builds it; stops without raising at the first position holding anything else. */
static PyObject *
decode_run(PyObject *module, PyObject *args)
{
    PyObject *buf_obj;
    Py_ssize_t pos, limit;
    if (!PyArg_ParseTuple(args, "Onn:decode_run", &buf_obj, &pos, &limit))
        return NULL;
    if (pos < 0) {
        PyErr_Format(PyExc_ValueError, "decode_run() needs a position >= 0, not %zd", pos);
        return NULL;
    }
    if (message_ext_type == NULL && load_message_ext() < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(buf_obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    if (limit > view.len)
        limit = view.len;
    host_memo born_memo = {{0}, 0, 0, NULL}, store_memo = {{0}, 0, 0, NULL};
    const unsigned char *topic_bytes = NULL;  /* the last topic's bytes in buf, and its text */
    Py_ssize_t topic_bytes_len = 0;
    PyObject *topic = NULL, *result = NULL, *out = PyList_New(0);
    if (out == NULL)
        goto done;
    /* The checks of check_record, in its order; lengths compare as differences, never overflowing. */
    while (pos <= limit && limit - pos >= 8) {
        const unsigned char *r = buf + pos;
        int32_t total = get_i32(r);
        if (get_i32(r + 4) != MESSAGE_MAGIC || total < MIN_RECORD_SIZE || total > limit - pos)
            break;
        int32_t sys_flag = get_i32(r + SYS_FLAG_POS);
        int born_len = (sys_flag & SYSFLAG_BORNHOST_V6) ? 16 : 4, store_len = (sys_flag & SYSFLAG_STOREHOST_V6) ? 16 : 4;
        Py_ssize_t fixed = 80 + born_len + store_len;  /* TOTALSIZE to the BODY length included */
        if (fixed > total)
            break;
        int32_t body_len = get_i32(r + fixed - 4);
        if (body_len < 0 || body_len > total - fixed - 3)
            break;
        Py_ssize_t topic_at = fixed + body_len, topic_len = r[topic_at];
        Py_ssize_t props_at = topic_at + 1 + topic_len;
        if (props_at + 2 > total)
            break;
        Py_ssize_t props_len = ((Py_ssize_t)r[props_at] << 8) | r[props_at + 1];
        if (props_at + 2 + props_len != total)
            break;

        PyObject *v[MESSAGE_EXT_FIELDS];
        const unsigned char *store = r + BORN_HOST_POS + born_len + 12;
        if (topic == NULL || topic_len != topic_bytes_len || memcmp(topic_bytes, r + topic_at + 1, topic_len) != 0) {
            Py_XSETREF(topic, PyUnicode_DecodeUTF8((const char *)r + topic_at + 1, topic_len, "replace"));
            if (topic == NULL)
                goto done;
            topic_bytes = r + topic_at + 1;
            topic_bytes_len = topic_len;
        }
        v[F_TOPIC] = Py_NewRef(topic);
        v[F_BODY] = PyBytes_FromStringAndSize((const char *)r + fixed, body_len);
        v[F_FLAG] = PyLong_FromLong(get_i32(r + 16));
        v[F_PROPERTIES] = PyDict_New();
        if (v[F_PROPERTIES] != NULL && props_len > 0) {
            PyObject *text = PyUnicode_DecodeUTF8((const char *)r + props_at + 2, props_len, "replace");
            if (text == NULL || decode_properties_into(text, v[F_PROPERTIES]) < 0)
                Py_CLEAR(v[F_PROPERTIES]);
            Py_XDECREF(text);
        }
        v[F_QUEUE_ID] = PyLong_FromLong(get_i32(r + 12));
        v[F_QUEUE_OFFSET] = PyLong_FromLongLong(get_i64(r + QUEUE_OFFSET_POS));
        v[F_COMMIT_LOG_OFFSET] = PyLong_FromLongLong(get_i64(r + QUEUE_OFFSET_POS + 8));
        v[F_SYS_FLAG] = PyLong_FromLong(sys_flag);
        v[F_BORN_TIMESTAMP] = PyLong_FromLongLong(get_i64(r + 40));
        v[F_BORN_HOST] = host_pair(&born_memo, r + BORN_HOST_POS, born_len, get_i32(r + BORN_HOST_POS + born_len));
        v[F_STORE_TIMESTAMP] = PyLong_FromLongLong(get_i64(store - 8));
        v[F_STORE_HOST] = host_pair(&store_memo, store, store_len, get_i32(store + store_len));
        v[F_RECONSUME_TIMES] = PyLong_FromLong(get_i32(store + store_len + 4));
        v[F_PREPARED_OFFSET] = PyLong_FromLongLong(get_i64(store + store_len + 8));
        v[F_BODY_CRC] = PyLong_FromLong(get_i32(r + 8));
        v[F_STORE_SIZE] = PyLong_FromLong(total);
        if (append_message_ext(out, v) < 0)
            goto done;
        pos += total;
    }
    result = Py_BuildValue("(nO)", pos, out);
done:
    Py_XDECREF(out);
    Py_XDECREF(topic);
    Py_XDECREF(born_memo.pair);
    Py_XDECREF(store_memo.pair);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ module */

/* ------------------------------------------------------------------ a batch's messages */

/* batch_messages(topic, body, extra, screened, queue_id, sys_flag, born_timestamp, born_host,
 *                store_host, reconsume_times) -> ([MessageExt], screened_seen, all_wait)
 * A SEND_BATCH_MESSAGE body's messages, built as decode_run builds records (no __init__ per
 * message): each element's properties updated with extra's, every other field shared; whether
 * any message's properties name one of screened (a tuple of str), and whether none has WAIT
 * "false". Errors as decode_batch_body's. */
static PyObject *
batch_messages(PyObject *module, PyObject *args)
{
    PyObject *topic, *body_obj, *extra, *screened, *queue_id, *sys_flag, *born_ts, *born_host, *store_host, *reconsume;
    if (!PyArg_ParseTuple(args, "UOO!O!OOOOOO:batch_messages", &topic, &body_obj, &PyDict_Type, &extra,
                          &PyTuple_Type, &screened, &queue_id, &sys_flag, &born_ts, &born_host, &store_host, &reconsume))
        return NULL;
    if (message_ext_type == NULL && load_message_ext() < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(body_obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t pos = 0;
    int seen = 0, all_wait = 1;
    batch_element e;
    PyObject *zero = PyLong_FromLong(0), *result = NULL, *out = PyList_New(0);
    if (zero == NULL || out == NULL)
        goto done;
    while (pos < view.len) {
        if (next_batch_element(buf, view.len, &pos, &e) < 0)
            goto done;
        PyObject *props = batch_element_properties(buf, &e);
        if (props == NULL)
            goto done;
        if (PyDict_Update(props, extra) < 0) {
            Py_DECREF(props);
            goto done;
        }
        for (Py_ssize_t i = 0; !seen && i < PyTuple_GET_SIZE(screened); i++) {
            seen = PyDict_Contains(props, PyTuple_GET_ITEM(screened, i));
            if (seen < 0) {
                Py_DECREF(props);
                goto done;
            }
        }
        if (all_wait) {
            PyObject *wait = PyDict_GetItemWithError(props, s_wait);
            if (wait == NULL && PyErr_Occurred()) {
                Py_DECREF(props);
                goto done;
            }
            all_wait = !(wait != NULL && PyUnicode_Check(wait) && PyUnicode_CompareWithASCIIString(wait, "false") == 0);
        }
        PyObject *v[MESSAGE_EXT_FIELDS] = {
            Py_NewRef(topic), PyBytes_FromStringAndSize((const char *)buf + e.body_at, e.body_len),
            PyLong_FromLong(e.flag), props, Py_NewRef(queue_id), Py_NewRef(zero), Py_NewRef(zero),
            Py_NewRef(sys_flag), Py_NewRef(born_ts), Py_NewRef(born_host), Py_NewRef(zero), Py_NewRef(store_host),
            Py_NewRef(reconsume), Py_NewRef(zero), Py_NewRef(zero), Py_NewRef(zero)};
        if (append_message_ext(out, v) < 0)
            goto done;
    }
    result = Py_BuildValue("(OOO)", out, seen ? Py_True : Py_False, all_wait ? Py_True : Py_False);
done:
    Py_XDECREF(out);
    Py_XDECREF(zero);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"java_string_hash", java_string_hash, METH_O, "Java's String.hashCode() of a str (signed int32)."},
    {"decode_properties", decode_properties, METH_O, "name\\x01value\\x02... -> dict"},
    {"encode_properties", encode_properties, METH_O,
     "dict -> name\\x01value\\x02... (NotImplemented unless a dict of str to str)"},
    {"decode_batch_body", decode_batch_body, METH_O, "SEND_BATCH_MESSAGE body -> [(flag, body, properties)]"},
    {"pack_record", pack_record, METH_VARARGS, "one CommitLog record's bytes"},
    {"index_entries", index_entries, METH_VARARGS,
     "IndexFile entries of postings, linking the slot table in place -> (entries, linked, new_slots)"},
    {"link_slots", link_slots, METH_VARARGS, "point a put's index slots at its entries in a mapped slot table"},
    {"encode_records", encode_records, METH_VARARGS,
     "a put's records back to back -> (bytearray, sizes), or (index, 'body'|'properties') for a message refused"},
    {"stamp_records", stamp_records, METH_VARARGS, "stamp queue offsets, CommitLog offsets and store time into a run"},
    {"place_records", place_records, METH_VARARGS, "give a run's messages their offsets and store time -> msgIds"},
    {"queue_entries", queue_entries, METH_VARARGS, "a run's ConsumeQueue entries"},
    {"index_postings", index_postings, METH_VARARGS, "append a run's index keys with their CommitLog offsets"},
    {"batch_messages", batch_messages, METH_VARARGS,
     "a batch body's messages, sharing all but flag, body and properties -> (msgs, screened_seen, all_wait)"},
    {"decode_run", decode_run, METH_VARARGS,
     "the well-formed message records from pos before limit -> (where it stopped, [MessageExt])"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ferrymq.common._message_codec", "Compiled per-message codecs (see ferrymq/common/speedups.py).", 0, methods,
};

PyMODINIT_FUNC
PyInit__message_codec(void)
{
    if (crc32_fn == NULL && init_names() < 0)
        return NULL;
    return PyModuleDef_Init(&module_def);
}
