/* trainer/env.c - see env.h. */
#include "env.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A value quoted in a message: at most 64 bytes of it. */
#define QUOTED "\"%.64s%s\""
#define QUOTE(t) (t), strlen(t) > 64 ? "..." : ""

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

const char *trn_env_str(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

int trn_env_has(const char *name)
{
	return trn_env_str(name) != NULL;
}

int trn_parse_long(const char *what, const char *text, long lo, long hi, long *out, char *err,
                   size_t errlen)
{
	char *end;
	errno = 0;
	long v = strtol(text, &end, 10);
	if (end == text || *end || errno || v < lo || v > hi)
		return fail(err, errlen, "%s: must be an integer in [%ld, %ld] (got " QUOTED ")", what,
		            lo, hi, QUOTE(text));
	*out = v;
	return 0;
}

int trn_parse_double(const char *what, const char *text, double lo, double hi, double *out,
                     char *err, size_t errlen)
{
	char *end;
	errno = 0;
	double v = strtod(text, &end);
	if (end == text || *end || errno || !isfinite(v) || v < lo || v > hi)
		return fail(err, errlen, "%s: must be a number in [%g, %g] (got " QUOTED ")", what, lo,
		            hi, QUOTE(text));
	*out = v;
	return 0;
}

int trn_parse_bool(const char *what, const char *text, int *out, char *err, size_t errlen)
{
	static const char *const on[] = { "1", "true", "yes", "on" };
	static const char *const off[] = { "0", "false", "no", "off" };
	for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
		if (strcasecmp(text, on[i]) == 0)
			return *out = 1, 0;
		if (strcasecmp(text, off[i]) == 0)
			return *out = 0, 0;
	}
	return fail(err, errlen, "%s: must be 1, true, yes, on, 0, false, no or off (got " QUOTED ")",
	            what, QUOTE(text));
}

int trn_parse_choice(const char *what, const char *text, const char *const *names, int *out,
                     char *err, size_t errlen)
{
	char list[256];
	size_t o = 0;
	for (int i = 0; names[i]; i++) {
		if (strcmp(text, names[i]) == 0)
			return *out = i, 0;
		if (o < sizeof list)
			o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", names[i]);
	}
	return fail(err, errlen, "%s: must be one of %s (got " QUOTED ")", what, list, QUOTE(text));
}

int trn_env_long(const char *name, long lo, long hi, long dflt, long *out, char *err,
                 size_t errlen)
{
	const char *v = trn_env_str(name);
	*out = dflt;
	return v ? trn_parse_long(name, v, lo, hi, out, err, errlen) : 0;
}

int trn_env_double(const char *name, double lo, double hi, double dflt, double *out, char *err,
                   size_t errlen)
{
	const char *v = trn_env_str(name);
	*out = dflt;
	return v ? trn_parse_double(name, v, lo, hi, out, err, errlen) : 0;
}

int trn_env_bool(const char *name, int dflt, int *out, char *err, size_t errlen)
{
	const char *v = trn_env_str(name);
	*out = dflt;
	return v ? trn_parse_bool(name, v, out, err, errlen) : 0;
}

int trn_env_choice(const char *name, const char *const *names, int dflt, int *out, char *err,
                   size_t errlen)
{
	const char *v = trn_env_str(name);
	*out = dflt;
	return v ? trn_parse_choice(name, v, names, out, err, errlen) : 0;
}
