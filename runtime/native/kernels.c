/* appopt runtime native kernels: a small thread pool and the hot CPU kernels.
 *
 * Built at first use by runtime/native/__init__.py with the system C compiler (-O3 -march=native) and loaded
 * with ctypes. Every kernel takes one pointer to an int64 argument block (see the *_ARGS layouts below), so a
 * call from Python costs one pointer conversion; float parameters are passed as their float32 bit patterns.
 *
 * Layout conventions: activations NHWC (channels contiguous); weights pre-packed at compile time into blocks of
 * NB output channels, zero padded. Vector code uses GCC vector extensions, so it compiles for any target: 16
 * float lanes map to one AVX-512 register (or two AVX2 registers where AVX-512 is absent).
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vec16.h"

#define API __attribute__((visibility("default")))
#define INLINE static inline __attribute__((always_inline))

#define NB 32 /* output channels per weight block: two vectors */
#if defined(__AVX512F__)
#define NOWMAX 12 /* output pixels per strip: NOWMAX x 2 accumulators must fit the register file */
#define NOWMAX16 24 /* pixels per strip of the one-vector (16-channel) kernel */
#include <immintrin.h>
#else
#define NOWMAX 4
#define NOWMAX16 8
#endif

INLINE v16 vload_n(const float *p, int n) {
#if defined(__AVX512F__)
  return (v16)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
#else
  v16 v = {0}; memcpy(&v, p, (size_t)n * sizeof(float)); return v;
#endif
}
INLINE void vstore_n(float *p, v16 v, int n) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), (__m512)v);
#else
  memcpy(p, &v, (size_t)n * sizeof(float));
#endif
}
/* max pooling: a NaN in either operand wins, so a window holding a NaN pools to NaN in every path and tap order */
INLINE v16 vmax_nan(v16 v, v16 acc) { return vblend((vi16)((v < acc) | (acc != acc)), acc, v); }

/* exp(x) of every lane (activations, softmax, erf, tanh). */
INLINE v16 vexp(v16 x) {
  /* exp(x) = 2^k * exp(r), r = x - k ln2 in [-ln2/2, ln2/2]; degree-6 polynomial; ~1 ulp over the float range */
  x = vmin(vmax(x, vsplat(-87.3f)), vsplat(88.7f));
  v16 k = x * 1.44269504088896341f;
  k = (v16)__builtin_convertvector(__builtin_convertvector(k + vblend((vi16)(k < 0.0f), vsplat(-0.5f), vsplat(0.5f)), vi16), v16);
  v16 r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  v16 p = vexp_poly(r);
  vi16 e = (__builtin_convertvector(k, vi16) + 127) << 23;
  return p * (v16)e;
}

/* erf(x) of every lane (activations, GELU). */
INLINE v16 verf(v16 x) {
  /* |x| >= 0.5: Abramowitz & Stegun 7.1.26 with the vector exp (|error| < 1.5e-7, small next to erf there);
   * |x| < 0.5: the Taylor series through x^13 (relative error < 3e-8), so tiny inputs keep full precision. */
  v16 ax = vblend((vi16)(x < 0.0f), -x, x);
  v16 t = 1.0f / (1.0f + 0.3275911f * ax);
  v16 p = vsplat(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  v16 r = 1.0f - p * t * vexp(-ax * ax);
  r = vblend((vi16)(x < 0.0f), -r, r);
  v16 x2 = x * x;
  v16 q = vsplat(-1.0f / 9360.0f);
  q = q * x2 + 1.0f / 1320.0f;
  q = q * x2 - 1.0f / 216.0f;
  q = q * x2 + 1.0f / 42.0f;
  q = q * x2 - 1.0f / 10.0f;
  q = q * x2 + 1.0f / 3.0f;
  v16 small = 1.1283791670955126f * x * (1.0f - q * x2);
  return vblend((vi16)(ax < 0.5f), small, r);
}

/* Activations shared by every epilogue: 0 none, 1 relu, 2 clip(lo, hi), 3 leaky relu (slope lo), 4 silu
 * (x * sigmoid(x)), 5 sigmoid, 6 hard sigmoid (clip(lo * x + hi, 0, 1)), 7 hard swish (x * clip(x / 6 + 0.5, 0, 1)),
 * 8 gelu (0.5 * x * (1 + erf(x / sqrt 2)), as ap_gelu), 9 tanh (2 sigmoid(2x) - 1; an odd series below 0.05, where
 * that difference would cancel). */
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_CLIP = 2, ACT_LEAKY = 3, ACT_SILU = 4, ACT_SIGMOID = 5, ACT_HARDSIGMOID = 6,
       ACT_HARDSWISH = 7, ACT_GELU = 8, ACT_TANH = 9 };
INLINE v16 activate(v16 v, int act, float lo, float hi) {
  if (act == ACT_RELU) return vblend((vi16)(v < 0.0f), vsplat(0.0f), v);
  if (act == ACT_CLIP) return vmin(vmax(v, vsplat(lo)), vsplat(hi));
  if (act == ACT_LEAKY) return vblend((vi16)(v < 0.0f), v * lo, v);
  if (act == ACT_SILU) return v / (1.0f + vexp(-v));
  if (act == ACT_SIGMOID) return 1.0f / (1.0f + vexp(-v));
  if (act == ACT_HARDSIGMOID) return vmin(vmax(v * lo + hi, vsplat(0.0f)), vsplat(1.0f));
  if (act == ACT_HARDSWISH) return v * vmin(vmax(v * (1.0f / 6.0f) + 0.5f, vsplat(0.0f)), vsplat(1.0f));
  if (act == ACT_GELU) return 0.5f * v * (1.0f + verf(v * 0.70710678118654752f));
  if (act == ACT_TANH) {
    v16 big = 2.0f / (1.0f + vexp(-2.0f * v)) - 1.0f, v2 = v * v;
    v16 small = v * (1.0f - v2 * (1.0f / 3.0f - v2 * (2.0f / 15.0f)));
    v16 av = vmax(v, -v);
    return vblend((vi16)(av < 0.05f), small, big);
  }
  return v;
}
/* The same activations over n contiguous floats in place, for kernels compiled from the other sources. */
API void ap_activate_row(float *p, long n, int act, float lo, float hi) {
  long i = 0;
  for (; i + VL <= n; i += VL) vstore(p + i, activate(vload(p + i), act, lo, hi));
  if (i < n) vstore_n(p + i, activate(vload_n(p + i, (int)(n - i)), act, lo, hi), (int)(n - i));
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Thread pool: persistent workers; tasks are claimed one at a time from one atomic ticket, so a worker that the
 * OS deschedules (shared machines) does not hold up the others: the caller takes whatever is left.
 *
 * ticket = job (20 bits) | ntasks (22 bits) | next task (22 bits). A claim is fetch_add(ticket, 1); it is valid
 * when next < ntasks, both read from the same atomic word. A valid claim pins its job (the caller cannot finish
 * the job, and so cannot publish another descriptor, before that task is done), hence the single descriptor
 * (fn, ctx) read after a valid claim always belongs to the claimed job. Workers spin briefly, then sleep. */
typedef void (*task_fn)(const void *ctx, long task);
#define MAX_WORKERS 256
#define T_NEXT_BITS 22
#define T_COUNT_BITS 22
#define T_MASK ((1ull << T_NEXT_BITS) - 1ull)
#define MAX_TASKS ((long)T_MASK - MAX_WORKERS - 2)
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic uint64_t ticket;
  _Atomic long done;
  atomic_int sleepers;
  task_fn fn;
  const void *ctx;
  atomic_int want; /* workers invited to the current job (besides the caller) */
  int nworkers;
  pid_t owner; /* process that started the workers (a forked child starts its own) */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static atomic_int g_threads = 1;
static atomic_int g_hold = 0; /* > 0: a run is in progress, its workers keep spinning between jobs */
static atomic_int g_hot = 0;  /* workers the last run invited (its threads - 1): only they spin, the rest sleep */
static _Atomic int64_t g_release_ns = 0; /* when the last run ended: workers stay hot for GRACE_NS after it */
#define GRACE_NS 3000000L                /* back-to-back runs never find the workers asleep */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000L + ts.tv_nsec;
}
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER; /* one job at a time (callers from several threads) */
static _Thread_local int in_task = 0;
#define SPIN_ROUNDS 4000

INLINE void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
INLINE uint32_t ticket_job(uint64_t t) { return (uint32_t)(t >> (T_NEXT_BITS + T_COUNT_BITS)); }

static void run_tasks(void) {
  for (;;) {
    uint64_t t = atomic_fetch_add(&pool.ticket, 1);
    long next = (long)(t & T_MASK), count = (long)((t >> T_NEXT_BITS) & T_MASK);
    if (next >= count) return;
    task_fn fn = pool.fn;
    const void *ctx = pool.ctx;
    in_task = 1;
    fn(ctx, next);
    in_task = 0;
    atomic_fetch_add(&pool.done, 1);
  }
}

static void *worker_main(void *arg) {
  int id = (int)(intptr_t)arg;
  uint32_t seen = ticket_job(atomic_load(&pool.ticket));
  for (;;) {
    int spins = 0;
    uint32_t job;
    while ((job = ticket_job(atomic_load(&pool.ticket))) == seen) {
      if (++spins < SPIN_ROUNDS) { cpu_relax(); continue; }
      if (id < atomic_load(&g_hot) && (atomic_load(&g_hold) > 0 || now_ns() - atomic_load(&g_release_ns) < GRACE_NS)) {
        /* hot while a run that wants it lasts and shortly after; yield now and then to other processes */
        spins = SPIN_ROUNDS / 2;
        sched_yield();
        continue;
      }
      pthread_mutex_lock(&pool.mu);
      atomic_fetch_add(&pool.sleepers, 1);
      while (ticket_job(atomic_load(&pool.ticket)) == seen && (atomic_load(&g_hold) == 0 || id >= atomic_load(&g_hot)))
        pthread_cond_wait(&pool.cv, &pool.mu);
      atomic_fetch_sub(&pool.sleepers, 1);
      pthread_mutex_unlock(&pool.mu);
      spins = 0;
    }
    seen = job;
    if (id < atomic_load(&pool.want)) run_tasks();
  }
  return NULL;
}

