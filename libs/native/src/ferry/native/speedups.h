/* What the units of ferry.native._speedups share: the record layout, byte helpers, and the
 * functions one unit lends another.
 *
 * The units, one per user: record.c (CRC-32), store.c (the broker-store's batch scan, stamp
 * and pull ranges), index.c (the index's key hashes and entries), sdk.c with sdk_receive.c
 * and sdk_send.c (the client's decode, encode and send results), door.c (the RocketMQ
 * door's batch body as records), and _speedups.c, which makes the module of them all. The record layout (offsets, sizes, magic codes, flags) is
 * record_layout.h, generated from ferry.protocol.record_layout by libs/native/gen_layout.py.
 */
#ifndef FERRY_SPEEDUPS_H
#define FERRY_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "record_layout.h"

static inline uint32_t get_u32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline int32_t get_i32(const uint8_t *p) { return (int32_t)get_u32(p); }
static inline int64_t get_i64(const uint8_t *p) {
    return (int64_t)(((uint64_t)get_u32(p) << 32) | get_u32(p + 4));
}
static inline void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void put_i64(uint8_t *p, int64_t v) {
    put_u32(p, (uint32_t)((uint64_t)v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

/* Java's String.hashCode of an ASCII tag; -1 in *ascii when a byte is not ASCII. */
static inline int32_t java_hash_ascii(const uint8_t *p, Py_ssize_t n, int *ascii) {
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] >= 0x80) {
            *ascii = 0;
            return 0;
        }
        h = 31u * h + p[i];
    }
    *ascii = 1;
    return (int32_t)h;
}

/* The value of property `name` (with its \x01) in props[0, n): the first item that starts
 * with it. Items start at the beginning and after each \x02, as ferry.protocol.record. */
static inline int find_property(const uint8_t *props, Py_ssize_t n, const char *name,
                                Py_ssize_t name_len, Py_ssize_t *value_at, Py_ssize_t *value_end) {
    Py_ssize_t i = 0;
    while (i < n) {
        const uint8_t *sep = memchr(props + i, 2, (size_t)(n - i));
        Py_ssize_t item_end = sep ? (Py_ssize_t)(sep - props) : n;
        if (item_end - i >= name_len && memcmp(props + i, name, (size_t)name_len) == 0) {
            *value_at = i + name_len;
            *value_end = item_end;
            return 1;
        }
        i = item_end + 1;
    }
    return 0;
}

/* record.c: zlib.crc32's value of p[0, n) */
uint32_t ferry_crc32(const uint8_t *p, Py_ssize_t n);

/* ---- sdk.c: the client classes' shapes, handed over by the SDK (bind_sdk) ---- */

/* A received message's attributes (MessageExt), in the order bind_sdk takes their names; the
 * first N_SEND_FIELDS are a Message's, which the send side reads. */
enum {
    A_TOPIC, A_BODY, A_TAGS, A_KEYS, A_PROPERTIES, A_DELAY_LEVEL, A_DELIVER_AT_MS, A_MSG_ID,
    A_OFFSET_MSG_ID, A_QUEUE, A_QUEUE_OFFSET, A_COMMITLOG_OFFSET, A_BORN_TIMESTAMP,
    A_STORE_TIMESTAMP, A_BORN_HOST, A_STORE_HOST, A_RECONSUME_TIMES, A_BROKER_NAME, A_FLAG,
    A_SYSFLAG, N_MESSAGE_FIELDS};
#define N_SEND_FIELDS 7 /* topic .. deliver_at_ms */
/* A SendResult's attributes, and a PlainMessage's fields (a tuple: positions are handed over) */
enum { R_STATUS, R_MSG_ID, R_OFFSET_MSG_ID, R_QUEUE, R_QUEUE_OFFSET, N_RESULT_FIELDS };
enum { P_BODY, P_TAGS, P_KEYS, P_SIZE, N_PLAIN_FIELDS };

extern PyObject *ferry_message_names[N_MESSAGE_FIELDS]; /* interned */
extern PyObject *ferry_result_names[N_RESULT_FIELDS];
extern Py_ssize_t ferry_plain_at[N_PLAIN_FIELDS];
extern int ferry_sdk_is_bound;

/* 0 when the SDK has bound its shapes, else -1 with an error naming `who` */
int ferry_sdk_bound(const char *who);
/* The offsets of attributes `names` of class `cls` when each is a plain writable __slots__
 * slot (an object member), so that C can read or fill them without attribute lookups: 1 when
 * all are, 0 when one is not (use getattr/setattr), -1 on error. */
int ferry_slot_offsets(PyObject *cls, PyObject *const *names, int n, Py_ssize_t *out);

/* An offset message id: prefix (ASCII: the store host's 16 hex digits) + 16 hex digits of phys. */
static inline PyObject *offset_id_of(PyObject *prefix, int64_t phys) {
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

/* Each unit adds its functions (and makes what it keeps) when the module is made: 0, or -1
 * with an error set. */
int ferry_record_init(PyObject *module);
int ferry_index_init(PyObject *module);
int ferry_store_init(PyObject *module);
int ferry_sdk_init(PyObject *module);
int ferry_sdk_receive_init(PyObject *module);
int ferry_sdk_send_init(PyObject *module);
int ferry_door_init(PyObject *module);
/* A new bind_sdk makes the receive and send units forget the classes they resolved */
void ferry_sdk_receive_forget(void);
void ferry_sdk_send_forget(void);

#endif
