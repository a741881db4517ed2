/* The SDK's send side in C: a batch of plain messages as records, the snapshot send_async
 * keeps of a plain message (read through its __slots__), the SendResults of a batch and
 * send_batch's joined offset ids. Attribute names and PlainMessage positions come from
 * bind_sdk. Python references: ferry.client.message (encode_plain_batch_py,
 * plain_message_py), ferry.client.outgoing (each_result_py, offset_ids). */
#include "speedups.h"

static PyObject *str_space, *empty_str;

/* ---- the SDK: a batch of plain messages as records ---- */

typedef struct { const char *p; Py_ssize_t n; } Text;

static int utf8_of(PyObject *s, Text *out) {
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "encode_plain_batch: tags, keys and ids are str");
        return -1;
    }
    out->p = PyUnicode_AsUTF8AndSize(s, &out->n);
    return out->p ? 0 : -1;
}

static uint8_t *put_prop(uint8_t *o, const char *name, Py_ssize_t name_len, Text v) {
    memcpy(o, name, (size_t)name_len);
    o += name_len;
    *o++ = 1;
    memcpy(o, v.p, (size_t)v.n);
    o += v.n;
    *o++ = 2;
    return o;
}

/* As ferry.client.message_encode.encode_plain_batch: for each (body, tags, keys) and id, the header,
 * body, topic tail, and TAGS, KEYS, UNIQ_KEY properties in that order; None when a body is
 * over compress_over (>= 0): compression is left to the Python encoder. at_* are where a
 * PlainMessage keeps body, tags and keys (bind_sdk); inlined twice below, so that the usual
 * positions are constants in the loop (read from the table, they cost ~2 % a record). */
static inline __attribute__((always_inline)) PyObject *encode_batch(
    PyObject *msgs, PyObject *ids, const Py_buffer *tail, const Py_buffer *born_host,
    long long born_ts, Py_ssize_t compress_over, const Py_ssize_t at_body,
    const Py_ssize_t at_tags, const Py_ssize_t at_keys) {
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    if (PyList_GET_SIZE(ids) != n || born_host->len != HOST_SIZE) {
        PyErr_SetString(PyExc_ValueError, "encode_plain_batch: one id per message, 8-byte host");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* sizes first: one allocation for the batch */
        PyObject *m = PyList_GET_ITEM(msgs, i);
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) < N_PLAIN_FIELDS ||
            !PyBytes_Check(PyTuple_GET_ITEM(m, at_body))) {
            PyErr_SetString(PyExc_TypeError, "encode_plain_batch: messages are PlainMessage");
            return NULL;
        }
        if (compress_over >= 0 && PyBytes_GET_SIZE(PyTuple_GET_ITEM(m, at_body)) > compress_over) {
            return Py_NewRef(Py_None); /* a body to compress: the Python encoder's */
        }
        Text tags, keys, id;
        if (utf8_of(PyTuple_GET_ITEM(m, at_tags), &tags) < 0 ||
            utf8_of(PyTuple_GET_ITEM(m, at_keys), &keys) < 0 ||
            utf8_of(PyList_GET_ITEM(ids, i), &id) < 0)
            return NULL;
        Py_ssize_t props = 10 + id.n + (tags.n ? 6 + tags.n : 0) + (keys.n ? 6 + keys.n : 0);
        if (props > MAX_PROPS_BYTES) {
            PyErr_SetString(PyExc_ValueError, "encode_plain_batch: properties over 65535 bytes");
            return NULL;
        }
        total += OFF_BODY + PyBytes_GET_SIZE(PyTuple_GET_ITEM(m, at_body)) + tail->len + PROPS_LEN_SIZE + props;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    if (!result) return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        PyObject *body = PyTuple_GET_ITEM(m, at_body);
        Text tags, keys, id;
        utf8_of(PyTuple_GET_ITEM(m, at_tags), &tags); /* cached by the first pass */
        utf8_of(PyTuple_GET_ITEM(m, at_keys), &keys);
        utf8_of(PyList_GET_ITEM(ids, i), &id);
        Py_ssize_t n_body = PyBytes_GET_SIZE(body);
        Py_ssize_t props = 10 + id.n + (tags.n ? 6 + tags.n : 0) + (keys.n ? 6 + keys.n : 0);
        Py_ssize_t size = OFF_BODY + n_body + tail->len + PROPS_LEN_SIZE + props;
        memset(o, 0, OFF_BODY);
        put_u32(o, (uint32_t)size);
        put_u32(o + OFF_MAGIC, MAGIC);
        put_i64(o + OFF_BORN_TIMESTAMP, born_ts);
        memcpy(o + OFF_BORN_HOST, born_host->buf, HOST_SIZE);
        put_u32(o + OFF_BODYLEN, (uint32_t)n_body);
        o += OFF_BODY;
        memcpy(o, PyBytes_AS_STRING(body), (size_t)n_body);
        o += n_body;
        memcpy(o, tail->buf, (size_t)tail->len);
        o += tail->len;
        *o++ = (uint8_t)(props >> 8);
        *o++ = (uint8_t)props;
        if (tags.n) o = put_prop(o, "TAGS", 4, tags);
        if (keys.n) o = put_prop(o, "KEYS", 4, keys);
        o = put_prop(o, "UNIQ_KEY", 8, id);
    }
    return result;
}

