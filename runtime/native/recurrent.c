/* appopt runtime native kernels: the recurrent layers (RNN, GRU, LSTM), one direction's whole sequence per call.
 *
 * Compiled together with kernels.c (runtime/native/__init__.py SOURCES). The caller (runtime/kernels/rnn.py)
 * computes the input projection for every time step as one GEMM, X W^T + biases, and packs R^T once per weight;
 * this loop then runs the recurrence without returning to Python: per step and batch row, a GEMV against the
 * packed R^T and the gate math, vectorised.
 *
 * Packing: each gate's H columns are padded to Hp (a multiple of 16), so R^T is (H, G*Hp) row-major and every
 * gate segment starts on a vector boundary; padded columns are zero, so the padded lanes of the state stay finite
 * and are never written out. Activations: 0 sigmoid, 1 tanh, 2 relu (others run on the NumPy path).
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

/* out[0:ncols] += h[0:H] @ RT[0:H, col0:col0+ncols] (ld ldr; ncols a multiple of 16), four vectors at a time. */
static void gemv_acc(const float *h, const float *rt, long H, long ldr, long col0, long ncols, float *out) {
  long c = 0;
  for (; c + 4 * RVL <= ncols; c += 4 * RVL) {
    rv16 a0 = rload(out + c), a1 = rload(out + c + RVL), a2 = rload(out + c + 2 * RVL), a3 = rload(out + c + 3 * RVL);
    const float *w = rt + col0 + c;
    for (long k = 0; k < H; k++, w += ldr) {
      rv16 hk = rsplat(h[k]);
      a0 += hk * rload(w);
      a1 += hk * rload(w + RVL);
      a2 += hk * rload(w + 2 * RVL);
      a3 += hk * rload(w + 3 * RVL);
    }
    rstore(out + c, a0); rstore(out + c + RVL, a1); rstore(out + c + 2 * RVL, a2); rstore(out + c + 3 * RVL, a3);
  }
  for (; c < ncols; c += RVL) {
    rv16 a0 = rload(out + c);
    const float *w = rt + col0 + c;
    for (long k = 0; k < H; k++, w += ldr) a0 += rsplat(h[k]) * rload(w);
    rstore(out + c, a0);
  }
}

/* Argument block of ap_rnn_seq (int64 each; pointers as addresses, floats as float32 bits). */
enum {
  RN_KIND,     /* 0 RNN, 1 GRU, 2 LSTM */
  RN_XP,       /* float*: projected input, gate g column j of step t, row b at XP + t*XP_T + b*XP_B + g*H + j */
  RN_XP_T, RN_XP_B,
  RN_RT,       /* float*: packed R^T, (H, G*Hp) */
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
  RN_NARGS
};

