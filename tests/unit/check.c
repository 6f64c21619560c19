/* tests/unit/check.c - see check.h. */
#include "check.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int n_checks, n_failed;
static const char *current_case = "";

int check_true(int ok, const char *expr, const char *file, int line)
{
	n_checks++;
	if (!ok) {
		n_failed++;
		fprintf(stderr, "FAIL %s:%d [%s] %s\n", file, line, current_case, expr);
	}
	return ok;
}

int check_truef(int ok, const char *file, int line, const char *fmt, ...)
{
	n_checks++;
	if (!ok) {
		n_failed++;
		fprintf(stderr, "FAIL %s:%d [%s] ", file, line, current_case);
		va_list ap;
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	return ok;
}

int check_int_eq(long long got, long long want, const char *expr, const char *file, int line)
{
	return check_truef(got == want, file, line, "%s == %lld, want %lld", expr, got, want);
}

int check_str_eq(const char *got, const char *want, const char *expr, const char *file, int line)
{
	int ok = got && want && strcmp(got, want) == 0;
	return check_truef(ok, file, line, "%s == \"%s\", want \"%s\"", expr,
	                   got ? got : "(null)", want ? want : "(null)");
}

int check_close(const char *what, const float *got, const float *want, long n,
                double atol, double rtol)
{
	long worst = -1;
	double worst_excess = -INFINITY, max_abs = 0;
	for (long i = 0; i < n; i++) {
		double g = got[i], w = want[i];
		double diff = fabs(g - w);
		if (diff > max_abs || isnan(diff))
			max_abs = diff;
		double excess = isnan(diff) ? INFINITY : diff - (atol + rtol * fabs(w));
		if (excess > worst_excess) {
			worst_excess = excess;
			worst = i;
		}
	}
	n_checks++;
	if (n > 0 && worst_excess > 0) {
		n_failed++;
		fprintf(stderr, "FAIL [%s] %s: element %ld got %.9g want %.9g (max abs diff %.3g, "
		        "atol %.1g rtol %.1g, n %ld)\n", current_case, what, worst, got[worst],
		        want[worst], max_abs, atol, rtol, n);
		return 0;
	}
	if (getenv("CHECK_VERBOSE"))
		fprintf(stderr, "ok   [%s] %s: max abs diff %.3g (n %ld)\n", current_case, what, max_abs, n);
	return 1;
}

/* CHECK_ONLY (names separated by spaces or commas): run only those cases */
static int selected(const char *name)
{
	const char *only = getenv("CHECK_ONLY");
	if (!only || !*only)
		return 1;
	size_t len = strlen(name);
	for (const char *p = only; *p;) {
		size_t n = strcspn(p, " ,");
		if (n == len && strncmp(p, name, len) == 0)
			return 1;
		p += n;
		p += strspn(p, " ,");
	}
	return 0;
}

void check_run(const char *name, void (*fn)(void))
{
	if (!selected(name)) {
		fprintf(stderr, "SKIP %s (CHECK_ONLY)\n", name);
		return;
	}
	int before = n_failed;
	current_case = name;
	fn();
	fprintf(stderr, "%s %s\n", n_failed == before ? "PASS" : "FAIL", name);
	current_case = "";
}

int check_finish(void)
{
	fprintf(stderr, "%d checks, %d failed\n", n_checks, n_failed);
	return n_failed ? 1 : 0;
}

uint64_t check_rand_u64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

float check_rand_uniform(uint64_t *state, float lo, float hi)
{
	double u = (check_rand_u64(state) >> 11) * (1.0 / 9007199254740992.0);
	return (float)(lo + (hi - lo) * u);
}

void check_fill(float *x, long n, float lo, float hi, uint64_t *state)
{
	for (long i = 0; i < n; i++)
		x[i] = check_rand_uniform(state, lo, hi);
}

int check_grad(const char *what, float *x, long n, const float *grad,
               check_loss_fn loss, void *ctx, double eps, double atol, double rtol,
               int max_probes)
{
	long stride = n > max_probes ? n / max_probes : 1;
	int ok = 1;
	for (long i = 0; i < n; i += stride) {
		float saved = x[i];
		x[i] = (float)(saved + eps);
		double up = loss(ctx);
		x[i] = (float)(saved - eps);
		double down = loss(ctx);
		x[i] = saved;
		/* use the perturbation actually applied after rounding to float */
		double h = (double)(float)(saved + eps) - (double)(float)(saved - eps);
		double fd = (up - down) / h;
		double diff = fabs(fd - grad[i]);
		if (diff > atol + rtol * fabs(fd) || isnan(diff)) {
			if (ok)
				fprintf(stderr, "FAIL [%s] %s: d/dx[%ld] analytic %.7g finite difference %.7g\n",
				        current_case, what, i, grad[i], fd);
			ok = 0;
		}
	}
	n_checks++;
	if (!ok)
		n_failed++;
	return ok;
}

const char *check_tmpdir(const char *name)
{
	static char path[4096];
	const char *base = getenv("LARCH_TEST_TMP");
	snprintf(path, sizeof path, "%s/tmp-%s-%ld", base ? base : "/tmp", name, (long)getpid());
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
	if (system(cmd) != 0 || (mkdir(path, 0755) != 0 && errno != EEXIST)) {
		fprintf(stderr, "check_tmpdir: cannot create %s\n", path);
		exit(1);
	}
	return path;
}

static int leaked(const char *text, const char *needle, const char *what, const char *file,
                  int line)
{
	if (!needle[0] || !strstr(text, needle))
		return 0;
	check_truef(0, file, line, "the message holds the file's %s (\"%s\"): %s", what, needle,
	            text);
	return 1;
}

int check_no_leak(const char *text, const void *secret, size_t len, const char *file, int line)
{
	const unsigned char *b = secret;
	char buf[64];
	int bad = 0;
	if (len < 16) {
		check_truef(0, file, line, "check_no_leak: a secret of %zu bytes, want 16", len);
		return 0;
	}
	for (size_t n = 4; n <= 8; n += 4) {
		snprintf(buf, sizeof buf, "%.*s", (int)n, (const char *)b);
		bad |= leaked(text, buf, "bytes as text", file, line);
	}
	for (size_t off = 0; off <= 8; off += 4) {
		uint32_t be = (uint32_t)b[off] << 24 | (uint32_t)b[off + 1] << 16 |
		              (uint32_t)b[off + 2] << 8 | b[off + 3];
		uint32_t le = (uint32_t)b[off] | (uint32_t)b[off + 1] << 8 |
		              (uint32_t)b[off + 2] << 16 | (uint32_t)b[off + 3] << 24;
		uint32_t words[2] = { be, le };
		for (int w = 0; w < 2; w++) {
			snprintf(buf, sizeof buf, "%d", (int32_t)words[w]);
			bad |= leaked(text, buf, "32-bit word", file, line);
			snprintf(buf, sizeof buf, "%u", words[w]);
			bad |= leaked(text, buf, "32-bit word", file, line);
			snprintf(buf, sizeof buf, "%x", words[w]);
			bad |= leaked(text, buf, "32-bit word", file, line);
			snprintf(buf, sizeof buf, "%08x", words[w]);
			bad |= leaked(text, buf, "32-bit word", file, line);
			snprintf(buf, sizeof buf, "%X", words[w]);
			bad |= leaked(text, buf, "32-bit word", file, line);
		}
	}
	for (size_t off = 0; off <= 8; off += 8) {
		uint64_t be = 0, le = 0;
		for (int i = 0; i < 8; i++) {
			be = be << 8 | b[off + (size_t)i];
			le |= (uint64_t)b[off + (size_t)i] << (8 * i);
		}
		uint64_t words[2] = { be, le };
		for (int w = 0; w < 2; w++) {
			snprintf(buf, sizeof buf, "%lld", (long long)words[w]);
			bad |= leaked(text, buf, "64-bit word", file, line);
			snprintf(buf, sizeof buf, "%llu", (unsigned long long)words[w]);
			bad |= leaked(text, buf, "64-bit word", file, line);
			snprintf(buf, sizeof buf, "%llx", (unsigned long long)words[w]);
			bad |= leaked(text, buf, "64-bit word", file, line);
		}
	}
	if (!bad)
		check_true(1, "no leak", file, line);
	return !bad;
}
