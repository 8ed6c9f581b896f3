# cython: language_level=3
"""qosmanager._native.jsonl -- the audit's write records as JSON lines, a batch in one call.

``write_lines(ts, rows, other)`` returns the UTF-8 bytes of one JSON line per row, each exactly what
``qosmanager.executor.audit._encode`` makes of the record ``{"ts": ts[i], "strategy", "action":
"write", "target", "value", "old", "uid", "reason", "executed": true}`` of row ``i`` = ``(strategy,
target, value, old, uid, reason)``.  A field that is an ASCII ``str`` is escaped here (``"``, ``\\``,
control characters, as json's ``encode_basestring``), ``None`` is ``null``, a finite ``float`` ts its
``repr``; anything else is given to ``other`` (the audit's own encoder), whose text is copied in.
The plain-Python twin is ``qosmanager._native.pure_jsonl``; tests/test_jsonl_twins.py holds them equal.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.math cimport isfinite
from libc.string cimport memcmp, memcpy


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object o)
    const char *PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags, int *ptype) except NULL
    int Py_DTSF_ADD_DOT_0


cdef struct Buf:
    char *data
    Py_ssize_t n
    Py_ssize_t cap


cdef int grow(Buf *b, Py_ssize_t need) except -1:
    cdef Py_ssize_t cap
    cdef char *p
    if b.n + need <= b.cap:
        return 0
    cap = b.cap * 2
    while cap < b.n + need:
        cap *= 2
    p = <char *>PyMem_Realloc(b.data, cap)
    if p == NULL:
        raise MemoryError()
    b.data = p
    b.cap = cap
    return 0


cdef int put(Buf *b, const char *s, Py_ssize_t n) except -1:
    grow(b, n)
    memcpy(b.data + b.n, s, n)
    b.n += n
    return 0


cdef const char *HEX = b"0123456789abcdef"


cdef int put_ascii(Buf *b, object s) except -1:
    """A compact ASCII str, quoted and escaped."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(s), i
    cdef const unsigned char *p = <const unsigned char *>PyUnicode_DATA(s)
    cdef unsigned char c
    cdef unsigned char special = 0
    cdef char *o
    for i in range(n):  # no early exit: the compiler makes this a vector loop
        c = p[i]
        special |= (c < 32) | (c == 34) | (c == 92)
    if not special:
        grow(b, n + 2)
        o = b.data + b.n
        o[0] = 34
        memcpy(o + 1, p, n)
        o[n + 1] = 34
        b.n += n + 2
        return 0
    grow(b, n * 6 + 2)  # the worst case: every character \\u00XX
    o = b.data + b.n
    o[0] = 34
    o += 1
    for i in range(n):
        c = p[i]
        if c >= 32 and c != 34 and c != 92:
            o[0] = c
            o += 1
            continue
        o[0] = 92
        if c == 34 or c == 92:
            o[1] = c
            o += 2
        elif c == 10:
            o[1] = 110  # n
            o += 2
        elif c == 13:
            o[1] = 114  # r
            o += 2
        elif c == 9:
            o[1] = 116  # t
            o += 2
        elif c == 8:
            o[1] = 98  # b
            o += 2
        elif c == 12:
            o[1] = 102  # f
            o += 2
        else:
            o[1] = 117  # u
            o[2] = 48
            o[3] = 48
            o[4] = HEX[c >> 4]
            o[5] = HEX[c & 15]
            o += 6
    o[0] = 34
    o += 1
    b.n = o - b.data
    return 0


cdef int put_field(Buf *b, object v, object other) except -1:
    cdef Py_ssize_t n
    cdef const char *u
    if v is None:
        return put(b, b"null", 4)
    if type(v) is str and PyUnicode_IS_ASCII(v):
        return put_ascii(b, v)
    text = other(v)
    u = PyUnicode_AsUTF8AndSize(text, &n)
    return put(b, u, n)


cdef struct Last:
    double x  # the last float ts written (consecutive clock readings are often the same double)
    char text[40]
    Py_ssize_t n


cdef int put_ts(Buf *b, object ts, object other, Last *last) except -1:
    cdef char *s
    cdef Py_ssize_t n = 0
    cdef const char *u
    cdef double x
    if type(ts) is float:
        x = ts
        if isfinite(x):
            if last.n > 0 and memcmp(&x, &last.x, sizeof(double)) == 0:  # bits: 0.0 is not -0.0
                return put(b, last.text, last.n)
            s = PyOS_double_to_string(x, b'r', 0, Py_DTSF_ADD_DOT_0, NULL)
            while s[n] != 0:
                n += 1
            try:
                put(b, s, n)
                if n < 40:
                    memcpy(last.text, s, n)
                    last.n = n
                    last.x = x
            finally:
                PyMem_Free(s)
            return 0
    text = other(ts)
    u = PyUnicode_AsUTF8AndSize(text, &n)
    return put(b, u, n)


def write_lines(list ts, list rows, other):
    """The JSON lines of write records (see the module docstring), as UTF-8 bytes."""
    cdef Buf b
    cdef Py_ssize_t i, k = len(rows)
    cdef tuple row
    cdef Last last
    last.n = 0
    if len(ts) != k:
        raise ValueError("one timestamp per row")
    b.n = 0
    b.cap = 320 * k + 64
    b.data = <char *>PyMem_Malloc(b.cap)
    if b.data == NULL:
        raise MemoryError()
    try:
        for i in range(k):
            row = <tuple?>rows[i]
            if len(row) != 6:
                raise ValueError("a row is (strategy, target, value, old, uid, reason)")
            put(&b, b'{"ts": ', 7)
            put_ts(&b, ts[i], other, &last)
            put(&b, b', "strategy": ', 14)
            put_field(&b, row[0], other)
            put(&b, b', "action": "write", "target": ', 31)
            put_field(&b, row[1], other)
            put(&b, b', "value": ', 11)
            put_field(&b, row[2], other)
            put(&b, b', "old": ', 9)
            put_field(&b, row[3], other)
            put(&b, b', "uid": ', 9)
            put_field(&b, row[4], other)
            put(&b, b', "reason": ', 12)
            put_field(&b, row[5], other)
            put(&b, b', "executed": true}\n', 20)
        return PyBytes_FromStringAndSize(b.data, b.n)
    finally:
        PyMem_Free(b.data)
