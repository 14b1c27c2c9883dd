/* appopt runtime native kernels: the recurrent layers (RNN, GRU, LSTM), one direction's whole sequence per call.
 *
 * Compiled together with kernels.c (runtime/native/__init__.py SOURCES). The caller (runtime/kernels/rnn.py)
 * computes the input projection for every time step as one GEMM, X W^T + biases, and packs R^T once per weight;
 * this loop then runs the recurrence without returning to Python: per step and batch row, a GEMV against the
 * packed R^T and the gate math, vectorised.
 *
 * Packing: each gate's H columns are padded to Hp (a multiple of 16), so R^T has G*Hp columns and every gate
 * segment starts on a vector boundary; it is stored in panels of 16 columns (G*Hp/16, H, 16), each one contiguous
 * stream for the GEMM. Padded columns are zero, so the padded lanes of the state stay finite and are never written
 * out. Activations: 0 sigmoid, 1 tanh, 2 relu (others run on the NumPy path).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "vec16.h"

#define RNN_API __attribute__((visibility("default")))
#define RINLINE static inline __attribute__((always_inline))

/* 1 / d for d > 0: the hardware estimate refined by one Newton step (~1 ulp) where AVX-512 has it, else a
 * divide; and a clamp with single min/max instructions there. */
#if defined(__AVX512F__)
RINLINE v16 rrecip(v16 d) {
  v16 r = (v16)_mm512_rcp14_ps((__m512)d);
  return r * (2.0f - d * r);
}
RINLINE v16 rclamp(v16 x, float lo, float hi) {
  /* MAXPS/MINPS return their second operand when one is NaN: x second, so a NaN stays NaN */
  return (v16)_mm512_min_ps((__m512)vsplat(hi), _mm512_max_ps((__m512)vsplat(lo), (__m512)x));
}
#else
RINLINE v16 rrecip(v16 d) { return 1.0f / d; }
RINLINE v16 rclamp(v16 x, float lo, float hi) { return vmin(vmax(x, vsplat(lo)), vsplat(hi)); }
#endif
/* tanh(x) as a rational function of x on [-7.905, 7.905] (past it tanh is 1 to float precision), with Eigen's
 * and onnxruntime's (MLAS) coefficients: an odd degree-13 polynomial over an even degree-6 one, error a few ulp,
 * no exponential and no branch. A NaN stays NaN (the clamp passes it through). */
RINLINE v16 rtanh(v16 x) {
  x = rclamp(x, -7.90531110763549805f, 7.90531110763549805f);
  const v16 x2 = x * x;
  v16 p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  v16 q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return x * p * rrecip(q);
}
/* exp(x), Cephes' expf polynomial after range reduction by ln 2 (vec16.h); x clamped to [-87, 88] first. */
RINLINE v16 rexp(v16 x) { return vexp_clamped(rclamp(x, -87.0f, 88.0f)); }
/* sigmoid(x) = 1 / (1 + e^-x), relatively accurate at both ends: near 1 a GRU's 1 - z scales the candidate, where
 * an error of two ulp already shows (the rational form of tanh(x / 2) fails the ONNX backend cases there). x is
 * clamped at -87 so the result stays a normal float (a denormal slows every product it meets). */
RINLINE v16 rsigmoid(v16 x) { return 1.0f / (1.0f + rexp(-rclamp(x, -87.0f, 88.0f))); }
enum { RA_SIGMOID = 0, RA_TANH = 1, RA_RELU = 2 };
RINLINE v16 ract(v16 x, int kind) {
  if (kind == RA_SIGMOID) return rsigmoid(x);
  if (kind == RA_TANH) return rtanh(x);
  return vblend((vi16)(x < 0.0f), vsplat(0.0f), x);
}
RINLINE v16 rclip(v16 x, int has_clip, float clip) {
  return has_clip ? vmin(vmax(x, vsplat(-clip)), vsplat(clip)) : x;
}

