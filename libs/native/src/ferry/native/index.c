/* The index service's per-record loops: the BLAKE2b-64 hashes of each record's keys, and
 * their entries written into a mapped index file. Python references: ferry.index.keys,
 * ferry.index.index_file. */
#include "speedups.h"

/* ---- BLAKE2b with an 8-byte digest, no key (RFC 7693): hashlib.blake2b(digest_size=8) ---- */

static const uint64_t B2_IV[8] = {
    0x6A09E667F3BCC908ull, 0xBB67AE8584CAA73Bull, 0x3C6EF372FE94F82Bull, 0xA54FF53A5F1D36F1ull,
    0x510E527FADE682D1ull, 0x9B05688C2B3E6C1Full, 0x1F83D9ABFB41BD6Bull, 0x5BE0CD19137E2179ull};

static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

#define B2_G(a, b, c, d, x, y)          \
    do {                                \
        v[a] = v[a] + v[b] + (x);       \
        v[d] = rotr64(v[d] ^ v[a], 32); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 24); \
        v[a] = v[a] + v[b] + (y);       \
        v[d] = rotr64(v[d] ^ v[a], 16); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 63); \
    } while (0)

static void b2_compress(uint64_t h[8], const uint8_t block[128], uint64_t counter, int last) {
    uint64_t v[16], m[16];
    for (int i = 0; i < 16; i++) {
        uint64_t w = 0;
        for (int b = 7; b >= 0; b--) w = (w << 8) | block[8 * i + b];
        m[i] = w;
    }
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= counter; /* inputs here stay far below 2^64 bytes: the high counter word is 0 */
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = B2_SIGMA[r];
        B2_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        B2_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        B2_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        B2_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        B2_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        B2_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        B2_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        B2_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* The hash of space + topic + '#' + key (three pieces, no copy of the message), as the
 * little-endian integer of its 8-byte digest. */
static uint64_t key_hash3(uint8_t space, const uint8_t *topic, Py_ssize_t topic_len,
                          const uint8_t *key, Py_ssize_t key_len) {
    uint64_t h[8];
    memcpy(h, B2_IV, sizeof h);
    h[0] ^= 0x01010000u ^ 8u; /* fanout 1, depth 1, no key, digest length 8 */
    uint8_t block[128];
    Py_ssize_t fill = 0;
    uint64_t counter = 0;
    const uint8_t *parts[4] = {&space, topic, (const uint8_t *)"#", key};
    Py_ssize_t lens[4] = {1, topic_len, 1, key_len};
    for (int p = 0; p < 4; p++) {
        const uint8_t *src = parts[p];
        Py_ssize_t n = lens[p];
        while (n > 0) {
            if (fill == 128) { /* a full block with more to come: compress it, not the last */
                counter += 128;
                b2_compress(h, block, counter, 0);
                fill = 0;
            }
            Py_ssize_t take = 128 - fill < n ? 128 - fill : n;
            memcpy(block + fill, src, (size_t)take);
            fill += take;
            src += take;
            n -= take;
        }
    }
    counter += (uint64_t)fill;
    memset(block + fill, 0, (size_t)(128 - fill));
    b2_compress(h, block, counter, 1);
    return h[0];
}

/* ---- the index: key hashes of whole records ---- */

static int is_ascii_space(uint8_t ch) {
    /* str.split()'s whitespace among ASCII: \t \n \v \f \r, \x1c-\x1f and the space */
    return ch == ' ' || (ch >= 9 && ch <= 13) || (ch >= 0x1c && ch <= 0x1f);
}

static int add_hash(PyObject *hashes, uint64_t h) {
    PyObject *v = PyLong_FromUnsignedLongLong(h);
    if (!v) return -1;
    int rc = PyList_Append(hashes, v);
    Py_DECREF(v);
    return rc;
}

/* Appends the hashes of the space-separated keys in value (ASCII, duplicates once). */
static int add_key_hashes(PyObject *hashes, const uint8_t *topic, Py_ssize_t topic_len,
                          const uint8_t *value, Py_ssize_t n) {
    Py_ssize_t starts[64], lens[64];
    int found = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        while (i < n && is_ascii_space(value[i])) i++;
        if (i >= n) break;
        Py_ssize_t s = i;
        while (i < n && !is_ascii_space(value[i])) i++;
        int dup = 0;
        for (int q = 0; q < found && !dup; q++)
            dup = lens[q] == i - s && memcmp(value + starts[q], value + s, (size_t)(i - s)) == 0;
        if (dup) continue;
        if (found == 64) return 1; /* unusually many: the Python code decides */
        starts[found] = s;
        lens[found] = i - s;
        found++;
    }
    for (int q = 0; q < found; q++) {
        if (add_hash(hashes, key_hash3('K', topic, topic_len, value + starts[q], lens[q])) < 0)
            return -1;
    }
    return 0;
}

