/* The SDK's receive side in C: a pulled frame's records as MessageExt objects, filled
 * through their __slots__ (attribute names from bind_sdk). Python reference:
 * ferry.client.message_decode.decode_records_py. */
#include "speedups.h"

static PyObject *str_TAGS, *str_KEYS, *str_UNIQ_KEY, *empty_tuple;

/* property names seen lately (few distinct ones: TAGS, KEYS, UNIQ_KEY, traceparent, ...) */
#define KEY_CACHE 16
#define KEY_MAX 32
static struct { Py_ssize_t len; uint8_t raw[KEY_MAX]; PyObject *str; } key_cache[KEY_CACHE];
static int key_cache_next;

static PyObject *property_name(const uint8_t *p, Py_ssize_t n) {
    if (n <= KEY_MAX) {
        for (int i = 0; i < KEY_CACHE; i++) {
            if (key_cache[i].str && key_cache[i].len == n && memcmp(key_cache[i].raw, p, (size_t)n) == 0)
                return Py_NewRef(key_cache[i].str);
        }
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (s && n <= KEY_MAX) {
        int i = key_cache_next;
        key_cache_next = (key_cache_next + 1) % KEY_CACHE;
        Py_XSETREF(key_cache[i].str, Py_NewRef(s));
        key_cache[i].len = n;
        memcpy(key_cache[i].raw, p, (size_t)n);
    }
    return s;
}

/* The properties as record.decode_properties makes them; NULL with an error set on bad UTF-8.
 * *special is set when DELAY or TIMER_DELIVER_MS is among them (the Python decoder's case). */
static PyObject *decode_props(const uint8_t *p, Py_ssize_t n, int *special) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    Py_ssize_t i = 0;
    while (i < n) {
        const uint8_t *sep = memchr(p + i, 2, (size_t)(n - i));
        Py_ssize_t item_end = sep ? (Py_ssize_t)(sep - p) : n;
        if (item_end > i) {
            const uint8_t *eq = memchr(p + i, 1, (size_t)(item_end - i));
            Py_ssize_t key_end = eq ? (Py_ssize_t)(eq - p) : item_end;
            Py_ssize_t value_at = eq ? key_end + 1 : item_end;
            Py_ssize_t klen = key_end - i;
            if ((klen == 5 && memcmp(p + i, "DELAY", 5) == 0) ||
                (klen == 16 && memcmp(p + i, "TIMER_DELIVER_MS", 16) == 0))
                *special = 1;
            PyObject *k = property_name(p + i, klen);
            PyObject *v = k ? PyUnicode_DecodeUTF8((const char *)p + value_at, item_end - value_at, NULL) : NULL;
            int rc = (k && v) ? PyDict_SetItem(d, k, v) : -1;
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (rc < 0) {
                Py_DECREF(d);
                return NULL;
            }
        }
        i = item_end + 1;
    }
    return d;
}

/* A cache of one: the last raw bytes seen and what a Python helper made of them. */
typedef struct { Py_ssize_t len; uint8_t raw[256]; PyObject *value; } Memo;

static PyObject *memo_get(Memo *m, const uint8_t *p, Py_ssize_t n, PyObject *helper) {
    if (m->value && m->len == n && memcmp(m->raw, p, (size_t)n) == 0) return Py_NewRef(m->value);
    PyObject *v = PyObject_CallFunction(helper, "y#", p, n);
    if (!v) return NULL;
    Py_XSETREF(m->value, Py_NewRef(v));
    m->len = n;
    memcpy(m->raw, p, (size_t)n);
    return v;
}

/* Where each attribute of the message class (MessageExt) lives: for a class of plain
 * __slots__ (object slots, writable), their offsets, so that a message is filled by 20
 * stores instead of 20 attribute lookups; any other class goes through setattr. Resolved
 * once per class (and again after a new bind_sdk). */
static PyObject *slots_cls;
static int slots_direct;
static Py_ssize_t slot_offset[N_MESSAGE_FIELDS];

static int resolve_slots(PyObject *cls) {
    if (cls == slots_cls) return 0;
    int direct = ferry_slot_offsets(cls, ferry_message_names, N_MESSAGE_FIELDS, slot_offset);
    if (direct < 0) return -1;
    Py_XSETREF(slots_cls, Py_NewRef(cls));
    slots_direct = direct;
    return 0;
}

void ferry_sdk_receive_forget(void) { Py_CLEAR(slots_cls); }

static int set_attr(PyObject *msg, int which, PyObject *value) {
    if (!value) return -1;
    if (slots_direct) { /* a new object: the slot is empty */
        PyObject **slot = (PyObject **)((char *)msg + slot_offset[which]);
        Py_XSETREF(*slot, value);
        return 0;
    }
    int rc = PyObject_SetAttr(msg, ferry_message_names[which], value);
    Py_DECREF(value);
    return rc;
}