static PyObject *py_encode_plain_batch(PyObject *self, PyObject *args) {
    Py_buffer tail, born_host;
    PyObject *msgs, *ids, *result;
    long long born_ts;
    Py_ssize_t compress_over;
    if (ferry_sdk_bound("encode_plain_batch") < 0) return NULL;
    if (!PyArg_ParseTuple(args, "y*O!O!Ly*n", &tail, &PyList_Type, &msgs, &PyList_Type, &ids,
                          &born_ts, &born_host, &compress_over))
        return NULL;
    const Py_ssize_t *at = ferry_plain_at;
    if (at[P_BODY] == 0 && at[P_TAGS] == 1 && at[P_KEYS] == 2)
        result = encode_batch(msgs, ids, &tail, &born_host, born_ts, compress_over, 0, 1, 2);
    else
        result = encode_batch(msgs, ids, &tail, &born_host, born_ts, compress_over, at[P_BODY],
                              at[P_TAGS], at[P_KEYS]);
    PyBuffer_Release(&tail);
    PyBuffer_Release(&born_host);
    return result;
}

/* ---- the SDK: what send_async and send_batch keep of a plain message ---- */

/* The first N_SEND_FIELDS message attributes (topic .. deliver_at_ms) of a send-side message
 * class: read straight from their slots when the class keeps them in plain __slots__, as the
 * decoder's resolve_slots does. One class remembered (Message, normally). */
static PyObject *send_cls;
static int send_direct;
static Py_ssize_t send_offset[N_SEND_FIELDS];

static int resolve_send_slots(PyTypeObject *tp) {
    if ((PyObject *)tp == send_cls) return 0;
    int direct = ferry_slot_offsets((PyObject *)tp, ferry_message_names, N_SEND_FIELDS, send_offset);
    if (direct < 0) return -1;
    Py_XSETREF(send_cls, Py_NewRef((PyObject *)tp));
    send_direct = direct;
    return 0;
}

/* A new reference to attribute `which` of msg; NULL with an error when it is not set. */
static PyObject *attr_of(PyObject *msg, int which) {
    if (send_direct && (PyObject *)Py_TYPE(msg) == send_cls) {
        PyObject *v = *(PyObject **)((char *)msg + send_offset[which]);
        if (v) return Py_NewRef(v);
    }
    return PyObject_GetAttr(msg, ferry_message_names[which]);
}

static int has_separator(PyObject *s, Py_ssize_t *utf8_len) {
    const char *p = PyUnicode_AsUTF8AndSize(s, utf8_len);
    if (!p) return -1;
    return (memchr(p, 1, (size_t)*utf8_len) || memchr(p, 2, (size_t)*utf8_len)) ? 1 : 0;
}

