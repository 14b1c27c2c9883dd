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

/* fn(a, 0 .. tasks-1): on the calling thread when the call touches fewer than `serial` values, else on the pool */
static void tr_tasks(long tasks, long values, long serial, tr_task_fn fn, const int64_t *a) {
  if (values < serial) {
    for (long t = 0; t < tasks; t++) fn(a, t);
    return;
  }
  ap_pool_for(tasks, fn, a);
}

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
  tr_tasks(tasks, planes * a[MG_H] * a[MG_W], MG_SERIAL, maxpool_grad_planes, a);
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
  tr_tasks(tasks, pairs * 2 * a[MQ_W], MG_SERIAL, maxpool_2x2_pairs, a);
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
  tr_tasks((a[SG_N] + SG_PER_TASK - 1) / SG_PER_TASK, a[SG_N], MG_SERIAL, sgd_momentum_part, a);
}

/* BatchNorm in training over NCHW float32 (any number of pixels per plane, P), one pool task per channel.
 * Forward: the batch mean and population variance (two passes: the mean, then squared deviations, as NumPy's
 * batch statistics), then y = x * gain + (bias - mean * gain), gain = scale / sqrt(var + eps). Backward, from the
 * saved mean and inverse std: dbias = sum dy, dscale = inv_std * sum dy (x - mean), and (when asked)
 * dx = gain dy - gain inv_std dscale / count (x - mean) - gain dbias / count, in one more pass.
 * Sums run in float vectors over strips of BN_STRIP values, added up in double. */
enum { BN_X, BN_Y, BN_SCALE, BN_BIAS, BN_MEAN, BN_VAR, BN_INVSTD, BN_N, BN_C, BN_P, BN_EPS, BN_NARGS };
enum { BG_DY, BG_X, BG_DX, BG_SCALE, BG_MEAN, BG_INVSTD, BG_DSCALE, BG_DBIAS, BG_N, BG_C, BG_P, BG_NARGS };
#define BN_STRIP 4096
#define BN_SERIAL (1L << 16) /* fewer values than this run on the calling thread */

static inline double tr_lanes(tr_f8 v) {
  double s = 0.0;
  for (int l = 0; l < 8; l++) s += v[l];
  return s;
}

/* sum of p[0..n) (op 0), of (p - mean)^2 (op 1) */
static double tr_strip_sum(const float *p, long n, float mean, int op) {
  double total = 0.0;
  for (long s0 = 0; s0 < n; s0 += BN_STRIP) {
    const long s1 = s0 + BN_STRIP < n ? s0 + BN_STRIP : n;
    tr_f8 acc = {0};
    const tr_f8 m = {mean, mean, mean, mean, mean, mean, mean, mean};
    long k = s0;
    for (; k + 8 <= s1; k += 8) {
      const tr_f8 v = *(const tr_f8 *)(p + k);
      if (op) {
        const tr_f8 d = v - m;
        acc += d * d;
      } else {
        acc += v;
      }
    }
    double s = tr_lanes(acc);
    for (; k < s1; k++) s += op ? (double)(p[k] - mean) * (p[k] - mean) : p[k];
    total += s;
  }
  return total;
}

