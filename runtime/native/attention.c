/* appopt runtime native kernels: fused scaled dot-product attention, compiled with kernels.c (EXTRA_SOURCES).
 *
 *   Y[b,h] = softmax(scale * Q[b,h] @ K[b,h]^T + M[b,h]) @ V[b,h]
 *
 * for the FusedAttention op (runtime/kernels/fused_attention.py, created by runtime/passes/attention_fusion.py).
 * Every operand is a strided 4-D view (element strides; 0 strides broadcast), so the head split and merge
 * Transposes, the Gathers of a packed QKV tensor and a broadcast mask are read in place, with no copies.
 *
 * One task is one (batch, head) pair and a chunk of query rows. It packs K^T (D x Skp) and V (Sk x Dvp) into
 * zero-padded scratch, then per block of 4 query rows computes the scores in registers (broadcast-FMA against
 * K^T, no horizontal sums), the softmax as the unfused Softmax op does it (max, exp, sum, multiply by 1/sum), and
 * the product with V, 4 rows x 64 columns of accumulators at a time. Scores never leave the L1-sized scratch.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vec16.h"

#define AT_API __attribute__((visibility("default")))
#define AINLINE static inline __attribute__((always_inline))

#define AROWS 4 /* query rows per register block */

/* The thread pool of kernels.c (parallel_for_work): tasks run on the pool's threads when the work is large. */
void ap_pool_run(long ntasks, void (*fn)(const void *, long), const void *ctx, double work);

/* exp(x) as recurrent.c computes it (vexp_clamped), except that x < -87 gives exactly 0: a masked score (-10000,
 * -inf) must not leave a denormal probability behind, since every multiply-add that then meets it in P @ V runs
 * ~100x slower. */
AINLINE v16 aexp(v16 x) {
  const vi16 under = (vi16)(x < -87.0f);
  return vblend(under, vsplat(0.0f), vexp_clamped(vmin(vmax(x, vsplat(-87.0f)), vsplat(88.0f))));
}

/* Argument block of ap_attention (int64 each; pointers as addresses, strides in elements, scale as f32 bits).
 * Mirrored by runtime/native/attention.py (tests/runtime/test_native_mirrors.py compares the two). */
enum {
  AT_Q, AT_K, AT_V, AT_M, AT_Y,
  AT_B, AT_H, AT_SQ, AT_SK, AT_D, AT_DV,
  AT_QS0, AT_QS1, AT_QS2, AT_QS3,
  AT_KS0, AT_KS1, AT_KS2, AT_KS3,
  AT_VS0, AT_VS1, AT_VS2, AT_VS3,
  AT_MS0, AT_MS1, AT_MS2, AT_MS3,
  AT_YS0, AT_YS1, AT_YS2, AT_YS3,
  AT_SCALE, AT_CHUNK,
  /* mask kind: 0 additive float mask; 1 boolean (one byte, strides in bytes) selecting the scaled score where it
   * equals AT_MKEEP and the fill value (f32 bits) elsewhere: Where(cond, scores, fill) or Where(cond, fill, scores) */
  AT_MKIND, AT_MKEEP, AT_MFILL,
  AT_NARGS
};
enum { MASK_ADD = 0, MASK_SELECT = 1 };

/* Scores of AROWS query rows against 16 * NV keys starting at column j of the packed K^T: s[r][j..] = q_r . k_j. */
#define QK_BLOCK(NV)                                                                                            \
  static void qk_block##NV(const float *const *q, long qs3, const float *kt, long skp, long d_len, long j,      \
                           float *s) {                                                                          \
    v16 acc[AROWS][NV];                                                                                         \
    for (int r = 0; r < AROWS; r++)                                                                             \
      for (int c = 0; c < NV; c++) acc[r][c] = vsplat(0.0f);                                                    \
    for (long d = 0; d < d_len; d++) {                                                                          \
      const float *krow = kt + d * skp + j;                                                                     \
      v16 kv[NV];                                                                                               \
      for (int c = 0; c < NV; c++) kv[c] = vload(krow + c * VL);                                                \
      for (int r = 0; r < AROWS; r++) {                                                                         \
        float qv = q[r][d * qs3];                                                                               \
        for (int c = 0; c < NV; c++) acc[r][c] += qv * kv[c];                                                   \
      }                                                                                                         \
    }                                                                                                           \
    for (int r = 0; r < AROWS; r++)                                                                             \
      for (int c = 0; c < NV; c++) vstore(s + r * skp + j + c * VL, acc[r][c]);                                 \
  }
