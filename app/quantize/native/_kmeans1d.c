/* The optimal weighted 1-D k-means that coremltools' bundled kmeans1d computes
 * (`cluster_with_weights`), the same result bit for bit, at a fraction of its time.
 *
 * The problem: values x[0] < x[1] < ... < x[n-1] with weights w[i] > 0, split into k runs
 * of consecutive values minimising the weighted squared distance of each value to its run's
 * weighted mean. The dynamic programme (Grønlund et al., 2017, section 2.2) fills, for each
 * number of runs m, cost[m][i] = the least cost of x[0..i] in m + 1 runs, and the start of
 * the last run; each layer is the row minima of an implicit n x n matrix, found with SMAWK.
 *
 * Why it is the same: kmeans1d does exactly this, and where two candidates tie (or floating
 * point makes the matrix slightly non-monotone) the run it picks is decided by the order of its
 * comparisons. So this file evaluates the same floating-point expressions in the same order (the
 * prefix sums, a run's cost, a matrix entry, the running mean of the backtrack), makes the same
 * comparisons in the same order (SMAWK's reduce step keeps the earlier column on a tie; its
 * interpolation takes the first strictly smaller entry), and is compiled without contracting
 * a multiply and an add into one fused operation (pyproject.toml: -ffp-contract=off), as the
 * x86-64 kmeans1d binary is. tests/test_quantize_kmeans_native.py compares the two on random,
 * tied, clustered and degenerate inputs.
 *
 * Why faster: kmeans1d's SMAWK allocates vectors and a hash map at every level of its recursion
 * and calls each matrix entry through a std::function; here a level's rows are an arithmetic
 * progression (row first + r * step), its surviving columns live in one preallocated stack, the
 * column of a row's minimum is found again by binary search in that increasing stack, and only
 * the previous layer's costs are kept (kmeans1d keeps all k layers of costs and starts, 8-byte
 * each; here the starts only, 4-byte). Fewer entries are computed, each the same value it would
 * be: a column popped from the reduce step's stack leaves the entry the new column is pushed
 * with (its comparison there was that entry), and the top level's reduce step, whose entries are
 * all empty runs or one-value runs, takes the latter's costs computed once for every layer
 * rather than dividing for each (2 of the 9.8 entries per value and layer were that step's).
 * And the three prefix sums of an index sit side by side (`Prefix`).
 *
 * cluster(values, weights, k, clusters, centroids): values and weights are n float64 each
 * (values strictly increasing), 1 <= k <= min(n, 256); clusters receives n uint8 (each value's
 * run) and centroids k float64 (each run's mean; a run left empty keeps what the buffer held,
 * as kmeans1d's centroids keep their zero start). The GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

/* The prefix sums at one index side by side, 32 bytes, so that the three an entry reads at each
 * of its two indices share a cache line (six lines otherwise: a group's sums, 3 x 8 bytes for
 * each of ~2,500 distinct values, outgrow the 32 KiB first-level cache). */
typedef struct {
    double w, s, q; /* of the weights, of weight * value, of weight * value * value */
    double unused;
} Prefix;

typedef struct {
    const Prefix *sum; /* prefix sums, n + 1 */
    const double *prev; /* the previous layer's least costs, n */
    const double *single; /* run_cost of each one-value run x[i..i], the same in every layer */
} Layer;

/* The cost of the run x[i..j] (0 when empty), kmeans1d's expression for it. */
static inline double run_cost(const Layer *L, size_t i, size_t j) {
    if (j < i) return 0.0;
    const Prefix *a = L->sum + i, *b = L->sum + j + 1;
    double w = b->w - a->w;
    double mu = (b->s - a->s) / w;
    double cost = b->q - a->q;
    cost += w * (mu * mu);
    cost -= (2 * mu) * (b->s - a->s);
    return cost;
}

/* Entry (row i, column j): x[0..i] with its last run starting at j. Column 0 and the columns
 * past i read the previous layer at i (unsigned j - 1 wraps for j = 0, as in kmeans1d). */
static inline double entry(const Layer *L, size_t i, size_t j) {
    size_t before = i < j - 1 ? i : j - 1;
    return L->prev[before] + run_cost(L, j, i);
}