/* out[b][0:ncols] += h[b][0:H] @ RT[0:H, col0:col0+ncols] for rows b in [0, nrows), out rows ld ldo, h rows ld ldh.
 * RT is packed in panels of 16 columns, panel p holding RT[k, 16p:16p+16] at rt + (p*H + k)*16, so each panel is
 * one contiguous stream; col0 and ncols are multiples of 16. Up to 4 rows x 4 panels share each load. */
/* One row (batch 1): eight panels at a time, so eight independent accumulators hide the FMA latency. */
static void gemv_acc(const float *h, const float *rt, long H, long p0, long np, float *out) {
  long p = 0;
  for (; p + 8 <= np; p += 8) {
    const float *w = rt + (p0 + p) * H * VL;
    const long ps = H * VL;
    v16 a0 = vload(out + p * VL), a1 = vload(out + (p + 1) * VL), a2 = vload(out + (p + 2) * VL);
    v16 a3 = vload(out + (p + 3) * VL), a4 = vload(out + (p + 4) * VL), a5 = vload(out + (p + 5) * VL);
    v16 a6 = vload(out + (p + 6) * VL), a7 = vload(out + (p + 7) * VL);
    for (long k = 0; k < H; k++) {
      const float *wk = w + k * VL;
      v16 s = vsplat(h[k]);
      a0 += s * vload(wk); a1 += s * vload(wk + ps); a2 += s * vload(wk + 2 * ps); a3 += s * vload(wk + 3 * ps);
      a4 += s * vload(wk + 4 * ps); a5 += s * vload(wk + 5 * ps); a6 += s * vload(wk + 6 * ps);
      a7 += s * vload(wk + 7 * ps);
    }
    vstore(out + p * VL, a0); vstore(out + (p + 1) * VL, a1); vstore(out + (p + 2) * VL, a2);
    vstore(out + (p + 3) * VL, a3); vstore(out + (p + 4) * VL, a4); vstore(out + (p + 5) * VL, a5);
    vstore(out + (p + 6) * VL, a6); vstore(out + (p + 7) * VL, a7);
  }
  for (; p < np; p++) {
    const float *w = rt + (p0 + p) * H * VL;
    v16 a = vload(out + p * VL), b = {0};
    long k = 0;
    for (; k + 2 <= H; k += 2) {
      a += vsplat(h[k]) * vload(w + k * VL);
      b += vsplat(h[k + 1]) * vload(w + (k + 1) * VL);
    }
    if (k < H) a += vsplat(h[k]) * vload(w + k * VL);
    vstore(out + p * VL, a + b);
  }
}

/* Rows hr[0..NR) x panels [0, NP) of out (row stride ldo) += h @ RT, panels starting at w (panel stride ps):
 * NR*NP accumulators stay in registers for the whole reduction; each weight load serves NR rows and each
 * broadcast NP panels. NR and NP are constants at every call, so the loops unroll into registers. */
RINLINE void gemm_tile(const float *const *hr, const float *w, long ps, long H, float *o, long ldo, int NR, int NP) {
  v16 acc[4][4];
  for (int r = 0; r < NR; r++)
    for (int q = 0; q < NP; q++) acc[r][q] = vload(o + r * ldo + q * VL);
  for (long k = 0; k < H; k++) {
    v16 wv[4];
    for (int q = 0; q < NP; q++) wv[q] = vload(w + q * ps + k * VL);
    for (int r = 0; r < NR; r++) {
      const v16 s = vsplat(hr[r][k]);
      for (int q = 0; q < NP; q++) acc[r][q] += s * wv[q];
    }
  }
  for (int r = 0; r < NR; r++)
    for (int q = 0; q < NP; q++) vstore(o + r * ldo + q * VL, acc[r][q]);
}