static PyObject *py_indexed_records(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    const uint8_t *d = buf.buf;
    Py_ssize_t end = buf.len, pos = 0;
    PyObject *out = PyList_New(0);
    PyObject *hashes = NULL;
    if (!out) goto fail;
    while (pos < end) {
        if (end - pos < OFF_BODY) {
            if (end - pos >= BLANK_MIN && get_u32(d + pos + OFF_MAGIC) == BLANK_MAGIC &&
                get_i32(d + pos) > 0) {
                pos += get_i32(d + pos);
                continue;
            }
            goto python_decides;
        }
        const uint8_t *r = d + pos;
        int32_t size = get_i32(r);
        uint32_t magic = get_u32(r + OFF_MAGIC);
        if (magic != MAGIC) {
            if (magic == BLANK_MAGIC && size > 0) {
                pos += size;
                continue;
            }
            goto python_decides;
        }
        int64_t phys = get_i64(r + OFF_PHYS_OFFSET);
        int32_t sysflag = get_i32(r + OFF_SYSFLAG);
        int64_t store_ms = get_i64(r + OFF_STORE_TIMESTAMP);
        int32_t body_len = get_i32(r + OFF_BODYLEN);
        Py_ssize_t stop = pos + size;
        Py_ssize_t at = pos + OFF_BODY + body_len;
        if (size < FIXED_SIZE || size > end - pos || body_len < 0 || at + TAIL_SIZE > stop)
            goto python_decides;
        Py_ssize_t topic_end = at + TOPIC_LEN_SIZE + d[at];
        Py_ssize_t props = topic_end + PROPS_LEN_SIZE;
        if (props > stop || props + ((d[topic_end] << 8) | d[topic_end + 1]) != stop)
            goto python_decides;
        pos = stop;
        if ((sysflag & SYSFLAG_TX_ROLLBACK) == SYSFLAG_TX_ROLLBACK || props == stop) continue;
        const uint8_t *topic = d + at + TOPIC_LEN_SIZE;
        Py_ssize_t topic_len = d[at];
        hashes = PyList_New(0);
        if (!hashes) goto fail;
        Py_ssize_t v0, v1;
        if (find_property(d + props, stop - props, "KEYS\x01", 5, &v0, &v1)) {
            for (Py_ssize_t b = v0; b < v1; b++)
                if (d[props + b] >= 0x80) goto python_decides; /* decoded as UTF-8 there */
            int rc = add_key_hashes(hashes, topic, topic_len, d + props + v0, v1 - v0);
            if (rc < 0) goto fail;
            if (rc > 0) goto python_decides;
        }
        if (find_property(d + props, stop - props, "UNIQ_KEY\x01", 9, &v0, &v1) && v1 > v0) {
            if (add_hash(hashes, key_hash3('U', topic, topic_len, d + props + v0, v1 - v0)) < 0)
                goto fail;
        }
        if (PyList_GET_SIZE(hashes) > 0) {
            PyObject *item = PyTuple_New(3);
            if (!item) goto fail;
            PyObject *a = PyLong_FromLongLong((long long)phys);
            PyObject *b = a ? PyLong_FromLongLong((long long)store_ms) : NULL;
            if (!b) {
                Py_XDECREF(a);
                Py_DECREF(item);
                goto fail;
            }
            PyTuple_SET_ITEM(item, 0, a);
            PyTuple_SET_ITEM(item, 1, b);
            /* ints only, in a tuple of ints and that list: no cycle can pass through them, so
             * the collector need not walk them (reference counting frees them) */
            PyObject_GC_UnTrack(hashes);
            PyTuple_SET_ITEM(item, 2, hashes);
            hashes = NULL; /* the tuple holds it */
            PyObject_GC_UnTrack(item);
            int rc = PyList_Append(out, item);
            Py_DECREF(item);
            if (rc < 0) goto fail;
        }
        Py_CLEAR(hashes);
    }
    PyBuffer_Release(&buf);
    return out;
python_decides:
    Py_XDECREF(hashes);
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(hashes);
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    return NULL;
}

/* ---- the index: entries of a batch of records into a mapped index file ---- */