static PyObject *py_decode_records(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *broker_name, *tags, *out, *cls, *queue_cls, *topic_of, *unpack_host,
        *host_info;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "O!nUOO!OOOOO", &PyBytes_Type, &buf_obj, &pos, &broker_name,
                          &tags, &PyList_Type, &out, &cls, &queue_cls, &topic_of, &unpack_host,
                          &host_info))
        return NULL;
    if (!PyType_Check(cls) || (tags != Py_None && !PyAnySet_Check(tags))) {
        PyErr_SetString(PyExc_TypeError, "decode_records: cls must be a type, tags a set");
        return NULL;
    }
    if (ferry_sdk_bound("decode_records") < 0 || resolve_slots(cls) < 0) return NULL;
    const uint8_t *d = (const uint8_t *)PyBytes_AS_STRING(buf_obj);
    Py_ssize_t stop = PyBytes_GET_SIZE(buf_obj);
    Memo topic_memo = {0}, born_memo = {0}, store_memo = {0};
    PyObject *queue = NULL, *queue_topic = NULL;
    int32_t queue_qid = 0;
    PyObject *result = NULL;
    while (pos < stop) {
        if (pos < 0 || stop - pos < OFF_BODY) break; /* a blank tail or a bad record: Python */
        const uint8_t *r = d + pos;
        int32_t size = get_i32(r);
        int32_t body_len = get_i32(r + OFF_BODYLEN);
        int32_t sysflag = get_i32(r + OFF_SYSFLAG);
        if (get_u32(r + OFF_MAGIC) != MAGIC || size < FIXED_SIZE || size > stop - pos || body_len < 0 ||
            (sysflag & SYSFLAG_COMPRESSED) || get_i64(r + OFF_PHYS_OFFSET) < 0)
            break; /* blank, bad, compressed or a negative offset (its id is Python's): Python */
        Py_ssize_t end = pos + size;
        Py_ssize_t at = pos + OFF_BODY + body_len;
        if (at + TAIL_SIZE > end) break;
        Py_ssize_t topic_len = d[at];
        Py_ssize_t props_at = at + TAIL_SIZE + topic_len;
        if (props_at > end) break;
        int special = 0;
        PyObject *props = decode_props(d + props_at, end - props_at, &special);
        if (!props) {
            PyErr_Clear(); /* Python raises what it raises on these bytes */
            break;
        }
        if (special) {
            Py_DECREF(props);
            break;
        }
        PyObject *tag = PyDict_GetItemWithError(props, str_TAGS); /* borrowed */
        if (tag && PyUnicode_GET_LENGTH(tag) == 0) tag = NULL;
        if (!tag && PyErr_Occurred()) goto fail_props;
        if (tags != Py_None) {
            int in = PySet_Contains(tags, tag ? tag : Py_None);
            if (in < 0) goto fail_props;
            if (!in) {
                Py_DECREF(props);
                pos = end;
                continue;
            }
        }
        PyObject *topic = memo_get(&topic_memo, d + at + TOPIC_LEN_SIZE, topic_len, topic_of);
        if (!topic) goto fail_props;
        PyObject *host = memo_get(&store_memo, r + OFF_STORE_HOST, HOST_SIZE, host_info); /* (text, id prefix) */
        if (!host || !PyTuple_Check(host) || PyTuple_GET_SIZE(host) != 2) {
            Py_XDECREF(host);
            Py_DECREF(topic);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "host_info: (text, prefix)");
            goto fail_props;
        }
        int32_t qid = get_i32(r + OFF_QUEUE_ID);
        if (!queue || queue_topic != topic || queue_qid != qid) {
            PyObject *q = PyObject_CallFunction(queue_cls, "OOi", topic, broker_name, (int)qid);
            if (!q) {
                Py_DECREF(host);
                Py_DECREF(topic);
                goto fail_props;
            }
            Py_XSETREF(queue, q);
            Py_XSETREF(queue_topic, Py_NewRef(topic));
            queue_qid = qid;
        }
        int64_t phys = get_i64(r + OFF_PHYS_OFFSET);
        PyObject *msg = ((PyTypeObject *)cls)->tp_new((PyTypeObject *)cls, empty_tuple, NULL);
        PyObject *prefix = PyTuple_GET_ITEM(host, 1);
        PyObject *offset_id = (msg && PyUnicode_Check(prefix) && PyUnicode_IS_ASCII(prefix))
                                  ? offset_id_of(prefix, phys) : NULL;
        if (!offset_id) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "host_info: ASCII prefix");
            Py_XDECREF(msg);
            Py_DECREF(host);
            Py_DECREF(topic);
            goto fail_props;
        }
        PyObject *keys = PyDict_GetItemWithError(props, str_KEYS); /* borrowed */
        PyObject *uniq = PyDict_GetItemWithError(props, str_UNIQ_KEY);
        if (uniq && PyUnicode_GET_LENGTH(uniq) == 0) uniq = NULL;
        int rc = PyErr_Occurred() ? -1 : 0;
        if (rc == 0) rc = set_attr(msg, A_TOPIC, Py_NewRef(topic));
        if (rc == 0) rc = set_attr(msg, A_BODY, PyBytes_FromStringAndSize((const char *)r + OFF_BODY, body_len));
        if (rc == 0) rc = set_attr(msg, A_TAGS, Py_NewRef(tag ? tag : Py_None));
        if (rc == 0) rc = set_attr(msg, A_KEYS, (keys && PyUnicode_GET_LENGTH(keys)) ? PyUnicode_Split(keys, NULL, -1) : PyList_New(0));
        if (rc == 0) rc = set_attr(msg, A_PROPERTIES, Py_NewRef(props));
        if (rc == 0) rc = set_attr(msg, A_DELAY_LEVEL, PyLong_FromLong(0));
        if (rc == 0) rc = set_attr(msg, A_DELIVER_AT_MS, Py_NewRef(Py_None));
        if (rc == 0) rc = set_attr(msg, A_MSG_ID, Py_NewRef(uniq ? uniq : offset_id));
        if (rc == 0) rc = set_attr(msg, A_OFFSET_MSG_ID, Py_NewRef(offset_id));
        if (rc == 0) rc = set_attr(msg, A_QUEUE, Py_NewRef(queue));
        if (rc == 0) rc = set_attr(msg, A_QUEUE_OFFSET, PyLong_FromLongLong(get_i64(r + OFF_QUEUE_OFFSET)));
        if (rc == 0) rc = set_attr(msg, A_COMMITLOG_OFFSET, PyLong_FromLongLong(phys));
        if (rc == 0) rc = set_attr(msg, A_BORN_TIMESTAMP, PyLong_FromLongLong(get_i64(r + OFF_BORN_TIMESTAMP)));
        if (rc == 0) rc = set_attr(msg, A_STORE_TIMESTAMP, PyLong_FromLongLong(get_i64(r + OFF_STORE_TIMESTAMP)));
        if (rc == 0) rc = set_attr(msg, A_BORN_HOST, memo_get(&born_memo, r + OFF_BORN_HOST, HOST_SIZE, unpack_host));
        if (rc == 0) rc = set_attr(msg, A_STORE_HOST, Py_NewRef(PyTuple_GET_ITEM(host, 0)));
        if (rc == 0) rc = set_attr(msg, A_RECONSUME_TIMES, PyLong_FromLong(get_i32(r + OFF_RECONSUME_TIMES)));
        if (rc == 0) rc = set_attr(msg, A_BROKER_NAME, Py_NewRef(broker_name));
        if (rc == 0) rc = set_attr(msg, A_FLAG, PyLong_FromLong(get_i32(r + OFF_FLAG)));
        if (rc == 0) rc = set_attr(msg, A_SYSFLAG, PyLong_FromLong(sysflag));
        if (rc == 0 && slots_direct) {
            /* Out of the collector's sight: a received message holds str, bytes, int, None,
             * a dict of str, a list of str and a frozen queue, none of which can lead back
             * to it; a consumer makes ~2 of these per message, and walking them in every
             * young collection cost 12-14 % of a consume's wall time (bench/gc_cost.py). */
            PyObject_GC_UnTrack(*(PyObject **)((char *)msg + slot_offset[A_KEYS]));
            PyObject_GC_UnTrack(msg);
        }
        if (rc == 0) rc = PyList_Append(out, msg);
        Py_DECREF(offset_id);
        Py_DECREF(msg);
        Py_DECREF(host);
        Py_DECREF(topic);
        Py_DECREF(props);
        if (rc < 0) goto fail;
        pos = end;
        continue;
    fail_props:
        Py_DECREF(props);
        goto fail;
    }
    result = PyLong_FromSsize_t(pos);
fail:
    Py_XDECREF(queue);
    Py_XDECREF(queue_topic);
    Py_XDECREF(topic_memo.value);
    Py_XDECREF(born_memo.value);
    Py_XDECREF(store_memo.value);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_records", py_decode_records, METH_VARARGS,
     "decode_records(buf, pos, broker_name, tags, out, cls, queue_cls, topic_of, unpack_host, "
     "host_info) -> where it stopped: len(buf), or a record the Python decoder must take"},
    {NULL, NULL, 0, NULL}};

int ferry_sdk_receive_init(PyObject *module) {
    str_TAGS = PyUnicode_InternFromString("TAGS");
    str_KEYS = PyUnicode_InternFromString("KEYS");
    str_UNIQ_KEY = PyUnicode_InternFromString("UNIQ_KEY");
    empty_tuple = PyTuple_New(0);
    if (!str_TAGS || !str_KEYS || !str_UNIQ_KEY || !empty_tuple) return -1;
    return PyModule_AddFunctions(module, methods);
}