/* The index of `col` in the increasing `cols` (0 if absent, which SMAWK's invariants rule out),
 * looked for from `from` on first: the rows' minima move right, so it is mostly a step or two
 * ahead (exact either way: the index is unique). */
static size_t position(const uint32_t *cols, size_t count, uint32_t col, size_t from) {
    if (from < count && cols[from] <= col) {
        while (from < count && cols[from] < col) from++;
        return from < count && cols[from] == col ? from : 0;
    }
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cols[mid] < col) lo = mid + 1;
        else hi = mid;
    }
    return lo < count && cols[lo] == col ? lo : 0;
}

/* The reduce step of the top level (rows and columns 0 .. n - 1): the general loop below, its
 * entries written out as entry() computes them there. A column is never left of the row it is
 * compared at (kept <= col), so each comparison's entry is an empty run's, prev[row] + 0.0, and
 * a push is an empty run's too, or, on the diagonal, prev[col - 1] (prev[0] for column 0, the
 * unsigned wrap of entry()) plus the one-value run's cost: no division in this step. */
static size_t reduce_top(const Layer *L, size_t n, uint32_t *stack, double *tops) {
    size_t kept = 0;
    for (size_t col = 0; col < n; col++) {
        double popped = 0.0;
        int any = 0;
        while (kept > 0) {
            double value = L->prev[kept - 1] + 0.0;
            if (value >= tops[kept - 1]) break;
            popped = value;
            any = 1;
            kept--;
        }
        if (kept < n) {
            stack[kept] = (uint32_t)col;
            if (any) tops[kept] = popped;
            else if (kept < col) tops[kept] = L->prev[kept] + 0.0;
            else tops[kept] = L->prev[col ? col - 1 : 0] + L->single[col];
            kept++;
        }
    }
    return kept;
}

/* SMAWK's reduce step on rows first, first + step, ... (`rows` of them) and the increasing
 * columns `cols`: the columns that can hold a row's minimum, into `stack` (at most `rows`; how
 * many is returned), each with its entry at its row in `tops`. */
static size_t reduce(const Layer *L, size_t first, size_t step, size_t rows, const uint32_t *cols,
                     size_t ncols, uint32_t *stack, double *tops) {
    size_t kept = 0;
    for (size_t c = 0; c < ncols; c++) {
        uint32_t col = cols[c];
        double popped = 0.0; /* the entry of the last column popped: the new column's at its row */
        int any = 0;
        while (kept > 0) {
            size_t row = first + (kept - 1) * step;
            double value = entry(L, row, col);
            if (value >= tops[kept - 1]) break;
            popped = value;
            any = 1;
            kept--;
        }
        if (kept < rows) {
            stack[kept] = col;
            tops[kept] = any ? popped : entry(L, first + kept * step, col);
            kept++;
        }
    }
    return kept;
}

/* Row minima of rows first, first + step, ... (`rows` of them) over the increasing columns
 * `cols`, into best[row]. `stack` has room for this level's surviving columns (at most `rows`)
 * and every deeper level's after them. The top level (step 1) is every row and every column. */
static void smawk(const Layer *L, size_t first, size_t step, size_t rows, const uint32_t *cols,
                  size_t ncols, uint32_t *stack, double *tops, uint32_t *best, double *least_of) {
    if (rows == 0) return;
    size_t kept = step == 1 ? reduce_top(L, rows, stack, tops)
                            : reduce(L, first, step, rows, cols, ncols, stack, tops);
    smawk(L, first + step, 2 * step, rows / 2, stack, kept, stack + rows, tops + rows, best,
          least_of);
    size_t start = 0;
    for (size_t r = 0; r < rows; r += 2) {
        size_t row = first + r * step;
        size_t stop = kept - 1;
        if (r < rows - 1) stop = position(stack, kept, best[first + (r + 1) * step], start);
        uint32_t argmin = stack[start];
        double least = entry(L, row, argmin);
        for (size_t c = start + 1; c <= stop; c++) {
            double value = entry(L, row, stack[c]);
            if (value < least) {
                argmin = stack[c];
                least = value;
            }
        }
        best[row] = argmin;
        least_of[row] = least;
        start = stop;
    }
}