/* NR rows (a constant) against every panel of [p0, p0 + np): four panels at a time, then two, then one. */
RINLINE void gemm_rows(const float *const *hr, const float *rt, long H, long p0, long np, float *o, long ldo,
                       int NR) {
  const long ps = H * VL;
  long p = 0;
  for (; p + 4 <= np; p += 4) gemm_tile(hr, rt + (p0 + p) * ps, ps, H, o + p * VL, ldo, NR, 4);
  if (p + 2 <= np) {
    gemm_tile(hr, rt + (p0 + p) * ps, ps, H, o + p * VL, ldo, NR, 2);
    p += 2;
  }
  if (p < np) gemm_tile(hr, rt + (p0 + p) * ps, ps, H, o + p * VL, ldo, NR, 1);
}

static void gemm_acc(const float *h, long ldh, long nrows, const float *rt, long H, long col0, long ncols, float *out,
                     long ldo) {
  const long p0 = col0 / VL, np = ncols / VL;
  if (nrows == 1) {
    gemv_acc(h, rt, H, p0, np, out);
    return;
  }
  for (long r0 = 0; r0 < nrows; r0 += 4) {
    const long nr = nrows - r0 < 4 ? nrows - r0 : 4;
    const float *hr[4];
    for (long r = 0; r < 4; r++) hr[r] = h + (r0 + (r < nr ? r : 0)) * ldh;
    float *o = out + r0 * ldo;
    if (nr == 4) gemm_rows(hr, rt, H, p0, np, o, ldo, 4);
    else if (nr == 3) gemm_rows(hr, rt, H, p0, np, o, ldo, 3);
    else if (nr == 2) gemm_rows(hr, rt, H, p0, np, o, ldo, 2);
    else gemv_acc(hr[0], rt, H, p0, np, o);
  }
}

/* Argument block of ap_rnn_seq (int64 each; pointers as addresses, floats as float32 bits). */
enum {
  RN_KIND,     /* 0 RNN, 1 GRU, 2 LSTM */
  RN_XP,       /* float*: projected input, gate g column j of step t, row b at XP + t*XP_T + b*XP_B + g*H + j */
  RN_XP_T, RN_XP_B,
  RN_RT,       /* float*: packed R^T, panels (G*Hp/16, H, 16) */
  RN_SEQ, RN_BATCH, RN_HIDDEN,
  RN_H0, RN_H0_B, /* float* initial h (row stride) or 0 */
  RN_C0, RN_C0_B, /* float* initial c (LSTM) or 0 */
  RN_LENS,     /* sequence lengths (int64*, or int32* when RN_LENS_I32) or 0; clamped to [0, seq] here */
  RN_LENS_I32,
  RN_REVERSE,
  RN_Y, RN_Y_T, RN_Y_B, /* float* Y (this direction's slice) and its strides, or 0 */
  RN_HN, RN_HN_B, /* float* final h and its row stride, or 0 */
  RN_CN, RN_CN_B, /* float* final c and its row stride, or 0 */
  RN_HAS_CLIP, RN_CLIP,
  RN_LBR,      /* GRU linear_before_reset */
  RN_RBH,      /* float* GRU: R's bias of the h gate (H), used when linear_before_reset, else 0 */
  RN_PEEP,     /* float* LSTM peepholes (i, o, f; 3H) or 0 */
  RN_INPUT_FORGET,
  RN_ACT_F, RN_ACT_G, RN_ACT_H,
  RN_SERIAL_WORK, /* recurrent multiply-adds per step below which a step runs on the caller alone */
  RN_NARGS
};

/* The compiled pool of kernels.c (same shared object): fn(ctx, 0..ntasks-1) on up to ap_get_threads() threads. */
void ap_pool_for(long ntasks, void (*fn)(const void *, long), const void *ctx);
int ap_get_threads(void);

/* One direction's loop state; a step's tasks each own a range of hidden units [j0, j1) (in vectors) for every
 * row: its gate columns' GEMM, the gate math, its slice of Y. The state h is double-buffered (h_old read by
 * every task's GEMM, h_new written) and swapped between steps; c, gates and scratch are touched only in a
 * task's own columns. GRU without linear_before_reset needs r * h over all units before its third product, so
 * its step runs in two phases. */
