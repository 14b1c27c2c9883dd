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

#define RNN_API __attribute__((visibility("default")))
#define RINLINE static inline __attribute__((always_inline))

typedef float rv16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t rvi16 __attribute__((vector_size(64), aligned(4), may_alias));
#define RVL 16

RINLINE rv16 rload(const float *p) { return *(const rv16 *)p; }
RINLINE void rstore(float *p, rv16 v) { *(rv16 *)p = v; }
RINLINE rv16 rsplat(float f) { return (rv16){0} + f; }
RINLINE rv16 rblend(rvi16 mask, rv16 yes, rv16 no) { return (rv16)((mask & (rvi16)yes) | (~mask & (rvi16)no)); }
RINLINE rv16 rmax(rv16 a, rv16 b) { return rblend((rvi16)(a < b), b, a); }
RINLINE rv16 rmin(rv16 a, rv16 b) { return rblend((rvi16)(a > b), b, a); }
RINLINE float rf32(int64_t bits) { union { int32_t i; float f; } u; u.i = (int32_t)bits; return u.f; }

/* exp(x), Cephes' expf polynomial after range reduction by ln 2; relative error ~1e-7 over the clamped range. */
RINLINE rv16 rexp(rv16 x) {
  x = rmin(rmax(x, rsplat(-87.0f)), rsplat(88.0f));
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits */
  rv16 t = x * 1.44269504088896341f + magic;
  rv16 n = t - magic;
  rvi16 ni = (rvi16)t - (rvi16)rsplat(magic);
  rv16 r = x - n * 0.693359375f + n * 2.12194440e-4f;
  rv16 p = rsplat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return (rv16)((rvi16)p + (ni << 23));
}
RINLINE rv16 rsigmoid(rv16 x) { return 1.0f / (1.0f + rexp(-x)); }
RINLINE rv16 rtanh(rv16 x) {
  rv16 ax = rblend((rvi16)(x < 0.0f), -x, x);
  rv16 e = rexp(-2.0f * ax); /* in (0, 1]: no overflow */
  rv16 small = ax * (1.0f - ax * ax * (1.0f / 3.0f)); /* |x| < 2^-7: the series, 1 - 2/(e+1) cancels there */
  rv16 big = (1.0f - e) / (1.0f + e);
  rv16 y = rblend((rvi16)(ax < 0.0078125f), small, big);
  return rblend((rvi16)(x < 0.0f), -y, y);
}
enum { RA_SIGMOID = 0, RA_TANH = 1, RA_RELU = 2 };
RINLINE rv16 ract(rv16 x, int kind) {
  if (kind == RA_SIGMOID) return rsigmoid(x);
  if (kind == RA_TANH) return rtanh(x);
  return rblend((rvi16)(x < 0.0f), rsplat(0.0f), x);
}
RINLINE rv16 rclip(rv16 x, int has_clip, float clip) {
  return has_clip ? rmin(rmax(x, rsplat(-clip)), rsplat(clip)) : x;
}

/* out[b][0:ncols] += h[b][0:H] @ RT[0:H, col0:col0+ncols] for rows b in [0, nrows), out rows ld ldo, h rows ld ldh.
 * RT is packed in panels of 16 columns, panel p holding RT[k, 16p:16p+16] at rt + (p*H + k)*16, so each panel is
 * one contiguous stream; col0 and ncols are multiples of 16. Up to 4 rows x 2 panels share each load. */
/* One row (batch 1): eight panels at a time, so eight independent accumulators hide the FMA latency. */
static void gemv_acc(const float *h, const float *rt, long H, long p0, long np, float *out) {
  long p = 0;
  for (; p + 8 <= np; p += 8) {
    const float *w = rt + (p0 + p) * H * RVL;
    const long ps = H * RVL;
    rv16 a0 = rload(out + p * RVL), a1 = rload(out + (p + 1) * RVL), a2 = rload(out + (p + 2) * RVL);
    rv16 a3 = rload(out + (p + 3) * RVL), a4 = rload(out + (p + 4) * RVL), a5 = rload(out + (p + 5) * RVL);
    rv16 a6 = rload(out + (p + 6) * RVL), a7 = rload(out + (p + 7) * RVL);
    for (long k = 0; k < H; k++) {
      const float *wk = w + k * RVL;
      rv16 s = rsplat(h[k]);
      a0 += s * rload(wk); a1 += s * rload(wk + ps); a2 += s * rload(wk + 2 * ps); a3 += s * rload(wk + 3 * ps);
      a4 += s * rload(wk + 4 * ps); a5 += s * rload(wk + 5 * ps); a6 += s * rload(wk + 6 * ps);
      a7 += s * rload(wk + 7 * ps);
    }
    rstore(out + p * RVL, a0); rstore(out + (p + 1) * RVL, a1); rstore(out + (p + 2) * RVL, a2);
    rstore(out + (p + 3) * RVL, a3); rstore(out + (p + 4) * RVL, a4); rstore(out + (p + 5) * RVL, a5);
    rstore(out + (p + 6) * RVL, a6); rstore(out + (p + 7) * RVL, a7);
  }
  for (; p < np; p++) {
    const float *w = rt + (p0 + p) * H * RVL;
    rv16 a = rload(out + p * RVL), b = {0};
    long k = 0;
    for (; k + 2 <= H; k += 2) {
      a += rsplat(h[k]) * rload(w + k * RVL);
      b += rsplat(h[k + 1]) * rload(w + (k + 1) * RVL);
    }
    if (k < H) a += rsplat(h[k]) * rload(w + k * RVL);
    rstore(out + p * RVL, a + b);
  }
}

