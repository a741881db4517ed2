/* The RocketMQ door's send path: a batch body (items total|magic|crc|flag|bodyLen|body|
 * propLen(2)|props) as Ferry's records, one head packed per item and its body and
 * propLen|props copied as sent. Python reference: ferry.remoting.door.send_records
 * (batch_records_py), which also explains every item this code declines. */
#include "speedups.h"

/* a batch item before its body: total, magic, crc, flag (i32 each), bodyLen (i32) */
#define ITEM_HEAD 20
#define ITEM_OFF_FLAG 12
#define ITEM_OFF_BODYLEN 16
/* and its propLen: the smallest item */
#define ITEM_MIN (ITEM_HEAD + PROPS_LEN_SIZE)

/* *out = v when v is an int in [lo, hi]; 0 otherwise (the Python pack would fail) */
static int int_in(PyObject *v, long long lo, long long hi, long long *out) {
    if (!PyLong_Check(v)) return 0;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (overflow || x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

/* Pass one: the count of items when every item's sizes add up, the body ends on an item's
 * end and no record would be over INT32_MAX bytes; 0 otherwise. */
static Py_ssize_t count_items(const uint8_t *d, Py_ssize_t n, Py_ssize_t extra) {
    Py_ssize_t pos = 0, count = 0;
    while (pos < n) {
        if (n - pos < ITEM_HEAD) return 0;
        const uint8_t *item = d + pos;
        int32_t total = get_i32(item);
        int32_t n_body = get_i32(item + ITEM_OFF_BODYLEN);
        if (n_body < 0 || total < ITEM_MIN || total > n - pos) return 0;
        Py_ssize_t at = pos + ITEM_HEAD + n_body; /* the item's propLen */
        Py_ssize_t next = pos + total;
        if (at > next - PROPS_LEN_SIZE) return 0;
        int16_t n_props = (int16_t)((d[at] << 8) | d[at + 1]); /* signed, as clients read it */
        if (n_props < 0 || at + PROPS_LEN_SIZE + n_props != next) return 0;
        if (total > INT32_MAX - extra) return 0;
        count++;
        pos = next;
    }
    return count;
}

/* batch_records(body, tail, queue_id, sysflag, born_timestamp, host, reconsume_times): the
 * numbers as they go into every head (queue_id and sysflag already as stored), tail the
 * record's TOPICLEN and topic. (records, count), or None when an item is malformed, a number
 * does not fit its field, the host is not 8 bytes or the batch is empty. */
static PyObject *py_batch_records(PyObject *self, PyObject *args) {
    Py_buffer body, tail;
    PyObject *queue_obj, *sysflag_obj, *born_obj, *host, *reconsume_obj;
    if (!PyArg_ParseTuple(args, "y*y*OOOOO", &body, &tail, &queue_obj, &sysflag_obj, &born_obj,
                          &host, &reconsume_obj))
        return NULL;
    PyObject *result = NULL;
    long long queue_id, sysflag, born_ts, reconsume;
    if (!int_in(queue_obj, INT32_MIN, INT32_MAX, &queue_id) ||
        !int_in(sysflag_obj, INT32_MIN, INT32_MAX, &sysflag) ||
        !int_in(born_obj, INT64_MIN, INT64_MAX, &born_ts) ||
        !int_in(reconsume_obj, INT32_MIN, INT32_MAX, &reconsume) || !PyBytes_Check(host) ||
        PyBytes_GET_SIZE(host) != HOST_SIZE || tail.len > 0xFF + TOPIC_LEN_SIZE)
        goto python_decides;
    const uint8_t *d = body.buf;
    Py_ssize_t n = body.len;
    /* a record is its item plus the head's extra fields and the topic */
    Py_ssize_t extra = FIXED_SIZE - TOPIC_LEN_SIZE + tail.len - ITEM_MIN;
    Py_ssize_t count = count_items(d, n, extra);
    if (count == 0 || count > (PY_SSIZE_T_MAX - n) / extra) goto python_decides;
    result = PyBytes_FromStringAndSize(NULL, n + count * extra);
    if (!result) goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    uint8_t head[OFF_BODY]; /* what every record's head shares */
    memset(head, 0, sizeof head);
    put_u32(head + OFF_MAGIC, MAGIC);
    put_u32(head + OFF_QUEUE_ID, (uint32_t)queue_id);
    put_u32(head + OFF_SYSFLAG, (uint32_t)sysflag);
    put_i64(head + OFF_BORN_TIMESTAMP, born_ts);
    memcpy(head + OFF_BORN_HOST, PyBytes_AS_STRING(host), HOST_SIZE);
    put_u32(head + OFF_RECONSUME_TIMES, (uint32_t)reconsume);
    for (Py_ssize_t pos = 0; pos < n;) { /* pass two: every item checked by pass one */
        const uint8_t *item = d + pos;
        int32_t total = get_i32(item);
        int32_t n_body = get_i32(item + ITEM_OFF_BODYLEN);
        Py_ssize_t n_props = total - ITEM_HEAD - n_body; /* propLen and props */
        memcpy(o, head, OFF_BODY);
        put_u32(o + OFF_TOTAL_SIZE, (uint32_t)(total + extra));
        memcpy(o + OFF_FLAG, item + ITEM_OFF_FLAG, 4);
        put_u32(o + OFF_BODYLEN, (uint32_t)n_body);
        o += OFF_BODY;
        memcpy(o, item + ITEM_HEAD, (size_t)n_body);
        o += n_body;
        memcpy(o, tail.buf, (size_t)tail.len);
        o += tail.len;
        memcpy(o, item + ITEM_HEAD + n_body, (size_t)n_props);
        o += n_props;
        pos += total;
    }
    PyObject *records = result;
    result = Py_BuildValue("(Nn)", records, count); /* N: records is the tuple's */
    goto done;
python_decides:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&body);
    PyBuffer_Release(&tail);
    return result;
}

static PyMethodDef methods[] = {
    {"batch_records", py_batch_records, METH_VARARGS,
     "batch_records(body, tail, queue_id, sysflag, born_timestamp, host, reconsume_times) -> "
     "(records, count) or None when the Python code must explain the batch"},
    {NULL, NULL, 0, NULL}};

int ferry_door_init(PyObject *module) { return PyModule_AddFunctions(module, methods); }
