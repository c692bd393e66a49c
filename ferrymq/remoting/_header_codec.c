/*
 * ferrymq.remoting._header_codec: the JSON remoting header (docs/wire-format.md#json-header) of every
 * request and response, and the numbers in header fields, compiled (issue 11).
 *
 * The specification is ferrymq/remoting/json_header.py (and command.py's frame layout and
 * py_java_number),
 * which stays the fallback: these functions handle the shapes Java and FerryMQ peers
 * actually send and return NotImplemented for anything else (a float, a null, a nested
 * value, a lone surrogate, bad JSON, ...), and the Python code then decides, with its own
 * coercions and error messages. tests/common/test_speedups.py holds both to the same
 * answers.
 *
 *   decode(header: bytes-like, languages: dict[str, int])
 *       -> (code, language, version, opaque, flag, remark, ext_fields) | NotImplemented
 *   encode_frame(code, language, version, opaque, flag, remark, ext_fields, body,
 *                language_names: dict[int, str]) -> bytes (a whole JSON frame) | NotImplemented
 *   java_number(text: str, bits: 32 | 64) -> int | None (Integer/Long.parseLong, in range)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_HEADER ((1 << 24) - 1)

/* ------------------------------------------------------------------ decoding */

typedef struct {
    const unsigned char *p, *end;
} Cursor;

static inline void
skip_ws(Cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int
hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char ch = p[i];
        v <<= 4;
        if (ch >= '0' && ch <= '9')
            v |= ch - '0';
        else if (ch >= 'a' && ch <= 'f')
            v |= ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F')
            v |= ch - 'A' + 10;
        else
            return -1;
    }
    *out = v;
    return 0;
}

static unsigned char *
put_utf8(unsigned char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *o++ = (unsigned char)(0xC0 | (cp >> 6));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (unsigned char)(0xE0 | (cp >> 12));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (unsigned char)(0xF0 | (cp >> 18));
        *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* A JSON string at c->p (the opening quote). Returns a new str, NULL with an error set, or
 * NULL without one for "not ours" (the caller answers NotImplemented). Invalid UTF-8 reads
 * as U+FFFD, as the Python side's bytes.decode("utf-8", "replace") before json.loads. */
static PyObject *
read_string(Cursor *c)
{
    const unsigned char *start = ++c->p, *q = start;
    int escaped = 0;
    while (q < c->end && *q != '"') {
        if (*q == '\\') {
            escaped = 1;
            q += 2;
            continue;
        }
        if (*q < 0x20)
            return NULL; /* a raw control character: json.loads refuses it */
        q++;
    }
    if (q >= c->end)
        return NULL;
    c->p = q + 1;
    if (!escaped)
        return PyUnicode_DecodeUTF8((const char *)start, q - start, "replace");
    /* An escape never takes more bytes decoded than it took written. */
    unsigned char small[512];
    unsigned char *buf = (q - start) <= (Py_ssize_t)sizeof(small) ? small : PyMem_Malloc(q - start);
    if (buf == NULL)
        return PyErr_NoMemory();
    unsigned char *o = buf;
    const unsigned char *p = start;
    PyObject *result = NULL;
    while (p < q) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        if (p + 1 >= q)
            goto done;
        unsigned char e = p[1];
        p += 2;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (q - p < 4 || hex4(p, &cp) < 0)
                goto done;
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (q - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
                    goto done; /* a lone surrogate: Python keeps it as such */
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                goto done;
            }
            o = put_utf8(o, cp);
            break;
        }
        default:
            goto done;
        }
    }
    result = PyUnicode_DecodeUTF8((const char *)buf, o - buf, "replace");
done:
    if (buf != small)
        PyMem_Free(buf);
    return result;
}

