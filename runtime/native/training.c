/* appopt runtime native kernels for training graphs, compiled with kernels.c (EXTRA_SOURCES).
 *
 * Max-pool backward for windows that tile the plane (kernel == stride, no padding or dilation; the digits CNN's
 * 2x2/2 pool): per window, dY goes to the first maximum of X in C order (NaN counts as a maximum, as NumPy's
 * argmax has it) and the window's other positions get zero. Planes are split across the pool's threads.
 */
#include <math.h>
#include <stdint.h>

#define TR_API __attribute__((visibility("default")))

typedef void (*tr_task_fn)(const void *ctx, long task);
void ap_pool_for(long ntasks, tr_task_fn fn, const void *ctx);

/* Argument block of ap_maxpool_grad_tiled (runtime/kernels/grad_pool.py builds it). */
enum { MG_X, MG_DY, MG_DX, MG_PLANES, MG_H, MG_W, MG_KH, MG_KW, MG_NARGS };
#define MG_PLANES_PER_TASK 16
#define MG_SERIAL (1L << 20) /* fewer input values than this run on the calling thread */

typedef float tr_f8 __attribute__((vector_size(32), aligned(4), may_alias));
typedef int32_t tr_i8 __attribute__((vector_size(32), aligned(4), may_alias));

/* Eight columns of a pair of rows (v0 above v1) of a 2x2/2 pool: each window's maximum, in both of its lanes (a
 * max of the rows, then of neighbouring lanes). */
static inline tr_f8 tr_window_max(tr_f8 v0, tr_f8 v1) {
  const tr_i8 up = v0 >= v1;
  const tr_f8 vm = (tr_f8)(((tr_i8)v0 & up) | ((tr_i8)v1 & ~up));
  const tr_f8 vs = __builtin_shufflevector(vm, vm, 1, 0, 3, 2, 5, 4, 7, 6);
  const tr_i8 left = vm >= vs;
  return (tr_f8)(((tr_i8)vm & left) | ((tr_i8)vs & ~left));
}

/* One pair of rows (x0 above x1, width w, a multiple of 8) of a 2x2/2 pool, eight columns (four windows) per
 * vector: the window maximum by a max of the rows then of neighbouring lanes, then masks that keep only the
 * first lane equal to it in C order (x0's left, x0's right, x1's left, x1's right). Returns 0, writing nothing,
 * when the rows hold a NaN (the scalar loop then resolves it). */
static int maxpool_grad_2x2_rows(const float *x0, const float *x1, const float *dy, float *d0, float *d1, long w) {
  tr_i8 nan = {0};
  for (long k = 0; k < w; k += 8) {
    const tr_f8 v0 = *(const tr_f8 *)(x0 + k), v1 = *(const tr_f8 *)(x1 + k);
    nan |= (v0 != v0) | (v1 != v1);
  }
  for (int l = 0; l < 8; l++)
    if (nan[l]) return 0;
  const tr_i8 odd = {0, -1, 0, -1, 0, -1, 0, -1};
  for (long k = 0; k < w; k += 8) {
    const tr_f8 v0 = *(const tr_f8 *)(x0 + k), v1 = *(const tr_f8 *)(x1 + k);
    const tr_f8 m = tr_window_max(v0, v1);
    const tr_i8 eq0 = v0 == m, eq1 = v1 == m;
    const tr_i8 eq0s = __builtin_shufflevector(eq0, eq0, 1, 0, 3, 2, 5, 4, 7, 6);
    const tr_i8 eq1s = __builtin_shufflevector(eq1, eq1, 1, 0, 3, 2, 5, 4, 7, 6);
    const tr_i8 t0 = eq0 & ~(eq0s & odd);
    const tr_i8 t1 = eq1 & ~(eq0 | eq0s) & ~(eq1s & odd);
    const float *g = dy + k / 2;
    const tr_f8 gd = {g[0], g[0], g[1], g[1], g[2], g[2], g[3], g[3]};
    *(tr_f8 *)(d0 + k) = (tr_f8)((tr_i8)gd & t0);
    *(tr_f8 *)(d1 + k) = (tr_f8)((tr_i8)gd & t1);
  }
  return 1;
}

static void maxpool_grad_planes(const void *ctx, long task) {
  const int64_t *a = (const int64_t *)ctx;
  const float *x = (const float *)(intptr_t)a[MG_X];
  const float *dy = (const float *)(intptr_t)a[MG_DY];
  float *dx = (float *)(intptr_t)a[MG_DX];
  const long h = a[MG_H], w = a[MG_W], kh = a[MG_KH], kw = a[MG_KW];
  const long oh = h / kh, ow = w / kw, planes = a[MG_PLANES];
  const long p0 = task * MG_PLANES_PER_TASK;
  const long p1 = p0 + MG_PLANES_PER_TASK < planes ? p0 + MG_PLANES_PER_TASK : planes;
  for (long p = p0; p < p1; p++) {
    const float *xp = x + p * h * w;
    float *dxp = dx + p * h * w;
    const float *dyp = dy + p * oh * ow;
    for (long i = 0; i < oh; i++) {
      if (kh == 2 && kw == 2 && w % 8 == 0 &&
          maxpool_grad_2x2_rows(xp + 2 * i * w, xp + (2 * i + 1) * w, dyp + i * ow, dxp + 2 * i * w,
                                dxp + (2 * i + 1) * w, w))
        continue;
      for (long j = 0; j < ow; j++) {
        long best = (i * kh) * w + j * kw;
        float top = xp[best];
        for (long r = 0; r < kh; r++) {
          for (long s = 0; s < kw; s++) {
            const long at = (i * kh + r) * w + j * kw + s;
            const float v = xp[at];
            const int take = (v > top) | (isnan(v) & !isnan(top)); /* branch-free: random data mispredicts */
            top = take ? v : top;
            best = take ? at : best;
            dxp[at] = 0.0f;
          }
        }
        dxp[best] = dyp[i * ow + j];
      }
    }
  }
}