static int ensure_workers(int n) {
  if (n > MAX_WORKERS) n = MAX_WORKERS;
  pid_t me = getpid();
  if (pool.owner == me && pool.nworkers >= n) return pool.nworkers;
  pthread_mutex_lock(&start_mu);
  if (pool.owner != me) { pool.nworkers = 0; pool.owner = me; } /* after fork: the parent's workers are gone */
  while (pool.nworkers < n) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, worker_main, (void *)(intptr_t)pool.nworkers);
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    pool.nworkers++;
  }
  pthread_mutex_unlock(&start_mu);
  return pool.nworkers;
}

/* Run fn(ctx, 0..ntasks-1) on up to g_threads threads (the caller included); returns when all have finished. */
static void parallel_for(long ntasks, task_fn fn, const void *ctx) {
  int threads = atomic_load(&g_threads);
  if (ntasks <= 0) return;
  if (threads <= 1 || ntasks == 1 || ntasks > MAX_TASKS || in_task || pthread_mutex_trylock(&job_mu) != 0) {
    for (long t = 0; t < ntasks; t++) fn(ctx, t);
    return;
  }
  int helpers = threads - 1;
  if (helpers > ntasks - 1) helpers = (int)(ntasks - 1);
  int started = ensure_workers(helpers);
  if (started < helpers) helpers = started;
  pool.fn = fn;
  pool.ctx = ctx;
  atomic_store(&pool.want, helpers);
  atomic_store(&pool.done, 0);
  uint64_t job = (uint64_t)((ticket_job(atomic_load(&pool.ticket)) + 1u) & 0xFFFFFu);
  atomic_store(&pool.ticket, (job << (T_NEXT_BITS + T_COUNT_BITS)) | ((uint64_t)ntasks << T_NEXT_BITS));
  if (atomic_load(&pool.sleepers) > 0) {
    pthread_mutex_lock(&pool.mu);
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
  }
  run_tasks();
  int spins = 0;
  while (atomic_load(&pool.done) < ntasks) {
    if (++spins < 2000) cpu_relax(); else sched_yield();
  }
  pthread_mutex_unlock(&job_mu);
}

/* Work (multiply-adds or elements touched) below which a kernel runs on the caller alone: waking a worker and
 * joining it costs about as much as this much arithmetic. */
#define SERIAL_WORK 65536L

static void parallel_for_work(long ntasks, task_fn fn, const void *ctx, double work) {
  if (work < (double)SERIAL_WORK) {
    for (long t = 0; t < ntasks; t++) fn(ctx, t);
    return;
  }
  parallel_for(ntasks, fn, ctx);
}

/* The pool for kernels compiled from the other sources (attention.c): parallel_for_work under a linkable name. */
void ap_pool_run(long ntasks, task_fn fn, const void *ctx, double work) { parallel_for_work(ntasks, fn, ctx, work); }

API void ap_set_threads(int n) { atomic_store(&g_threads, n < 1 ? 1 : n); }

/* Start a model run on `threads` threads (holding the workers hot); returns the previous thread count, which
 * ap_run_end restores. One call each, so a run pays two foreign calls for its threading. */
API void ap_hold(int on);
API int ap_run_begin(int threads) {
  int previous = atomic_load(&g_threads);
  atomic_store(&g_threads, threads < 1 ? 1 : threads);
  ap_hold(1);
  return previous;
}
API void ap_run_end(int previous) {
  ap_hold(0);
  atomic_store(&g_threads, previous < 1 ? 1 : previous);
}

/* Keep the workers spinning (on > 0) for the duration of a model run, and wake sleeping ones now, so the first
 * parallel operation of the run does not wait for a wake-up; hold(0) lets them sleep again. Nests. */
API void ap_hold(int on) {
  if (on > 0) {
    int helpers = atomic_load(&g_threads) - 1;
    if (helpers > 0) ensure_workers(helpers);
    atomic_store(&g_hot, helpers > 0 ? helpers : 0); /* a 1-thread run leaves workers of earlier runs asleep */
    atomic_fetch_add(&g_hold, 1);
    if (helpers > 0 && atomic_load(&pool.sleepers) > 0) { /* and does not wake them: 20-40 us per run here */
      pthread_mutex_lock(&pool.mu);
      pthread_cond_broadcast(&pool.cv);
      pthread_mutex_unlock(&pool.mu);
    }
  } else if (atomic_load(&g_hold) > 0) {
    atomic_store(&g_release_ns, now_ns());
    atomic_fetch_sub(&g_hold, 1);
  }
}
API int ap_get_threads(void) { return atomic_load(&g_threads); }
API int ap_vector_width(void) { return NOWMAX == 12 ? 16 : 8; }

/* ---------------------------------------------------------------------------------------------------------- */
/* Direct convolution over NHWC input with pre-packed weights, and every GEMM with one pre-packed operand.
 *
 * Output pixel (b0, b1, oh, ow), block j of NB (or 16) output channels of group g:
 *   y = act(alpha * sum_{tap, c} x_tap(pixel)[c] * w[g][j][tap][c][0..NB) + bias + res)
 * In image mode (ap_conv2d) x_tap(pixel) is the input pixel under that tap, or a zero row where the tap falls in
 * the padding (indirect convolution: no im2col, no padded copy). In GEMM mode (ap_conv) it is
 * x + b0*x_b0 + b1*x_b1 + oh*x_row + ow*x_px + toff[tap]: a GEMM A[M,K] @ B[K,N] is ntaps = 1, C = K, OW = M,
 * x_px = row stride of A, with B packed as the weights. Each strip of up to NOWMAX output pixels keeps its
 * accumulators in registers through the whole reduction; the epilogue (bias, residual, activation) runs before
 * the only store. */
enum {
  CV_X, CV_X_B0, CV_X_B1, CV_X_ROW, CV_X_PX, CV_NB0, CV_NB1, CV_OH, CV_OW, CV_NTAPS, CV_TOFF, CV_C, CV_W, CV_W_B0,
  CV_W_B1, CV_G, CV_X_GOFF, CV_MG, CV_NMB, CV_Y, CV_Y_B0, CV_Y_B1, CV_Y_ROW, CV_Y_PX, CV_Y_GOFF, CV_BIAS, CV_RES,
  CV_R_B0, CV_R_B1, CV_R_ROW, CV_R_PX, CV_ACT, CV_LO, CV_HI, CV_ALPHA, CV_CHUNK,
  /* image mode (ap_conv2d): input geometry; taps outside the image read the zero row */
  CV_IH, CV_IW, CV_KH, CV_KW, CV_SH, CV_SW, CV_DIL_H, CV_DIL_W, CV_PT, CV_PL, CV_ZERO,
  /* channel blocks per task (blocks are looped inside a task, sharing its pointer tables) */
  CV_MBT,
  /* output channels per weight block: 32 (two vectors) or 16 (one vector, for layers with <= 16 channels) */
  CV_BW, CV_NARGS
};
#define MAXTAPS 128
#define MERGE_MAX 256 /* longest merged kernel row (KW * C) */
#define MERGE_ROWS 8 /* merged kernels have at most this many rows */
#define MERGE_SCRATCH (NOWMAX16 * MERGE_ROWS * MERGE_MAX)

/* One strip: NOW output pixels, one block of NB output channels. tp[t][p] points at the C input channels that
 * tap t reads for pixel p (a zero row where the tap falls outside the image): indirect convolution, so there is
 * no im2col and no padded copy. The whole reduction (taps x C) stays in registers; then the epilogue and the
 * only store at y + yo[p] (residual at res + ro[p]). */
typedef const float *tap_row[NOWMAX16];

INLINE void conv_strip(const int NOW, const tap_row *tp, int ntaps, int C, const float *w, float *y,
                       const int64_t *yo, const float *res, const int64_t *ro, const float *bias, int act, float lo,
                       float hi, float alpha, int nvalid) {
  v16 a0[NOWMAX], a1[NOWMAX];
#pragma GCC unroll 12
  for (int p = 0; p < NOW; p++) { a0[p] = vsplat(0.0f); a1[p] = vsplat(0.0f); }
  for (int t = 0; t < ntaps; t++) {
    const float *xp[NOWMAX];
#pragma GCC unroll 12
    for (int p = 0; p < NOW; p++) xp[p] = tp[t][p];
    const float *wt = w + (long)t * C * NB;
    for (int c = 0; c < C; c++) {
      v16 w0 = vload(wt + (long)c * NB), w1 = vload(wt + (long)c * NB + VL);
#pragma GCC unroll 12
      for (int p = 0; p < NOW; p++) {
        float xv = xp[p][c];
        a0[p] += xv * w0;
        a1[p] += xv * w1;
      }
    }
  }
  v16 b0 = bias ? vload(bias) : vsplat(0.0f), b1 = bias ? vload(bias + VL) : vsplat(0.0f);
#pragma GCC unroll 12
  for (int p = 0; p < NOW; p++) {
    v16 r0 = a0[p], r1 = a1[p];
    if (alpha != 1.0f) { r0 *= alpha; r1 *= alpha; }
    r0 += b0;
    r1 += b1;
    float *yp = y + yo[p];
    if (nvalid == NB) {
      if (res) { r0 += vload(res + ro[p]); r1 += vload(res + ro[p] + VL); }
      vstore(yp, activate(r0, act, lo, hi));
      vstore(yp + VL, activate(r1, act, lo, hi));
    } else {
      int n0 = nvalid < VL ? nvalid : VL, n1 = nvalid - n0;
      if (res) { r0 += vload_n(res + ro[p], n0); if (n1 > 0) r1 += vload_n(res + ro[p] + VL, n1); }
      vstore_n(yp, activate(r0, act, lo, hi), n0);
      if (n1 > 0) vstore_n(yp + VL, activate(r1, act, lo, hi), n1);
    }
  }
}

#define STRIP_FN(N)                                                                                           \
  static void conv_strip_##N(const tap_row *tp, int ntaps, int C, const float *w, float *y, const int64_t *yo, \
                             const float *res, const int64_t *ro, const float *bias, int act, float lo,        \
                             float hi, float alpha, int nvalid) {                                              \
    conv_strip(N, tp, ntaps, C, w, y, yo, res, ro, bias, act, lo, hi, alpha, nvalid);                          \
  }
typedef void (*strip_fn)(const tap_row *, int, int, const float *, float *, const int64_t *, const float *,
                         const int64_t *, const float *, int, float, float, float, int);
