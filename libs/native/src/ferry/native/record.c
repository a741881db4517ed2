/* The record codec's C: CRC-32 of stored records (zlib's value), which the store stamps into
 * every record it appends and tests compare with zlib.crc32. */
#include "speedups.h"

#include <zlib.h>

/* ---- CRC-32 (zlib.crc32's value), folded with carry-less multiplies where the CPU has them ---- */

/* zlib's braided loop runs at ~1 byte per cycle; folding 64 bytes at a time with PCLMULQDQ
 * (Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", bit-reflected
 * form) gives the same value several times faster. The constants are x^n mod P for the
 * fold distances, bit-reflected and shifted by one; tests/test_speedups.py derives them again
 * from the polynomial and compares every length and alignment against zlib. Short inputs and CPUs
 * without PCLMULQDQ use zlib. */
static uint32_t crc32_zlib(uint32_t c, const uint8_t *p, Py_ssize_t n) {
    while (n > 0) { /* zlib takes uInt lengths */
        uInt step = n > (Py_ssize_t)0x40000000 ? 0x40000000u : (uInt)n;
        c = (uint32_t)crc32(c, p, step);
        p += step;
        n -= step;
    }
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CRC_FOLD 1
static int crc_fold_ok = -1; /* unknown until the first call */

__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_fold(uint32_t c, const uint8_t *p, Py_ssize_t n) {
    /* n >= 64; returns the CRC of p[0, n - n % 16) continued from c, the tail left to zlib */
    const __m128i fold4 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL); /* x^480, x^544 */
    const __m128i fold1 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL); /* x^96, x^160 */
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)~c));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(p + 48));
    p += 64;
    n -= 64;
#define FOLD(x, k, next) \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next)
    for (; n >= 64; p += 64, n -= 64) {
        a = FOLD(a, fold4, _mm_loadu_si128((const __m128i *)p));
        b = FOLD(b, fold4, _mm_loadu_si128((const __m128i *)(p + 16)));
        d = FOLD(d, fold4, _mm_loadu_si128((const __m128i *)(p + 32)));
        e = FOLD(e, fold4, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    a = FOLD(a, fold1, b);
    a = FOLD(a, fold1, d);
    a = FOLD(a, fold1, e);
    for (; n >= 16; p += 16, n -= 16) a = FOLD(a, fold1, _mm_loadu_si128((const __m128i *)p));
#undef FOLD
    /* 128 -> 64 bits, 64 -> 32 bits, then Barrett reduction (x^64 / P and P, reflected) */
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, fold1, 0x10));
    __m128i hi = _mm_srli_si128(a, 4);
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), _mm_cvtsi64_si128(0x163cd6124LL), 0x00), hi);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    return ~(uint32_t)_mm_extract_epi32(_mm_xor_si128(a, t), 1);
}
#endif

static uint32_t crc32_update(uint32_t c, const uint8_t *p, Py_ssize_t n) {
#ifdef CRC_FOLD
    if (crc_fold_ok < 0) {
        __builtin_cpu_init();
        crc_fold_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    }
    if (crc_fold_ok && n >= 64) {
        Py_ssize_t whole = n - n % 16;
        c = crc32_fold(c, p, whole);
        p += whole;
        n -= whole;
    }
#endif
    return crc32_zlib(c, p, n);
}

uint32_t ferry_crc32(const uint8_t *p, Py_ssize_t n) { return crc32_update(0, p, n); }

static PyObject *py_crc32(PyObject *self, PyObject *args) {
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b)) return NULL;
    uint32_t c = ferry_crc32(b.buf, b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"crc32", py_crc32, METH_VARARGS, "crc32(data) -> zlib.crc32(data)"},
    {NULL, NULL, 0, NULL}};

int ferry_record_init(PyObject *module) { return PyModule_AddFunctions(module, methods); }