static inline void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void put_le64(uint8_t *p, uint64_t v) {
    put_le32(p, (uint32_t)v);
    put_le32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define ENTRY_SIZE 32
#define ENTRY_MARKER 0xE7E7E7E7u

/* As IndexFile.put_records: every entry first (chained to the newest entry of its slot, in
 * this batch or before), then the slots, so that a crash in between leaves the slots as they
 * were. Returns (entries written, lowest store ms, highest store ms). */
static PyObject *py_put_entries(PyObject *self, PyObject *args) {
    Py_buffer mm;
    Py_ssize_t entries_at, slots_at, nslots, first;
    PyObject *records;
    if (!PyArg_ParseTuple(args, "w*nnnnO!", &mm, &entries_at, &slots_at, &nslots, &first,
                          &PyList_Type, &records))
        return NULL;
    PyObject *result = NULL;
    uint32_t *keys = NULL, *vals = NULL;
    Py_ssize_t total = 0, nrec = PyList_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < nrec; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) != 3 || !PyList_Check(PyTuple_GET_ITEM(rec, 2))) {
            PyErr_SetString(PyExc_TypeError, "put_entries: records are (phys, store_ms, [hashes])");
            goto done;
        }
        total += PyList_GET_SIZE(PyTuple_GET_ITEM(rec, 2));
    }
    if (nslots <= 0 || first < 1 || first + total > UINT32_MAX ||
        slots_at + 4 * nslots > mm.len || entries_at + (first + total) * ENTRY_SIZE > mm.len) {
        PyErr_SetString(PyExc_ValueError, "put_entries: the entries do not fit the file");
        goto done;
    }
    Py_ssize_t cap = 16;
    while (cap < 2 * total) cap <<= 1;
    keys = PyMem_Malloc(sizeof(uint32_t) * (size_t)cap); /* slot + 1; 0 is empty */
    vals = PyMem_Malloc(sizeof(uint32_t) * (size_t)cap);
    if (!keys || !vals) {
        PyErr_NoMemory();
        goto done;
    }
    memset(keys, 0, sizeof(uint32_t) * (size_t)cap);
    uint8_t *base = mm.buf;
    long long lo_ms = 0, hi_ms = 0;
    uint32_t n = (uint32_t)first;
    for (Py_ssize_t i = 0; i < nrec; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        long long phys = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 0));
        long long ms = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 1));
        if (PyErr_Occurred()) goto done;
        if (i == 0 || ms < lo_ms) lo_ms = ms;
        if (i == 0 || ms > hi_ms) hi_ms = ms;
        PyObject *hashes = PyTuple_GET_ITEM(rec, 2);
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(hashes); k++) {
            uint64_t h = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(hashes, k));
            if (PyErr_Occurred()) goto done;
            uint32_t slot = (uint32_t)(h % (uint64_t)nslots);
            Py_ssize_t at = (Py_ssize_t)((slot * 2654435761u) & (uint32_t)(cap - 1));
            while (keys[at] && keys[at] != slot + 1) at = (at + 1) & (cap - 1);
            uint32_t prev = keys[at] ? vals[at] : get_le32(base + slots_at + 4 * (Py_ssize_t)slot);
            keys[at] = slot + 1;
            vals[at] = n;
            uint8_t *e = base + entries_at + (Py_ssize_t)n * ENTRY_SIZE;
            put_le64(e, h);
            put_le64(e + 8, (uint64_t)phys);
            put_le64(e + 16, (uint64_t)ms);
            put_le32(e + 24, prev);
            put_le32(e + 28, ENTRY_MARKER);
            n++;
        }
    }
    for (Py_ssize_t at = 0; at < cap; at++) {
        if (keys[at]) put_le32(base + slots_at + 4 * (Py_ssize_t)(keys[at] - 1), vals[at]);
    }
    result = Py_BuildValue("(nLL)", total, lo_ms, hi_ms);
done:
    PyMem_Free(keys);
    PyMem_Free(vals);
    PyBuffer_Release(&mm);
    return result;
}

static PyObject *py_key_hash(PyObject *self, PyObject *args) {
    Py_buffer topic, key;
    int unique;
    if (!PyArg_ParseTuple(args, "y*y*p", &topic, &key, &unique)) return NULL;
    uint64_t h = key_hash3(unique ? 'U' : 'K', topic.buf, topic.len, key.buf, key.len);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&key);
    return PyLong_FromUnsignedLongLong(h);
}

static PyMethodDef methods[] = {
    {"indexed_records", py_indexed_records, METH_VARARGS,
     "indexed_records(buf) -> [(phys, store_ms, [hashes])] or None when the Python code "
     "must decide"},
    {"put_entries", py_put_entries, METH_VARARGS,
     "put_entries(mm, entries_at, slots_at, slot_count, first, records) -> "
     "(entries written, lowest store ms, highest store ms)"},
    {"key_hash", py_key_hash, METH_VARARGS,
     "key_hash(topic, key, unique) -> the index hash of one key"},
    {NULL, NULL, 0, NULL}};

int ferry_index_init(PyObject *module) { return PyModule_AddFunctions(module, methods); }