typedef struct {
  int kind, lbr, input_forget, has_clip, af, ag, ah;
  float clip;
  long B, H, Hp, G, ldr, hv, ntasks;
  const float *rt, *pp, *rbp;
  const int64_t *lens;
  float *h_old, *h_new, *cs, *gates, *tmp;
  float *yt; /* Y at this step, or NULL */
  long yb;
  long t;
  int phase; /* GRU without linear_before_reset: 1 (z, r and r*h), 2 (candidate and h) */
} rnn_ctx;

/* Gates [0, ng) over a task's units [j0, j1) of every row: out += h @ R^T. One product over all the gates' columns
 * when the task has every unit (their segments are then contiguous), else one per gate. */
static void gates_acc(const float *h, long B, const float *rt, long H, long Hp, long ng, long j0, long j1, float *out,
                      long ldo) {
  if (j0 == 0 && j1 == Hp) {
    gemm_acc(h, Hp, B, rt, H, 0, ng * Hp, out, ldo);
    return;
  }
  for (long g = 0; g < ng; g++) gemm_acc(h, Hp, B, rt, H, g * Hp + j0, j1 - j0, out + g * Hp + j0, ldo);
}

static void rnn_step_task(const void *vctx, long task) {
  const rnn_ctx *x = (const rnn_ctx *)vctx;
  const long j0 = task * x->hv / x->ntasks * VL, j1 = (task + 1) * x->hv / x->ntasks * VL;
  if (j1 <= j0) return;
  const long B = x->B, H = x->H, Hp = x->Hp, ldr = x->ldr, nc = j1 - j0;
  const int has_clip = x->has_clip, af = x->af, ag = x->ag, ah = x->ah;
  const float clip = x->clip;
  const float *rt = x->rt, *pp = x->pp;
  float *gates = x->gates, *tmp = x->tmp;
  if (x->kind == 1 && !x->lbr && x->phase == 1) {
    gates_acc(x->h_old, B, rt, H, Hp, 2, j0, j1, gates, ldr);
    for (long b = 0; b < B; b++)
      for (long j = j0; j < j1; j += VL) {
        v16 r = ract(rclip(vload(gates + b * ldr + Hp + j), has_clip, clip), af);
        vstore(tmp + b * Hp + j, r * vload(x->h_old + b * Hp + j));
      }
    return;
  }
  if (x->kind == 1 && !x->lbr) {
    gemm_acc(tmp, Hp, B, rt, H, 2 * Hp + j0, nc, gates + 2 * Hp + j0, ldr);
  } else {
    gates_acc(x->h_old, B, rt, H, Hp, x->G, j0, j1, gates, ldr);
  }
  for (long b = 0; b < B; b++) {
    const float *ho = x->h_old + b * Hp;
    float *h = x->h_new + b * Hp, *c = x->cs + b * Hp;
    const long yn = (j1 < H ? j1 : H) - j0; /* this task's share of the row in Y */
    float *yrow = x->yt ? x->yt + b * x->yb + j0 : NULL;
    if (x->lens && x->t >= x->lens[b]) { /* past this entry's length: state kept, output zero */
      memcpy(h + j0, ho + j0, (size_t)nc * sizeof(float));
      if (yrow && yn > 0) memset(yrow, 0, (size_t)yn * sizeof(float));
      continue;
    }
    const float *gt = gates + b * ldr;
    if (x->kind == 0) {
      for (long j = j0; j < j1; j += VL) vstore(h + j, ract(rclip(vload(gt + j), has_clip, clip), af));
    } else if (x->kind == 2) {
      for (long j = j0; j < j1; j += VL) {
        v16 cp = vload(c + j);
        v16 pi = vload(gt + j), po = vload(gt + Hp + j), pf = vload(gt + 2 * Hp + j);
        v16 pc = vload(gt + 3 * Hp + j);
        if (pp) { pi += vload(pp + j) * cp; pf += vload(pp + 2 * Hp + j) * cp; }
        v16 i = ract(rclip(pi, has_clip, clip), af);
        v16 f = 1.0f - i;
        if (!x->input_forget) f = ract(rclip(pf, has_clip, clip), af);
        v16 cn = f * cp + i * ract(rclip(pc, has_clip, clip), ag);
        if (pp) po += vload(pp + Hp + j) * cn;
        v16 o = ract(rclip(po, has_clip, clip), af);
        vstore(c + j, cn);
        vstore(h + j, o * ract(cn, ah));
      }
    } else if (x->lbr) { /* GRU, h~ = g(x_h + r * (h R_h^T + Rb_h)): x_h (Wb_h in it) in tmp, Rb_h in the gate */
      for (long j = j0; j < j1; j += VL) {
        v16 z = ract(rclip(vload(gt + j), has_clip, clip), af);
        v16 r = ract(rclip(vload(gt + Hp + j), has_clip, clip), af);
        v16 cand = vload(tmp + b * Hp + j) + r * vload(gt + 2 * Hp + j);
        v16 ht = ract(rclip(cand, has_clip, clip), ag);
        vstore(h + j, (1.0f - z) * ht + z * vload(ho + j));
      }
    } else { /* GRU, h~ = g(x_h + (r * h) R_h^T), both biases in x_h */
      for (long j = j0; j < j1; j += VL) {
        v16 z = ract(rclip(vload(gt + j), has_clip, clip), af);
        v16 ht = ract(rclip(vload(gt + 2 * Hp + j), has_clip, clip), ag);
        vstore(h + j, (1.0f - z) * ht + z * vload(ho + j));
      }
    }
    if (yrow && yn > 0) memcpy(yrow, h + j0, (size_t)yn * sizeof(float));
  }
}

