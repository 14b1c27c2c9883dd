/* appopt runtime native kernels: the scatter half of ConvTranspose, compiled with kernels.c (EXTRA_SOURCES).
 *
 * ConvTranspose = one GEMM (BLAS, in runtime/kernels/conv_transpose.py) to per-tap columns, then this col2im.
 * It gathers rather than scatters: every output pixel is written once, bias included, straight into the cropped
 * (or output-padded) output, with no zero fill and no read-modify-write passes per tap.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* The taps of a transposed convolution along one axis, shared by both col2im kernels: output position o reads
 * kernel tap k from input position t = (o + head - k * dil) / stride where that is whole and inside [0, len);
 * off[o * K + n] = t * tstride + k * kstride for its n-th such tap, cnt[o] = n. */
static void col2im_axis(long out_len, long K, long head, long dil, long stride, long len, long tstride, long kstride,
                        long *off, long *cnt) {
  for (long o = 0; o < out_len; o++) {
    long n = 0;
    for (long k = 0; k < K; k++) {
      long t = o + head - k * dil;
      if (t < 0 || t % stride) continue;
      t /= stride;
      if (t < len) off[o * K + n++] = t * tstride + k * kstride;
    }
    cnt[o] = n;
  }
}

/* Both axes' tap tables (col2im_axis), or all NULL when memory runs out; col2im_free releases them. */
typedef struct { long *hoff, *hcnt, *woff, *wcnt; } Col2imTaps;

static int col2im_alloc(Col2imTaps *t, long OH, long KH, long OW, long KW) {
  t->wcnt = (long *)malloc((size_t)(OW + 1) * sizeof(long));
  t->woff = (long *)malloc((size_t)(OW * KW + 1) * sizeof(long));
  t->hoff = (long *)malloc((size_t)(OH * KH + 1) * sizeof(long));
  t->hcnt = (long *)malloc((size_t)(OH + 1) * sizeof(long));
  return t->wcnt && t->woff && t->hoff && t->hcnt;
}

static void col2im_free(Col2imTaps *t) {
  free(t->wcnt);
  free(t->woff);
  free(t->hoff);
  free(t->hcnt);
}

