/* appopt runtime native kernels: squeeze-excite, the embedding bag and Gather, compiled with kernels.c (EXTRA_SOURCES).
 *
 * Squeeze-excite (ap_se): y = x * gate(W2 act1(W1 mean(x) + b1) + b2), per image and channel, over NHWC or NCHW x.
 * One call replaces GlobalAveragePool, two 1x1 convolutions on a 1x1 image, their activations and the broadcast
 * Mul, and keeps the tensor in whichever layout it is in. The activations are kernels.c's (ap_activate_row), so
 * the codes are runtime/native/abi.py's ACTIVATIONS.
 *
 * Gather (ap_gather): rows picked by index, checked; the static plan's Gather of fixed arrays.
 *
 * Strided copy (ap_strided_copy): a strided view (a Transpose's) copied into a contiguous buffer, row by row, the
 * rows along the innermost strided dim gathered in one loop; what the static plan runs for a Reshape or Flatten that
 * cannot view its input, and before a kernel that cannot read a strided input.
 *
 * Embedding bag (ap_embag): y[n] = sum (or mean) over l of table[ids[n, l]], the Gather + ReduceSum that PyTorch
 * exports for a bag of ids. Ids are checked: one outside [-V, V) stops the call with EB_STATUS set.
 */
#include <stdint.h>
#include <string.h>

#define CN_API __attribute__((visibility("default")))
typedef void (*cn_task_fn)(const void *ctx, long task);
void ap_pool_for(long ntasks, cn_task_fn fn, const void *ctx);
void ap_activate_row(float *p, long n, int act, float lo, float hi);
void ap_pool_run(long ntasks, cn_task_fn fn, const void *ctx, double work);

typedef float cv16 __attribute__((vector_size(64), aligned(4), may_alias));
#define CVL 16
/* Work (floats touched) below which a kernel runs on the caller alone (kernels.c's SERIAL_WORK). */
#define CN_SERIAL 65536L

/* ---------------------------------------------------------------------------------------------------------- */
/* Squeeze-excite. SE_GATES: scratch of N * (C + CR) floats (the per-image gates, then the hidden layer). */
enum {
  SE_X, SE_Y, SE_N, SE_HW, SE_C, SE_CR, SE_W1, SE_B1, SE_W2, SE_B2, SE_ACT1, SE_LO1, SE_HI1, SE_ACT2, SE_LO2,
  SE_HI2, SE_NHWC, SE_GATES, SE_NARGS
};
static float cn_f32(int64_t bits) { union { int32_t i; float f; } u; u.i = (int32_t)bits; return u.f; }

/* Image n: gates[c] from the channel means. */
static void se_gates_task(const void *vctx, long n) {
  const int64_t *a = (const int64_t *)vctx;
  long HW = a[SE_HW], C = a[SE_C], CR = a[SE_CR];
  const float *x = (const float *)a[SE_X] + n * HW * C;
  float *g = (float *)a[SE_GATES] + n * (C + CR), *h = g + C;
  const float *w1 = (const float *)a[SE_W1], *b1 = (const float *)a[SE_B1];
  const float *w2 = (const float *)a[SE_W2], *b2 = (const float *)a[SE_B2];
  if (a[SE_NHWC]) {
    memset(g, 0, (size_t)C * sizeof(float));
    for (long p = 0; p < HW; p++) {
      const float *row = x + p * C;
      long c = 0;
      for (; c + CVL <= C; c += CVL) *(cv16 *)(g + c) += *(const cv16 *)(row + c);
      for (; c < C; c++) g[c] += row[c];
    }
  } else {
    for (long c = 0; c < C; c++) {
      const float *plane = x + c * HW;
      cv16 acc = {0};
      long p = 0;
      for (; p + CVL <= HW; p += CVL) acc += *(const cv16 *)(plane + p);
      float s = 0.0f;
      for (int k = 0; k < CVL; k++) s += acc[k];
      for (; p < HW; p++) s += plane[p];
      g[c] = s;
    }
  }
  float inv = 1.0f / (float)HW;
  for (long c = 0; c < C; c++) g[c] *= inv;
  for (long r = 0; r < CR; r++) {
    const float *wr = w1 + r * C;
    float s = 0.0f;
    for (long c = 0; c < C; c++) s += wr[c] * g[c];
    h[r] = s + (b1 ? b1[r] : 0.0f);
  }
  ap_activate_row(h, CR, (int)a[SE_ACT1], cn_f32(a[SE_LO1]), cn_f32(a[SE_HI1]));
  for (long c = 0; c < C; c++) {
    const float *wc = w2 + c * CR;
    float s = 0.0f;
    for (long r = 0; r < CR; r++) s += wc[r] * h[r];
    g[c] = s + (b2 ? b2[c] : 0.0f);
  }
  ap_activate_row(g, C, (int)a[SE_ACT2], cn_f32(a[SE_LO2]), cn_f32(a[SE_HI2]));
}