/* A JSON integer as Python would read it; 0 on success, -1 for "not ours". */
static int
read_int(Cursor *c, long long *out)
{
    const unsigned char *p = c->p;
    int negative = 0;
    if (p < c->end && *p == '-') {
        negative = 1;
        p++;
    }
    const unsigned char *digits = p;
    long long v = 0;
    while (p < c->end && *p >= '0' && *p <= '9') {
        if (p - digits >= 18)
            return -1;
        v = v * 10 + (*p - '0');
        p++;
    }
    if (p == digits || (*digits == '0' && p - digits > 1))
        return -1;
    if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E'))
        return -1;
    c->p = p;
    *out = negative ? -v : v;
    return 0;
}

static int
key_is(const unsigned char *k, Py_ssize_t n, const char *name)
{
    return (Py_ssize_t)strlen(name) == n && memcmp(k, name, n) == 0;
}

/* The extFields object; a new dict, or NULL (error set, or "not ours" if none). */
static PyObject *
read_ext_fields(Cursor *c)
{
    if (c->p >= c->end || *c->p != '{')
        return NULL;
    c->p++;
    PyObject *ext = PyDict_New();
    if (ext == NULL)
        return NULL;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return ext;
    }
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"')
            goto fail;
        PyObject *key = read_string(c);
        if (key == NULL)
            goto fail;
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') {
            Py_DECREF(key);
            goto fail;
        }
        c->p++;
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"') { /* a number, a null, ...: Python's to_header_map */
            Py_DECREF(key);
            goto fail;
        }
        PyObject *value = read_string(c);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        int rc = PyDict_SetItem(ext, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (rc < 0)
            goto fail;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return ext;
        }
        goto fail;
    }
fail:
    Py_DECREF(ext);
    return NULL;
}

static PyObject *
decode(PyObject *module, PyObject *args)
{
    Py_buffer view;
    PyObject *languages;
    if (!PyArg_ParseTuple(args, "y*O!:decode", &view, &PyDict_Type, &languages))
        return NULL;
    Cursor c = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len};
    long long code = 0, version = 0, opaque = 0, flag = 0, language = 0; /* Java's defaults */
    PyObject *remark = NULL, *ext = NULL, *result = NULL;
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '{')
        goto not_ours;
    c.p++;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') {
        c.p++;
        goto closed;
    }
    for (;;) {
        skip_ws(&c);
        if (c.p >= c.end || *c.p != '"')
            goto not_ours;
        const unsigned char *k = c.p + 1, *kend = k;
        while (kend < c.end && *kend != '"' && *kend != '\\' && *kend >= 0x20)
            kend++;
        if (kend >= c.end || *kend != '"')
            goto not_ours; /* an escape or a raw control character in a key: Python's case */
        Py_ssize_t kn = kend - k;
        c.p = kend + 1;
        skip_ws(&c);
        if (c.p >= c.end || *c.p != ':')
            goto not_ours;
        c.p++;
        skip_ws(&c);
        if (c.p >= c.end)
            goto not_ours;
        long long *number = NULL;
        if (key_is(k, kn, "code"))
            number = &code;
        else if (key_is(k, kn, "version"))
            number = &version;
        else if (key_is(k, kn, "opaque"))
            number = &opaque;
        else if (key_is(k, kn, "flag"))
            number = &flag;
        if (number != NULL) {
            if (read_int(&c, number) < 0)
                goto not_ours;
        } else if (key_is(k, kn, "extFields")) {
            PyObject *fields = read_ext_fields(&c);
            if (fields == NULL)
                goto not_ours;
            Py_XSETREF(ext, fields);
        } else if (key_is(k, kn, "remark")) {
            if (*c.p != '"')
                goto not_ours;
            PyObject *text = read_string(&c);
            if (text == NULL)
                goto not_ours;
            Py_XSETREF(remark, text);
        } else if (key_is(k, kn, "language")) {
            if (*c.p == '"') {
                PyObject *name = read_string(&c);
                if (name == NULL)
                    goto not_ours;
                PyObject *value = PyDict_GetItemWithError(languages, name);
                Py_DECREF(name);
                if (value == NULL)
                    goto not_ours; /* a language we have no name for: Python logs it */
                language = PyLong_AsLongLong(value);
                if (language == -1 && PyErr_Occurred())
                    goto fail;
            } else if (read_int(&c, &language) < 0) {
                goto not_ours;
            }
        } else if (*c.p == '"') { /* serializeTypeCurrentRPC or a key nobody reads */
            PyObject *ignored = read_string(&c);
            if (ignored == NULL)
                goto not_ours;
            Py_DECREF(ignored);
        } else {
            long long ignored;
            if (read_int(&c, &ignored) < 0)
                goto not_ours;
        }
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            c.p++;
            continue;
        }
        if (c.p < c.end && *c.p == '}') {
            c.p++;
            break;
        }
        goto not_ours;
    }