/* 0, or -1 when out of memory. */
static int cluster_runs(const double *x, const double *w, size_t n, size_t k, uint8_t *clusters,
                        double *centroids) {
    double *sums = malloc(sizeof(double) * (2 * n + 2 * n + 2 + n));
    Prefix *prefix = aligned_alloc(64, (sizeof(Prefix) * (n + 1) + 63) / 64 * 64);
    uint32_t *starts = malloc(sizeof(uint32_t) * k * n);
    uint32_t *work = malloc(sizeof(uint32_t) * (4 * n + 4));
    if (!sums || !prefix || !starts || !work) {
        free(sums);
        free(prefix);
        free(starts);
        free(work);
        return -1;
    }
    double *cost = sums, *next = cost + n;
    double *tops = next + n, *single = tops + 2 * n + 2;
    uint32_t *cols = work, *best = cols + n, *stack = best + n;
    Prefix *sum = prefix;
    sum[0].w = sum[0].s = sum[0].q = sum[0].unused = 0.0;
    for (size_t i = 0; i < n; i++) {
        sum[i + 1].w = w[i] + sum[i].w;
        sum[i + 1].s = w[i] * x[i] + sum[i].s;
        sum[i + 1].q = w[i] * x[i] * x[i] + sum[i].q;
        sum[i + 1].unused = 0.0;
        cols[i] = (uint32_t)i;
    }
    Layer L = {sum, cost, single};
    for (size_t i = 0; i < n; i++) {
        single[i] = run_cost(&L, i, i);
        cost[i] = run_cost(&L, 0, i);
        starts[i] = 0;
    }
    for (size_t m = 1; m < k; m++) {
        L.prev = cost;
        smawk(&L, 0, 1, n, cols, n, stack, tops, best, next);
        for (size_t i = 0; i < n; i++) starts[m * n + i] = best[i];
        double *swap = cost;
        cost = next;
        next = swap;
    }
    for (size_t i = 0; i < n; i++) clusters[i] = 0;
    /* back from the last run; kmeans1d's loop, unsigned arithmetic included */
    size_t end = n, m = k - 1, last = n - 1, start;
    do {
        start = starts[m * n + last];
        double mean = 0.0;
        for (size_t i = start; i < end; i++) {
            clusters[i] = (uint8_t)m;
            mean += (x[i] - mean) * (sum[i + 1].w - sum[i].w) / (sum[i + 1].w - sum[start].w);
        }
        centroids[m] = mean;
        end = start;
        m -= 1;
        last = start - 1;
    } while (start > 0);
    free(sums);
    free(prefix);
    free(starts);
    free(work);
    return 0;
}

/* The palettes of `groups` consecutive runs of `each` fp16 bit patterns: each group's distinct
 * values and their counts (its histogram over `rank`, the pattern's place in value order with
 * -0 at +0's, and `value`, the float64 value at each place), clustered into min(distinct, size)
 * runs; the centroids into lut[group * size ...] (the rest 0), each element's run into indices. */
static int palettize_groups(const uint16_t *bits, size_t groups, size_t each, size_t size,
                            const uint16_t *rank, const double *value, double *lut,
                            uint8_t *indices) {
    uint32_t *counts = calloc(65536, sizeof(uint32_t));
    uint16_t *used = malloc(65536 * sizeof(uint16_t));
    uint8_t *run_of = malloc(65536);
    double *xs = malloc(65536 * 2 * sizeof(double) + size * sizeof(double));
    uint8_t *clusters = malloc(65536);
    int status = 0;
    if (!counts || !used || !run_of || !xs || !clusters) status = -1;
    double *ws = xs + 65536, *centroids = ws + 65536;
    for (size_t g = 0; g < groups && status == 0; g++) {
        const uint16_t *group = bits + g * each;
        size_t lo = 65535, hi = 0;
        for (size_t e = 0; e < each; e++) {
            size_t r = rank[group[e]];
            counts[r]++;
            if (r < lo) lo = r;
            if (r > hi) hi = r;
        }
        size_t n = 0;
        for (size_t r = lo; r <= hi; r++) {
            if (!counts[r]) continue;
            xs[n] = value[r];
            ws[n] = (double)counts[r];
            used[n] = (uint16_t)r;
            counts[r] = 0;
            n++;
        }
        size_t k = n < size ? n : size;
        for (size_t c = 0; c < size; c++) centroids[c] = 0.0;
        status = cluster_runs(xs, ws, n, k, clusters, centroids);
        for (size_t c = 0; c < size; c++) lut[g * size + c] = centroids[c];
        for (size_t i = 0; i < n; i++) run_of[used[i]] = clusters[i];
        uint8_t *out = indices + g * each;
        for (size_t e = 0; e < each; e++) out[e] = run_of[rank[group[e]]];
    }
    free(counts);
    free(used);
    free(run_of);
    free(xs);
    free(clusters);
    return status;
}