#define SE_ROWS 64 /* pixels (NHWC) or channels (NCHW) per scaling task */
static void se_scale_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long HW = a[SE_HW], C = a[SE_C], CR = a[SE_CR];
  long rows = a[SE_NHWC] ? HW : C, per_image = (rows + SE_ROWS - 1) / SE_ROWS;
  long n = task / per_image, r0 = task % per_image * SE_ROWS, r1 = r0 + SE_ROWS < rows ? r0 + SE_ROWS : rows;
  const float *x = (const float *)a[SE_X] + n * HW * C;
  float *y = (float *)a[SE_Y] + n * HW * C;
  const float *g = (const float *)a[SE_GATES] + n * (C + CR);
  if (a[SE_NHWC]) {
    for (long p = r0; p < r1; p++) {
      const float *xr = x + p * C;
      float *yr = y + p * C;
      long c = 0;
      for (; c + CVL <= C; c += CVL) *(cv16 *)(yr + c) = *(const cv16 *)(xr + c) * *(const cv16 *)(g + c);
      for (; c < C; c++) yr[c] = xr[c] * g[c];
    }
  } else {
    for (long c = r0; c < r1; c++) {
      const float *xp = x + c * HW;
      float *yp = y + c * HW;
      float s = g[c];
      long p = 0;
      for (; p + CVL <= HW; p += CVL) *(cv16 *)(yp + p) = *(const cv16 *)(xp + p) * s;
      for (; p < HW; p++) yp[p] = xp[p] * s;
    }
  }
}

