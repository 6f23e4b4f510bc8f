/* fp32 and bf16 -> fp16 with the CPU's own conversion instruction (x86-64 F16C), round to
 * nearest even, exactly as NumPy's cast: subnormals kept, overflow to infinity. It counts what
 * the conversion must report: values that overflowed and values that were NaN or infinite.
 *
 * Why C: NumPy's float32 -> float16 cast does not use F16C and runs at a third of a memory
 * copy; NumPy has no bfloat16 at all. One vcvtps2ph per 8 values runs faster than the copy
 * (BENCHMARKS.md, "Checkpoint -> programs"). app/checkpoints/convert.py uses this module when it
 * was built and the CPU has F16C and AVX2, and NumPy otherwise; tests check both give the same
 * bytes.
 *
 * convert(kind, source, out) -> (overflow, nonfinite): kind 0 = fp32, 1 = bf16; source and out
 * are contiguous buffers of n values (4 or 2 bytes each) and n fp16 values. Returns None when
 * the CPU lacks the instructions (the caller falls back to NumPy).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_F16C_PATH 1

#define FP32_OVERFLOW 0x477ff000u /* |x| >= 65520 rounds to infinity in fp16 */
#define FP32_INF 0x7f800000u
#define BF16_OVERFLOW 0x4780u /* 65536; the bf16 below it, 65280, is finite in fp16 */
#define BF16_INF 0x7f80u

__attribute__((target("avx2,f16c"))) static uint16_t one_fp32(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

/* The vector loop converts and notes whether any value needs counting; only then (rare in a
 * checkpoint) is the chunk counted value by value. */
__attribute__((target("avx2,f16c"))) static void from_fp32(const float *src, uint16_t *dst,
                                                            size_t n, size_t *overflow,
                                                            size_t *nonfinite) {
    size_t i = 0;
    const __m256 limit = _mm256_set1_ps(65520.0f);
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 large = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* not-less-than, unordered: NaN counts as large too */
        large = _mm256_or_ps(large, _mm256_cmp_ps(_mm256_and_ps(v, magnitude), limit, _CMP_NLT_UQ));
    }
    for (size_t j = i; j < n; j++) dst[j] = one_fp32(src[j]);
    size_t from = _mm256_testz_ps(large, large) ? i : 0;
    for (size_t j = from; j < n; j++) {
        uint32_t bits;
        memcpy(&bits, src + j, 4);
        bits &= 0x7fffffffu;
        if (bits >= FP32_INF) (*nonfinite)++;
        else if (bits >= FP32_OVERFLOW) (*overflow)++;
    }
}

__attribute__((target("avx2,f16c"))) static void from_bf16(const uint16_t *src, uint16_t *dst,
                                                            size_t n, size_t *overflow,
                                                            size_t *nonfinite) {
    size_t i = 0;
    const __m256i zero = _mm256_setzero_si256();
    const __m256i below = _mm256_set1_epi16(BF16_OVERFLOW - 1);
    const __m256i magnitude = _mm256_set1_epi16(0x7fff);
    __m256i large = zero;
    for (; i + 16 <= n; i += 16) {
        __m256i w = _mm256_loadu_si256((const __m256i *)(src + i));
        /* bf16 is the high half of an fp32: interleaving with zeros widens it exactly. The
         * interleave works within each 128-bit lane: lo holds values 0-3 and 8-11, hi 4-7 and
         * 12-15. */
        __m128i lo = _mm256_cvtps_ph(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m128i hi = _mm256_cvtps_ph(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(dst + i), _mm_unpacklo_epi64(lo, hi));
        _mm_storeu_si128((__m128i *)(dst + i + 8), _mm_unpackhi_epi64(lo, hi));
        /* magnitudes fit 15 bits, so the signed comparison is right */
        large = _mm256_or_si256(large, _mm256_cmpgt_epi16(_mm256_and_si256(w, magnitude), below));
    }
    for (size_t j = i; j < n; j++) {
        uint32_t wide = (uint32_t)src[j] << 16;
        float f;
        memcpy(&f, &wide, 4);
        dst[j] = one_fp32(f);
    }
    size_t from = _mm256_testz_si256(large, large) ? i : 0;
    for (size_t j = from; j < n; j++) {
        uint16_t m = src[j] & 0x7fffu;
        if (m >= BF16_INF) (*nonfinite)++;
        else if (m >= BF16_OVERFLOW) (*overflow)++;
    }
}

static int cpu_has_f16c(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#else
#define HAVE_F16C_PATH 0
#endif

static PyObject *convert(PyObject *self, PyObject *args) {
    int kind;
    Py_buffer source, out;
    if (!PyArg_ParseTuple(args, "iy*w*", &kind, &source, &out)) return NULL;
    PyObject *result = NULL;
    size_t width = kind == 0 ? 4 : 2;
    size_t n = (size_t)source.len / width;
    if (kind != 0 && kind != 1) {
        PyErr_SetString(PyExc_ValueError, "kind is 0 (fp32) or 1 (bf16)");
    } else if ((size_t)source.len % width || (size_t)out.len != 2 * n) {
        PyErr_SetString(PyExc_ValueError, "out must hold one fp16 value per source value");
    } else {
#if HAVE_F16C_PATH
        if (cpu_has_f16c()) {
            size_t overflow = 0, nonfinite = 0;
            Py_BEGIN_ALLOW_THREADS
            if (kind == 0) from_fp32((const float *)source.buf, (uint16_t *)out.buf, n, &overflow, &nonfinite);
            else from_bf16((const uint16_t *)source.buf, (uint16_t *)out.buf, n, &overflow, &nonfinite);
            Py_END_ALLOW_THREADS
            result = Py_BuildValue("(nn)", (Py_ssize_t)overflow, (Py_ssize_t)nonfinite);
        } else {
            result = Py_NewRef(Py_None);
        }
#else
        result = Py_NewRef(Py_None);
#endif
    }
    PyBuffer_Release(&source);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *available(PyObject *self, PyObject *unused) {
#if HAVE_F16C_PATH
    return PyBool_FromLong(cpu_has_f16c());
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"convert", convert, METH_VARARGS, "convert(kind, source, out) -> (overflow, nonfinite) | None"},
    {"available", available, METH_NOARGS, "whether this CPU runs the conversion (F16C, AVX2)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fp16", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fp16(void) { return PyModule_Create(&module); }
