/* The client classes' shapes, as the SDK hands them over: ferry.client.message calls
 * bind_sdk at import with the attribute names of a received message (MessageExt) and of a
 * SendResult, in the order of the roles in speedups.h, and where a PlainMessage keeps its
 * body, tags, keys and size. The C code holds no Python attribute name or field order of its
 * own: renaming or reordering a field changes what the SDK hands over, not the C. */
#include "speedups.h"

#include <structmember.h>

PyObject *ferry_message_names[N_MESSAGE_FIELDS];
PyObject *ferry_result_names[N_RESULT_FIELDS];
Py_ssize_t ferry_plain_at[N_PLAIN_FIELDS];
int ferry_sdk_is_bound;

int ferry_sdk_bound(const char *who) {
    if (ferry_sdk_is_bound) return 0;
    PyErr_Format(PyExc_RuntimeError, "%s: import ferry.client.message first (it calls bind_sdk)",
                 who);
    return -1;
}

int ferry_slot_offsets(PyObject *cls, PyObject *const *names, int n, Py_ssize_t *out) {
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

static int check_names(PyObject *names, Py_ssize_t n, const char *what) {
    if (PyTuple_GET_SIZE(names) != n) {
        PyErr_Format(PyExc_ValueError, "bind_sdk: %zd %s attribute names", n, what);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, i))) {
            PyErr_Format(PyExc_TypeError, "bind_sdk: %s attribute names are str", what);
            return -1;
        }
    }
    return 0;
}

static void take_names(PyObject *names, PyObject **out, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = Py_NewRef(PyTuple_GET_ITEM(names, i));
        PyUnicode_InternInPlace(&s);
        Py_XSETREF(out[i], s);
    }
}

/* Everything is checked before anything changes: a refused bind leaves the last one. */
static PyObject *py_bind_sdk(PyObject *self, PyObject *args) {
    PyObject *message, *result, *plain;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyTuple_Type, &message, &PyTuple_Type, &result,
                          &PyTuple_Type, &plain))
        return NULL;
    if (check_names(message, N_MESSAGE_FIELDS, "message") < 0 ||
        check_names(result, N_RESULT_FIELDS, "send result") < 0)
        return NULL;
    Py_ssize_t at[N_PLAIN_FIELDS];
    int seen = 0;
    if (PyTuple_GET_SIZE(plain) != N_PLAIN_FIELDS) goto bad_plain;
    for (int i = 0; i < N_PLAIN_FIELDS; i++) {
        at[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(plain, i));
        if (at[i] == -1 && PyErr_Occurred()) return NULL;
        if (at[i] < 0 || at[i] >= N_PLAIN_FIELDS || (seen & (1 << at[i]))) goto bad_plain;
        seen |= 1 << at[i];
    }
    take_names(message, ferry_message_names, N_MESSAGE_FIELDS);
    take_names(result, ferry_result_names, N_RESULT_FIELDS);
    memcpy(ferry_plain_at, at, sizeof at);
    ferry_sdk_is_bound = 1;
    ferry_sdk_receive_forget(); /* their slot offsets were found by the old names */
    ferry_sdk_send_forget();
    Py_RETURN_NONE;
bad_plain:
    PyErr_SetString(PyExc_ValueError,
                    "bind_sdk: a PlainMessage's positions of body, tags, keys and size (0-3, once each)");
    return NULL;
}

static PyMethodDef methods[] = {
    {"bind_sdk", py_bind_sdk, METH_VARARGS,
     "bind_sdk(message_fields, result_fields, plain_positions): the SDK classes' shapes"},
    {NULL, NULL, 0, NULL}};

int ferry_sdk_init(PyObject *module) { return PyModule_AddFunctions(module, methods); }