closed:
    skip_ws(&c);
    if (c.p != c.end)
        goto not_ours;
    if (ext == NULL && (ext = PyDict_New()) == NULL)
        goto fail;
    result = Py_BuildValue("(LLLLLOO)", code, language, version, opaque, flag, remark ? remark : Py_None, ext);
    goto fail; /* releases what the tuple now holds its own references to */
not_ours:
    if (!PyErr_Occurred()) /* else an error of ours (no memory): raised */
        result = Py_NewRef(Py_NotImplemented);
fail:
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ encoding */

typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} Buf;

static int
reserve(Buf *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->len + more)
        cap = b->len + more + 256;
    unsigned char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int
put_raw(Buf *b, const char *s, Py_ssize_t n)
{
    if (reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static int
put_int(Buf *b, long long v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", v);
    return put_raw(b, tmp, n);
}

/* A JSON string as json.dumps(ensure_ascii=False) writes it, in UTF-8. Returns 1 for a
 * lone surrogate (not encodable: the Python side raises its own error). */
static int
put_string(Buf *b, PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (reserve(b, 2 + 6 * n) < 0) /* the worst case, \u00XX for every character */
        return -1;
    unsigned char *o = b->data + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        if (ch >= 0x20 && ch != '"' && ch != '\\') {
            if (ch < 0x80) {
                *o++ = (unsigned char)ch;
                continue;
            }
            if (ch >= 0xD800 && ch <= 0xDFFF)
                return 1;
            o = put_utf8(o, ch); /* at most 4 bytes: within the 6 reserved per character */
            continue;
        }
        *o++ = '\\';
        switch (ch) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        default: {
            static const char hex[] = "0123456789abcdef";
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[ch >> 4];
            *o++ = hex[ch & 0xF];
        }
        }
    }
    *o++ = '"';
    b->len = o - b->data;
    return 0;
}

#define PUT(lit) put_raw(&b, lit, sizeof(lit) - 1)