STRIP_FN(1) STRIP_FN(2) STRIP_FN(3) STRIP_FN(4)
#if NOWMAX > 4
STRIP_FN(5) STRIP_FN(6) STRIP_FN(7) STRIP_FN(8) STRIP_FN(9) STRIP_FN(10) STRIP_FN(11) STRIP_FN(12)
static const strip_fn STRIPS[13] = {NULL, conv_strip_1, conv_strip_2, conv_strip_3, conv_strip_4,
                                    conv_strip_5, conv_strip_6, conv_strip_7, conv_strip_8, conv_strip_9,
                                    conv_strip_10, conv_strip_11, conv_strip_12};
#else
static const strip_fn STRIPS[5] = {NULL, conv_strip_1, conv_strip_2, conv_strip_3, conv_strip_4};
#endif

/* The one-vector variant: 16 output channels, up to NOWMAX16 pixels per strip. */
INLINE void conv_strip16(const int NOW, const tap_row *tp, int ntaps, int C, const float *w, float *y,
                         const int64_t *yo, const float *res, const int64_t *ro, const float *bias, int act,
                         float lo, float hi, float alpha, int nvalid) {
  v16 a0[NOWMAX16];
#pragma GCC unroll 24
  for (int p = 0; p < NOW; p++) a0[p] = vsplat(0.0f);
  for (int t = 0; t < ntaps; t++) {
    const float *xp[NOWMAX16];
#pragma GCC unroll 24
    for (int p = 0; p < NOW; p++) xp[p] = tp[t][p];
    const float *wt = w + (long)t * C * VL;
    for (int c = 0; c < C; c++) {
      v16 w0 = vload(wt + (long)c * VL);
#pragma GCC unroll 24
      for (int p = 0; p < NOW; p++) a0[p] += xp[p][c] * w0;
    }
  }
  v16 b0 = bias ? vload(bias) : vsplat(0.0f);
#pragma GCC unroll 24
  for (int p = 0; p < NOW; p++) {
    v16 r0 = a0[p];
    if (alpha != 1.0f) r0 *= alpha;
    r0 += b0;
    float *yp = y + yo[p];
    if (nvalid == VL) {
      if (res) r0 += vload(res + ro[p]);
      vstore(yp, activate(r0, act, lo, hi));
    } else {
      if (res) r0 += vload_n(res + ro[p], nvalid);
      vstore_n(yp, activate(r0, act, lo, hi), nvalid);
    }
  }
}

#define STRIP16_FN(N)                                                                                          \
  static void conv_strip16_##N(const tap_row *tp, int ntaps, int C, const float *w, float *y,                  \
                               const int64_t *yo, const float *res, const int64_t *ro, const float *bias,      \
                               int act, float lo, float hi, float alpha, int nvalid) {                         \
    conv_strip16(N, tp, ntaps, C, w, y, yo, res, ro, bias, act, lo, hi, alpha, nvalid);                        \
  }
STRIP16_FN(1) STRIP16_FN(2) STRIP16_FN(3) STRIP16_FN(4) STRIP16_FN(5) STRIP16_FN(6) STRIP16_FN(7) STRIP16_FN(8)
#if NOWMAX16 > 8
STRIP16_FN(9) STRIP16_FN(10) STRIP16_FN(11) STRIP16_FN(12) STRIP16_FN(13) STRIP16_FN(14) STRIP16_FN(15)
STRIP16_FN(16) STRIP16_FN(17) STRIP16_FN(18) STRIP16_FN(19) STRIP16_FN(20) STRIP16_FN(21) STRIP16_FN(22)
STRIP16_FN(23) STRIP16_FN(24)
static const strip_fn STRIPS16[25] = {
    NULL, conv_strip16_1, conv_strip16_2, conv_strip16_3, conv_strip16_4, conv_strip16_5, conv_strip16_6,
    conv_strip16_7, conv_strip16_8, conv_strip16_9, conv_strip16_10, conv_strip16_11, conv_strip16_12,
    conv_strip16_13, conv_strip16_14, conv_strip16_15, conv_strip16_16, conv_strip16_17, conv_strip16_18,
    conv_strip16_19, conv_strip16_20, conv_strip16_21, conv_strip16_22, conv_strip16_23, conv_strip16_24};
#else
static const strip_fn STRIPS16[9] = {NULL, conv_strip16_1, conv_strip16_2, conv_strip16_3, conv_strip16_4,
                                     conv_strip16_5, conv_strip16_6, conv_strip16_7, conv_strip16_8};
#endif

typedef struct {
  const int64_t *a;
  long npix, nchunks, tasks_per_block;
  int image; /* 1: ap_conv2d geometry; 0: uniform offsets (GEMM / already padded input) */
} conv_ctx;

/* Task = (group, run of channel blocks, b0, b1, chunk of the image's OH*OW output pixels). Strips may span
 * output rows, so small images (7x7) still fill NOWMAX-pixel strips; each strip's pointer table is built once
 * and used for every channel block of the task. */
static void conv_task(const void *vctx, long task) {
  const conv_ctx *cx = (const conv_ctx *)vctx;
  const int64_t *a = cx->a;
  long nb1 = a[CV_NB1], OW = a[CV_OW], chunk = a[CV_CHUNK], npix = cx->npix;
  long nmb = a[CV_NMB], Mg = a[CV_MG], mbt = a[CV_MBT] > 0 ? a[CV_MBT] : 1;
  int bw = a[CV_BW] == VL ? VL : NB, pixmax = bw == VL ? NOWMAX16 : NOWMAX;
  const strip_fn *strips = bw == VL ? STRIPS16 : STRIPS;
  long nruns = (nmb + mbt - 1) / mbt;
  long rest = task % cx->tasks_per_block, blk = task / cx->tasks_per_block;
  long g = blk / nruns, mb0 = blk % nruns * mbt, mb1 = mb0 + mbt < nmb ? mb0 + mbt : nmb;
  long ck = rest % cx->nchunks;
  rest /= cx->nchunks;
  long i1 = rest % nb1, i0 = rest / nb1;
  int ntaps = (int)a[CV_NTAPS], C = (int)a[CV_C];
  const int64_t *toff = (const int64_t *)a[CV_TOFF];
  const float *x = (const float *)a[CV_X] + i0 * a[CV_X_B0] + i1 * a[CV_X_B1] + g * a[CV_X_GOFF];
  const float *w = (const float *)a[CV_W] + i0 * a[CV_W_B0] + i1 * a[CV_W_B1] + g * nmb * (long)ntaps * C * bw;
  float *y = (float *)a[CV_Y] + i0 * a[CV_Y_B0] + i1 * a[CV_Y_B1] + g * a[CV_Y_GOFF];
  const float *res = (const float *)a[CV_RES];
  if (res) res += i0 * a[CV_R_B0] + i1 * a[CV_R_B1] + g * a[CV_Y_GOFF];
  const float *bias = (const float *)a[CV_BIAS];
  if (bias) bias += g * nmb * bw;
  int act = (int)a[CV_ACT];
  float lo = f32(a[CV_LO]), hi = f32(a[CV_HI]), alpha = f32(a[CV_ALPHA]);
  long xrow = a[CV_X_ROW], xpx = a[CV_X_PX], yrow = a[CV_Y_ROW], ypx = a[CV_Y_PX], rrow = a[CV_R_ROW],
       rpx = a[CV_R_PX];
  long H = a[CV_IH], W = a[CV_IW], KH = a[CV_KH], KW = a[CV_KW], sh = a[CV_SH], sw = a[CV_SW], dh = a[CV_DIL_H],
       dw = a[CV_DIL_W], pt = a[CV_PT], pl = a[CV_PL];
  const float *zero = (const float *)a[CV_ZERO];
  long begin = ck * chunk, end = begin + chunk < npix ? begin + chunk : npix;
  long n = end - begin;
  long nstrips = (n + pixmax - 1) / pixmax;
  long base = n / nstrips, extra = n % nstrips;
  int64_t yo[NOWMAX16], ro[NOWMAX16];
  tap_row tp[MAXTAPS];
  /* Row merging: with unit dilation along W, the KW taps of one kernel row read KW*C consecutive floats, so a
   * row is one tap of length KW*C (fewer, longer reductions). Border pixels get their row copied, zero filled,
   * into scratch. Used when rows are short (small C), where per-tap tables would cost more than the math. */
  int merge = cx->image && dw == 1 && xpx == C && KW * C <= MERGE_MAX && KH <= MERGE_ROWS;
  float scratch[MERGE_SCRATCH];
  long oh = begin / OW, ow = begin % OW;
  for (long s = 0; s < nstrips; s++) {
    int now = (int)(base + (s < extra));
    int used = 0;
    for (int p = 0; p < now; p++) {
      yo[p] = oh * yrow + ow * ypx;
      ro[p] = oh * rrow + ow * rpx;
      if (merge) {
        long ih0 = oh * sh - pt, iw0 = ow * sw - pl;
        int inside = iw0 >= 0 && iw0 + KW <= W;
        for (long i = 0; i < KH; i++) {
          long ih = ih0 + i * dh;
          if (ih < 0 || ih >= H) {
            tp[i][p] = zero;
          } else if (inside) {
            tp[i][p] = x + (ih * W + iw0) * xpx;
          } else {
            float *dst = scratch + used;
            used += (int)(KW * C);
            for (long j = 0; j < KW; j++) {
              long iw = iw0 + j;
              if (iw >= 0 && iw < W) memcpy(dst + j * C, x + (ih * W + iw) * xpx, (size_t)C * sizeof(float));
              else memset(dst + j * C, 0, (size_t)C * sizeof(float));
            }
            tp[i][p] = dst;
          }
        }
      } else if (cx->image) {
        long ih0 = oh * sh - pt, iw0 = ow * sw - pl;
        int t = 0;
        for (long i = 0; i < KH; i++) {
          long ih = ih0 + i * dh;
          int row_ok = ih >= 0 && ih < H;
          const float *row = x + ih * W * xpx;
          for (long j = 0; j < KW; j++, t++) {
            long iw = iw0 + j * dw;
            tp[t][p] = row_ok && iw >= 0 && iw < W ? row + iw * xpx : zero;
          }
        }
      } else {
        const float *px = x + oh * xrow + ow * xpx;
        for (int t = 0; t < ntaps; t++) tp[t][p] = px + toff[t];
      }
      if (++ow == OW) { ow = 0; oh++; }
    }
    int taps = merge ? (int)KH : ntaps, len = merge ? (int)(KW * C) : C;
    for (long mb = mb0; mb < mb1; mb++) {
      int nvalid = (int)(Mg - mb * bw < bw ? Mg - mb * bw : bw);
      strips[now](tp, taps, len, w + mb * (long)ntaps * C * bw, y + mb * bw, yo, res ? res + mb * bw : NULL, ro,
                  bias ? bias + mb * bw : NULL, act, lo, hi, alpha, nvalid);
    }
  }
}

