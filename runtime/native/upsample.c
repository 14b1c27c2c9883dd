/* appopt runtime native kernels: the scatter half of ConvTranspose, compiled with kernels.c (EXTRA_SOURCES).
 *
 * ConvTranspose = one GEMM (BLAS, in runtime/kernels/conv_transpose.py) to per-tap columns, then this col2im.
 * It gathers rather than scatters: every output pixel is written once, bias included, straight into the cropped
 * (or output-padded) output, with no zero fill and no read-modify-write passes per tap.
 */
#include <stdint.h>
#include <stdlib.h>

#define UP_API __attribute__((visibility("default")))

/* Argument block of ap_col2im_gather (int64 each; pointers as addresses). */
enum {
  CG_COLS,  /* float*: (N, M, KH, KW, H, W) columns */
  CG_OUT,   /* float*: (N, M, OH, OW) */
  CG_BIAS,  /* float* (M) or 0 */
  CG_N, CG_M, CG_KH, CG_KW, CG_H, CG_W, CG_OH, CG_OW,
  CG_SH, CG_SW, CG_DH, CG_DW,
  CG_HEADH, CG_HEADW, /* output (0, 0) sits at (HEADH, HEADW) of the uncropped result (may be negative) */
  CG_NARGS
};

UP_API void ap_col2im_gather(const int64_t *a) {
  const float *cols = (const float *)a[CG_COLS];
  float *out = (float *)a[CG_OUT];
  const float *bias = (const float *)a[CG_BIAS];
  const long N = a[CG_N], M = a[CG_M], KH = a[CG_KH], KW = a[CG_KW], H = a[CG_H], W = a[CG_W];
  const long OH = a[CG_OH], OW = a[CG_OW], SH = a[CG_SH], SW = a[CG_SW], DH = a[CG_DH], DW = a[CG_DW];
  const long HH = a[CG_HEADH], HW = a[CG_HEADW];
  const long plane = H * W;
  /* per output column, the column offsets (tap kw, input column iw) that reach it: the same for every row */
  long *wcnt = (long *)malloc((size_t)(OW + 1) * sizeof(long));
  long *woff = (long *)malloc((size_t)(OW * KW + 1) * sizeof(long));
  long *hoff = (long *)malloc((size_t)(OH * KH + 1) * sizeof(long));
  long *hcnt = (long *)malloc((size_t)(OH + 1) * sizeof(long));
  if (!wcnt || !woff || !hoff || !hcnt) { /* out of memory: NaN, never a silently wrong result */
    for (long i = 0; i < N * M * OH * OW; i++) out[i] = __builtin_nanf("");
    goto done;
  }
  for (long ow = 0; ow < OW; ow++) {
    long nk = 0;
    for (long kw = 0; kw < KW; kw++) {
      long t = ow + HW - kw * DW;
      if (t < 0 || t % SW) continue;
      t /= SW;
      if (t < W) woff[ow * KW + nk++] = kw * plane + t;
    }
    wcnt[ow] = nk;
  }
  for (long oh = 0; oh < OH; oh++) {
    long nk = 0;
    for (long kh = 0; kh < KH; kh++) {
      long t = oh + HH - kh * DH;
      if (t < 0 || t % SH) continue;
      t /= SH;
      if (t < H) hoff[oh * KH + nk++] = kh * KW * plane + t * W;
    }
    hcnt[oh] = nk;
  }
  for (long nm = 0; nm < N * M; nm++) {
    const float *c = cols + nm * KH * KW * plane;
    float *o = out + nm * OH * OW;
    const float b = bias ? bias[nm % M] : 0.0f;
    for (long oh = 0; oh < OH; oh++) {
      float *orow = o + oh * OW;
      const long *hr = hoff + oh * KH;
      const long nh = hcnt[oh];
      for (long ow = 0; ow < OW; ow++) {
        float acc = b;
        const long *wr = woff + ow * KW;
        const long nw = wcnt[ow];
        for (long i = 0; i < nh; i++) {
          const float *row = c + hr[i];
          for (long j = 0; j < nw; j++) acc += row[wr[j]];
        }
        orow[ow] = acc;
      }
    }
  }
done:
  free(wcnt);
  free(woff);
  free(hoff);
  free(hcnt);
}
