/* The broker-store's per-record loops: scan a put's records, stamp them and write their
 * ConsumeQueue entries, walk a pull's ConsumeQueue entries into log ranges. Python
 * references: ferry.store.batch, ferry.store.commit_log, ferry.store.pull_runs. Also the
 * unzeroed buffer ferry.runtime.log_reader reads the store's log files into. */
#include "speedups.h"

/* ---- the store: scan a put's records ---- */

static PyObject *py_scan_batch(PyObject *self, PyObject *args) {
    Py_buffer buf, topic;
    Py_ssize_t count, max_body, max_record;
    PyObject *tags_fallback;
    if (!PyArg_ParseTuple(args, "y*ny*nnO", &buf, &count, &topic, &max_body, &max_record,
                          &tags_fallback))
        return NULL;
    PyObject *sizes = NULL, *flags = NULL, *tags = NULL, *result = NULL;
    const uint8_t *d = buf.buf;
    const uint8_t *t = topic.buf;
    Py_ssize_t n = buf.len, pos = 0;
    if (count < 1 || count > n / FIXED_SIZE) goto python_decides;
    sizes = PyList_New(count);
    flags = PyList_New(count);
    tags = PyList_New(count);
    if (!sizes || !flags || !tags) goto done;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (n - pos < FIXED_SIZE) goto python_decides;
        const uint8_t *r = d + pos;
        int32_t size = get_i32(r);
        int32_t body_len = get_i32(r + OFF_BODYLEN);
        if (get_u32(r + OFF_MAGIC) != MAGIC || size < FIXED_SIZE || size > n - pos || body_len < 0)
            goto python_decides;
        Py_ssize_t end = pos + size;
        Py_ssize_t at = pos + OFF_BODY + body_len; /* the topic length byte */
        if (at + TAIL_SIZE > end) goto python_decides;
        Py_ssize_t props = at + TAIL_SIZE + d[at]; /* PROPLEN: the two bytes before */
        if (props > end || props + ((d[props - 2] << 8) | d[props - 1]) != end) goto python_decides;
        if (d[at] != topic.len || memcmp(d + at + TOPIC_LEN_SIZE, t, (size_t)topic.len) != 0 ||
            body_len > max_body || size > max_record)
            goto python_decides;
        PyObject *code = NULL;
        Py_ssize_t v0, v1;
        if (props < end && find_property(d + props, end - props, "TAGS\x01", 5, &v0, &v1)) {
            int ascii;
            int32_t h = java_hash_ascii(d + props + v0, v1 - v0, &ascii);
            if (ascii) {
                code = PyLong_FromLong(h);
            } else {
                code = PyObject_CallFunction(tags_fallback, "y#", d + props + v0, v1 - v0);
            }
        } else {
            code = PyLong_FromLong(0);
        }
        if (!code) goto done;
        PyObject *s = PyLong_FromLong(size), *f = PyLong_FromLong(get_i32(r + OFF_FLAG));
        if (!s || !f) {
            Py_XDECREF(s);
            Py_XDECREF(f);
            Py_DECREF(code);
            goto done;
        }
        PyList_SET_ITEM(sizes, index, s);
        PyList_SET_ITEM(flags, index, f);
        PyList_SET_ITEM(tags, index, code);
        pos = end;
    }
    if (pos != n) goto python_decides;
    result = PyTuple_Pack(3, sizes, flags, tags);
    goto done;
python_decides:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(sizes);
    Py_XDECREF(flags);
    Py_XDECREF(tags);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&topic);
    return result;
}

/* ---- the store: stamp records k..j of a chunk and write their ConsumeQueue entries ---- */

static PyObject *py_stamp(PyObject *self, PyObject *args) {
    Py_buffer out, host, cq;
    PyObject *sizes, *flags, *tags, *phys;
    Py_ssize_t k, j;
    int queue_id;
    long long first_queue_offset, at, store_ms;
    if (!PyArg_ParseTuple(args, "w*O!O!O!O!nniLLLy*w*", &out, &PyList_Type, &sizes, &PyList_Type,
                          &flags, &PyList_Type, &tags, &PyList_Type, &phys, &k, &j, &queue_id,
                          &first_queue_offset, &at, &store_ms, &host, &cq))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(sizes);
    if (k < 0 || j > n || k > j || PyList_GET_SIZE(flags) < j || PyList_GET_SIZE(tags) < j ||
        PyList_GET_SIZE(phys) < j || host.len != HOST_SIZE || cq.len < CQ_ENTRY_SIZE * j) {
        PyErr_SetString(PyExc_ValueError, "stamp: arguments do not agree");
        goto done;
    }
    uint8_t *o = out.buf;
    uint8_t *c = cq.buf;
    Py_ssize_t local = 0;
    for (Py_ssize_t i = k; i < j; i++) {
        long size = PyLong_AsLong(PyList_GET_ITEM(sizes, i));
        long flag = PyLong_AsLong(PyList_GET_ITEM(flags, i));
        long long code = PyLong_AsLongLong(PyList_GET_ITEM(tags, i));
        if (PyErr_Occurred()) goto done;
        if (size < FIXED_SIZE || local + size > out.len) {
            PyErr_SetString(PyExc_ValueError, "stamp: record sizes overrun the chunk");
            goto done;
        }
        uint8_t *r = o + local;
        put_u32(r + OFF_QUEUE_ID, (uint32_t)queue_id);
        put_u32(r + OFF_FLAG, (uint32_t)flag);
        put_i64(r + OFF_QUEUE_OFFSET, first_queue_offset + i);
        put_i64(r + OFF_PHYS_OFFSET, at);
        put_i64(r + OFF_STORE_TIMESTAMP, store_ms);
        memcpy(r + OFF_STORE_HOST, host.buf, HOST_SIZE);
        put_u32(r + OFF_CRC, ferry_crc32(r + CRC_START, size - CRC_START));
        uint8_t *e = c + CQ_ENTRY_SIZE * i;
        put_i64(e, at);
        put_u32(e + CQ_OFF_SIZE, (uint32_t)size);
        put_i64(e + CQ_OFF_TAGS, code);
        PyObject *p = PyLong_FromLongLong(at);
        if (!p) goto done;
        if (PyList_SetItem(phys, i, p) < 0) goto done;
        at += size;
        local += size;
    }
    result = PyLong_FromLongLong(at);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&host);
    PyBuffer_Release(&cq);
    return result;
}