static void conv_run(const int64_t *a, int image) {
  conv_ctx cx;
  cx.a = a;
  cx.image = image;
  if (a[CV_CHUNK] <= 0 || a[CV_NTAPS] > MAXTAPS) return;
  long mbt = a[CV_MBT] > 0 ? a[CV_MBT] : 1;
  cx.npix = a[CV_OH] * a[CV_OW];
  cx.nchunks = (cx.npix + a[CV_CHUNK] - 1) / a[CV_CHUNK];
  cx.tasks_per_block = a[CV_NB0] * a[CV_NB1] * cx.nchunks;
  double work = (double)a[CV_G] * a[CV_NMB] * (a[CV_BW] == VL ? VL : NB) * a[CV_NB0] * a[CV_NB1] * cx.npix *
                a[CV_NTAPS] * a[CV_C];
  parallel_for_work(a[CV_G] * ((a[CV_NMB] + mbt - 1) / mbt) * cx.tasks_per_block, conv_task, &cx, work);
}

/* GEMM mode: pixel (oh, ow) reads x + oh*x_row + ow*x_px + toff[t]. */
API void ap_conv(const int64_t *a) { conv_run(a, 0); }
/* Image mode: NHWC image H x W with pixel stride x_px (all channels), image stride x_b0; padding by geometry. */
API void ap_conv2d(const int64_t *a) { conv_run(a, 1); }

/* ---------------------------------------------------------------------------------------------------------- */
/* Pack a row-major-ish matrix B[K][N] (any strides, batched on two levels) into [batch][N/NB][K][NB] panels,
 * zero padding the last panel: the run-time counterpart of weight packing, for products of two activations. */
enum { PB_B, PB_B_B0, PB_B_B1, PB_SK, PB_SN, PB_NB0, PB_NB1, PB_K, PB_N, PB_OUT, PB_NARGS };

static void packb_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long K = a[PB_K], N = a[PB_N], nnb = (N + NB - 1) / NB, nb1 = a[PB_NB1];
  long jb = task % nnb, i = task / nnb, i1 = i % nb1, i0 = i / nb1;
  const float *b = (const float *)a[PB_B] + i0 * a[PB_B_B0] + i1 * a[PB_B_B1] + jb * NB * a[PB_SN];
  float *out = (float *)a[PB_OUT] + (i * nnb + jb) * K * NB;
  long sk = a[PB_SK], sn = a[PB_SN];
  int n = (int)(N - jb * NB < NB ? N - jb * NB : NB);
  for (long k = 0; k < K; k++) {
    float *o = out + k * NB;
    const float *src = b + k * sk;
    if (sn == 1) {
      memcpy(o, src, (size_t)n * sizeof(float));
    } else {
      for (int j = 0; j < n; j++) o[j] = src[j * sn];
    }
    for (int j = n; j < NB; j++) o[j] = 0.0f;
  }
}

API void ap_pack_b(const int64_t *a) {
  long nnb = (a[PB_N] + NB - 1) / NB;
  parallel_for_work(a[PB_NB0] * a[PB_NB1] * nnb, packb_task, a, (double)a[PB_NB0] * a[PB_NB1] * a[PB_K] * a[PB_N]);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Depthwise convolution over NHWC (one filter per channel, channel multiplier 1) with the same epilogue.
 * Weights packed [KH*KW][Cp] (Cp = C rounded up to 16, zero padded), bias padded to Cp. Taps outside the image
 * read a zero row (C floats), so no padded copy is made. */
enum {
  DW_X, DW_H, DW_W, DW_N, DW_OH, DW_OW, DW_KH, DW_KW, DW_SH, DW_SW, DW_DH, DW_DWD, DW_PT, DW_PL, DW_C, DW_W_PTR,
  DW_BIAS, DW_Y, DW_RES, DW_ACT, DW_LO, DW_HI, DW_ZERO, DW_NARGS
};
#define DW_PIX 8 /* interior pixels per strip (dw_strip_full is written for 8) */

/* Border pixels (some tap outside the image): per-pixel tap pointers, a zero row for the outside. */
static void dw_border_pixel(const float *x, long H, long W, long C, long Cp, long ih0, long iw0, long KH, long KW,
                            long dh, long dwd, const float *w, const float *bias, const float *zero, float *yp,
                            const float *rp, int act, float lo, float hi) {
  /* only the taps inside the image (the others read zeros); up to four channel vectors at once, so the FMA
   * chains of a pixel overlap instead of waiting on each other */
  (void)zero;
  long i_lo = ih0 < 0 ? (-ih0 + dh - 1) / dh : 0, i_hi = ih0 <= H - 1 ? (H - 1 - ih0) / dh + 1 : 0;
  long j_lo = iw0 < 0 ? (-iw0 + dwd - 1) / dwd : 0, j_hi = iw0 <= W - 1 ? (W - 1 - iw0) / dwd + 1 : 0;
  if (i_hi > KH) i_hi = KH;
  if (j_hi > KW) j_hi = KW;
  for (long c = 0; c < C; c += 4 * VL) {
    int nk = 0, nv[4];
    v16 acc[4];
    for (; nk < 4 && c + nk * VL < C; nk++) {
      long cc = c + nk * VL;
      nv[nk] = (int)(C - cc < VL ? C - cc : VL);
      acc[nk] = bias ? vload(bias + cc) : vsplat(0.0f);
    }
    for (long i = i_lo; i < i_hi; i++) {
      for (long j = j_lo; j < j_hi; j++) {
        const float *src = x + ((ih0 + i * dh) * W + iw0 + j * dwd) * C + c;
        const float *wt = w + (i * KW + j) * Cp + c;
        for (int k = 0; k < nk; k++) acc[k] += vload_n(src + k * VL, nv[k]) * vload(wt + k * VL);
      }
    }
    for (int k = 0; k < nk; k++) {
      v16 r = acc[k];
      if (rp) r += vload_n(rp + c + k * VL, nv[k]);
      vstore_n(yp + c + k * VL, activate(r, act, lo, hi), nv[k]);
    }
  }
}

/* NP interior pixels (1..DW_PIX) x one vector of nv channels; the accumulators stay in registers. */
INLINE void dw_strip(const int NP, const float *base, long pstride, long rstride, long tstride, long KH, long KW,
                     const float *w, long Cp, const float *bias, float *y, long ystride, const float *res, int act,
                     float lo, float hi, int nv) {
  v16 bv = bias ? vload(bias) : vsplat(0.0f);
  v16 acc[DW_PIX];
#pragma GCC unroll 8
  for (int p = 0; p < NP; p++) acc[p] = bv;
  for (long i = 0; i < KH; i++) {
    const float *row = base + i * rstride;
    for (long j = 0; j < KW; j++) {
      v16 wv = vload(w + (i * KW + j) * Cp);
      const float *src = row + j * tstride;
      if (nv == VL) {
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) acc[p] += vload(src + p * pstride) * wv;
      } else {
#pragma GCC unroll 8
        for (int p = 0; p < NP; p++) acc[p] += vload_n(src + p * pstride, nv) * wv;
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < NP; p++) {
    v16 r = acc[p];
    if (res) r += nv == VL ? vload(res + p * ystride) : vload_n(res + p * ystride, nv);
    r = activate(r, act, lo, hi);
    if (nv == VL) vstore(y + p * ystride, r); else vstore_n(y + p * ystride, r, nv);
  }
}

#define DW_STRIP_FN(N)                                                                                         \
  static void dw_strip_##N(const float *base, long pstride, long rstride, long tstride, long KH, long KW,        \
                           const float *w, long Cp, const float *bias, float *y, long ystride, const float *res, \
                           int act, float lo, float hi, int nv) {                                              \
    dw_strip(N, base, pstride, rstride, tstride, KH, KW, w, Cp, bias, y, ystride, res, act, lo, hi, nv);        \
  }
typedef void (*dw_strip_fn)(const float *, long, long, long, long, long, const float *, long, const float *, float *,
                            long, const float *, int, float, float, int);
DW_STRIP_FN(1) DW_STRIP_FN(2) DW_STRIP_FN(3) DW_STRIP_FN(4) DW_STRIP_FN(5) DW_STRIP_FN(6) DW_STRIP_FN(7)
DW_STRIP_FN(8)
static const dw_strip_fn DW_STRIPS[9] = {NULL, dw_strip_1, dw_strip_2, dw_strip_3, dw_strip_4,
                                         dw_strip_5, dw_strip_6, dw_strip_7, dw_strip_8};

static void dw_row(const int64_t *a, long task) {
  long H = a[DW_H], W = a[DW_W], OH = a[DW_OH], OW = a[DW_OW], C = a[DW_C];
  long KH = a[DW_KH], KW = a[DW_KW], sh = a[DW_SH], sw = a[DW_SW], dh = a[DW_DH], dwd = a[DW_DWD];
  long pt = a[DW_PT], pl = a[DW_PL];
  long oh = task % OH, n = task / OH;
  const float *x = (const float *)a[DW_X] + n * H * W * C;
  float *y = (float *)a[DW_Y] + (n * OH + oh) * OW * C;
  const float *res = (const float *)a[DW_RES];
  if (res) res += (n * OH + oh) * OW * C;
  const float *w = (const float *)a[DW_W_PTR], *bias = (const float *)a[DW_BIAS];
  const float *zero = (const float *)a[DW_ZERO];
  int act = (int)a[DW_ACT];
  float lo = f32(a[DW_LO]), hi = f32(a[DW_HI]);
  long Cp = (C + VL - 1) / VL * VL;
  long ih0 = oh * sh - pt;
  /* interior columns: every tap of the kernel row lands inside the image */
  long ow_lo = (pl + sw - 1) / sw, span = (KW - 1) * dwd;
  long ow_hi = W - 1 - span + pl >= 0 ? (W - 1 - span + pl) / sw + 1 : 0;
  if (ow_lo > OW) ow_lo = OW;
  if (ow_hi > OW) ow_hi = OW;
  if (ow_hi < ow_lo) ow_hi = ow_lo;
  int rows_ok = ih0 >= 0 && ih0 + (KH - 1) * dh < H;
  for (long ow = 0; ow < OW; ow++) {
    if (rows_ok && ow == ow_lo) { ow = ow_hi - 1; continue; } /* interior handled below */
    dw_border_pixel(x, H, W, C, Cp, ih0, ow * sw - pl, KH, KW, dh, dwd, w, bias, zero, y + ow * C,
                    res ? res + ow * C : NULL, act, lo, hi);
  }
  if (!rows_ok || ow_hi <= ow_lo) return;
  long pstride = sw * C;
  for (long ow = ow_lo; ow < ow_hi; ow += DW_PIX) {
    int np = (int)(ow_hi - ow < DW_PIX ? ow_hi - ow : DW_PIX);
    const float *base = x + (ih0 * W + ow * sw - pl) * C;
    for (long c = 0; c < C; c += VL) {
      int nv = (int)(C - c < VL ? C - c : VL);
      const float *res_c = res ? res + ow * C + c : NULL;
      DW_STRIPS[np](base + c, pstride, W * C * dh, dwd * C, KH, KW, w + c, Cp, bias ? bias + c : NULL,
                    y + ow * C + c, C, res_c, act, lo, hi, nv);
    }
  }
}

/* Row kernels run in tasks of several rows, at least ROW_TASK_WORK multiply-adds or taps each: one task per short
 * row (a small image's, or one output row of one NCHW plane) spent more on claiming tickets, and on threads
 * writing neighbouring rows' cache lines, than on the row (two threads ran an NCHW pool slower than one). */
#define ROW_TASK_WORK 16384.0
typedef void (*row_fn)(const int64_t *a, long row);
typedef struct {
  const int64_t *a;
  long rows, per;
  row_fn row;
} rows_ctx;

static void rows_task(const void *vctx, long task) {
  const rows_ctx *cx = (const rows_ctx *)vctx;
  for (long r = task * cx->per; r < cx->rows && r < (task + 1) * cx->per; r++) cx->row(cx->a, r);
}

static void parallel_rows(const int64_t *a, long rows, double row_work, row_fn row) {
  rows_ctx cx = {a, rows, 1, row};
  cx.per = row_work >= ROW_TASK_WORK ? 1 : (long)(ROW_TASK_WORK / (row_work > 1.0 ? row_work : 1.0)) + 1;
  parallel_for_work((rows + cx.per - 1) / cx.per, rows_task, &cx, row_work * rows);
}

API void ap_dwconv(const int64_t *a) {
  parallel_rows(a, a[DW_N] * a[DW_OH], (double)a[DW_OW] * a[DW_C] * a[DW_KH] * a[DW_KW], dw_row);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Windowed pooling over NHWC, unpadded input: taps falling outside the image are skipped (max) or not counted
 * (average without count_include_pad); mode 0 max, 1 average excluding pads, 2 average including pads (the
 * divisor counts taps inside the padded extent, never the ceil-mode overhang). */
enum {
  PL_X, PL_N, PL_H, PL_W, PL_C, PL_OH, PL_OW, PL_KH, PL_KW, PL_SH, PL_SW, PL_DH, PL_DW, PL_PT, PL_PL, PL_PB, PL_PR,
  PL_MODE, PL_Y, PL_NARGS
};

static void pool_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long H = a[PL_H], W = a[PL_W], C = a[PL_C], OH = a[PL_OH], OW = a[PL_OW];
  long KH = a[PL_KH], KW = a[PL_KW], sh = a[PL_SH], sw = a[PL_SW], dh = a[PL_DH], dw = a[PL_DW];
  long pt = a[PL_PT], pl = a[PL_PL], pb = a[PL_PB], pr = a[PL_PR];
  int mode = (int)a[PL_MODE];
  long oh = task % OH, n = task / OH;
  const float *x = (const float *)a[PL_X] + n * H * W * C;
  float *y = (float *)a[PL_Y] + (n * OH + oh) * OW * C;
  for (long ow = 0; ow < OW; ow++) {
    long count = 0, padded_count = 0;
    for (long i = 0; i < KH; i++) {
      long ih = oh * sh - pt + i * dh;
      if (ih < -pt || ih >= H + pb) continue;
      for (long j = 0; j < KW; j++) {
        long iw = ow * sw - pl + j * dw;
        if (iw < -pl || iw >= W + pr) continue;
        padded_count++;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) count++;
      }
    }
    float scale = mode == 1 ? 1.0f / (float)(count ? count : 1) : 1.0f / (float)(padded_count ? padded_count : 1);
    for (long c = 0; c < C; c += VL) {
      int nv = (int)(C - c < VL ? C - c : VL);
      v16 acc = vsplat(mode == 0 ? -INFINITY : 0.0f);
      for (long i = 0; i < KH; i++) {
        long ih = oh * sh - pt + i * dh;
        if (ih < 0 || ih >= H) continue;
        for (long j = 0; j < KW; j++) {
          long iw = ow * sw - pl + j * dw;
          if (iw < 0 || iw >= W) continue;
          v16 v = vload_n(x + (ih * W + iw) * C + c, nv);
          if (mode == 0) acc = vmax_nan(v, acc); else acc += v;
        }
      }
      if (mode != 0) acc *= scale;
      vstore_n(y + ow * C + c, acc, nv);
    }
  }
}