RNN_API void ap_rnn_seq(const int64_t *a) {
  const int kind = (int)a[RN_KIND];
  const float *xp = (const float *)a[RN_XP];
  const long xpt = a[RN_XP_T], xpb = a[RN_XP_B];
  const float *rt = (const float *)a[RN_RT];
  const long S = a[RN_SEQ], B = a[RN_BATCH], H = a[RN_HIDDEN];
  const long Hp = (H + RVL - 1) / RVL * RVL;
  const long G = kind == 2 ? 4 : (kind == 1 ? 3 : 1);
  const long ldr = G * Hp;
  const int64_t *lens = (const int64_t *)a[RN_LENS];
  const int reverse = (int)a[RN_REVERSE];
  float *y = (float *)a[RN_Y];
  const long yt = a[RN_Y_T], yb = a[RN_Y_B];
  const int has_clip = (int)a[RN_HAS_CLIP];
  const float clip = rf32(a[RN_CLIP]);
  const int lbr = (int)a[RN_LBR];
  const float *rbh = (const float *)a[RN_RBH];
  const float *peep = (const float *)a[RN_PEEP];
  const int input_forget = (int)a[RN_INPUT_FORGET];
  const int af = (int)a[RN_ACT_F], ag = (int)a[RN_ACT_G], ah = (int)a[RN_ACT_H];

  /* state h, c (B, Hp); gates (Hp * G); gru scratch (Hp); padded peepholes and rbh (3 Hp, Hp) */
  size_t nfl = (size_t)(2 * B * Hp + ldr + 2 * Hp + 3 * Hp + Hp);
  float *buf = (float *)aligned_alloc(64, ((nfl * sizeof(float)) + 63) / 64 * 64);
  if (!buf) return;
  memset(buf, 0, nfl * sizeof(float));
  float *hs = buf, *cs = buf + B * Hp, *gates = cs + B * Hp, *tmp = gates + ldr, *tmp2 = tmp + Hp;
  float *pp = tmp2 + Hp, *rbp = pp + 3 * Hp;
  for (long b = 0; b < B; b++) {
    if (a[RN_H0]) memcpy(hs + b * Hp, (const float *)a[RN_H0] + b * a[RN_H0_B], (size_t)H * sizeof(float));
    if (a[RN_C0]) memcpy(cs + b * Hp, (const float *)a[RN_C0] + b * a[RN_C0_B], (size_t)H * sizeof(float));
  }
  if (peep)
    for (int g = 0; g < 3; g++) memcpy(pp + g * Hp, peep + g * H, (size_t)H * sizeof(float));
  if (rbh) memcpy(rbp, rbh, (size_t)H * sizeof(float));

  for (long s = 0; s < S; s++) {
    const long t = reverse ? S - 1 - s : s;
    for (long b = 0; b < B; b++) {
      float *yrow = y ? y + t * yt + b * yb : NULL;
      if (lens && t >= lens[b]) { /* past this entry's length: state kept, output zero */
        if (yrow) memset(yrow, 0, (size_t)H * sizeof(float));
        continue;
      }
      float *h = hs + b * Hp, *c = cs + b * Hp;
      const float *x = xp + t * xpt + b * xpb;
      for (long g = 0; g < G; g++) memcpy(gates + g * Hp, x + g * H, (size_t)H * sizeof(float));
      if (kind == 0) {
        gemv_acc(h, rt, H, ldr, 0, Hp, gates);
        for (long j = 0; j < Hp; j += RVL) rstore(h + j, ract(rclip(rload(gates + j), has_clip, clip), af));
      } else if (kind == 2) {
        gemv_acc(h, rt, H, ldr, 0, ldr, gates);
        for (long j = 0; j < Hp; j += RVL) {
          rv16 cp = rload(c + j);
          rv16 pi = rload(gates + j), po = rload(gates + Hp + j), pf = rload(gates + 2 * Hp + j);
          rv16 pc = rload(gates + 3 * Hp + j);
          if (peep) { pi += rload(pp + j) * cp; pf += rload(pp + 2 * Hp + j) * cp; }
          rv16 i = ract(rclip(pi, has_clip, clip), af);
          rv16 f = 1.0f - i;
          if (!input_forget) f = ract(rclip(pf, has_clip, clip), af);
          rv16 cn = f * cp + i * ract(rclip(pc, has_clip, clip), ag);
          if (peep) po += rload(pp + Hp + j) * cn;
          rv16 o = ract(rclip(po, has_clip, clip), af);
          rstore(c + j, cn);
          rstore(h + j, o * ract(cn, ah));
        }
      } else if (lbr) { /* GRU, h~ = g(x_h + r * (h R_h^T + Rb_h)) with Wb_h in x_h */
        memset(tmp, 0, (size_t)Hp * sizeof(float));
        gemv_acc(h, rt, H, ldr, 0, 2 * Hp, gates);
        gemv_acc(h, rt, H, ldr, 2 * Hp, Hp, tmp);
        for (long j = 0; j < Hp; j += RVL) {
          rv16 z = ract(rclip(rload(gates + j), has_clip, clip), af);
          rv16 r = ract(rclip(rload(gates + Hp + j), has_clip, clip), af);
          rv16 cand = rload(gates + 2 * Hp + j) + r * (rload(tmp + j) + rload(rbp + j));
          rv16 ht = ract(rclip(cand, has_clip, clip), ag);
          rstore(h + j, (1.0f - z) * ht + z * rload(h + j));
        }
      } else { /* GRU, h~ = g(x_h + (r * h) R_h^T), both biases in x_h */
        gemv_acc(h, rt, H, ldr, 0, 2 * Hp, gates);
        for (long j = 0; j < Hp; j += RVL) {
          rv16 r = ract(rclip(rload(gates + Hp + j), has_clip, clip), af);
          rstore(tmp + j, r * rload(h + j));
        }
        gemv_acc(tmp, rt, H, ldr, 2 * Hp, Hp, gates + 2 * Hp);
        for (long j = 0; j < Hp; j += RVL) {
          rv16 z = ract(rclip(rload(gates + j), has_clip, clip), af);
          rv16 ht = ract(rclip(rload(gates + 2 * Hp + j), has_clip, clip), ag);
          rstore(h + j, (1.0f - z) * ht + z * rload(h + j));
        }
      }
      if (yrow) memcpy(yrow, h, (size_t)H * sizeof(float));
    }
  }
  for (long b = 0; b < B; b++) {
    if (a[RN_HN]) memcpy((float *)a[RN_HN] + b * a[RN_HN_B], hs + b * Hp, (size_t)H * sizeof(float));
    if (a[RN_CN]) memcpy((float *)a[RN_CN] + b * a[RN_CN_B], cs + b * Hp, (size_t)H * sizeof(float));
  }
  free(buf);
}