static void bn_forward_channel(const void *ctx, long c) {
  const int64_t *a = (const int64_t *)ctx;
  const float *x = (const float *)(intptr_t)a[BN_X];
  float *y = (float *)(intptr_t)a[BN_Y];
  const float *scale = (const float *)(intptr_t)a[BN_SCALE], *bias = (const float *)(intptr_t)a[BN_BIAS];
  const long n = a[BN_N], ch = a[BN_C], px = a[BN_P];
  const double count = (double)(n * px);
  double sum = 0.0;
  for (long i = 0; i < n; i++) sum += tr_strip_sum(x + (i * ch + c) * px, px, 0.0f, 0);
  const float mean = (float)(sum / count);
  double dev = 0.0;
  for (long i = 0; i < n; i++) dev += tr_strip_sum(x + (i * ch + c) * px, px, mean, 1);
  const float var = (float)(dev / count);
  const float inv_std = 1.0f / sqrtf(var + tr_f32(a[BN_EPS]));
  const float gain = scale[c] * inv_std, shift = bias[c] - mean * gain;
  ((float *)(intptr_t)a[BN_MEAN])[c] = mean;
  ((float *)(intptr_t)a[BN_VAR])[c] = var;
  ((float *)(intptr_t)a[BN_INVSTD])[c] = inv_std;
  const tr_f8 g = {gain, gain, gain, gain, gain, gain, gain, gain};
  const tr_f8 b = {shift, shift, shift, shift, shift, shift, shift, shift};
  for (long i = 0; i < n; i++) {
    const float *xp = x + (i * ch + c) * px;
    float *yp = y + (i * ch + c) * px;
    long k = 0;
    for (; k + 8 <= px; k += 8) *(tr_f8 *)(yp + k) = *(const tr_f8 *)(xp + k) * g + b;
    for (; k < px; k++) yp[k] = xp[k] * gain + shift;
  }
}

static void bn_backward_channel(const void *ctx, long c) {
  const int64_t *a = (const int64_t *)ctx;
  const float *dy = (const float *)(intptr_t)a[BG_DY], *x = (const float *)(intptr_t)a[BG_X];
  float *dx = (float *)(intptr_t)a[BG_DX];
  const long n = a[BG_N], ch = a[BG_C], px = a[BG_P];
  const float mean = ((const float *)(intptr_t)a[BG_MEAN])[c];
  const float inv_std = ((const float *)(intptr_t)a[BG_INVSTD])[c];
  const tr_f8 m = {mean, mean, mean, mean, mean, mean, mean, mean};
  double sdy = 0.0, sdyx = 0.0;
  for (long i = 0; i < n; i++) {
    const float *gp = dy + (i * ch + c) * px, *xp = x + (i * ch + c) * px;
    for (long s0 = 0; s0 < px; s0 += BN_STRIP) {
      const long s1 = s0 + BN_STRIP < px ? s0 + BN_STRIP : px;
      tr_f8 a0 = {0}, a1 = {0};
      long k = s0;
      for (; k + 8 <= s1; k += 8) {
        const tr_f8 g = *(const tr_f8 *)(gp + k);
        a0 += g;
        a1 += g * (*(const tr_f8 *)(xp + k) - m);
      }
      double s = tr_lanes(a0), t = tr_lanes(a1);
      for (; k < s1; k++) {
        s += gp[k];
        t += (double)gp[k] * (xp[k] - mean);
      }
      sdy += s;
      sdyx += t;
    }
  }
  const float dscale = (float)(sdyx * inv_std), dbias = (float)sdy;
  ((float *)(intptr_t)a[BG_DSCALE])[c] = dscale;
  ((float *)(intptr_t)a[BG_DBIAS])[c] = dbias;
  if (!dx) return;
  const float count = (float)(n * px);
  const float gain = ((const float *)(intptr_t)a[BG_SCALE])[c] * inv_std;
  const float k1 = -gain * inv_std * dscale / count, k0 = -k1 * mean - gain * dbias / count;
  const tr_f8 vg = {gain, gain, gain, gain, gain, gain, gain, gain};
  const tr_f8 v1 = {k1, k1, k1, k1, k1, k1, k1, k1}, v0 = {k0, k0, k0, k0, k0, k0, k0, k0};
  for (long i = 0; i < n; i++) {
    const float *gp = dy + (i * ch + c) * px, *xp = x + (i * ch + c) * px;
    float *dp = dx + (i * ch + c) * px;
    long k = 0;
    for (; k + 8 <= px; k += 8) *(tr_f8 *)(dp + k) = *(const tr_f8 *)(gp + k) * vg + *(const tr_f8 *)(xp + k) * v1 + v0;
    for (; k < px; k++) dp[k] = gp[k] * gain + xp[k] * k1 + k0;
  }
}