TR_API void ap_maxpool_grad_tiled(const int64_t *a) {
  const long planes = a[MG_PLANES];
  const long tasks = (planes + MG_PLANES_PER_TASK - 1) / MG_PLANES_PER_TASK;
  if (planes * a[MG_H] * a[MG_W] < MG_SERIAL) {
    for (long t = 0; t < tasks; t++) maxpool_grad_planes(a, t);
    return;
  }
  ap_pool_for(tasks, maxpool_grad_planes, a);
}

/* Max pool 2x2/2 (no pads or dilation) over NCHW planes whose width is a multiple of 8, such as the digits CNN's
 * 8x8: the general NCHW pool (kernels.c) pays a row's setup per four outputs there. Per pair of input rows, a max
 * of the rows then of neighbouring lanes, eight columns a vector; a pair holding a NaN takes a scalar loop that
 * propagates it, as np.maximum does. */
enum { MQ_X, MQ_Y, MQ_PAIRS, MQ_W, MQ_NARGS };
#define MQ_PAIRS_PER_TASK 256
typedef float tr_f4 __attribute__((vector_size(16), aligned(4), may_alias));

static void maxpool_2x2_pairs(const void *ctx, long task) {
  const int64_t *a = (const int64_t *)ctx;
  const float *x = (const float *)(intptr_t)a[MQ_X];
  float *y = (float *)(intptr_t)a[MQ_Y];
  const long w = a[MQ_W], pairs = a[MQ_PAIRS];
  const long q0 = task * MQ_PAIRS_PER_TASK;
  const long q1 = q0 + MQ_PAIRS_PER_TASK < pairs ? q0 + MQ_PAIRS_PER_TASK : pairs;
  for (long q = q0; q < q1; q++) {
    const float *x0 = x + q * 2 * w, *x1 = x0 + w;
    float *out = y + q * (w / 2);
    tr_i8 nan = {0};
    for (long k = 0; k < w; k += 8) {
      const tr_f8 v0 = *(const tr_f8 *)(x0 + k), v1 = *(const tr_f8 *)(x1 + k);
      nan |= (v0 != v0) | (v1 != v1);
    }
    int any = 0;
    for (int l = 0; l < 8; l++) any |= nan[l] != 0;
    if (any) {
      for (long j = 0; j < w / 2; j++) {
        const float v[4] = {x0[2 * j], x0[2 * j + 1], x1[2 * j], x1[2 * j + 1]};
        float m = v[0];
        for (int t = 1; t < 4; t++) m = isnan(m) ? m : (isnan(v[t]) || v[t] > m ? v[t] : m);
        out[j] = m;
      }
      continue;
    }
    for (long k = 0; k < w; k += 8) {
      const tr_f8 v0 = *(const tr_f8 *)(x0 + k), v1 = *(const tr_f8 *)(x1 + k);
      const tr_f8 m = tr_window_max(v0, v1);
      *(tr_f4 *)(out + k / 2) = __builtin_shufflevector(m, m, 0, 2, 4, 6);
    }
  }
}

TR_API void ap_maxpool_2x2(const int64_t *a) {
  const long pairs = a[MQ_PAIRS];
  const long tasks = (pairs + MQ_PAIRS_PER_TASK - 1) / MQ_PAIRS_PER_TASK;
  if (pairs * 2 * a[MQ_W] < MG_SERIAL) {
    for (long t = 0; t < tasks; t++) maxpool_2x2_pairs(a, t);
    return;
  }
  ap_pool_for(tasks, maxpool_2x2_pairs, a);
}

/* SGD with momentum over one float32 tensor, in place and in one pass over the weights, velocity and gradient
 * (the NumPy update takes five): PyTorch's rule with dampening 0, as ONNX's Momentum op in standard mode.
 * g' = scale * g + decay * x; v = momentum * v + g' (v = g' when momentum is 0); x -= lr * v. */
enum { SG_X, SG_G, SG_V, SG_N, SG_SCALE, SG_DECAY, SG_MOMENTUM, SG_LR, SG_NARGS };
#define SG_PER_TASK (1L << 16)

static inline float tr_f32(int64_t bits) {
  union {
    int32_t i;
    float f;
  } u = {.i = (int32_t)bits};
  return u.f;
}

static void sgd_momentum_part(const void *ctx, long task) {
  const int64_t *a = (const int64_t *)ctx;
  float *x = (float *)(intptr_t)a[SG_X];
  const float *g = (const float *)(intptr_t)a[SG_G];
  float *v = (float *)(intptr_t)a[SG_V];
  const float scale = tr_f32(a[SG_SCALE]), decay = tr_f32(a[SG_DECAY]);
  const float momentum = tr_f32(a[SG_MOMENTUM]), lr = tr_f32(a[SG_LR]);
  const long i0 = task * SG_PER_TASK, i1 = i0 + SG_PER_TASK < a[SG_N] ? i0 + SG_PER_TASK : a[SG_N];
  for (long i = i0; i < i1; i++) {
    const float step = scale * g[i] + decay * x[i];
    const float vi = momentum != 0.0f ? momentum * v[i] + step : step;
    v[i] = vi;
    x[i] -= lr * vi;
  }
}

TR_API void ap_sgd_momentum(const int64_t *a) {
  const long tasks = (a[SG_N] + SG_PER_TASK - 1) / SG_PER_TASK;
  if (a[SG_N] < MG_SERIAL) {
    for (long t = 0; t < tasks; t++) sgd_momentum_part(a, t);
    return;
  }
  ap_pool_for(tasks, sgd_momentum_part, a);
}