/* As ferry.client.message_encode.plain_message for one message: a `cls` (PlainMessage) of (body,
 * tags, keys, size), or Py_None when the message needs the general path (properties of its
 * own, delay or timer, a body that is not bytes, a separator in tags or keys, text over
 * max_text, another topic than `topic` when one is given). NULL with an error on failure. */
static PyObject *plain_one(PyObject *msg, PyObject *topic, Py_ssize_t base, Py_ssize_t max_text,
                           PyObject *cls) {
    PyObject *v, *body = NULL, *tags = NULL, *keys = NULL, *out = NULL;
    if (resolve_send_slots(Py_TYPE(msg)) < 0) return NULL;
    if (topic != Py_None) {
        if (!(v = attr_of(msg, A_TOPIC))) return NULL;
        int same = v == topic || (PyUnicode_Check(v) && PyUnicode_Compare(v, topic) == 0);
        Py_DECREF(v);
        if (PyErr_Occurred()) return NULL;
        if (!same) return Py_NewRef(Py_None);
    }
    if (!(v = attr_of(msg, A_PROPERTIES))) return NULL;
    int plain = PyDict_Check(v) && PyDict_GET_SIZE(v) == 0;
    Py_DECREF(v);
    if (!plain) return Py_NewRef(Py_None);
    if (!(v = attr_of(msg, A_DELAY_LEVEL))) return NULL;
    int overflow = 0;
    plain = PyLong_Check(v) && PyLong_AsLongAndOverflow(v, &overflow) == 0 && !overflow;
    Py_DECREF(v);
    if (!plain) return Py_NewRef(Py_None);
    if (!(v = attr_of(msg, A_DELIVER_AT_MS))) return NULL;
    plain = v == Py_None;
    Py_DECREF(v);
    if (!plain) return Py_NewRef(Py_None);
    if (!(body = attr_of(msg, A_BODY))) return NULL;
    if (!PyBytes_CheckExact(body)) goto general;
    Py_ssize_t size = base + PyBytes_GET_SIZE(body), n;
    if (!(tags = attr_of(msg, A_TAGS))) goto done;
    if (tags == Py_None) {
        Py_SETREF(tags, Py_NewRef(empty_str));
    } else if (!PyUnicode_Check(tags)) {
        goto general;
    } else if (PyUnicode_GET_LENGTH(tags)) {
        int sep = has_separator(tags, &n);
        if (sep < 0) goto done;
        if (sep) goto general;
        size += 6 + n; /* TAGS \1 value \2 */
    }
    if (!(v = attr_of(msg, A_KEYS))) goto done;
    if (!PyList_Check(v)) {
        Py_DECREF(v);
        goto general;
    }
    if (PyList_GET_SIZE(v) == 0) {
        keys = Py_NewRef(empty_str);
    } else {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
            if (!PyUnicode_Check(PyList_GET_ITEM(v, i))) {
                Py_DECREF(v);
                goto general;
            }
        }
        keys = PyUnicode_Join(str_space, v);
    }
    Py_DECREF(v);
    if (!keys) goto done;
    if (PyUnicode_GET_LENGTH(keys)) {
        int sep = has_separator(keys, &n);
        if (sep < 0) goto done;
        if (sep) goto general;
        size += 6 + n; /* KEYS \1 value \2 */
    }
    if (PyUnicode_GET_LENGTH(tags) + PyUnicode_GET_LENGTH(keys) > max_text) goto general;
    PyObject *sz = PyLong_FromSsize_t(size);
    if (!sz) goto done;
    out = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, N_PLAIN_FIELDS); /* tuple.__new__ */
    if (!out) {
        Py_DECREF(sz);
        goto done;
    }
    PyTuple_SET_ITEM(out, ferry_plain_at[P_BODY], Py_NewRef(body));
    PyTuple_SET_ITEM(out, ferry_plain_at[P_TAGS], Py_NewRef(tags));
    PyTuple_SET_ITEM(out, ferry_plain_at[P_KEYS], Py_NewRef(keys));
    PyTuple_SET_ITEM(out, ferry_plain_at[P_SIZE], sz);
    /* Out of the collector's sight: a tuple of exact bytes, str and int can never close a
     * reference cycle, and a send_async burst keeps ~100k of these queued, which each full
     * collection walked (see bench/gc_cost.py). */
    if (PyUnicode_CheckExact(tags) && PyUnicode_CheckExact(keys)) PyObject_GC_UnTrack(out);
    goto done;
general:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(body);
    Py_XDECREF(tags);
    Py_XDECREF(keys);
    return out;
}

static int check_plain_cls(PyObject *cls) {
    if (ferry_sdk_bound("plain_message") < 0) return -1;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) ||
        ((PyTypeObject *)cls)->tp_itemsize != sizeof(PyObject *)) {
        PyErr_SetString(PyExc_TypeError, "plain messages: cls must be a tuple type");
        return -1;
    }
    return 0;
}

static PyObject *py_plain_message(PyObject *self, PyObject *args) {
    PyObject *msg, *cls;
    Py_ssize_t base, max_text;
    if (!PyArg_ParseTuple(args, "OnnO", &msg, &base, &max_text, &cls)) return NULL;
    if (check_plain_cls(cls) < 0) return NULL;
    return plain_one(msg, Py_None, base, max_text, cls);
}

/* plain_one for each message of a batch of one topic: the list, or None at the first message
 * that needs the general path (the Python code then checks the batch and says why). */
static PyObject *py_plain_messages(PyObject *self, PyObject *args) {
    PyObject *msgs, *topic, *cls;
    Py_ssize_t base, max_text;
    if (!PyArg_ParseTuple(args, "O!UnnO", &PyList_Type, &msgs, &topic, &base, &max_text, &cls))
        return NULL;
    if (check_plain_cls(cls) < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *one = plain_one(PyList_GET_ITEM(msgs, i), topic, base, max_text, cls);
        if (!one || one == Py_None) {
            Py_DECREF(out);
            return one;
        }
        PyList_SET_ITEM(out, i, one);
    }
    return out;
}

/* ---- the SDK: the SendResults of a batch ---- */

static PyObject *result_cls;
static Py_ssize_t result_offset[N_RESULT_FIELDS];

static int resolve_result_slots(PyObject *cls) {
    if (ferry_sdk_bound("send_results") < 0) return -1;
    if (cls == result_cls) return 0;
    int direct = ferry_slot_offsets(cls, ferry_result_names, N_RESULT_FIELDS, result_offset);
    if (direct < 0) return -1;
    if (!direct) {
        PyErr_SetString(PyExc_TypeError, "send_results: the class keeps its fields in __slots__");
        return -1;
    }
    Py_XSETREF(result_cls, Py_NewRef(cls));
    return 0;
}

void ferry_sdk_send_forget(void) {
    Py_CLEAR(send_cls);
    send_direct = 0;
    Py_CLEAR(result_cls);
}

/* As ferry.client.outgoing.each_result once the reply is checked: cls(status, id, prefix +
 * offset in 16 hex digits, queue, first_offset + i) for each id and CommitLog offset. */