TR_API void ap_bn_train(const int64_t *a) {
  tr_tasks(a[BN_C], a[BN_N] * a[BN_C] * a[BN_P], BN_SERIAL, bn_forward_channel, a);
}

TR_API void ap_bn_train_grad(const int64_t *a) {
  tr_tasks(a[BG_C], a[BG_N] * a[BG_C] * a[BG_P], BN_SERIAL, bn_backward_channel, a);
}

/* ReLU's gradient over float32: dx = dy where y > 0, else 0 (a select, so an overflowed dy where y <= 0 still
 * reads 0, as np.where has it), one pass in RG_PER_TASK-value pool tasks. */
enum { RG_DY, RG_Y, RG_DX, RG_N, RG_NARGS };
#define RG_PER_TASK (1L << 15)

static void relu_grad_part(const void *ctx, long task) {
  const int64_t *a = (const int64_t *)ctx;
  const float *dy = (const float *)(intptr_t)a[RG_DY], *y = (const float *)(intptr_t)a[RG_Y];
  float *dx = (float *)(intptr_t)a[RG_DX];
  const long i0 = task * RG_PER_TASK, i1 = i0 + RG_PER_TASK < a[RG_N] ? i0 + RG_PER_TASK : a[RG_N];
  const tr_f8 zero = {0};
  long i = i0;
  for (; i + 8 <= i1; i += 8) {
    const tr_i8 keep = *(const tr_f8 *)(y + i) > zero;
    *(tr_f8 *)(dx + i) = (tr_f8)((tr_i8) * (const tr_f8 *)(dy + i) & keep);
  }
  for (; i < i1; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

TR_API void ap_relu_grad(const int64_t *a) {
  tr_tasks((a[RG_N] + RG_PER_TASK - 1) / RG_PER_TASK, a[RG_N], BN_SERIAL, relu_grad_part, a);
}

/* A training step's convolution weights into the NHWC kernel's blocks (runtime/native/conv.py's layout):
 * out[g][blk][i][k][c][j] = W[g*mg + blk*bw + j][c][i][k] for the block's channels j (a last, partial block's
 * padding lanes are left as they are: zero since the kernel was built), W read through element strides, so a
 * flipped or transposed view packs as it lies. One pool task per (group, block); NumPy's copy of the transposed
 * view took 15-20 ms a step for ResNet-50's 23.5M weights. */
enum { PW_W, PW_OUT, PW_G, PW_MG, PW_CG, PW_KH, PW_KW, PW_BW, PW_SM, PW_SC, PW_SH, PW_SW, PW_NARGS };
#define PW_TILE 8

static void pack_weights_block(const void *ctx, long task) {
  const int64_t *a = (const int64_t *)ctx;
  const long mg = a[PW_MG], cg = a[PW_CG], kh = a[PW_KH], kw = a[PW_KW], bw = a[PW_BW];
  const long sm = a[PW_SM], sc = a[PW_SC], sh = a[PW_SH], sw = a[PW_SW];
  const long nmb = (mg + bw - 1) / bw, g = task / nmb, blk = task % nmb;
  const long nj = mg - blk * bw < bw ? mg - blk * bw : bw;
  const float *w = (const float *)(intptr_t)a[PW_W] + (g * mg + blk * bw) * sm;
  float *out = (float *)(intptr_t)a[PW_OUT] + task * kh * kw * cg * bw;
  /* tiles of PW_TILE rows by PW_TILE input channels, every tap of a tile before the next: the tile's source
   * lines and destination rows stay in L1 whatever the strides (one value from each of 32 rows per step, or a
   * tap's whole plane before the next tap, ran no faster than NumPy's copy) */
  for (long c0 = 0; c0 < cg; c0 += PW_TILE) {
    const long nc = cg - c0 < PW_TILE ? cg - c0 : PW_TILE;
    for (long j0 = 0; j0 < nj; j0 += PW_TILE) {
      const long nr = nj - j0 < PW_TILE ? nj - j0 : PW_TILE;
      for (long i = 0; i < kh; i++)
        for (long k = 0; k < kw; k++) {
          const float *src = w + j0 * sm + c0 * sc + i * sh + k * sw;
          float *dst = out + ((i * kw + k) * cg + c0) * bw + j0;
          for (long c = 0; c < nc; c++)
            for (long j = 0; j < nr; j++) dst[c * bw + j] = src[j * sm + c * sc];
        }
    }
  }
}

TR_API void ap_pack_conv_weights(const int64_t *a) {
  const long tasks = a[PW_G] * ((a[PW_MG] + a[PW_BW] - 1) / a[PW_BW]);
  tr_tasks(tasks, a[PW_G] * a[PW_MG] * a[PW_CG] * a[PW_KH] * a[PW_KW], BN_SERIAL, pack_weights_block, a);
}

/* LayerNormalization's gradient over rows of D contiguous float32 values (the normalised trailing dims), from x
 * itself (the statistics are recomputed per row, as the NumPy kernel does): per row, with g = dy * scale and
 * xhat = (x - mean) * inv_std, dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)); dscale and dbias are summed
 * over a task's rows into its own slot of `partial` [tasks][2][D] (the caller adds the slots). LG_ROWS rows a
 * task; a row's D values stay in L1 across its four passes. */
enum { LG_DY, LG_X, LG_DX, LG_SCALE, LG_PARTIAL, LG_ROWS_N, LG_D, LG_EPS, LG_NARGS };
#define LG_ROWS 64

static void layer_norm_grad_rows(const void *ctx, long task) {
  const int64_t *a = (const int64_t *)ctx;
  const float *dy = (const float *)(intptr_t)a[LG_DY], *x = (const float *)(intptr_t)a[LG_X];
  float *dx = (float *)(intptr_t)a[LG_DX];
  const float *scale = (const float *)(intptr_t)a[LG_SCALE];
  const long d = a[LG_D], r0 = task * LG_ROWS, r1 = r0 + LG_ROWS < a[LG_ROWS_N] ? r0 + LG_ROWS : a[LG_ROWS_N];
  float *dscale = (float *)(intptr_t)a[LG_PARTIAL] + task * 2 * d, *dbias = dscale + d;
  const float eps = tr_f32(a[LG_EPS]);
  for (long j = 0; j < 2 * d; j++) dscale[j] = 0.0f;
  for (long r = r0; r < r1; r++) {
    const float *xr = x + r * d, *gr = dy + r * d;
    const float mean = (float)(tr_strip_sum(xr, d, 0.0f, 0) / (double)d);
    const float inv_std = 1.0f / sqrtf((float)(tr_strip_sum(xr, d, mean, 1) / (double)d) + eps);
    double sg = 0.0, sgx = 0.0;
    for (long j = 0; j < d; j++) {
      const float xhat = (xr[j] - mean) * inv_std, g = gr[j] * scale[j];
      sg += g;
      sgx += g * xhat;
      dscale[j] += gr[j] * xhat;
      dbias[j] += gr[j];
    }
    if (!dx) continue;
    const float mg = (float)(sg / (double)d), mgx = (float)(sgx / (double)d);
    float *dr = dx + r * d;
    for (long j = 0; j < d; j++) {
      const float xhat = (xr[j] - mean) * inv_std;
      dr[j] = inv_std * (gr[j] * scale[j] - mg - xhat * mgx);
    }
  }
}

TR_API void ap_layer_norm_grad(const int64_t *a) {
  const long tasks = (a[LG_ROWS_N] + LG_ROWS - 1) / LG_ROWS;
  tr_tasks(tasks, a[LG_ROWS_N] * a[LG_D], BN_SERIAL, layer_norm_grad_rows, a);
}