/* ---- the store: a pull's log ranges from ConsumeQueue entries ---- */

static int append_run(PyObject *runs, long long start, long long stop) {
    PyObject *run = Py_BuildValue("(LL)", start, stop);
    int rc = run ? PyList_Append(runs, run) : -1;
    Py_XDECREF(run);
    return rc;
}

/* As the loop of MessageStore.get without a tag filter: walks big-endian (offset, size,
 * tags) entries, stops before the entry that would pass max_bytes (never the first of the
 * pull) or at max_msgs, and joins adjacent records into [start, stop) runs. count and total
 * are what earlier chunks of the same pull took. Returns (runs, count, total, used, state):
 * state 0 means the chunk ran out, 1 a limit was reached, 2 entry `used` points outside the
 * log (the caller reports it). */
static PyObject *py_queue_runs(PyObject *self, PyObject *args) {
    Py_buffer raw;
    Py_ssize_t count, max_msgs;
    long long total, max_bytes, log_end;
    if (!PyArg_ParseTuple(args, "y*nLnLL", &raw, &count, &total, &max_msgs, &max_bytes, &log_end))
        return NULL;
    PyObject *runs = PyList_New(0);
    if (!runs) {
        PyBuffer_Release(&raw);
        return NULL;
    }
    const uint8_t *p = raw.buf;
    Py_ssize_t n = raw.len / CQ_ENTRY_SIZE, used = 0;
    int state = 0, open = 0;
    long long start = 0, stop = 0;
    for (; used < n; used++) {
        const uint8_t *e = p + used * CQ_ENTRY_SIZE;
        long long phys = (long long)get_i64(e);
        long long size = (long long)get_i32(e + CQ_OFF_SIZE);
        if (count && total > max_bytes - size) { /* total + size > max_bytes, no overflow */
            state = 1;
            break;
        }
        if (size <= 0 || phys > log_end - size) {
            state = 2;
            break;
        }
        if (open && stop == phys) {
            stop += size;
        } else {
            if (open && append_run(runs, start, stop) < 0) goto fail;
            start = phys;
            stop = phys + size;
            open = 1;
        }
        count++;
        total += size;
        if (count >= max_msgs) {
            used++;
            state = 1;
            break;
        }
    }
    if (open && append_run(runs, start, stop) < 0) goto fail;
    PyBuffer_Release(&raw);
    return Py_BuildValue("(NnLni)", runs, count, total, used, state);
fail:
    Py_DECREF(runs);
    PyBuffer_Release(&raw);
    return NULL;
}

/* A bytearray of n bytes left as malloc gave them: for a caller that fills every byte
 * before anything reads it (a log read), the zeroing of bytearray(n) is wasted work. */
static PyObject *py_unfilled(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "unfilled: negative size");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

static PyMethodDef methods[] = {
    {"scan_batch", py_scan_batch, METH_VARARGS,
     "scan_batch(buf, count, topic, max_body, max_record, tags_fallback) -> "
     "(sizes, flags, tags) or None when the Python scan must explain a bad record"},
    {"stamp", py_stamp, METH_VARARGS,
     "stamp(out, sizes, flags, tags, phys, k, j, queue_id, first_queue_offset, at, store_ms, "
     "host, cq) -> the log offset after record j-1"},
    {"queue_runs", py_queue_runs, METH_VARARGS,
     "queue_runs(entries, count, total, max_msgs, max_bytes, log_end) -> "
     "(runs, count, total, entries used, state)"},
    {"unfilled", py_unfilled, METH_VARARGS,
     "unfilled(n) -> a bytearray of n bytes, not zeroed (the caller fills every byte)"},
    {NULL, NULL, 0, NULL}};

int ferry_store_init(PyObject *module) { return PyModule_AddFunctions(module, methods); }