static PyObject *
encode_frame(PyObject *module, PyObject *args)
{
    long long code, language, version, opaque, flag;
    PyObject *remark, *ext, *body, *names;
    if (!PyArg_ParseTuple(args, "LLLLLOO!OO!:encode_frame", &code, &language, &version, &opaque, &flag, &remark,
                          &PyDict_Type, &ext, &body, &PyDict_Type, &names)) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            /* a number beyond 64 bits, a field of another type: the Python side's error */
            PyErr_Clear();
            Py_RETURN_NOTIMPLEMENTED;
        }
        return NULL;
    }
    if ((remark != Py_None && !PyUnicode_Check(remark)) || (body != Py_None && !PyBytes_Check(body)))
        Py_RETURN_NOTIMPLEMENTED;
    Buf b = {PyMem_Malloc(256), 8, 256}; /* room for the length and type prefix first */
    if (b.data == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL;
    int rc = 0;
    if (PUT("{\"code\":") < 0 || put_int(&b, code) < 0)
        goto fail;
    if (PyDict_GET_SIZE(ext) > 0) {
        if (PUT(",\"extFields\":{") < 0)
            goto fail;
        Py_ssize_t pos = 0, i = 0;
        PyObject *key, *value;
        while (PyDict_Next(ext, &pos, &key, &value)) {
            if (!PyUnicode_Check(key) || !PyUnicode_Check(value))
                goto not_ours;
            if (i++ > 0 && PUT(",") < 0)
                goto fail;
            if ((rc = put_string(&b, key)) != 0)
                goto check;
            if (PUT(":") < 0)
                goto fail;
            if ((rc = put_string(&b, value)) != 0)
                goto check;
        }
        if (PUT("}") < 0)
            goto fail;
    }
    if (PUT(",\"flag\":") < 0 || put_int(&b, flag) < 0 || PUT(",\"language\":") < 0)
        goto fail;
    PyObject *key = PyLong_FromLongLong(language);
    if (key == NULL)
        goto fail;
    PyObject *name = PyDict_GetItemWithError(names, key);
    Py_DECREF(key);
    if (name != NULL) {
        if (!PyUnicode_Check(name))
            goto not_ours;
        if ((rc = put_string(&b, name)) != 0)
            goto check;
    } else if (PyErr_Occurred() || put_int(&b, language) < 0) {
        goto fail;
    }
    if (PUT(",\"opaque\":") < 0 || put_int(&b, opaque) < 0)
        goto fail;
    if (remark != Py_None) {
        if (PUT(",\"remark\":") < 0)
            goto fail;
        if ((rc = put_string(&b, remark)) != 0)
            goto check;
    }
    if (PUT(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":") < 0 || put_int(&b, version) < 0 || PUT("}") < 0)
        goto fail;
    Py_ssize_t header = b.len - 8, body_len = body == Py_None ? 0 : PyBytes_GET_SIZE(body);
    if (header > MAX_HEADER || 4 + header + body_len > INT32_MAX)
        goto not_ours; /* Python raises the error that says so */
    result = PyBytes_FromStringAndSize(NULL, b.len + body_len);
    if (result == NULL)
        goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    uint32_t length = (uint32_t)(4 + header + body_len), type_and_header = (uint32_t)header; /* JSON is type 0 */
    for (int i = 0; i < 4; i++) {
        b.data[i] = (unsigned char)(length >> (24 - 8 * i));
        b.data[4 + i] = (unsigned char)(type_and_header >> (24 - 8 * i));
    }
    memcpy(out, b.data, b.len);
    if (body_len)
        memcpy(out + b.len, PyBytes_AS_STRING(body), body_len);
    PyMem_Free(b.data);
    return result;
check:
    if (rc < 0)
        goto fail;
not_ours:
    PyMem_Free(b.data);
    Py_RETURN_NOTIMPLEMENTED;
fail:
    PyMem_Free(b.data);
    return NULL;
}

/* ------------------------------------------------------------------ header field numbers */

static int parse_java_number(PyObject *text, int bits, long long *out);

/* Java's Integer.parseInt (bits 32) / Long.parseLong (bits 64) of a header field: an optional
 * sign and ASCII digits, within the type's range; None for anything else. */