CN_API void ap_se(const int64_t *a) {
  long N = a[SE_N], rows = a[SE_NHWC] ? a[SE_HW] : a[SE_C];
  long total = N * a[SE_HW] * a[SE_C];
  long tasks = N * ((rows + SE_ROWS - 1) / SE_ROWS);
  if (total < CN_SERIAL) {
    for (long n = 0; n < N; n++) se_gates_task(a, n);
    for (long t = 0; t < tasks; t++) se_scale_task(a, t);
    return;
  }
  ap_pool_for(N, se_gates_task, a);
  ap_pool_for(tasks, se_scale_task, a);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Embedding bag: bag n reads ids[n * EB_ROW + EB_OFF + l] for l < EB_L (int64, or int32 when EB_I32), rows of D
 * floats of table[V][D]; y[n] = their sum, times 1/L when EB_MEAN. EB_STATUS: 0, or 1 + the first bad bag. */
enum { EB_TABLE, EB_V, EB_D, EB_IDS, EB_I32, EB_N, EB_L, EB_ROW, EB_OFF, EB_Y, EB_MEAN, EB_STATUS, EB_NARGS };

static int eb_bag(const int64_t *a, long n) {
  long V = a[EB_V], D = a[EB_D], L = a[EB_L];
  const float *table = (const float *)a[EB_TABLE];
  float *y = (float *)a[EB_Y] + n * D;
  long base = n * a[EB_ROW] + a[EB_OFF];
  memset(y, 0, (size_t)D * sizeof(float));
  for (long l = 0; l < L; l++) {
    long id = a[EB_I32] ? (long)((const int32_t *)a[EB_IDS])[base + l] : (long)((const int64_t *)a[EB_IDS])[base + l];
    if (id < 0) id += V;
    if (id < 0 || id >= V) return 0;
    const float *row = table + id * D;
    long d = 0;
    for (; d + CVL <= D; d += CVL) *(cv16 *)(y + d) += *(const cv16 *)(row + d);
    for (; d < D; d++) y[d] += row[d];
  }
  if (a[EB_MEAN]) { /* an empty bag's mean is 0/0, as ReduceMean gives */
    float count = (float)L;
    for (long d = 0; d < D; d++) y[d] /= count;
  }
  return 1;
}

CN_API void ap_embag(int64_t *a) {
  a[EB_STATUS] = 0;
  for (long n = 0; n < a[EB_N]; n++) {
    if (!eb_bag(a, n)) { a[EB_STATUS] = 1 + n; return; }
  }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Gather (ap_gather): y[o, j] = x[o, idx[j]] for o < GA_OUTER, j < GA_NIDX, each a row of GA_INNER bytes of an
 * axis of GA_DIM rows (any element type: rows are copied as bytes). Indices (int64, or int32 when GA_I32) are all
 * checked before any row is copied: one outside [-DIM, DIM) stops the call with GA_STATUS = 1 + its position. */
enum { GA_X, GA_OUTER, GA_DIM, GA_INNER, GA_IDX, GA_I32, GA_NIDX, GA_Y, GA_STATUS, GA_NARGS };

static long ga_index(const int64_t *a, long j) {
  return a[GA_I32] ? (long)((const int32_t *)a[GA_IDX])[j] : (long)((const int64_t *)a[GA_IDX])[j];
}

CN_API void ap_gather(int64_t *a) {
  long outer = a[GA_OUTER], dim = a[GA_DIM], inner = a[GA_INNER], n = a[GA_NIDX];
  const char *x = (const char *)a[GA_X];
  char *y = (char *)a[GA_Y];
  a[GA_STATUS] = 0;
  for (long j = 0; j < n; j++) {
    long i = ga_index(a, j);
    if (i < -dim || i >= dim) { a[GA_STATUS] = 1 + j; return; }
  }
  for (long o = 0; o < outer; o++) {
    for (long j = 0; j < n; j++) {
      long i = ga_index(a, j);
      if (i < 0) i += dim;
      memcpy(y + (o * n + j) * inner, x + (o * dim + i) * inner, (size_t)inner);
    }
  }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Strided copy (ap_strided_copy): y, contiguous, gets SC_ROWS rows of SC_ROW bytes each; row r's multi-index over
 * the SC_RANK outer dims (SC_DIMS.., row-major) picks its source at x + sum(index[d] * SC_STRIDES[d]) bytes. Any
 * element type (rows are bytes); SC_RANK <= SC_MAX_RANK. Tasks take runs of rows. */
#define SC_MAX_RANK 8
#define SC_TASKS 64L
enum { SC_X, SC_Y, SC_RANK, SC_ROW, SC_ROWS, SC_DIMS, SC_STRIDES = 13, SC_NARGS = 21 };
_Static_assert(SC_STRIDES == SC_DIMS + SC_MAX_RANK && SC_NARGS == SC_STRIDES + SC_MAX_RANK, "SC_ slots");

static void sc_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long rows = a[SC_ROWS], rank = a[SC_RANK], row = a[SC_ROW];
  long ntasks = rows < SC_TASKS ? rows : SC_TASKS;
  long r0 = rows * task / ntasks, r1 = rows * (task + 1) / ntasks;
  const int64_t *dims = a + SC_DIMS, *strides = a + SC_STRIDES;
  long index[SC_MAX_RANK];
  long offset = 0, rest = r0;
  for (long d = rank - 1; d >= 0; d--) {
    index[d] = rest % dims[d];
    rest /= dims[d];
    offset += index[d] * strides[d];
  }
  const char *x = (const char *)a[SC_X];
  char *y = (char *)a[SC_Y] + r0 * row;
  if (rank == 0) {  /* one contiguous row */
    if (r1 > r0) memcpy(y, x + offset, (size_t)row);
    return;
  }
  const long last = rank - 1;
  const long step = strides[last];
  for (long r = r0; r < r1;) {
    /* a run of rows along the innermost outer dim: a gather with one stride (a transpose's is one element per
     * row, which a memcpy and an index carry per element made the slowest copy of all) */
    long run = dims[last] - index[last];
    if (run > r1 - r) run = r1 - r;
    const char *src = x + offset;
    switch (row) {
      case 4: for (long i = 0; i < run; i++) memcpy(y + 4 * i, src + i * step, 4); break;
      case 2: for (long i = 0; i < run; i++) memcpy(y + 2 * i, src + i * step, 2); break;
      case 8: for (long i = 0; i < run; i++) memcpy(y + 8 * i, src + i * step, 8); break;
      case 1: for (long i = 0; i < run; i++) y[i] = src[i * step]; break;
      default: for (long i = 0; i < run; i++) memcpy(y + row * i, src + i * step, (size_t)row);
    }
    y += run * row;
    r += run;
    offset += run * step;
    index[last] += run;
    if (index[last] < dims[last]) continue;
    offset -= index[last] * step;  /* the innermost dim wrapped: carry into the outer ones */
    index[last] = 0;
    for (long d = last - 1; d >= 0; d--) {
      offset += strides[d];
      if (++index[d] < dims[d]) break;
      offset -= index[d] * strides[d];
      index[d] = 0;
    }
  }
}

CN_API void ap_strided_copy(const int64_t *a) {
  long rows = a[SC_ROWS];
  if (rows <= 0) return;
  ap_pool_run(rows < SC_TASKS ? rows : SC_TASKS, sc_task, a, (double)rows * (double)a[SC_ROW] / 4.0);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Embedding bags by ranges (PyTorch's nn.EmbeddingBag export, a Loop over bags): bag i sums (or averages) the
 * rows table[idx[j]] for j in [starts[i], ends[i]), the bounds clamped as ONNX Slice clamps them (negative counts
 * from the end of idx, then into [0, NIDX]). ER_STATUS: 0, 1 + the first bag with an id outside [-V, V), or -1
 * when there are fewer starts or ends than bags. */
enum { ER_TABLE, ER_V, ER_D, ER_IDX, ER_I32, ER_NIDX, ER_STARTS, ER_NSTARTS, ER_ENDS, ER_NENDS, ER_M, ER_Y, ER_MEAN,
       ER_STATUS, ER_NARGS };

static long er_bound(long b, long n) {
  if (b < 0) b += n;
  return b < 0 ? 0 : b > n ? n : b;
}

CN_API void ap_embag_ranges(int64_t *a) {
  long V = a[ER_V], D = a[ER_D], T = a[ER_NIDX], M = *(const int64_t *)a[ER_M];
  const float *table = (const float *)a[ER_TABLE];
  const int64_t *starts = (const int64_t *)a[ER_STARTS], *ends = (const int64_t *)a[ER_ENDS];
  a[ER_STATUS] = 0;
  if (M > a[ER_NSTARTS] || M > a[ER_NENDS]) { a[ER_STATUS] = -1; return; }
  for (long i = 0; i < M; i++) {
    long s = er_bound((long)starts[i], T), e = er_bound((long)ends[i], T);
    if (e < s) e = s;
    float *y = (float *)a[ER_Y] + i * D;
    memset(y, 0, (size_t)D * sizeof(float));
    for (long j = s; j < e; j++) {
      long id = a[ER_I32] ? (long)((const int32_t *)a[ER_IDX])[j] : (long)((const int64_t *)a[ER_IDX])[j];
      if (id < 0) id += V;
      if (id < 0 || id >= V) { a[ER_STATUS] = 1 + i; return; }
      const float *row = table + id * D;
      long d = 0;
      for (; d + CVL <= D; d += CVL) *(cv16 *)(y + d) += *(const cv16 *)(row + d);
      for (; d < D; d++) y[d] += row[d];
    }
    if (a[ER_MEAN]) { /* an empty bag's mean is 0/0, as ReduceMean gives */
      float count = (float)(e - s);
      for (long d = 0; d < D; d++) y[d] /= count;
    }
  }
}