static PyObject *palettize(PyObject *self, PyObject *args) {
    Py_buffer bits, rank, value, lut, indices;
    Py_ssize_t each, size;
    if (!PyArg_ParseTuple(args, "y*nny*y*w*w*", &bits, &each, &size, &rank, &value, &lut,
                          &indices))
        return NULL;
    PyObject *result = NULL;
    size_t count = (size_t)bits.len / 2;
    size_t groups = each > 0 ? count / (size_t)each : 0;
    if (each < 1 || (size_t)bits.len % 2 || count % (size_t)each) {
        PyErr_SetString(PyExc_ValueError, "bits are groups of `each` > 0 uint16 patterns");
    } else if (size < 1 || size > 256) {
        PyErr_SetString(PyExc_ValueError, "a palette has 1 to 256 entries");
    } else if (rank.len != 65536 * 2 || value.len != 65536 * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "rank is 65,536 uint16, value 65,536 float64");
    } else if ((size_t)lut.len != groups * (size_t)size * sizeof(double) ||
               (size_t)indices.len != count) {
        PyErr_SetString(PyExc_ValueError, "lut holds size float64 per group, indices one uint8 per pattern");
    } else {
        const uint16_t *ranks = (const uint16_t *)rank.buf;
        int status = 0;
        Py_BEGIN_ALLOW_THREADS
        status = palettize_groups((const uint16_t *)bits.buf, groups, (size_t)each, (size_t)size,
                                  ranks, (const double *)value.buf, (double *)lut.buf,
                                  (uint8_t *)indices.buf);
        Py_END_ALLOW_THREADS
        result = status == 0 ? Py_NewRef(Py_None) : PyErr_NoMemory();
    }
    PyBuffer_Release(&bits);
    PyBuffer_Release(&rank);
    PyBuffer_Release(&value);
    PyBuffer_Release(&lut);
    PyBuffer_Release(&indices);
    return result;
}

static PyObject *cluster(PyObject *self, PyObject *args) {
    Py_buffer values, weights, clusters, centroids;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "y*y*nw*w*", &values, &weights, &k, &clusters, &centroids))
        return NULL;
    PyObject *result = NULL;
    size_t n = (size_t)values.len / sizeof(double);
    if (n == 0 || (size_t)values.len % sizeof(double) || (size_t)weights.len != n * sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "values and weights are n > 0 float64 each");
    } else if (k < 1 || (size_t)k > n || k > 256 || n > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "k is 1 to min(n, 256)");
    } else if ((size_t)clusters.len != n || (size_t)centroids.len != (size_t)k * sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "clusters holds n uint8, centroids k float64");
    } else {
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = cluster_runs((const double *)values.buf, (const double *)weights.buf, n,
                              (size_t)k, (uint8_t *)clusters.buf, (double *)centroids.buf);
        Py_END_ALLOW_THREADS
        result = status == 0 ? Py_NewRef(Py_None) : PyErr_NoMemory();
    }
    PyBuffer_Release(&values);
    PyBuffer_Release(&weights);
    PyBuffer_Release(&clusters);
    PyBuffer_Release(&centroids);
    return result;
}

static PyMethodDef methods[] = {
    {"cluster", cluster, METH_VARARGS,
     "cluster(values, weights, k, clusters, centroids): kmeans1d's weighted clustering of "
     "increasing float64 values, into n uint8 clusters and k float64 centroids"},
    {"palettize", palettize, METH_VARARGS,
     "palettize(bits, each, size, rank, value, lut, indices): the k-means palette of each group "
     "of `each` fp16 patterns, from its histogram"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kmeans1d", NULL, -1, methods};

PyMODINIT_FUNC PyInit__kmeans1d(void) { return PyModule_Create(&module); }
