/* The module ferry.native._speedups: each unit adds its functions (speedups.h lists the
 * units, one per user of the C code).
 *
 * Anything unusual (a malformed record, a non-ASCII tag or key) is left to the Python code:
 * the functions return None, or call back, rather than explain errors themselves. Each has
 * a Python reference in the package that calls it, and tests compare the two on the same
 * bytes. The C code holds no Python class shape of its own: the SDK hands its classes' field
 * names and positions over with bind_sdk (sdk.c).
 */
#include "speedups.h"

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups",
                                    "Ferry's per-record loops in C (see ferry.native).", -1,
                                    NULL, NULL, NULL, NULL, NULL};

typedef int (*UnitInit)(PyObject *module);

PyMODINIT_FUNC PyInit__speedups(void) {
    static const UnitInit units[] = {ferry_record_init,   ferry_store_init,       ferry_index_init,
                                     ferry_sdk_init,      ferry_sdk_receive_init, ferry_sdk_send_init,
                                     ferry_door_init};
    PyObject *m = PyModule_Create(&module);
    for (size_t i = 0; m && i < sizeof units / sizeof units[0]; i++) {
        if (units[i](m) < 0) Py_CLEAR(m);
    }
    return m;
}