QK_BLOCK(1)
QK_BLOCK(2)

/* Y rows (AROWS of them) for the 16 * NV value columns starting at e: y_r[e..] = sum_j p_r[j] v_j[e..]. */
#define PV_BLOCK(NV)                                                                                            \
  static void pv_block##NV(const float *p, long skp, const float *vp, long dvp, long sk, long e,                \
                           v16 acc[AROWS][4]) {                                                                 \
    for (int r = 0; r < AROWS; r++)                                                                             \
      for (int c = 0; c < NV; c++) acc[r][c] = vsplat(0.0f);                                                    \
    for (long j = 0; j < sk; j++) {                                                                             \
      const float *vrow = vp + j * dvp + e;                                                                     \
      v16 vv[NV];                                                                                               \
      for (int c = 0; c < NV; c++) vv[c] = vload(vrow + c * VL);                                                \
      for (int r = 0; r < AROWS; r++) {                                                                         \
        float pr = p[r * skp + j];                                                                              \
        for (int c = 0; c < NV; c++) acc[r][c] += pr * vv[c];                                                   \
      }                                                                                                         \
    }                                                                                                           \
  }
PV_BLOCK(1)
PV_BLOCK(2)
PV_BLOCK(3)
PV_BLOCK(4)

/* Scale, mask and softmax of one score row in place; the padded columns [sk, skp) end up 0. */
typedef struct {
  int kind, keep;
  float fill;
} mask_mode;

static void softmax_row(float *s, long sk, long skp, float scale, const void *m, long ms3, mask_mode mode) {
  if (m != NULL && mode.kind == MASK_SELECT) {
    const uint8_t *c = (const uint8_t *)m;
    for (long j = 0; j < sk; j++) s[j] = (c[j * ms3] != 0) == mode.keep ? s[j] * scale : mode.fill;
  } else if (m != NULL) {
    const float *add = (const float *)m;
    for (long j = 0; j < sk; j++) s[j] = s[j] * scale + add[j * ms3];
  } else {
    long j = 0;
    for (; j + VL <= sk; j += VL) vstore(s + j, vload(s + j) * scale);
    for (; j < sk; j++) s[j] *= scale;
  }
  float mx = -INFINITY;
  long j = 0;
  if (sk >= VL) {
    v16 mv = vload(s);
    for (j = VL; j + VL <= sk; j += VL) mv = vmax(vload(s + j), mv);
    for (int l = 0; l < VL; l++) mx = mv[l] > mx ? mv[l] : mx;
  }
  for (; j < sk; j++) mx = s[j] > mx ? s[j] : mx;
  v16 sum = vsplat(0.0f);
  float tail = 0.0f;
  for (j = 0; j + VL <= sk; j += VL) {
    v16 e = aexp(vload(s + j) - mx);
    vstore(s + j, e);
    sum += e;
  }
  for (; j < sk; j++) {
    float e = s[j] - mx < -87.0f ? 0.0f : expf(s[j] - mx);
    s[j] = e;
    tail += e;
  }
  for (int l = 0; l < VL; l++) tail += sum[l];
  /* normalised probabilities below FLT_MIN are flushed to 0 for the same reason */
  float inv = 1.0f / tail;
  for (j = 0; j + VL <= sk; j += VL) {
    v16 p = vload(s + j) * inv;
    vstore(s + j, vblend((vi16)(p < 1.17549435e-38f), vsplat(0.0f), p));
  }
  for (; j < sk; j++) s[j] = s[j] * inv < 1.17549435e-38f ? 0.0f : s[j] * inv;
  for (; j < skp; j++) s[j] = 0.0f;
}

