/*
 * ferrymq.grpc._hpack: HPACK's Huffman decoding (RFC 7541 section 5.2, Appendix B), compiled.
 *
 * The specification is py_huffman_decode in ferrymq/grpc/hpack.py, which stays the fallback:
 * the same nibble-wise machine, built here at import from the same code lengths, with the
 * same errors. tests/grpc/test_hpack.py holds both to the same answers.
 *
 *   huffman_decode(data: bytes-like) -> bytes
 *       ValueError: "EOS symbol in a Huffman string", "Huffman padding longer than 7 bits",
 *       "Huffman padding not all ones"
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

static PyObject *
huffman_decode(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf, *end = p + view.len;
    /* the shortest code has 5 bits: at most 8/5 octets out per octet in */
    PyObject *out = PyBytes_FromStringAndSize(NULL, view.len + view.len * 3 / 5 + 1);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned state = 0;
    const char *error = NULL;
    for (; p < end; p++) {
        const Step *step = &steps[state][*p >> 4];
        if (step->symbol < STEP_NONE)
            *o++ = (unsigned char)step->symbol;
        else if (step->symbol == STEP_FAIL)
            goto eos;
        step = &steps[step->next][*p & 15];
        if (step->symbol < STEP_NONE)
            *o++ = (unsigned char)step->symbol;
        else if (step->symbol == STEP_FAIL)
            goto eos;
        state = step->next;
    }
    if (ends[state] == END_TOO_LONG)
        error = "Huffman padding longer than 7 bits";
    else if (ends[state] == END_NOT_ONES)
        error = "Huffman padding not all ones";
    goto done;
eos:
    error = "EOS symbol in a Huffman string";
done:
    PyBuffer_Release(&view);
    if (error != NULL) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    if (_PyBytes_Resize(&out, (Py_ssize_t)(o - (unsigned char *)PyBytes_AS_STRING(out))) < 0)
        return NULL;
    return out;
}

static PyMethodDef methods[] = {
    {"huffman_decode", huffman_decode, METH_O, "the octets of a Huffman-coded HPACK string"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ferrymq.grpc._hpack",
    "HPACK's Huffman decoding, compiled (see ferrymq/grpc/hpack.py).", 0, methods,
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