static PyObject *
java_number(PyObject *module, PyObject *args)
{
    PyObject *text;
    int bits;
    if (!PyArg_ParseTuple(args, "Ui:java_number", &text, &bits))
        return NULL;
    if (bits != 32 && bits != 64) {
        PyErr_SetString(PyExc_ValueError, "bits must be 32 or 64");
        return NULL;
    }
    long long number;
    if (parse_java_number(text, bits, &number) < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(number);
}

/* ------------------------------------------------------------------ a header's typed fields */

/* Java's number of ASCII digits with an optional sign, within bits; 0, or -1 when malformed. */
static int
parse_java_number(PyObject *text, int bits, long long *out)
{
    if (!PyUnicode_IS_ASCII(text))
        return -1;
    const unsigned char *p = PyUnicode_1BYTE_DATA(text), *end = p + PyUnicode_GET_LENGTH(text);
    int negative = 0;
    if (p < end && (*p == '+' || *p == '-')) {
        negative = *p == '-';
        p++;
    }
    if (p == end)
        return -1;
    uint64_t limit = bits == 32 ? (negative ? 0x80000000ull : 0x7FFFFFFFull)
                                : (negative ? 0x8000000000000000ull : 0x7FFFFFFFFFFFFFFFull);
    uint64_t v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned digit = *p - '0';
        if (v > (limit - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    *out = negative ? (v == 0x8000000000000000ull ? INT64_MIN : -(long long)v) : (long long)v;
    return 0;
}

#define FIELD_STR 0
#define FIELD_INT 1
#define FIELD_LONG 2
#define FIELD_BOOL 3

/* header_values(ext_fields, spec) -> tuple | int | NotImplemented: spec is a tuple of (name, kind,
 * default, required) with kind 0 str, 1 int, 2 long, 3 bool. The values in spec order; the index
 * of the first field that is missing but required or not a number; NotImplemented when the ext
 * fields are not a dict of str (the Python version then reads them). */
static PyObject *
header_values(PyObject *module, PyObject *args)
{
    PyObject *ext, *spec;
    if (!PyArg_ParseTuple(args, "O!O!:header_values", &PyDict_Type, &ext, &PyTuple_Type, &spec))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *field = PyTuple_GET_ITEM(spec, i);
        if (!PyTuple_Check(field) || PyTuple_GET_SIZE(field) != 4) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "a header field spec is (name, kind, default, required)");
            return NULL;
        }
        PyObject *name = PyTuple_GET_ITEM(field, 0), *def = PyTuple_GET_ITEM(field, 2);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(field, 1));
        int required = PyObject_IsTrue(PyTuple_GET_ITEM(field, 3));
        if ((kind == -1 && PyErr_Occurred()) || required < 0) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *value = PyDict_GetItemWithError(ext, name), *item;
        if (value == NULL && PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        if (value != NULL && !PyUnicode_Check(value)) {
            Py_DECREF(out);
            Py_RETURN_NOTIMPLEMENTED;
        }
        if (value == NULL || PyUnicode_GET_LENGTH(value) == 0) {  /* absent: empty counts as absent */
            if (required) {
                Py_DECREF(out);
                return PyLong_FromSsize_t(i);
            }
            item = def;
            Py_INCREF(item);
        } else if (kind == FIELD_STR) {
            item = value;
            Py_INCREF(item);
        } else if (kind == FIELD_BOOL) {  /* Boolean.parseBoolean: "true" in any case, else false */
            int is_true = 0;
            if (PyUnicode_GET_LENGTH(value) == 4 && PyUnicode_IS_ASCII(value)) {
                const char *c = (const char *)PyUnicode_1BYTE_DATA(value);
                is_true = (c[0] | 0x20) == 't' && (c[1] | 0x20) == 'r' && (c[2] | 0x20) == 'u' && (c[3] | 0x20) == 'e';
            } else if (PyUnicode_GET_LENGTH(value) == 4) {  /* non-ASCII: as str.lower() would */
                PyObject *lower = PyObject_CallMethod(value, "lower", NULL);
                if (lower == NULL) {
                    Py_DECREF(out);
                    return NULL;
                }
                is_true = PyUnicode_CompareWithASCIIString(lower, "true") == 0;
                Py_DECREF(lower);
            }
            item = is_true ? Py_True : Py_False;
            Py_INCREF(item);
        } else {
            long long number;
            if (parse_java_number(value, kind == FIELD_INT ? 32 : 64, &number) < 0) {
                Py_DECREF(out);
                return PyLong_FromSsize_t(i);
            }
            if ((item = PyLong_FromLongLong(number)) == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "JSON header bytes -> header fields, or NotImplemented"},
    {"encode_frame", encode_frame, METH_VARARGS, "a whole JSON frame, or NotImplemented"},
    {"java_number", java_number, METH_VARARGS, "a header field's Java int/long, or None"},
    {"header_values", header_values, METH_VARARGS,
     "a header's typed field values by spec, the index of a bad field, or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ferrymq.remoting._header_codec",
    "The remoting header, compiled (see ferrymq/remoting/json_header.py, command.py).", 0, methods,
};

PyMODINIT_FUNC
PyInit__header_codec(void)
{
    return PyModuleDef_Init(&module_def);
}
