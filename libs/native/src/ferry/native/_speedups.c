/* The module ferry.native._speedups, made of one unit per user (speedups.h lists them).
 *
 * Anything unusual (a malformed record, a non-ASCII tag or key) is left to the Python code:
 * these functions return None, or call back, rather than explain errors themselves. Each has
 * a Python reference in the package that calls it, and tests compare the two on the same
 * bytes.
 */
#include "speedups.h"

#include <structmember.h>


/* ---- the SDK: pulled records as MessageExt objects ---- */

#define N_ATTRS 20
static const char *ATTR_NAMES[N_ATTRS] = {
    "topic", "body", "tags", "keys", "properties", "delay_level", "deliver_at_ms",
    "msg_id", "offset_msg_id", "queue", "queue_offset", "commitlog_offset", "born_timestamp",
    "store_timestamp", "born_host", "store_host", "reconsume_times", "broker_name", "flag",
    "sysflag"};
enum {
    A_TOPIC, A_BODY, A_TAGS, A_KEYS, A_PROPERTIES, A_DELAY_LEVEL, A_DELIVER_AT_MS, A_MSG_ID,
    A_OFFSET_MSG_ID, A_QUEUE, A_QUEUE_OFFSET, A_COMMITLOG_OFFSET, A_BORN_TIMESTAMP,
    A_STORE_TIMESTAMP, A_BORN_HOST, A_STORE_HOST, A_RECONSUME_TIMES, A_BROKER_NAME, A_FLAG,
    A_SYSFLAG};
static PyObject *attr_names[N_ATTRS];
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

static PyObject *offset_id_of(PyObject *prefix, int64_t phys) {
    static const char HEX[] = "0123456789ABCDEF";
    Py_ssize_t plen = PyUnicode_GET_LENGTH(prefix);
    PyObject *s = PyUnicode_New(plen + 16, 127);
    if (!s) return NULL;
    Py_UCS1 *o = PyUnicode_1BYTE_DATA(s);
    memcpy(o, PyUnicode_1BYTE_DATA(prefix), (size_t)plen);
    uint64_t v = (uint64_t)phys;
    for (int i = 15; i >= 0; i--) {
        o[plen + i] = (Py_UCS1)HEX[v & 0xF];
        v >>= 4;
    }
    return s;
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

/* Where each attribute of the message class lives: for a class of plain __slots__ (object
 * slots, writable), their offsets, so that a message is filled by 20 stores instead of 20
 * attribute lookups; any other class goes through setattr. Resolved once per class. */
/* The offsets of attributes `names` of class `cls` when each is a plain writable __slots__
 * slot (an object member), so that C can read or fill them without attribute lookups: 1 when
 * all are, 0 when one is not (use getattr/setattr), -1 on error. */
static int slot_offsets(PyObject *cls, PyObject *const *names, int n, Py_ssize_t *out) {
    int direct = 1;
    for (int i = 0; i < n && direct; i++) {
        PyObject *d = PyObject_GetAttr(cls, names[i]);
        if (!d) return -1;
        PyMemberDef *m = Py_IS_TYPE(d, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)d)->d_member : NULL;
        if (m && m->type == T_OBJECT_EX && !(m->flags & READONLY))
            out[i] = m->offset;
        else
            direct = 0;
        Py_DECREF(d);
    }
    return direct;
}

/* The message class the decoder fills (MessageExt): resolved once per class. */
static PyObject *slots_cls;
static int slots_direct;
static Py_ssize_t slot_offset[N_ATTRS];

static int resolve_slots(PyObject *cls) {
    if (cls == slots_cls) return 0;
    int direct = slot_offsets(cls, attr_names, N_ATTRS, slot_offset);
    if (direct < 0) return -1;
    Py_XSETREF(slots_cls, Py_NewRef(cls));
    slots_direct = direct;
    return 0;
}