/* Packed R^T up to this size stays in one thread's cache from step to step (half a 2 MiB L2). */
#define RL_BATCH_SPLIT_BYTES (1L << 20)

/* One direction's whole sequence; its steps are split between the pool's threads only when may_split, and then
 * when a step is large (RN_SERIAL_WORK) or R^T does not fit one thread's cache: each thread then keeps its
 * columns' share of R^T in its own cache instead of streaming all of it every step. */
static void rnn_seq(const int64_t *a, int may_split) {
  const int kind = (int)a[RN_KIND];
  const float *xp = (const float *)a[RN_XP];
  const long xpt = a[RN_XP_T], xpb = a[RN_XP_B];
  const long S = a[RN_SEQ], B = a[RN_BATCH], H = a[RN_HIDDEN];
  const long Hp = (H + VL - 1) / VL * VL;
  const long G = kind == 2 ? 4 : (kind == 1 ? 3 : 1);
  const long ldr = G * Hp;
  const int reverse = (int)a[RN_REVERSE];
  const float *rbh = (const float *)a[RN_RBH];
  const float *peep = (const float *)a[RN_PEEP];
  float *y = (float *)a[RN_Y];

  /* states h (two buffers), c (B, Hp); gates (B, G * Hp); GRU scratch (B, Hp); padded peepholes, Rb_h */
  size_t nfl = (size_t)(3 * B * Hp + B * ldr + B * Hp + 3 * Hp + Hp + 2 * B);
  float *buf = (float *)aligned_alloc(64, ((nfl * sizeof(float)) + 63) / 64 * 64);
  if (!buf) { /* out of memory: NaN, never a silently wrong result */
    for (long t = 0; y && t < S; t++)
      for (long b = 0; b < B; b++)
        for (long j = 0; j < H; j++) y[t * a[RN_Y_T] + b * a[RN_Y_B] + j] = __builtin_nanf("");
    return;
  }
  memset(buf, 0, nfl * sizeof(float));
  float *hs = buf, *hs2 = buf + B * Hp, *cs = hs2 + B * Hp, *gates = cs + B * Hp, *tmp = gates + B * ldr;
  float *pp = tmp + B * Hp, *rbp = pp + 3 * Hp;
  int64_t *lens = NULL;
  if (a[RN_LENS]) { /* read once, clamped: a graph input's values may be anything */
    lens = (int64_t *)(rbp + Hp);
    for (long b = 0; b < B; b++) {
      int64_t n = a[RN_LENS_I32] ? ((const int32_t *)a[RN_LENS])[b] : ((const int64_t *)a[RN_LENS])[b];
      lens[b] = n < 0 ? 0 : (n > S ? S : n);
    }
  }
  for (long b = 0; b < B; b++) {
    if (a[RN_H0]) memcpy(hs + b * Hp, (const float *)a[RN_H0] + b * a[RN_H0_B], (size_t)H * sizeof(float));
    if (a[RN_C0]) memcpy(cs + b * Hp, (const float *)a[RN_C0] + b * a[RN_C0_B], (size_t)H * sizeof(float));
  }
  if (peep)
    for (int g = 0; g < 3; g++) memcpy(pp + g * Hp, peep + g * H, (size_t)H * sizeof(float));
  if (rbh) memcpy(rbp, rbh, (size_t)H * sizeof(float));

  rnn_ctx cx = {
      .kind = kind, .lbr = (int)a[RN_LBR], .input_forget = (int)a[RN_INPUT_FORGET],
      .has_clip = (int)a[RN_HAS_CLIP], .af = (int)a[RN_ACT_F], .ag = (int)a[RN_ACT_G], .ah = (int)a[RN_ACT_H],
      .clip = f32(a[RN_CLIP]), .B = B, .H = H, .Hp = Hp, .G = G, .ldr = ldr, .hv = Hp / VL,
      .rt = (const float *)a[RN_RT], .pp = peep ? pp : NULL, .rbp = rbp, .lens = lens,
      .cs = cs, .gates = gates, .tmp = tmp, .yb = a[RN_Y_B],
  };
  long threads = may_split ? ap_get_threads() : 1;
  const int small = G * H * Hp * B < a[RN_SERIAL_WORK] && G * Hp * H * (long)sizeof(float) <= RL_BATCH_SPLIT_BYTES;
  cx.ntasks = small ? 1 : (threads < cx.hv ? threads : cx.hv);
  if (cx.ntasks < 1) cx.ntasks = 1;
  for (long s = 0; s < S; s++) {
    const long t = reverse ? S - 1 - s : s;
    for (long b = 0; b < B; b++) {
      const float *xr = xp + t * xpt + b * xpb;
      float *gt = gates + b * ldr;
      if (kind == 1 && cx.lbr) { /* x_h apart (scaled by r later), the h gate's product starts from Rb_h */
        for (long g = 0; g < 2; g++) memcpy(gt + g * Hp, xr + g * H, (size_t)H * sizeof(float));
        memcpy(tmp + b * Hp, xr + 2 * H, (size_t)H * sizeof(float));
        memcpy(gt + 2 * Hp, rbp, (size_t)Hp * sizeof(float));
      } else {
        for (long g = 0; g < G; g++) memcpy(gt + g * Hp, xr + g * H, (size_t)H * sizeof(float));
      }
    }
    cx.h_old = hs;
    cx.h_new = hs2;
    cx.t = t;
    cx.yt = y ? y + t * a[RN_Y_T] : NULL;
    if (kind == 1 && !cx.lbr) {
      cx.phase = 1;
      if (cx.ntasks > 1) ap_pool_for(cx.ntasks, rnn_step_task, &cx);
      else rnn_step_task(&cx, 0);
    }
    cx.phase = 2;
    if (cx.ntasks > 1) ap_pool_for(cx.ntasks, rnn_step_task, &cx);
    else rnn_step_task(&cx, 0);
    float *swap = hs;
    hs = hs2;
    hs2 = swap;
  }
  for (long b = 0; b < B; b++) {
    if (a[RN_HN]) memcpy((float *)a[RN_HN] + b * a[RN_HN_B], hs + b * Hp, (size_t)H * sizeof(float));
    if (a[RN_CN]) memcpy((float *)a[RN_CN] + b * a[RN_CN_B], cs + b * Hp, (size_t)H * sizeof(float));
  }
  free(buf);
}