API void ap_pool(const int64_t *a) {
  double work = (double)a[PL_N] * a[PL_OH] * a[PL_OW] * a[PL_C] * a[PL_KH] * a[PL_KW];
  parallel_for_work(a[PL_N] * a[PL_OH], pool_task, a, work);
}

/* Split a row into its `sw` phases: phase p gets row[p], row[p + sw], ... at out + p * plen. Stride 2 (the
 * common downsampling pool) splits 32 floats at a time with two permutes. */
static void split_phases(const float *row, long W, long sw, float *out, long plen) {
  long iw = 0;
#if defined(__AVX512F__)
  if (sw == 2) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (; iw + 2 * VL <= W; iw += 2 * VL) {
      __m512 a = _mm512_loadu_ps(row + iw), b = _mm512_loadu_ps(row + iw + VL);
      _mm512_storeu_ps(out + iw / 2, _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_ps(out + plen + iw / 2, _mm512_permutex2var_ps(a, odd, b));
    }
  }
#endif
  for (long ph = 0; ph < sw; ph++)
    for (long i = iw + ph, k = (iw + ph) / sw; i < W; i += sw, k++) out[ph * plen + k] = row[i];
}

/* The same pooling over NCHW (same argument block, PL_C the channels of each image): one task per output row of
 * one channel plane; the taps of a row are added one at a time along the row, a contiguous (stride 1) or strided
 * read, so single-plane pools (a MaxPool with no convolution around it) need no layout conversion. */
static void pool_nchw_row(const int64_t *a, long task) {
  long H = a[PL_H], W = a[PL_W], OH = a[PL_OH], OW = a[PL_OW];
  long KH = a[PL_KH], KW = a[PL_KW], sh = a[PL_SH], sw = a[PL_SW], dh = a[PL_DH], dw = a[PL_DW];
  long pt = a[PL_PT], pl = a[PL_PL], pb = a[PL_PB], pr = a[PL_PR];
  int mode = (int)a[PL_MODE];
  long oh = task % OH, plane = task / OH;
  const float *x = (const float *)a[PL_X] + plane * H * W;
  float *y = (float *)a[PL_Y] + (plane * OH + oh) * OW;
  long hcount = 0, hpadded = 0;
  enum { PHASE_FLOATS = 4096 };
  float phases[PHASE_FLOATS];
  long plen = (W + sw - 1) / sw;
  int phased = sw > 1 && sw * plen <= PHASE_FLOATS && KW > 1;
  for (long ow = 0; ow < OW; ow++) y[ow] = mode == 0 ? -INFINITY : 0.0f;
  for (long i = 0; i < KH; i++) {
    long ih = oh * sh - pt + i * dh;
    if (ih >= -pt && ih < H + pb) hpadded++;
    if (ih < 0 || ih >= H) continue;
    hcount++;
    const float *row = x + ih * W;
    if (phased) split_phases(row, W, sw, phases, plen);
    for (long j = 0; j < KW; j++) {
      long off = j * dw - pl; /* input column of output column ow: ow * sw + off */
      long lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
      if (W - 1 - off < 0) continue;
      long hi = (W - 1 - off) / sw;
      if (hi > OW - 1) hi = OW - 1;
      if (sw == 1 || phased) {
        /* input column ow * sw + off = sw * (ow + q) + ph: phase ph of the row, shifted by q, read contiguously */
        long q = off >= 0 ? off / sw : -((-off + sw - 1) / sw), ph = off - q * sw;
        const float *r = (sw == 1 ? row : phases + ph * plen) + q;
        for (long ow = lo; ow <= hi; ow += VL) {
          int nv = (int)(hi + 1 - ow < VL ? hi + 1 - ow : VL);
          v16 v = vload_n(r + ow, nv), acc = vload_n(y + ow, nv);
          vstore_n(y + ow, mode == 0 ? vmax_nan(v, acc) : (v16)(acc + v), nv);
        }
      } else {
        for (long ow = lo; ow <= hi; ow++) {
          float v = row[ow * sw + off];
          if (mode == 0) y[ow] = v > y[ow] || v != v ? v : y[ow]; else y[ow] += v;
        }
      }
    }
  }
  if (mode == 0) return;
  for (long ow = 0; ow < OW; ow++) {
    long wcount = 0, wpadded = 0;
    for (long j = 0; j < KW; j++) {
      long iw = ow * sw - pl + j * dw;
      if (iw >= -pl && iw < W + pr) wpadded++;
      if (iw >= 0 && iw < W) wcount++;
    }
    long count = mode == 1 ? hcount * wcount : hpadded * wpadded;
    y[ow] *= 1.0f / (float)(count ? count : 1);
  }
}

API void ap_pool_nchw(const int64_t *a) {
  parallel_rows(a, a[PL_N] * a[PL_C] * a[PL_OH], (double)a[PL_OW] * a[PL_KH] * a[PL_KW], pool_nchw_row);
}

/* Local response normalisation across the channels of NCHW [N][C][HW]: y = x * (bias + alpha/size * sum of x^2
 * over the channel window)^-beta. One task per image and strip of LRN_STRIP pixels, vectorised across pixels; each
 * window is summed afresh (size loads per output: exact, where a running sum would cancel). beta 0.75 (AlexNet's,
 * GoogLeNet's), 0.5 and 1 use square roots and a division; any other beta powf per element. */
enum { LR_X, LR_Y, LR_N, LR_C, LR_HW, LR_SIZE, LR_ALPHA, LR_BETA, LR_BIAS, LR_NARGS };
#define LRN_STRIP 512