static void attention_task(const void *vctx, long task) {
  const int64_t *a = (const int64_t *)vctx;
  const long H = a[AT_H], SQ = a[AT_SQ], SK = a[AT_SK], D = a[AT_D], DV = a[AT_DV], CHUNK = a[AT_CHUNK];
  const long chunks = (SQ + CHUNK - 1) / CHUNK;
  const long bh = task / chunks, b = bh / H, h = bh % H;
  const long i_begin = (task % chunks) * CHUNK, i_end = i_begin + CHUNK < SQ ? i_begin + CHUNK : SQ;
  const long skp = (SK + VL - 1) / VL * VL, dvp = (DV + VL - 1) / VL * VL;
  const float *q = (const float *)a[AT_Q] + b * a[AT_QS0] + h * a[AT_QS1];
  const float *k = (const float *)a[AT_K] + b * a[AT_KS0] + h * a[AT_KS1];
  const float *v = (const float *)a[AT_V] + b * a[AT_VS0] + h * a[AT_VS1];
  const mask_mode mode = {(int)a[AT_MKIND], a[AT_MKEEP] != 0, f32(a[AT_MFILL])};
  const long m_item = mode.kind == MASK_SELECT ? 1 : (long)sizeof(float); /* bytes per mask element */
  const char *m = a[AT_M] ? (const char *)a[AT_M] + (b * a[AT_MS0] + h * a[AT_MS1]) * m_item : NULL;
  float *y = (float *)a[AT_Y] + b * a[AT_YS0] + h * a[AT_YS1];
  const long qs2 = a[AT_QS2], qs3 = a[AT_QS3], ks2 = a[AT_KS2], ks3 = a[AT_KS3], vs2 = a[AT_VS2], vs3 = a[AT_VS3];
  const long ms2 = a[AT_MS2], ms3 = a[AT_MS3], ys2 = a[AT_YS2], ys3 = a[AT_YS3];
  const float scale = f32(a[AT_SCALE]);
  const size_t bytes = ((size_t)(D * skp + SK * dvp + AROWS * skp) * sizeof(float) + 63) / 64 * 64;
  float *kt = (float *)aligned_alloc(64, bytes);
  if (kt == NULL) { /* out of memory: NaN, never a silently wrong result */
    for (long i = i_begin; i < i_end; i++)
      for (long e = 0; e < DV; e++) y[i * ys2 + e * ys3] = __builtin_nanf("");
    return;
  }
  float *vp = kt + D * skp, *s = vp + SK * dvp;
  for (long d = 0; d < D; d++) {
    float *row = kt + d * skp;
    for (long j = 0; j < SK; j++) row[j] = k[j * ks2 + d * ks3];
    for (long j = SK; j < skp; j++) row[j] = 0.0f;
  }
  for (long j = 0; j < SK; j++) {
    float *row = vp + j * dvp;
    const float *src = v + j * vs2;
    if (vs3 == 1) memcpy(row, src, (size_t)DV * sizeof(float));
    else for (long e = 0; e < DV; e++) row[e] = src[e * vs3];
    for (long e = DV; e < dvp; e++) row[e] = 0.0f;
  }
  for (long i0 = i_begin; i0 < i_end; i0 += AROWS) {
    const long nr = i_end - i0 < AROWS ? i_end - i0 : AROWS;
    const float *qr[AROWS];
    for (int r = 0; r < AROWS; r++) qr[r] = q + (i0 + (r < nr ? r : nr - 1)) * qs2; /* short block: repeat a row */
    long j = 0;
    for (; j + 2 * VL <= skp; j += 2 * VL) qk_block2(qr, qs3, kt, skp, D, j, s);
    if (j < skp) qk_block1(qr, qs3, kt, skp, D, j, s);
    for (int r = 0; r < nr; r++)
      softmax_row(s + r * skp, SK, skp, scale, m ? m + (i0 + r) * ms2 * m_item : NULL, ms3, mode);
    for (long e = 0; e < dvp; e += 4 * VL) {
      const long nv = (dvp - e) / VL < 4 ? (dvp - e) / VL : 4;
      v16 acc[AROWS][4];
      if (nv == 4) pv_block4(s, skp, vp, dvp, SK, e, acc);
      else if (nv == 3) pv_block3(s, skp, vp, dvp, SK, e, acc);
      else if (nv == 2) pv_block2(s, skp, vp, dvp, SK, e, acc);
      else pv_block1(s, skp, vp, dvp, SK, e, acc);
      for (int r = 0; r < nr; r++) {
        float *yr = y + (i0 + r) * ys2;
        for (long c = 0; c < nv; c++) {
          const long e0 = e + c * VL, n = DV - e0 < VL ? DV - e0 : VL;
          if (ys3 == 1 && n == VL) vstore(yr + e0, acc[r][c]);
          else for (long l = 0; l < n; l++) yr[(e0 + l) * ys3] = acc[r][c][l];
        }
      }
    }
  }
  free(kt);
}

AT_API void ap_attention(const int64_t *a) {
  const long chunks = (a[AT_SQ] + a[AT_CHUNK] - 1) / a[AT_CHUNK];
  const double work = (double)a[AT_B] * a[AT_H] * a[AT_SQ] * a[AT_SK] * (a[AT_D] + a[AT_DV]);
  ap_pool_run(a[AT_B] * a[AT_H] * chunks, attention_task, a, work);
}