static void gemm_acc(const float *h, long ldh, long nrows, const float *rt, long H, long col0, long ncols, float *out,
                     long ldo) {
  const long p0 = col0 / RVL, np = ncols / RVL;
  if (nrows == 1) {
    gemv_acc(h, rt, H, p0, np, out);
    return;
  }
  for (long r0 = 0; r0 < nrows; r0 += 4) {
    const long nr = nrows - r0 < 4 ? nrows - r0 : 4;
    const float *hr[4];
    for (long r = 0; r < 4; r++) hr[r] = h + (r0 + (r < nr ? r : 0)) * ldh;
    long p = 0;
    for (; p + 2 <= np; p += 2) {
      const float *w0 = rt + (p0 + p) * H * RVL, *w1 = w0 + H * RVL;
      float *o = out + r0 * ldo + p * RVL;
      rv16 a00 = rload(o), a01 = rload(o + RVL), a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
      if (nr > 1) { a10 = rload(o + ldo); a11 = rload(o + ldo + RVL); }
      if (nr > 2) { a20 = rload(o + 2 * ldo); a21 = rload(o + 2 * ldo + RVL); }
      if (nr > 3) { a30 = rload(o + 3 * ldo); a31 = rload(o + 3 * ldo + RVL); }
      for (long k = 0; k < H; k++) {
        rv16 v0 = rload(w0 + k * RVL), v1 = rload(w1 + k * RVL);
        rv16 s0 = rsplat(hr[0][k]), s1 = rsplat(hr[1][k]), s2 = rsplat(hr[2][k]), s3 = rsplat(hr[3][k]);
        a00 += s0 * v0; a01 += s0 * v1;
        a10 += s1 * v0; a11 += s1 * v1;
        a20 += s2 * v0; a21 += s2 * v1;
        a30 += s3 * v0; a31 += s3 * v1;
      }
      rstore(o, a00); rstore(o + RVL, a01);
      if (nr > 1) { rstore(o + ldo, a10); rstore(o + ldo + RVL, a11); }
      if (nr > 2) { rstore(o + 2 * ldo, a20); rstore(o + 2 * ldo + RVL, a21); }
      if (nr > 3) { rstore(o + 3 * ldo, a30); rstore(o + 3 * ldo + RVL, a31); }
    }
    for (; p < np; p++) {
      const float *w0 = rt + (p0 + p) * H * RVL;
      for (long r = 0; r < nr; r++) {
        float *o = out + (r0 + r) * ldo + p * RVL;
        rv16 a = rload(o);
        for (long k = 0; k < H; k++) a += rsplat(hr[r][k]) * rload(w0 + k * RVL);
        rstore(o, a);
      }
    }
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
  RN_LENS,     /* int64* sequence lengths (clamped to [0, seq] by the caller) or 0 */
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

static void rnn_step_task(const void *vctx, long task) {
  const rnn_ctx *x = (const rnn_ctx *)vctx;
  const long j0 = task * x->hv / x->ntasks * RVL, j1 = (task + 1) * x->hv / x->ntasks * RVL;
  if (j1 <= j0) return;
  const long B = x->B, H = x->H, Hp = x->Hp, ldr = x->ldr, nc = j1 - j0;
  const int has_clip = x->has_clip, af = x->af, ag = x->ag, ah = x->ah;
  const float clip = x->clip;
  const float *rt = x->rt, *pp = x->pp;
  float *gates = x->gates, *tmp = x->tmp;
  if (x->kind == 1 && !x->lbr && x->phase == 1) {
    gemm_acc(x->h_old, Hp, B, rt, H, j0, nc, gates + j0, ldr);
    gemm_acc(x->h_old, Hp, B, rt, H, Hp + j0, nc, gates + Hp + j0, ldr);
    for (long b = 0; b < B; b++)
      for (long j = j0; j < j1; j += RVL) {
        rv16 r = ract(rclip(rload(gates + b * ldr + Hp + j), has_clip, clip), af);
        rstore(tmp + b * Hp + j, r * rload(x->h_old + b * Hp + j));
      }
    return;
  }
  if (x->kind == 1 && !x->lbr) {
    gemm_acc(tmp, Hp, B, rt, H, 2 * Hp + j0, nc, gates + 2 * Hp + j0, ldr);
  } else if (x->kind == 1) {
    for (long g = 0; g < 2; g++) gemm_acc(x->h_old, Hp, B, rt, H, g * Hp + j0, nc, gates + g * Hp + j0, ldr);
    for (long b = 0; b < B; b++) memset(tmp + b * Hp + j0, 0, (size_t)nc * sizeof(float));
    gemm_acc(x->h_old, Hp, B, rt, H, 2 * Hp + j0, nc, tmp + j0, Hp);
  } else {
    for (long g = 0; g < x->G; g++) gemm_acc(x->h_old, Hp, B, rt, H, g * Hp + j0, nc, gates + g * Hp + j0, ldr);
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
      for (long j = j0; j < j1; j += RVL) rstore(h + j, ract(rclip(rload(gt + j), has_clip, clip), af));
    } else if (x->kind == 2) {
      for (long j = j0; j < j1; j += RVL) {
        rv16 cp = rload(c + j);
        rv16 pi = rload(gt + j), po = rload(gt + Hp + j), pf = rload(gt + 2 * Hp + j);
        rv16 pc = rload(gt + 3 * Hp + j);
        if (pp) { pi += rload(pp + j) * cp; pf += rload(pp + 2 * Hp + j) * cp; }
        rv16 i = ract(rclip(pi, has_clip, clip), af);
        rv16 f = 1.0f - i;
        if (!x->input_forget) f = ract(rclip(pf, has_clip, clip), af);
        rv16 cn = f * cp + i * ract(rclip(pc, has_clip, clip), ag);
        if (pp) po += rload(pp + Hp + j) * cn;
        rv16 o = ract(rclip(po, has_clip, clip), af);
        rstore(c + j, cn);
        rstore(h + j, o * ract(cn, ah));
      }
    } else if (x->lbr) { /* GRU, h~ = g(x_h + r * (h R_h^T + Rb_h)) with Wb_h in x_h */
      for (long j = j0; j < j1; j += RVL) {
        rv16 z = ract(rclip(rload(gt + j), has_clip, clip), af);
        rv16 r = ract(rclip(rload(gt + Hp + j), has_clip, clip), af);
        rv16 cand = rload(gt + 2 * Hp + j) + r * (rload(tmp + b * Hp + j) + rload(x->rbp + j));
        rv16 ht = ract(rclip(cand, has_clip, clip), ag);
        rstore(h + j, (1.0f - z) * ht + z * rload(ho + j));
      }
    } else { /* GRU, h~ = g(x_h + (r * h) R_h^T), both biases in x_h */
      for (long j = j0; j < j1; j += RVL) {
        rv16 z = ract(rclip(rload(gt + j), has_clip, clip), af);
        rv16 ht = ract(rclip(rload(gt + 2 * Hp + j), has_clip, clip), ag);
        rstore(h + j, (1.0f - z) * ht + z * rload(ho + j));
      }
    }
    if (yrow && yn > 0) memcpy(yrow, h + j0, (size_t)yn * sizeof(float));
  }
}

RNN_API void ap_rnn_seq(const int64_t *a) {
  const int kind = (int)a[RN_KIND];
  const float *xp = (const float *)a[RN_XP];
  const long xpt = a[RN_XP_T], xpb = a[RN_XP_B];
  const long S = a[RN_SEQ], B = a[RN_BATCH], H = a[RN_HIDDEN];
  const long Hp = (H + RVL - 1) / RVL * RVL;
  const long G = kind == 2 ? 4 : (kind == 1 ? 3 : 1);
  const long ldr = G * Hp;
  const int reverse = (int)a[RN_REVERSE];
  const float *rbh = (const float *)a[RN_RBH];
  const float *peep = (const float *)a[RN_PEEP];
  float *y = (float *)a[RN_Y];

  /* states h (two buffers), c (B, Hp); gates (B, G * Hp); GRU scratch (B, Hp); padded peepholes, Rb_h */
  size_t nfl = (size_t)(3 * B * Hp + B * ldr + B * Hp + 3 * Hp + Hp);
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
      .clip = rf32(a[RN_CLIP]), .B = B, .H = H, .Hp = Hp, .G = G, .ldr = ldr, .hv = Hp / RVL,
      .rt = (const float *)a[RN_RT], .pp = peep ? pp : NULL, .rbp = rbp, .lens = (const int64_t *)a[RN_LENS],
      .cs = cs, .gates = gates, .tmp = tmp, .yb = a[RN_Y_B],
  };
  long threads = ap_get_threads();
  cx.ntasks = G * H * Hp * B < a[RN_SERIAL_WORK] ? 1 : (threads < cx.hv ? threads : cx.hv);
  if (cx.ntasks < 1) cx.ntasks = 1;
  for (long s = 0; s < S; s++) {
    const long t = reverse ? S - 1 - s : s;
    for (long b = 0; b < B; b++) {
      const float *xr = xp + t * xpt + b * xpb;
      for (long g = 0; g < G; g++) memcpy(gates + b * ldr + g * Hp, xr + g * H, (size_t)H * sizeof(float));
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