static PyObject *py_send_results(PyObject *self, PyObject *args) {
    PyObject *cls, *status, *ids, *phys, *prefix, *queue;
    long long first;
    if (!PyArg_ParseTuple(args, "O!OO!O!UOL", &PyType_Type, &cls, &status, &PyList_Type, &ids,
                          &PyList_Type, &phys, &prefix, &queue, &first))
        return NULL;
    if (resolve_result_slots(cls) < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    if (PyList_GET_SIZE(phys) != n || !PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_ValueError, "send_results: one offset per id, an ASCII prefix");
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (!out) return NULL;
    PyTypeObject *tp = (PyTypeObject *)cls;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long at = PyLong_AsLongLong(PyList_GET_ITEM(phys, i));
        if (at == -1 && PyErr_Occurred()) goto fail;
        PyObject *r = tp->tp_alloc(tp, 0);
        if (!r) goto fail;
        PyList_SET_ITEM(out, i, r);
        PyObject *values[N_RESULT_FIELDS] = {
            [R_STATUS] = Py_NewRef(status),
            [R_MSG_ID] = Py_NewRef(PyList_GET_ITEM(ids, i)),
            [R_OFFSET_MSG_ID] = offset_id_of(prefix, at),
            [R_QUEUE] = Py_NewRef(queue),
            [R_QUEUE_OFFSET] = PyLong_FromLongLong(first + i)};
        int bad = 0;
        for (int k = 0; k < N_RESULT_FIELDS; k++) {
            if (!values[k]) bad = 1;
            *(PyObject **)((char *)r + result_offset[k]) = values[k]; /* new object: slots empty */
        }
        if (bad) goto fail;
        /* Out of the collector's sight: a frozen result of a str, an int, an enum member and
         * a frozen queue can never close a reference cycle, and callers holding 100k of them
         * made each full collection walk them all. */
        PyObject_GC_UnTrack(r);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- the SDK: send_batch's offset ids ---- */

/* send_batch's offset message id: every record's (host prefix + 16 hex digits of its
 * CommitLog offset), joined by commas, in one string (a format per record in Python); None
 * for an offset that is not a non-negative 64-bit int. */
static PyObject *py_joined_offset_ids(PyObject *self, PyObject *args) {
    static const char HEX[] = "0123456789ABCDEF";
    PyObject *prefix, *offsets;
    if (!PyArg_ParseTuple(args, "UO!", &prefix, &PyList_Type, &offsets)) return NULL;
    if (!PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_ValueError, "joined_offset_ids: the host prefix is not ASCII");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(offsets), plen = PyUnicode_GET_LENGTH(prefix);
    if (n == 0) return PyUnicode_New(0, 127);
    PyObject *s = PyUnicode_New(n * (plen + 17) - 1, 127);
    if (!s) return NULL;
    Py_UCS1 *o = PyUnicode_1BYTE_DATA(s);
    const Py_UCS1 *p = PyUnicode_1BYTE_DATA(prefix);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(offsets, i);
        long long signed_v = PyLong_Check(item) ? PyLong_AsLongLong(item) : -1;
        if (signed_v < 0) { /* not an int, past 63 bits or negative: the Python code decides */
            PyErr_Clear();
            Py_DECREF(s);
            Py_RETURN_NONE;
        }
        uint64_t v = (uint64_t)signed_v;
        if (i > 0) *o++ = ',';
        memcpy(o, p, (size_t)plen);
        o += plen;
        for (int k = 15; k >= 0; k--) {
            o[k] = (Py_UCS1)HEX[v & 0xF];
            v >>= 4;
        }
        o += 16;
    }
    return s;
}

static PyMethodDef methods[] = {
    {"encode_plain_batch", py_encode_plain_batch, METH_VARARGS,
     "encode_plain_batch(topic_tail, msgs, ids, born_timestamp, born_host, compress_over) -> "
     "the records, or None when a body is to be compressed"},
    {"plain_message", py_plain_message, METH_VARARGS,
     "plain_message(msg, base_size, max_text, cls) -> cls(body, tags, keys, size) | None"},
    {"plain_messages", py_plain_messages, METH_VARARGS,
     "plain_messages(msgs, topic, base_size, max_text, cls) -> list | None"},
    {"send_results", py_send_results, METH_VARARGS,
     "send_results(cls, status, ids, phys_offsets, id_prefix, queue, first_offset) -> list"},
    {"joined_offset_ids", py_joined_offset_ids, METH_VARARGS,
     "joined_offset_ids(host_prefix, phys_offsets) -> the offset ids joined by commas, or None"},
    {NULL, NULL, 0, NULL}};

int ferry_sdk_send_init(PyObject *module) {
    str_space = PyUnicode_InternFromString(" ");
    empty_str = PyUnicode_New(0, 0);
    if (!str_space || !empty_str) return -1;
    return PyModule_AddFunctions(module, methods);
}