INLINE v16 lrn_scale(v16 t, float beta, int nv) {
  if (beta == 0.75f) { v16 r = t; for (int l = 0; l < nv; l++) r[l] = sqrtf(t[l] * sqrtf(t[l])); return 1.0f / r; }
  if (beta == 0.5f) { v16 r = t; for (int l = 0; l < nv; l++) r[l] = sqrtf(t[l]); return 1.0f / r; }
  if (beta == 1.0f) return 1.0f / t;
  v16 r = t;
  for (int l = 0; l < nv; l++) r[l] = powf(t[l], -beta);
  return r;
}

static void lrn_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long C = a[LR_C], HW = a[LR_HW], size = a[LR_SIZE];
  long strips = (HW + LRN_STRIP - 1) / LRN_STRIP, n = task / strips, p0 = (task % strips) * LRN_STRIP;
  long p1 = p0 + LRN_STRIP < HW ? p0 + LRN_STRIP : HW;
  float scale = f32(a[LR_ALPHA]) / (float)size, beta = f32(a[LR_BETA]), bias = f32(a[LR_BIAS]);
  long before = (size - 1) / 2, after = size - 1 - before;
  const float *x = (const float *)a[LR_X] + n * C * HW;
  float *y = (float *)a[LR_Y] + n * C * HW;
  for (long c = 0; c < C; c++) {
    long lo = c - before < 0 ? 0 : c - before, hi = c + after >= C ? C - 1 : c + after;
    for (long p = p0; p < p1; p += VL) {
      int nv = (int)(p1 - p < VL ? p1 - p : VL);
      v16 acc = vsplat(0.0f);
      for (long k = lo; k <= hi; k++) { v16 v = vload_n(x + k * HW + p, nv); acc += v * v; }
      v16 t = bias + scale * acc;
      vstore_n(y + c * HW + p, vload_n(x + c * HW + p, nv) * lrn_scale(t, beta, nv), nv);
    }
  }
}

API void ap_lrn(const int64_t *a) {
  long strips = (a[LR_HW] + LRN_STRIP - 1) / LRN_STRIP;
  parallel_for_work(a[LR_N] * strips, lrn_task, a, (double)a[LR_N] * a[LR_C] * a[LR_HW] * a[LR_SIZE]);
}

/* Global average pool NHWC [N][HW][C] -> [N][C]. */
enum { GP_X, GP_N, GP_HW, GP_C, GP_Y, GP_NARGS };

static void gap_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long HW = a[GP_HW], C = a[GP_C];
  long nchunk = (C + 63) / 64, n = task / nchunk, c0 = task % nchunk * 64;
  const float *x = (const float *)a[GP_X] + n * HW * C;
  float *y = (float *)a[GP_Y] + n * C;
  float scale = 1.0f / (float)HW;
  for (long c = c0; c < C && c < c0 + 64; c += VL) {
    int nv = (int)(C - c < VL ? C - c : VL);
    v16 acc = vsplat(0.0f);
    for (long p = 0; p < HW; p++) acc += vload_n(x + p * C + c, nv);
    vstore_n(y + c, acc * scale, nv);
  }
}

API void ap_gap(const int64_t *a) {
  parallel_for_work(a[GP_N] * ((a[GP_C] + 63) / 64), gap_task, a, (double)a[GP_N] * a[GP_HW] * a[GP_C]);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Layout transposes [N][R][C] -> [N][C][R] (NCHW <-> NHWC with HW flattened): 16x16 tiles transposed in
 * registers (four butterfly stages of shuffles, each swapping one row-index bit with one column-index bit); a
 * side shorter than 16 is walked whole while tasks split the long side. */
enum { TR_X, TR_N, TR_ROWS, TR_COLS, TR_Y, TR_NARGS };
#define TR_BAND 64 /* rows of tiles per task */
#define TR_CHUNK 2048

#define TR_S1A 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define TR_S1B 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#define TR_S2A 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define TR_S2B 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define TR_S4A 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define TR_S4B 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define TR_S8A 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define TR_S8B 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define TR_STAGE(S, A, B)                                                                    \
  for (int i = 0; i < 16; i++) {                                                             \
    if (i & S) continue;                                                                     \
    v16 p = v[i], q = v[i + S];                                                              \
    v[i] = __builtin_shufflevector(p, q, A);                                                 \
    v[i + S] = __builtin_shufflevector(p, q, B);                                             \
  }

INLINE void transpose16(const float *x, long ldx, float *y, long ldy) {
  v16 v[16];
  for (int i = 0; i < 16; i++) v[i] = vload(x + i * ldx);
  TR_STAGE(1, TR_S1A, TR_S1B)
  TR_STAGE(2, TR_S2A, TR_S2B)
  TR_STAGE(4, TR_S4A, TR_S4B)
  TR_STAGE(8, TR_S8A, TR_S8B)
  for (int i = 0; i < 16; i++) vstore(y + i * ldy, v[i]);
}

static void transpose_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long R = a[TR_ROWS], Cc = a[TR_COLS];
  if (R < 16 || Cc < 16) {
    long longest = R > Cc ? R : Cc, nchunks = (longest + TR_CHUNK - 1) / TR_CHUNK;
    long n = task / nchunks, k0 = task % nchunks * TR_CHUNK, k1 = k0 + TR_CHUNK < longest ? k0 + TR_CHUNK : longest;
    const float *x = (const float *)a[TR_X] + n * R * Cc;
    float *y = (float *)a[TR_Y] + n * R * Cc;
    if (R <= Cc) {
      for (long c = k0; c < k1; c++)
        for (long r = 0; r < R; r++) y[c * R + r] = x[r * Cc + c];
    } else {
      for (long r = k0; r < k1; r++)
        for (long c = 0; c < Cc; c++) y[c * R + r] = x[r * Cc + c];
    }
    return;
  }
  long nbands = (R + TR_BAND - 1) / TR_BAND;
  long n = task / nbands, r0 = task % nbands * TR_BAND, r1 = r0 + TR_BAND < R ? r0 + TR_BAND : R;
  const float *x = (const float *)a[TR_X] + n * R * Cc;
  float *y = (float *)a[TR_Y] + n * R * Cc;
  long rfull = r0 + (r1 - r0) / 16 * 16, cfull = Cc / 16 * 16;
  for (long r = r0; r < rfull; r += 16)
    for (long c = 0; c < cfull; c += 16) transpose16(x + r * Cc + c, Cc, y + c * R + r, R);
  for (long r = r0; r < r1; r++) /* ragged edges */
    for (long c = (r < rfull ? cfull : 0); c < Cc; c++) y[c * R + r] = x[r * Cc + c];
}

/* y[n][c][r] = x[n][r][c] for x of shape [N][ROWS][COLS]. */
API void ap_transpose(const int64_t *a) {
  long R = a[TR_ROWS], Cc = a[TR_COLS];
  double work = (double)a[TR_N] * R * Cc;
  if (R < 16 || Cc < 16) {
    long longest = R > Cc ? R : Cc;
    parallel_for_work(a[TR_N] * ((longest + TR_CHUNK - 1) / TR_CHUNK), transpose_task, a, work);
  } else {
    parallel_for_work(a[TR_N] * ((R + TR_BAND - 1) / TR_BAND), transpose_task, a, work);
  }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Row-wise kernels over contiguous [rows][n]: softmax, layer normalisation, and elementwise GELU. */

enum { RW_X, RW_Y, RW_ROWS, RW_N, RW_GAMMA, RW_BETA, RW_EPS, RW_NARGS };

static void softmax_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long n = a[RW_N], rows = a[RW_ROWS], per = (rows + 63) / 64;
  for (long r = task * per; r < rows && r < (task + 1) * per; r++) {
    const float *x = (const float *)a[RW_X] + r * n;
    float *y = (float *)a[RW_Y] + r * n;
    v16 m = vsplat(-INFINITY);
    long i = 0;
    for (; i + VL <= n; i += VL) m = vmax(vload(x + i), m);
    float mx = -INFINITY;
    for (int l = 0; l < VL; l++) mx = m[l] > mx ? m[l] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    v16 s = vsplat(0.0f);
    for (i = 0; i + VL <= n; i += VL) { v16 e = vexp(vload(x + i) - mx); vstore(y + i, e); s += e; }
    float sum = 0.0f;
    for (int l = 0; l < VL; l++) sum += s[l];
    for (; i < n; i++) { float e = expf(x[i] - mx); y[i] = e; sum += e; }
    /* probabilities below FLT_MIN (masked scores: vexp clamps at -87.3) become 0, not denormals that slow every
     * multiply-add meeting them downstream (attention's P @ V) by ~100x */
    float inv = 1.0f / sum;
    for (i = 0; i + VL <= n; i += VL) {
      v16 p = vload(y + i) * inv;
      vstore(y + i, vblend((vi16)(p < 1.17549435e-38f), vsplat(0.0f), p));
    }
    for (; i < n; i++) y[i] = y[i] * inv < 1.17549435e-38f ? 0.0f : y[i] * inv;
  }
}

API void ap_softmax(const int64_t *a) {
  parallel_for_work(a[RW_ROWS] < 64 ? a[RW_ROWS] : 64, softmax_task, a, 8.0 * a[RW_ROWS] * a[RW_N]);
}

static void layernorm_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long n = a[RW_N], rows = a[RW_ROWS], per = (rows + 63) / 64;
  const float *gamma = (const float *)a[RW_GAMMA], *beta = (const float *)a[RW_BETA];
  float eps = f32(a[RW_EPS]);
  for (long r = task * per; r < rows && r < (task + 1) * per; r++) {
    const float *x = (const float *)a[RW_X] + r * n;
    float *y = (float *)a[RW_Y] + r * n;
    v16 s = vsplat(0.0f);
    long i = 0;
    for (; i + VL <= n; i += VL) s += vload(x + i);
    float sum = 0.0f;
    for (int l = 0; l < VL; l++) sum += s[l];
    for (; i < n; i++) sum += x[i];
    float mean = sum / (float)n;
    v16 q = vsplat(0.0f);
    for (i = 0; i + VL <= n; i += VL) { v16 d = vload(x + i) - mean; q += d * d; }
    float sq = 0.0f;
    for (int l = 0; l < VL; l++) sq += q[l];
    for (; i < n; i++) { float d = x[i] - mean; sq += d * d; }
    float inv = 1.0f / sqrtf(sq / (float)n + eps);
    for (i = 0; i + VL <= n; i += VL) {
      v16 v = (vload(x + i) - mean) * inv * vload(gamma + i);
      if (beta) v += vload(beta + i);
      vstore(y + i, v);
    }
    for (; i < n; i++) y[i] = (x[i] - mean) * inv * gamma[i] + (beta ? beta[i] : 0.0f);
  }
}

