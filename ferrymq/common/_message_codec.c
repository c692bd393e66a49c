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
 *
 * Plain CPython C API, no dependency beyond the interpreter's headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

static PyObject *
decode_batch_body(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    while (pos < n) {
        if (n - pos < BATCH_HEAD + 2) {
            PyErr_Format(PyExc_ValueError, "truncated batch element at %zd", pos);
            goto fail;
        }
        int32_t total = get_i32(buf + pos), flag = get_i32(buf + pos + 12), body_len = get_i32(buf + pos + 16);
        Py_ssize_t p = pos + BATCH_HEAD;
        if (body_len < 0 || p + body_len + 2 > n) {
            PyErr_Format(PyExc_ValueError, "bad body length %d in batch element at %zd", (int)body_len, pos);
            goto fail;
        }
        Py_ssize_t body_at = p;
        p += body_len;
        Py_ssize_t props_len = ((Py_ssize_t)buf[p] << 8) | buf[p + 1];
        p += 2;
        if ((Py_ssize_t)total != p + props_len - pos || p + props_len > n) {
            PyErr_Format(PyExc_ValueError, "batch element at %zd: fields add up to %zd bytes, TOTALSIZE says %d",
                         pos, p + props_len - pos, (int)total);
            goto fail;
        }
        PyObject *props_text = PyUnicode_DecodeUTF8((const char *)buf + p, props_len, "replace");
        if (props_text == NULL)
            goto fail;
        PyObject *props = PyDict_New();
        if (props == NULL || (props_len > 0 && decode_properties_into(props_text, props) < 0)) {
            Py_DECREF(props_text);
            Py_XDECREF(props);
            goto fail;
        }
        Py_DECREF(props_text);
        PyObject *item = Py_BuildValue("(iy#N)", (int)flag, (const char *)buf + body_at, (Py_ssize_t)body_len, props);
        if (item == NULL)
            goto fail;
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0)
            goto fail;
        pos = p + props_len;
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

/* pack_record(topic, body, props, crc, queue_id, flag, queue_offset, commit_log_offset,
 *             sys_flag, born_timestamp, born_ip, born_port, store_timestamp, store_ip,
 *             store_port, reconsume_times, prepared_transaction_offset) -> bytearray
 * The record's bytes in the layout of ferrymq/common/message.py (wire facts 5). Field
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

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"java_string_hash", java_string_hash, METH_O, "Java's String.hashCode() of a str (signed int32)."},
    {"decode_properties", decode_properties, METH_O, "name\\x01value\\x02... -> dict"},
    {"encode_properties", encode_properties, METH_O,
     "dict -> name\\x01value\\x02... (NotImplemented unless a dict of str to str)"},
    {"decode_batch_body", decode_batch_body, METH_O, "SEND_BATCH_MESSAGE body -> [(flag, body, properties)]"},
    {"pack_record", pack_record, METH_VARARGS, "one CommitLog record's bytes"},
    {"index_entries", index_entries, METH_VARARGS,
     "IndexFile entries of postings, linking the slot table in place -> (entries, linked, new_slots)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ferrymq.common._message_codec", "Compiled per-message codecs (see ferrymq/common/speedups.py).", 0, methods,
};

PyMODINIT_FUNC
PyInit__message_codec(void)
{
    return PyModuleDef_Init(&module_def);
}
