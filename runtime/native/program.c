/* appopt runtime native kernels: run a list of prebound kernel calls in one call from Python.
 *
 * Compiled with kernels.c (runtime/native/__init__.py EXTRA_SOURCES). The static plan (runtime/static_plan.py)
 * binds most steps of a model to one entry point and one argument block each; a stretch of such steps runs as a
 * program here, so a node costs its kernel and an indirect call instead of a Python loop turn and a ctypes call
 * (~0.3 us).
 */
#include <stdint.h>

#define PROG_API __attribute__((visibility("default")))

typedef void (*prog_entry)(const int64_t *args);

/* Argument block of ap_run_program: the number of calls, then per call the entry point and its argument block. */
enum { PG_COUNT, PG_CALLS, PG_NARGS };

PROG_API void ap_run_program(const int64_t *a) {
  const long n = (long)a[PG_COUNT];
  const int64_t *calls = a + PG_CALLS;
  for (long i = 0; i < n; i++) ((prog_entry)(intptr_t)calls[2 * i])((const int64_t *)(intptr_t)calls[2 * i + 1]);
}