/* Argument block of ap_rnn_layer: the number of directions (1 or 2), then each direction's ap_rnn_seq block. */
enum { RL_DIRS, RL_BLOCKS, RL_NARGS = 3 }; /* two blocks: RL_BLOCKS, RL_BLOCKS + 1 */

typedef struct {
  const int64_t *a;
  long chunks; /* batch chunks per direction */
} rnn_layer_ctx;

/* Task d * chunks + k: direction d over the k-th chunk of the batch, a loop of its own from the first step to
 * the last (batch rows are independent), its steps never split. */
static void rnn_layer_task(const void *vctx, long task) {
  const rnn_layer_ctx *x = (const rnn_layer_ctx *)vctx;
  const int64_t *src = (const int64_t *)(intptr_t)x->a[RL_BLOCKS + task / x->chunks];
  const long k = task % x->chunks, B = src[RN_BATCH];
  const long b0 = k * B / x->chunks, b1 = (k + 1) * B / x->chunks;
  if (b1 <= b0) return;
  int64_t blk[RN_NARGS];
  memcpy(blk, src, sizeof(blk));
  const int64_t f = (int64_t)sizeof(float);
  blk[RN_BATCH] = b1 - b0;
  blk[RN_XP] += b0 * src[RN_XP_B] * f;
  if (blk[RN_H0]) blk[RN_H0] += b0 * src[RN_H0_B] * f;
  if (blk[RN_C0]) blk[RN_C0] += b0 * src[RN_C0_B] * f;
  if (blk[RN_LENS]) blk[RN_LENS] += b0 * (src[RN_LENS_I32] ? 4 : 8);
  if (blk[RN_Y]) blk[RN_Y] += b0 * src[RN_Y_B] * f;
  if (blk[RN_HN]) blk[RN_HN] += b0 * src[RN_HN_B] * f;
  if (blk[RN_CN]) blk[RN_CN] += b0 * src[RN_CN_B] * f;
  rnn_seq(blk, 0);
}