API void ap_layernorm(const int64_t *a) {
  parallel_for_work(a[RW_ROWS] < 64 ? a[RW_ROWS] : 64, layernorm_task, a, 4.0 * a[RW_ROWS] * a[RW_N]);
}

INLINE v16 vtanh(v16 v) {
  /* |x| >= 0.3: (1 - e) / (1 + e) with e = exp(-2|x|); |x| < 0.3: odd Taylor series through x^13 */
  v16 ax = vblend((vi16)(v < 0.0f), -v, v);
  v16 e = vexp(-2.0f * ax);
  v16 t = (1.0f - e) / (1.0f + e);
  t = vblend((vi16)(v < 0.0f), -t, t);
  v16 x2 = v * v;
  v16 q = vsplat(21844.0f / 6081075.0f);
  q = q * x2 - 1382.0f / 155925.0f;
  q = q * x2 + 62.0f / 2835.0f;
  q = q * x2 - 17.0f / 315.0f;
  q = q * x2 + 2.0f / 15.0f;
  q = q * x2 - 1.0f / 3.0f;
  v16 small = v + v * x2 * q;
  return vblend((vi16)(ax < 0.3f), small, t);
}

/* log(1 + t) for t in [0, 1] (softplus): log u of u = 1 + t in [1, 2] by Cephes' logf polynomial about 1 (u above
 * sqrt 2 halved first, adding ln 2), times t / (u - 1), the rounding of 1 + t undone (Goldberg), so that tiny t keep
 * their value instead of rounding to log 1 = 0. */
INLINE v16 vlog1p_unit(v16 t) {
  v16 u = 1.0f + t;
  vi16 high = (vi16)(u > 1.41421356f);
  v16 m = vblend(high, u * 0.5f, u), e = vblend(high, vsplat(1.0f), vsplat(0.0f));
  v16 f = m - 1.0f, z = f * f;
  v16 y = vsplat(7.0376836292e-2f);
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z + e * -2.12194440e-4f - 0.5f * z;
  v16 logu = f + y + e * 0.693359375f, d = u - 1.0f;
  return vblend((vi16)(d == 0.0f), t, logu * (t / vblend((vi16)(d == 0.0f), vsplat(1.0f), d)));
}
/* softplus(x) = log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), never overflowing; a NaN stays NaN, and below
 * -87.3, where e^x is under FLT_MIN (vexp clamps there), the result is 0 rather than a denormal. */
INLINE v16 vsoftplus(v16 v) {
  v16 ax = vblend((vi16)(v < 0.0f), -v, v);
  v16 r = vmax(v, vsplat(0.0f)) + vlog1p_unit(vexp(-ax));
  return vblend((vi16)(v < -87.3f), vsplat(0.0f), r);
}

/* y = 0.5 * x * (1 + erf(x / sqrt(2))) over n contiguous floats. */
enum { GL_X, GL_Y, GL_N, GL_NARGS };
#define GL_CHUNK 4096
static void gelu_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long n = a[GL_N], i0 = task * GL_CHUNK, i1 = i0 + GL_CHUNK < n ? i0 + GL_CHUNK : n;
  const float *x = (const float *)a[GL_X];
  float *y = (float *)a[GL_Y];
  for (long i = i0; i < i1; i += VL) {
    int nv = (int)(i1 - i < VL ? i1 - i : VL);
    v16 v = vload_n(x + i, nv);
    v16 r = 0.5f * v * (1.0f + verf(v * 0.70710678118654752f));
    vstore_n(y + i, r, nv);
  }
}