UP_API void ap_col2im_gather(const int64_t *a) {
  const float *cols = (const float *)a[CG_COLS];
  float *out = (float *)a[CG_OUT];
  const float *bias = (const float *)a[CG_BIAS];
  const long N = a[CG_N], M = a[CG_M], KH = a[CG_KH], KW = a[CG_KW], H = a[CG_H], W = a[CG_W];
  const long OH = a[CG_OH], OW = a[CG_OW], SH = a[CG_SH], SW = a[CG_SW], DH = a[CG_DH], DW = a[CG_DW];
  const long HH = a[CG_HEADH], HW = a[CG_HEADW];
  const long plane = H * W;
  /* per output column, the column offsets (tap kw, input column iw) that reach it: the same for every row */
  Col2imTaps taps;
  if (!col2im_alloc(&taps, OH, KH, OW, KW)) { /* out of memory: NaN, never a silently wrong result */
    for (long i = 0; i < N * M * OH * OW; i++) out[i] = __builtin_nanf("");
    goto done;
  }
  col2im_axis(OW, KW, HW, DW, SW, W, 1, plane, taps.woff, taps.wcnt);
  col2im_axis(OH, KH, HH, DH, SH, H, W, KW * plane, taps.hoff, taps.hcnt);
  const long *hoff = taps.hoff, *hcnt = taps.hcnt, *woff = taps.woff, *wcnt = taps.wcnt;
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
  col2im_free(&taps);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Shared by the NHWC kernels below: the pool of kernels.c, row tasks of at least UP_TASK_WORK elements, and
 * 16-lane vectors over the channels (a scalar loop takes the tail). */
void ap_pool_for(long ntasks, void (*fn)(const void *, long), const void *ctx);

typedef float uv16 __attribute__((vector_size(64), aligned(4), may_alias));
#define UVL 16
#define UP_TASK_WORK 16384.0 /* elements a row task touches at least */
#define UP_SERIAL_WORK 65536.0 /* below this much work in all, one thread does it (a join costs about as much) */

typedef void (*up_row_fn)(const int64_t *a, long row, float *scratch);
typedef struct {
  const int64_t *a;
  long rows, per, scratch;
  up_row_fn row;
} up_rows_ctx;

static void up_rows_task(const void *vctx, long task) {
  const up_rows_ctx *cx = (const up_rows_ctx *)vctx;
  /* a row given no scratch where it needs some (out of memory) writes NaN: never a silently wrong result */
  float *scratch = cx->scratch ? (float *)malloc((size_t)cx->scratch * sizeof(float)) : 0;
  for (long r = task * cx->per; r < cx->rows && r < (task + 1) * cx->per; r++) cx->row(cx->a, r, scratch);
  free(scratch);
}

/* row(a, r, scratch) for r in [0, rows), in tasks of several rows; scratch: floats of per-task scratch. */
static void up_parallel_rows(const int64_t *a, long rows, double row_work, long scratch, up_row_fn row) {
  up_rows_ctx cx = {a, rows, 1, scratch, row};
  if (rows <= 0) return;
  cx.per = row_work >= UP_TASK_WORK ? 1 : (long)(UP_TASK_WORK / (row_work > 1.0 ? row_work : 1.0)) + 1;
  long tasks = (rows + cx.per - 1) / cx.per;
  if (row_work * rows < UP_SERIAL_WORK || tasks == 1) {
    cx.per = rows;
    up_rows_task(&cx, 0);
    return;
  }
  ap_pool_for(tasks, up_rows_task, &cx);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* ConvTranspose's col2im over NHWC: columns (N, H, W, KH, KW, M), from one 1x1 convolution of the NHWC input
 * with the taps as output channels; each output pixel gathers the (at most KH x KW) columns that reach it, adds
 * the bias and is written once, whole vectors of channels at a time. Output pixels lie OPX floats apart (M, or
 * the channel count of a wider tensor this one is a channel slice of). */
enum {
  CN_COLS, CN_OUT, CN_BIAS,
  CN_N, CN_M, CN_KH, CN_KW, CN_H, CN_W, CN_OH, CN_OW,
  CN_SH, CN_SW, CN_DH, CN_DW,
  CN_HEADH, CN_HEADW, /* output (0, 0) sits at (HEADH, HEADW) of the uncropped result (may be negative) */
  CN_OPX,
  CN_HOFF, CN_HCNT, CN_WOFF, CN_WCNT, /* filled in by the call: per output row/column, the column offsets */
  CN_NARGS
};

static void col2im_nhwc_row(const int64_t *a, long row, float *scratch) {
  (void)scratch;
  const float *cols = (const float *)a[CN_COLS];
  const float *bias = (const float *)a[CN_BIAS];
  const long M = a[CN_M], KH = a[CN_KH], KW = a[CN_KW], H = a[CN_H], W = a[CN_W];
  const long OH = a[CN_OH], OW = a[CN_OW], OPX = a[CN_OPX];
  const long *hoff = (const long *)a[CN_HOFF], *hcnt = (const long *)a[CN_HCNT];
  const long *woff = (const long *)a[CN_WOFF], *wcnt = (const long *)a[CN_WCNT];
  const long n = row / OH, oh = row % OH;
  const float *c = cols + n * H * W * KH * KW * M;
  float *o = (float *)a[CN_OUT] + row * OW * OPX;
  const long *hr = hoff + oh * KH;
  const long nh = hcnt[oh];
  for (long ow = 0; ow < OW; ow++, o += OPX) {
    const long *wr = woff + ow * KW;
    const long nw = wcnt[ow];
    long m = 0;
    for (; m + UVL <= M; m += UVL) {
      uv16 acc = bias ? *(const uv16 *)(bias + m) : (uv16){0};
      for (long i = 0; i < nh; i++)
        for (long j = 0; j < nw; j++) acc += *(const uv16 *)(c + hr[i] + wr[j] + m);
      *(uv16 *)(o + m) = acc;
    }
    for (; m < M; m++) {
      float acc = bias ? bias[m] : 0.0f;
      for (long i = 0; i < nh; i++)
        for (long j = 0; j < nw; j++) acc += c[hr[i] + wr[j] + m];
      o[m] = acc;
    }
  }
}

UP_API void ap_col2im_nhwc(const int64_t *args) {
  int64_t a[CN_NARGS];
  memcpy(a, args, sizeof(a));
  const long N = a[CN_N], M = a[CN_M], KH = a[CN_KH], KW = a[CN_KW], H = a[CN_H], W = a[CN_W];
  const long OH = a[CN_OH], OW = a[CN_OW], SH = a[CN_SH], SW = a[CN_SW], DH = a[CN_DH], DW = a[CN_DW];
  const long HH = a[CN_HEADH], HW = a[CN_HEADW];
  const long K = KH * KW;
  Col2imTaps taps;
  if (!col2im_alloc(&taps, OH, KH, OW, KW)) { /* out of memory: NaN, never a silently wrong result */
    float *out = (float *)a[CN_OUT];
    for (long p = 0; p < N * OH * OW; p++)
      for (long m = 0; m < M; m++) out[p * a[CN_OPX] + m] = __builtin_nanf("");
    goto done;
  }
  col2im_axis(OW, KW, HW, DW, SW, W, K * M, M, taps.woff, taps.wcnt);
  col2im_axis(OH, KH, HH, DH, SH, H, W * K * M, KW * M, taps.hoff, taps.hcnt);
  a[CN_HOFF] = (int64_t)taps.hoff;
  a[CN_HCNT] = (int64_t)taps.hcnt;
  a[CN_WOFF] = (int64_t)taps.woff;
  a[CN_WCNT] = (int64_t)taps.wcnt;
  /* a pixel costs at least a vector's worth (its taps' loops): with 3 channels the work counted by floats alone
   * kept a VAE's 64x64 RGB output layer on one thread */
  up_parallel_rows(a, N * OH, (double)OW * (M > UVL ? M : UVL) * (K < 4 ? K : 4), 0, col2im_nhwc_row);
done:
  col2im_free(&taps);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Resize of the two spatial axes, NHWC or NCHW, from per-axis tap tables: output row oh reads source rows
 * HIDX[oh*TH + t] with weights HWT[oh*TH + t], output column ow likewise (the tables, built in Python from the
 * ONNX coordinate modes, cover nearest, linear, cubic and antialiasing alike). Rows are interpolated first, into
 * a scratch row at the input width, then columns, as the NumPy path does (axis by axis). NEAREST: one tap of
 * weight 1 per axis, so pixels are copied. */
enum {
  RS_X, RS_Y, RS_N, RS_C, RS_H, RS_W, RS_OH, RS_OW,
  RS_NHWC, /* 1: (N, H, W, C); 0: (N, C, H, W) */
  RS_TH, RS_HIDX, RS_HWT, /* taps per output row; int64 source rows and float32 weights, (OH, TH) each */
  RS_TW, RS_WIDX, RS_WWT, /* the same for the columns, (OW, TW) */
  RS_NEAREST,
  RS_OPX, /* NHWC: floats between output pixels (C, or more when the output is a channel slice of a concat) */
  RS_NARGS
};

/* dst[0:len] = sum_t w[t] * src[idx[t] * stride : + len] */
static void up_blend_rows(float *dst, const float *src, long stride, const int64_t *idx, const float *w, long taps,
                          long len) {
  long i = 0;
  for (; i + UVL <= len; i += UVL) {
    uv16 acc = *(const uv16 *)(src + idx[0] * stride + i) * w[0];
    for (long t = 1; t < taps; t++) acc += *(const uv16 *)(src + idx[t] * stride + i) * w[t];
    *(uv16 *)(dst + i) = acc;
  }
  for (; i < len; i++) {
    float acc = src[idx[0] * stride + i] * w[0];
    for (long t = 1; t < taps; t++) acc += src[idx[t] * stride + i] * w[t];
    dst[i] = acc;
  }
}

static void resize_nhwc_row(const int64_t *a, long row, float *tmp) {
  const long C = a[RS_C], H = a[RS_H], W = a[RS_W], OH = a[RS_OH], OW = a[RS_OW], OPX = a[RS_OPX];
  const long TH = a[RS_TH], TW = a[RS_TW];
  const int64_t *hidx = (const int64_t *)a[RS_HIDX], *widx = (const int64_t *)a[RS_WIDX];
  const float *hwt = (const float *)a[RS_HWT], *wwt = (const float *)a[RS_WWT];
  const long n = row / OH, oh = row % OH;
  const float *x = (const float *)a[RS_X] + n * H * W * C;
  float *y = (float *)a[RS_Y] + row * OW * OPX;
  if (a[RS_NEAREST]) {
    const float *src = x + hidx[oh] * W * C;
    for (long ow = 0; ow < OW; ow++) memcpy(y + ow * OPX, src + widx[ow] * C, (size_t)C * sizeof(float));
    return;
  }
  if (!tmp) {
    for (long ow = 0; ow < OW; ow++)
      for (long i = 0; i < C; i++) y[ow * OPX + i] = __builtin_nanf("");
    return;
  }
  up_blend_rows(tmp, x, W * C, hidx + oh * TH, hwt + oh * TH, TH, W * C);
  for (long ow = 0; ow < OW; ow++) up_blend_rows(y + ow * OPX, tmp, C, widx + ow * TW, wwt + ow * TW, TW, C);
}

static void resize_nchw_row(const int64_t *a, long row, float *tmp) {
  const long H = a[RS_H], W = a[RS_W], OH = a[RS_OH], OW = a[RS_OW];
  const long TH = a[RS_TH], TW = a[RS_TW];
  const int64_t *hidx = (const int64_t *)a[RS_HIDX], *widx = (const int64_t *)a[RS_WIDX];
  const float *hwt = (const float *)a[RS_HWT], *wwt = (const float *)a[RS_WWT];
  const long plane = row / OH, oh = row % OH;
  const float *x = (const float *)a[RS_X] + plane * H * W;
  float *y = (float *)a[RS_Y] + row * OW;
  if (a[RS_NEAREST]) {
    const float *src = x + hidx[oh] * W;
    for (long ow = 0; ow < OW; ow++) y[ow] = src[widx[ow]];
    return;
  }
  if (!tmp) {
    for (long i = 0; i < OW; i++) y[i] = __builtin_nanf("");
    return;
  }
  up_blend_rows(tmp, x, W, hidx + oh * TH, hwt + oh * TH, TH, W);
  for (long ow = 0; ow < OW; ow++) {
    const int64_t *ix = widx + ow * TW;
    const float *wt = wwt + ow * TW;
    float acc = tmp[ix[0]] * wt[0];
    for (long t = 1; t < TW; t++) acc += tmp[ix[t]] * wt[t];
    y[ow] = acc;
  }
}

UP_API void ap_resize2d(const int64_t *a) {
  const long N = a[RS_N], C = a[RS_C], W = a[RS_W], OH = a[RS_OH], OW = a[RS_OW];
  const long TH = a[RS_NEAREST] ? 1 : a[RS_TH], TW = a[RS_NEAREST] ? 1 : a[RS_TW];
  if (a[RS_NHWC])
    up_parallel_rows(a, N * OH, (double)W * C * TH + (double)OW * C * TW, a[RS_NEAREST] ? 0 : W * C,
                     resize_nhwc_row);
  else
    up_parallel_rows(a, N * C * OH, (double)W * TH + (double)OW * TW, a[RS_NEAREST] ? 0 : W, resize_nchw_row);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Concat along the last axis: ROWS rows of every part (PARTS: its address and width, in floats) side by side. A
 * part at address 0 is already in place (its producer wrote its slice of the output). */
enum { CC_OUT, CC_ROWS, CC_NPARTS, CC_PTRS, CC_WIDTHS, CC_TOTAL, CC_NARGS };

static void concat_row(const int64_t *a, long row, float *scratch) {
  (void)scratch;
  const int64_t *ptrs = (const int64_t *)a[CC_PTRS], *widths = (const int64_t *)a[CC_WIDTHS];
  float *o = (float *)a[CC_OUT] + row * a[CC_TOTAL];
  for (long p = 0; p < a[CC_NPARTS]; p++) {
    const long w = widths[p];
    if (ptrs[p]) memcpy(o, (const float *)ptrs[p] + row * w, (size_t)w * sizeof(float));
    o += w;
  }
}

UP_API void ap_concat_last(const int64_t *a) {
  up_parallel_rows(a, a[CC_ROWS], (double)a[CC_TOTAL], 0, concat_row);
}