static int set_attr(PyObject *msg, int which, PyObject *value) {
    if (!value) return -1;
    if (slots_direct) { /* a new object: the slot is empty */
        PyObject **slot = (PyObject **)((char *)msg + slot_offset[which]);
        Py_XSETREF(*slot, value);
        return 0;
    }
    int rc = PyObject_SetAttr(msg, attr_names[which], value);
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
    if (resolve_slots(cls) < 0) return NULL;
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
        int32_t body_len = get_i32(r + 84);
        int32_t sysflag = get_i32(r + 36);
        if (get_u32(r + 4) != MAGIC || size < FIXED_SIZE || size > stop - pos || body_len < 0 ||
            (sysflag & 1) || get_i64(r + 28) < 0)
            break; /* blank, bad, compressed or a negative offset (its id is Python's): Python */
        Py_ssize_t end = pos + size;
        Py_ssize_t at = pos + OFF_BODY + body_len;
        if (at + 3 > end) break;
        Py_ssize_t topic_len = d[at];
        Py_ssize_t props_at = at + 3 + topic_len;
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
        PyObject *topic = memo_get(&topic_memo, d + at + 1, topic_len, topic_of);
        if (!topic) goto fail_props;
        PyObject *host = memo_get(&store_memo, r + 64, 8, host_info); /* (text, id prefix) */
        if (!host || !PyTuple_Check(host) || PyTuple_GET_SIZE(host) != 2) {
            Py_XDECREF(host);
            Py_DECREF(topic);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "host_info: (text, prefix)");
            goto fail_props;
        }
        int32_t qid = get_i32(r + 12);
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
        int64_t phys = get_i64(r + 28);
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
        if (rc == 0) rc = set_attr(msg, A_QUEUE_OFFSET, PyLong_FromLongLong(get_i64(r + 20)));
        if (rc == 0) rc = set_attr(msg, A_COMMITLOG_OFFSET, PyLong_FromLongLong(phys));
        if (rc == 0) rc = set_attr(msg, A_BORN_TIMESTAMP, PyLong_FromLongLong(get_i64(r + 40)));
        if (rc == 0) rc = set_attr(msg, A_STORE_TIMESTAMP, PyLong_FromLongLong(get_i64(r + 56)));
        if (rc == 0) rc = set_attr(msg, A_BORN_HOST, memo_get(&born_memo, r + 48, 8, unpack_host));
        if (rc == 0) rc = set_attr(msg, A_STORE_HOST, Py_NewRef(PyTuple_GET_ITEM(host, 0)));
        if (rc == 0) rc = set_attr(msg, A_RECONSUME_TIMES, PyLong_FromLong(get_i32(r + 72)));
        if (rc == 0) rc = set_attr(msg, A_BROKER_NAME, Py_NewRef(broker_name));
        if (rc == 0) rc = set_attr(msg, A_FLAG, PyLong_FromLong(get_i32(r + 16)));
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

/* As ferry.client.message.encode_plain_batch: for each (body, tags, keys) and id, the header,
 * body, topic tail, and TAGS, KEYS, UNIQ_KEY properties in that order; None when a body is
 * over compress_over (>= 0): compression is left to the Python encoder. */
static PyObject *py_encode_plain_batch(PyObject *self, PyObject *args) {
    Py_buffer tail, born_host;
    PyObject *msgs, *ids;
    long long born_ts;
    Py_ssize_t compress_over;
    if (!PyArg_ParseTuple(args, "y*O!O!Ly*n", &tail, &PyList_Type, &msgs, &PyList_Type, &ids,
                          &born_ts, &born_host, &compress_over))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    if (PyList_GET_SIZE(ids) != n || born_host.len != 8) {
        PyErr_SetString(PyExc_ValueError, "encode_plain_batch: one id per message, 8-byte host");
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) { /* sizes first: one allocation for the batch */
        PyObject *m = PyList_GET_ITEM(msgs, i);
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) < 3 || !PyBytes_Check(PyTuple_GET_ITEM(m, 0))) {
            PyErr_SetString(PyExc_TypeError, "encode_plain_batch: messages are PlainMessage");
            goto done;
        }
        if (compress_over >= 0 && PyBytes_GET_SIZE(PyTuple_GET_ITEM(m, 0)) > compress_over) {
            result = Py_NewRef(Py_None); /* a body to compress: the Python encoder's */
            goto done;
        }
        Text tags, keys, id;
        if (utf8_of(PyTuple_GET_ITEM(m, 1), &tags) < 0 || utf8_of(PyTuple_GET_ITEM(m, 2), &keys) < 0 ||
            utf8_of(PyList_GET_ITEM(ids, i), &id) < 0)
            goto done;
        Py_ssize_t props = 10 + id.n + (tags.n ? 6 + tags.n : 0) + (keys.n ? 6 + keys.n : 0);
        if (props > 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "encode_plain_batch: properties over 65535 bytes");
            goto done;
        }
        total += OFF_BODY + PyBytes_GET_SIZE(PyTuple_GET_ITEM(m, 0)) + tail.len + 2 + props;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (!result) goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(msgs, i);
        PyObject *body = PyTuple_GET_ITEM(m, 0);
        Text tags, keys, id;
        utf8_of(PyTuple_GET_ITEM(m, 1), &tags); /* cached by the first pass */
        utf8_of(PyTuple_GET_ITEM(m, 2), &keys);
        utf8_of(PyList_GET_ITEM(ids, i), &id);
        Py_ssize_t n_body = PyBytes_GET_SIZE(body);
        Py_ssize_t props = 10 + id.n + (tags.n ? 6 + tags.n : 0) + (keys.n ? 6 + keys.n : 0);
        Py_ssize_t size = OFF_BODY + n_body + tail.len + 2 + props;
        memset(o, 0, OFF_BODY);
        put_u32(o, (uint32_t)size);
        put_u32(o + 4, MAGIC);
        put_i64(o + 40, born_ts);
        memcpy(o + 48, born_host.buf, 8);
        put_u32(o + 84, (uint32_t)n_body);
        o += OFF_BODY;
        memcpy(o, PyBytes_AS_STRING(body), (size_t)n_body);
        o += n_body;
        memcpy(o, tail.buf, (size_t)tail.len);
        o += tail.len;
        *o++ = (uint8_t)(props >> 8);
        *o++ = (uint8_t)props;
        if (tags.n) o = put_prop(o, "TAGS", 4, tags);
        if (keys.n) o = put_prop(o, "KEYS", 4, keys);
        o = put_prop(o, "UNIQ_KEY", 8, id);
    }