/* Every direction of one layer. With two threads or more, the directions and chunks of the batch run
 * concurrently, each task a whole sequence on one thread (no join per step; a task nobody claims yet is taken by
 * whoever is free, so a descheduled worker costs its share at most). A single sequence of one batch row instead
 * splits each step's hidden units between the threads, where the step is large enough (RN_SERIAL_WORK). */
RNN_API void ap_rnn_layer(const int64_t *a) {
  const long dirs = a[RL_DIRS], threads = ap_get_threads();
  const int64_t *first = (const int64_t *)(intptr_t)a[RL_BLOCKS];
  const long B = first[RN_BATCH], H = first[RN_HIDDEN], Hp = (H + VL - 1) / VL * VL;
  const long G = first[RN_KIND] == 2 ? 4 : (first[RN_KIND] == 1 ? 3 : 1);
  /* chunks of the batch: only while every thread can keep the whole packed R^T in its own cache (past that,
   * splitting each step's columns reads each weight once per step instead of once per thread). At least one per
   * thread, and down to four rows (a full register tile) each, so that a worker the OS deschedules holds up a
   * small share: the others claim the tasks it has not started. */
  long chunks = 1;
  if (G * Hp * H * (long)sizeof(float) <= RL_BATCH_SPLIT_BYTES) {
    chunks = threads / dirs;
    if (chunks < B / 4) chunks = B / 4;
  }
  if (chunks > B) chunks = B;
  if (chunks < 1) chunks = 1;
  if (threads > 1 && dirs * chunks > 1) {
    rnn_layer_ctx cx = {.a = a, .chunks = chunks};
    ap_pool_for(dirs * chunks, rnn_layer_task, &cx);
    return;
  }
  for (long d = 0; d < dirs; d++) rnn_seq((const int64_t *)(intptr_t)a[RL_BLOCKS + d], 1);
}

RNN_API void ap_rnn_seq(const int64_t *a) { rnn_seq(a, 1); }