API void ap_gelu(const int64_t *a) {
  parallel_for_work((a[GL_N] + GL_CHUNK - 1) / GL_CHUNK, gelu_task, a, 16.0 * a[GL_N]);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Elementwise chain: a program over one float32 tensor, evaluated in L1-sized chunks so the intermediate values
 * never go to memory. Each step updates an accumulator chunk. Operands of binary steps are scalars, tensors of the
 * output's size, vectors broadcast along the last axis (length `inner`), the accumulator itself (x * x), or one of
 * EW_REGS saved chunks; SAVE copies the accumulator to a register and LOAD replaces it by an operand, so a tree of
 * elementwise ops over the input (a tanh GELU's three reads of x) runs as one program. POW takes a scalar exponent.
 * Step = (op, operand kind, operand index, swapped). */
enum { EW_X, EW_Y, EW_N, EW_INNER, EW_NSTEPS, EW_STEPS, EW_OPERANDS, EW_SCALARS, EW_NARGS };
enum { EO_ADD, EO_SUB, EO_MUL, EO_DIV, EO_MAX, EO_MIN, EO_RELU, EO_NEG, EO_ABS, EO_EXP, EO_ERF, EO_SIGMOID,
       EO_TANH, EO_SQRT, EO_RECIP, EO_CLIP, EO_LEAKY_RELU, EO_POW, EO_SAVE, EO_LOAD, EO_SOFTPLUS, EO_MISH };
enum { EK_NONE, EK_SCALAR, EK_FULL, EK_INNER, EK_SELF, EK_REG };
#define EW_CHUNK 1024
enum { EW_REGS = 4 }; /* registers of a chain (CHAIN_REGISTERS in kernels/fused.py) */

/* One binary step over buf[0..m): the operand kind and order are fixed for the whole loop. */
#define EW_BINARY_LOOP(EXPR)                                                                 \
  do {                                                                                       \
    if (kind == EK_SCALAR) {                                                                 \
      v16 b = vsplat(sc);                                                                    \
      for (long i = 0; i < m; i += VL) {                                                     \
        v16 v = vload(buf + i), l = swap ? b : v, r = swap ? v : b;                          \
        vstore(buf + i, EXPR);                                                               \
      }                                                                                      \
    } else if (kind == EK_FULL) {                                                            \
      for (long i = 0; i < m; i += VL) {                                                     \
        int nv = (int)(m - i < VL ? m - i : VL);                                             \
        v16 v = vload(buf + i), b = vload_n(src + i0 + i, nv), l = swap ? b : v, r = swap ? v : b; \
        vstore(buf + i, EXPR);                                                               \
      }                                                                                      \
    } else if (kind == EK_SELF || kind == EK_REG) {                                          \
      const float *rb = kind == EK_SELF ? buf : regs[idx];                                   \
      for (long i = 0; i < m; i += VL) {                                                     \
        v16 v = vload(buf + i), b = vload(rb + i), l = swap ? b : v, r = swap ? v : b;       \
        vstore(buf + i, EXPR);                                                               \
      }                                                                                      \
    } else {                                                                                 \
      long pos = i0 % inner;                                                                 \
      for (long i = 0; i < m; i += VL) {                                                     \
        int nv = (int)(m - i < VL ? m - i : VL);                                             \
        v16 b;                                                                               \
        if (pos + nv <= inner) {                                                             \
          b = vload_n(src + pos, nv);                                                        \
        } else {                                                                             \
          float tmp[VL];                                                                     \
          long q = pos;                                                                      \
          for (int k = 0; k < nv; k++) { tmp[k] = src[q]; if (++q == inner) q = 0; }         \
          b = vload_n(tmp, nv);                                                              \
        }                                                                                    \
        v16 v = vload(buf + i), l = swap ? b : v, r = swap ? v : b;                          \
        vstore(buf + i, EXPR);                                                               \
        pos += nv;                                                                           \
        while (pos >= inner) pos -= inner;                                                   \
      }                                                                                      \
    }                                                                                        \
  } while (0)

#define EW_UNARY_LOOP(EXPR)                                                                  \
  do {                                                                                       \
    for (long i = 0; i < m; i += VL) {                                                       \
      v16 v = vload(buf + i);                                                                \
      vstore(buf + i, EXPR);                                                                 \
    }                                                                                        \
  } while (0)

static void ew_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long n = a[EW_N], inner = a[EW_INNER] > 0 ? a[EW_INNER] : 1;
  long i0 = task * EW_CHUNK, i1 = i0 + EW_CHUNK < n ? i0 + EW_CHUNK : n;
  const int64_t *steps = (const int64_t *)a[EW_STEPS];
  const int64_t *ops = (const int64_t *)a[EW_OPERANDS];
  const float *scalars = (const float *)a[EW_SCALARS];
  int nsteps = (int)a[EW_NSTEPS];
  const float *x = (const float *)a[EW_X];
  float *y = (float *)a[EW_Y];
  float buf[EW_CHUNK + VL];
  float regs[EW_REGS][EW_CHUNK + VL];
  long m = i1 - i0;
  memcpy(buf, x + i0, (size_t)m * sizeof(float));
  memset(buf + m, 0, sizeof(float) * VL);
  for (int s = 0; s < nsteps; s++) {
    int op = (int)steps[4 * s], kind = (int)steps[4 * s + 1], idx = (int)steps[4 * s + 2], swap = (int)steps[4 * s + 3];
    const float *src = kind == EK_FULL || kind == EK_INNER ? (const float *)ops[idx] : NULL;
    float sc = kind == EK_SCALAR ? scalars[idx] : 0.0f;
    if ((kind == EK_REG || op == EO_SAVE) && (idx < 0 || idx >= EW_REGS)) continue; /* checked by the caller */
    switch (op) {
      case EO_ADD: EW_BINARY_LOOP(l + r); break;
      case EO_SUB: EW_BINARY_LOOP(l - r); break;
      case EO_MUL: EW_BINARY_LOOP(l * r); break;
      case EO_DIV: EW_BINARY_LOOP(l / r); break;
      case EO_MAX: EW_BINARY_LOOP(vmax(vmax(l, r), r)); break;
      case EO_MIN: EW_BINARY_LOOP(vmin(vmin(l, r), r)); break;
      case EO_RELU: EW_UNARY_LOOP(vblend((vi16)(v < 0.0f), vsplat(0.0f), v)); break;
      case EO_NEG: EW_UNARY_LOOP(-v); break;
      case EO_ABS: EW_UNARY_LOOP(vblend((vi16)(v < 0.0f), -v, v)); break;
      case EO_EXP: EW_UNARY_LOOP(vexp(v)); break;
      case EO_ERF: EW_UNARY_LOOP(verf(v)); break;
      case EO_SIGMOID: EW_UNARY_LOOP(1.0f / (1.0f + vexp(-v))); break;
      case EO_TANH: EW_UNARY_LOOP(vtanh(v)); break;
      case EO_SQRT:
        for (long i = 0; i < m; i++) buf[i] = sqrtf(buf[i]);
        break;
      case EO_RECIP: EW_UNARY_LOOP(1.0f / v); break;
      case EO_CLIP: {
        v16 lo = vsplat(scalars[idx]), hi = vsplat(scalars[idx + 1]);
        EW_UNARY_LOOP(vmin(vmax(v, lo), hi));
        break;
      }
      case EO_LEAKY_RELU: {
        v16 alpha = vsplat(scalars[idx]);
        EW_UNARY_LOOP(vblend((vi16)(v < 0.0f), v * alpha, v));
        break;
      }
      case EO_POW: /* x ** scalar: products for the small integer powers exporters write, powf otherwise */
        if (sc == 2.0f) {
          EW_UNARY_LOOP(v * v);
        } else if (sc == 3.0f) {
          EW_UNARY_LOOP(v * v * v);
        } else if (sc != 1.0f) {
          for (long i = 0; i < m; i++) buf[i] = powf(buf[i], sc);
        }
        break;
      case EO_SOFTPLUS: EW_UNARY_LOOP(vsoftplus(v)); break;
      case EO_MISH: EW_UNARY_LOOP(v * vtanh(vsoftplus(v))); break;
      case EO_SAVE: memcpy(regs[idx], buf, sizeof(float) * (size_t)(m + VL)); break;
      case EO_LOAD: EW_BINARY_LOOP(r); break;
    }
  }
  memcpy(y + i0, buf, (size_t)m * sizeof(float));
}

API void ap_ew(const int64_t *a) {
  parallel_for_work((a[EW_N] + EW_CHUNK - 1) / EW_CHUNK, ew_task, a, 2.0 * a[EW_N] * (a[EW_NSTEPS] + 1));
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Channel shuffle over NHWC pixels: y[p][j * g + i] = x[p][i * cg + j] (ShuffleNet), C = g * cg. */
enum { CS_X, CS_Y, CS_PIXELS, CS_G, CS_CG, CS_NARGS };
#define CS_CHUNK 256

static void shuffle_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  long pixels = a[CS_PIXELS], g = a[CS_G], cg = a[CS_CG], C = g * cg;
  long p0 = task * CS_CHUNK, p1 = p0 + CS_CHUNK < pixels ? p0 + CS_CHUNK : pixels;
  const float *x = (const float *)a[CS_X];
  float *y = (float *)a[CS_Y];
  for (long p = p0; p < p1; p++) {
    const float *xp = x + p * C;
    float *yp = y + p * C;
    for (long i = 0; i < g; i++)
      for (long j = 0; j < cg; j++) yp[j * g + i] = xp[i * cg + j];
  }
}

API void ap_channel_shuffle(const int64_t *a) {
  long pixels = a[CS_PIXELS];
  parallel_for_work((pixels + CS_CHUNK - 1) / CS_CHUNK, shuffle_task, a, (double)pixels * a[CS_G] * a[CS_CG]);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Depthwise convolution feeding a 1x1 convolution (MobileNet's dw -> pw), fused: for each strip of output
 * pixels of one row, the depthwise results (all channels) go to a stack buffer and the pointwise strip kernel
 * reads them from there, so the depthwise output never travels to memory. */
enum {
  DP_X, DP_N, DP_H, DP_W, DP_C, DP_OH, DP_OW, DP_KH, DP_KW, DP_SH, DP_SW, DP_DH, DP_DWD, DP_PT, DP_PL, DP_WDW,
  DP_BDW, DP_DACT, DP_DLO, DP_DHI, DP_ZERO, DP_WPW, DP_BPW, DP_M, DP_NMB, DP_BW, DP_Y, DP_RES, DP_ACT, DP_LO, DP_HI,
  DP_NARGS
};
#define DP_MAXC 2048 /* widest depthwise layer fused (the buffer is NOWMAX16 x DP_MAXC floats) */

typedef struct {
  const int64_t *a;
  long rows, per;
} dp_ctx;

/* Rows r0..r1-1 of the flattened N*OH output rows: the task's pixels are taken in order, across row ends, in
 * strips of up to NOWMAX (NOWMAX16) pixels, so each pointwise weight block loaded serves a full strip even when
 * rows are short (7x7 and 25x5 maps): the depthwise result of a strip's pixels goes to buf, then the pointwise
 * GEMM strips read it. */
static void dwpw_rows(const int64_t *a, long r0, long r1) {
  long H = a[DP_H], W = a[DP_W], C = a[DP_C], OH = a[DP_OH], OW = a[DP_OW], KH = a[DP_KH], KW = a[DP_KW];
  long sh = a[DP_SH], sw = a[DP_SW], dh = a[DP_DH], dwd = a[DP_DWD], pt = a[DP_PT], pl = a[DP_PL];
  long M = a[DP_M], nmb = a[DP_NMB];
  int bw = a[DP_BW] == VL ? VL : NB, pixmax = bw == VL ? NOWMAX16 : NOWMAX;
  const strip_fn *strips = bw == VL ? STRIPS16 : STRIPS;
  const float *wdw = (const float *)a[DP_WDW], *bdw = (const float *)a[DP_BDW], *zero = (const float *)a[DP_ZERO];
  const float *wpw = (const float *)a[DP_WPW], *bpw = (const float *)a[DP_BPW], *res = (const float *)a[DP_RES];
  float *y = (float *)a[DP_Y];
  int dact = (int)a[DP_DACT], act = (int)a[DP_ACT];
  float dlo = f32(a[DP_DLO]), dhi = f32(a[DP_DHI]), lo = f32(a[DP_LO]), hi = f32(a[DP_HI]);
  long Cp = (C + VL - 1) / VL * VL;
  long ow_lo = (pl + sw - 1) / sw, span = (KW - 1) * dwd;
  long ow_hi = W - 1 - span + pl >= 0 ? (W - 1 - span + pl) / sw + 1 : 0;
  if (ow_lo > OW) ow_lo = OW;
  if (ow_hi > OW) ow_hi = OW;
  if (ow_hi < ow_lo) ow_hi = ow_lo;
  float buf[NOWMAX16 * DP_MAXC];
  long total = (r1 - r0) * OW;
  long nstrips = (total + pixmax - 1) / pixmax, base_n = total / nstrips, extra = total % nstrips;
  long r = r0, ow = 0; /* the next pixel: row r (image r / OH, output row r % OH), column ow */
  int64_t yo[NOWMAX16], ro[NOWMAX16];
  tap_row tp[1];
  for (long s = 0; s < nstrips; s++) {
    int now = (int)(base_n + (s < extra));
    /* depthwise for the strip's pixels into buf[p][c] */
    int p = 0;
    while (p < now) {
      long oh = r % OH, ih0 = oh * sh - pt;
      const float *x = (const float *)a[DP_X] + (r / OH) * H * W * C;
      int rows_ok = ih0 >= 0 && ih0 + (KH - 1) * dh < H;
      int np = 1;
      if (rows_ok && ow >= ow_lo && ow < ow_hi) {
        np = (int)(ow_hi - ow < DW_PIX ? ow_hi - ow : DW_PIX);
        if (np > now - p) np = now - p;
        const float *base = x + (ih0 * W + ow * sw - pl) * C;
        for (long c = 0; c < C; c += VL) {
          int nv = (int)(C - c < VL ? C - c : VL);
          DW_STRIPS[np](base + c, sw * C, W * C * dh, dwd * C, KH, KW, wdw + c, Cp, bdw ? bdw + c : NULL,
                        buf + p * C + c, C, NULL, dact, dlo, dhi, nv);
        }
      } else {
        dw_border_pixel(x, H, W, C, Cp, ih0, ow * sw - pl, KH, KW, dh, dwd, wdw, bdw, zero, buf + p * C, NULL, dact,
                        dlo, dhi);
      }
      for (int k = p; k < p + np; k++) {
        tp[0][k] = buf + k * C;
        yo[k] = ro[k] = (r * OW + ow + (k - p)) * M;
      }
      p += np;
      ow += np;
      if (ow == OW) { ow = 0; r++; }
    }
    for (long mb = 0; mb < nmb; mb++) {
      int nvalid = (int)(M - mb * bw < bw ? M - mb * bw : bw);
      strips[now](tp, 1, (int)C, wpw + mb * C * bw, y + mb * bw, yo, res ? res + mb * bw : NULL, ro,
                  bpw ? bpw + mb * bw : NULL, act, lo, hi, 1.0f, nvalid);
    }
  }
}
static void dwpw_task(const void *vctx, long task) {
  const dp_ctx *cx = (const dp_ctx *)vctx;
  long r0 = task * cx->per, r1 = r0 + cx->per < cx->rows ? r0 + cx->per : cx->rows;
  dwpw_rows(cx->a, r0, r1);
}
API void ap_dwpw(const int64_t *a) {
  if (a[DP_C] > DP_MAXC) return;
  double row_work = (double)a[DP_OW] * a[DP_C] * (a[DP_KH] * a[DP_KW] + a[DP_M]);
  dp_ctx cx = {a, a[DP_N] * a[DP_OH], 1};
  cx.per = row_work >= 32768.0 ? 1 : (long)(32768.0 / (row_work > 1.0 ? row_work : 1.0)) + 1;
  /* enough rows per task for nearly full strips (short rows: a task's pixels split into strips evenly, so about
   * three strips' worth), while leaving at least two tasks per thread to balance them */
  long pixmax = a[DP_BW] == VL ? NOWMAX16 : NOWMAX, strip_rows = (3 * pixmax + a[DP_OW] - 1) / a[DP_OW];
  long threads = atomic_load(&g_threads), balance = cx.rows / (2 * (threads > 0 ? threads : 1));
  if (balance < 1) balance = 1;
  if (cx.per < strip_rows) cx.per = strip_rows < balance ? strip_rows : (cx.per > balance ? cx.per : balance);
  parallel_for_work((cx.rows + cx.per - 1) / cx.per, dwpw_task, &cx, row_work * cx.rows);
}

/* The pool for kernels compiled from the other sources of this library (recurrent.c). */
API void ap_pool_for(long ntasks, task_fn fn, const void *ctx) { parallel_for(ntasks, fn, ctx); }