done:
    PyBuffer_Release(&tail);
    PyBuffer_Release(&born_host);
    return result;
}

/* ---- the SDK: what send_async and send_batch keep of a plain message ---- */

static PyObject *str_space, *empty_str;

/* The first seven message attributes (topic .. deliver_at_ms) of a send-side message class:
 * read straight from their slots when the class keeps them in plain __slots__, as the
 * decoder's resolve_slots does. One class remembered (Message, normally). */
#define N_SEND_ATTRS 7
static PyObject *send_cls;
static int send_direct;
static Py_ssize_t send_offset[N_SEND_ATTRS];

static int resolve_send_slots(PyTypeObject *tp) {
    if ((PyObject *)tp == send_cls) return 0;
    int direct = slot_offsets((PyObject *)tp, attr_names, N_SEND_ATTRS, send_offset);
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
    return PyObject_GetAttr(msg, attr_names[which]);
}

static int has_separator(PyObject *s, Py_ssize_t *utf8_len) {
    const char *p = PyUnicode_AsUTF8AndSize(s, utf8_len);
    if (!p) return -1;
    return (memchr(p, 1, (size_t)*utf8_len) || memchr(p, 2, (size_t)*utf8_len)) ? 1 : 0;
}

/* As ferry.client.message.plain_message for one message: a `cls` (PlainMessage) of (body,
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
    out = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 4); /* as tuple.__new__(cls) */
    if (!out) {
        Py_DECREF(sz);
        goto done;
    }
    PyTuple_SET_ITEM(out, 0, Py_NewRef(body));
    PyTuple_SET_ITEM(out, 1, Py_NewRef(tags));
    PyTuple_SET_ITEM(out, 2, Py_NewRef(keys));
    PyTuple_SET_ITEM(out, 3, sz);
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

#define N_RESULT_ATTRS 5
static const char *RESULT_NAMES[N_RESULT_ATTRS] = {"status", "msg_id", "offset_msg_id", "queue",
                                                   "queue_offset"};
static PyObject *result_names[N_RESULT_ATTRS];
static PyObject *result_cls;
static Py_ssize_t result_offset[N_RESULT_ATTRS];

static int resolve_result_slots(PyObject *cls) {
    if (cls == result_cls) return 0;
    int direct = slot_offsets(cls, result_names, N_RESULT_ATTRS, result_offset);
    if (direct < 0) return -1;
    if (!direct) {
        PyErr_SetString(PyExc_TypeError, "send_results: the class keeps its fields in __slots__");
        return -1;
    }
    Py_XSETREF(result_cls, Py_NewRef(cls));
    return 0;
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
        PyObject *values[N_RESULT_ATTRS] = {Py_NewRef(status), Py_NewRef(PyList_GET_ITEM(ids, i)),
                                            offset_id_of(prefix, at), Py_NewRef(queue),
                                            PyLong_FromLongLong(first + i)};
        int bad = 0;
        for (int k = 0; k < N_RESULT_ATTRS; k++) {
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

/* ---- small entry points for the tests ---- */


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
    {"decode_records", py_decode_records, METH_VARARGS,
     "decode_records(buf, pos, broker_name, tags, out, cls, queue_cls, topic_of, unpack_host, "
     "host_info) -> where it stopped: len(buf), or a record the Python decoder must take"},
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

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups",
                                    "Ferry's per-record loops in C (see ferry.native).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
    for (int i = 0; i < N_ATTRS; i++) {
        attr_names[i] = PyUnicode_InternFromString(ATTR_NAMES[i]);
        if (!attr_names[i]) return NULL;
    }
    for (int i = 0; i < N_RESULT_ATTRS; i++) {
        result_names[i] = PyUnicode_InternFromString(RESULT_NAMES[i]);
        if (!result_names[i]) return NULL;
    }
    str_TAGS = PyUnicode_InternFromString("TAGS");
    str_KEYS = PyUnicode_InternFromString("KEYS");
    str_UNIQ_KEY = PyUnicode_InternFromString("UNIQ_KEY");
    str_space = PyUnicode_InternFromString(" ");
    empty_str = PyUnicode_New(0, 0);
    empty_tuple = PyTuple_New(0);
    if (!str_TAGS || !str_KEYS || !str_UNIQ_KEY || !str_space || !empty_str || !empty_tuple)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && ferry_record_init(m) < 0) Py_CLEAR(m);
    if (m && ferry_index_init(m) < 0) Py_CLEAR(m);
    if (m && ferry_store_init(m) < 0) Py_CLEAR(m);
    return m;
}