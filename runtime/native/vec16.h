/* appopt runtime native kernels: the 16-lane float vector and its helpers, shared by kernels.c, recurrent.c and
 * attention.c (each a translation unit of its own, so everything here is static inline).
 *
 * GCC vector extensions compile for any target: 16 float lanes map to one AVX-512 register, or two AVX2
 * registers where AVX-512 is absent. Loads and stores are unaligned (aligned(4)) and may alias float arrays.
 */
#ifndef APPOPT_VEC16_H
#define APPOPT_VEC16_H

#include <stdint.h>

#define VINLINE static inline __attribute__((always_inline))

typedef float v16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t vi16 __attribute__((vector_size(64), aligned(4), may_alias));
#define VL 16

VINLINE v16 vload(const float *p) { return *(const v16 *)p; }
VINLINE void vstore(float *p, v16 v) { *(v16 *)p = v; }
VINLINE v16 vsplat(float f) { return (v16){0} + f; }
VINLINE v16 vblend(vi16 mask, v16 yes, v16 no) { return (v16)((mask & (vi16)yes) | (~mask & (vi16)no)); }
VINLINE v16 vmax(v16 a, v16 b) { return vblend((vi16)(a < b), b, a); } /* NaN in a propagates */
VINLINE v16 vmin(v16 a, v16 b) { return vblend((vi16)(a > b), b, a); }
/* A float parameter from its float32 bit pattern in an int64 argument block. */
VINLINE float f32(int64_t bits) { union { int32_t i; float f; } u; u.i = (int32_t)bits; return u.f; }

/* exp(r) for a reduced argument r = x - n ln2 (|r| <= ln2 / 2): Cephes' expf polynomial, 1 + r + r^2 P(r). Each
 * caller reduces x in its own way and scales the result by 2^n. */
VINLINE v16 vexp_poly(v16 r) {
  v16 p = vsplat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

/* exp(x) for x already clamped to [-87, 88]: n = round(x / ln2) by the magic-number trick, r = x - n ln2 in two
 * parts, then exp(r) scaled by 2^n through the exponent bits; relative error ~1e-7 over the clamped range. */
VINLINE v16 vexp_clamped(v16 x) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits */
  v16 t = x * 1.44269504088896341f + magic;
  v16 n = t - magic;
  vi16 ni = (vi16)t - (vi16)vsplat(magic);
  v16 r = x - n * 0.693359375f + n * 2.12194440e-4f;
  return (v16)((vi16)vexp_poly(r) + (ni << 23));
}

#endif
