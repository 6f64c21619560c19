/* tests/unit/check.h - a small harness for the ctest-driven C unit tests.
 *
 * A test file's main() runs its cases with CHECK_RUN and returns
 * check_finish(): 0 when every check passed, 1 otherwise (77 = skipped, for
 * tests that need what this machine lacks). Failed checks print file:line and
 * what was expected; numeric comparisons print the worst element.
 * CHECK_ONLY="test_a test_b" in the environment runs only those cases (for
 * a slow tool over one case: compute-sanitizer, a debugger).
 */
#ifndef LARCH_TESTS_CHECK_H
#define LARCH_TESTS_CHECK_H

#include <stddef.h>
#include <stdint.h>

#define CHECK(cond) check_true(!!(cond), #cond, __FILE__, __LINE__)
#define CHECK_MSG(cond, ...) check_truef(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define CHECK_INT_EQ(got, want) check_int_eq((long long)(got), (long long)(want), #got, __FILE__, __LINE__)
#define CHECK_STR_EQ(got, want) check_str_eq((got), (want), #got, __FILE__, __LINE__)
#define CHECK_RUN(fn) check_run(#fn, fn)

int check_true(int ok, const char *expr, const char *file, int line);
int check_truef(int ok, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int check_int_eq(long long got, long long want, const char *expr, const char *file, int line);
int check_str_eq(const char *got, const char *want, const char *expr, const char *file, int line);

/* |got - want| <= atol + rtol * |want| for every element; prints the worst
 * element on failure (and its error on success when CHECK_VERBOSE is set). */
int check_close(const char *what, const float *got, const float *want, long n,
                double atol, double rtol);

void check_run(const char *name, void (*fn)(void));
int check_finish(void);

/* Deterministic test data: a splitmix64 stream in *state. */
uint64_t check_rand_u64(uint64_t *state);
float check_rand_uniform(uint64_t *state, float lo, float hi);
void check_fill(float *x, long n, float lo, float hi, uint64_t *state);

/* Gradient check by central differences. loss(ctx) must recompute a scalar
 * from the current contents of x (in double). For up to max_probes indices
 * spread over x, compares (loss(x+eps) - loss(x-eps)) / 2eps with grad[i]
 * within atol + rtol * |fd|. Restores x. */
typedef double (*check_loss_fn)(void *ctx);
int check_grad(const char *what, float *x, long n, const float *grad,
               check_loss_fn loss, void *ctx, double eps, double atol, double rtol,
               int max_probes);

/* Whether text holds nothing of secret (len >= 16 bytes, the start of a file
 * that failed to parse) in any rendering a message could give it: the
 * first 4 and 8 bytes as text; the 32-bit words at offsets 0, 4 and 8 and
 * the 64-bit words at 0 and 8, big- and little-endian, as %d, %u, %x,
 * %08x, %X, %lld, %llu and %llx print them. Fails the check, naming what
 * leaked, and returns 0 when it does. */
#define CHECK_NO_LEAK(text, secret, len) check_no_leak((text), (secret), (len), __FILE__, __LINE__)
int check_no_leak(const char *text, const void *secret, size_t len, const char *file, int line);

/* A fresh scratch directory under LARCH_TEST_TMP (or /tmp) for this test;
 * returns its path (static storage). */
const char *check_tmpdir(const char *name);

#endif
