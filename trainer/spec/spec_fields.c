/* trainer/spec/spec_fields.c - see spec_fields.h. */
#include "spec_fields.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static json_t *field(const struct trn_fields *f, const char *key)
{
	return f->in ? json_object_get(f->in, key) : NULL;
}

static int listed(const char *const *list, const char *key)
{
	for (; list && *list; list++)
		if (strcmp(*list, key) == 0)
			return 1;
	return 0;
}

const char *trn_json_type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "object";
	case JSON_ARRAY: return "array";
	case JSON_STRING: return "string";
	case JSON_INTEGER: return "integer";
	case JSON_REAL: return "real number";
	case JSON_TRUE:
	case JSON_FALSE: return "boolean";
	case JSON_NULL: return "null";
	}
	return "?";
}

const char *trn_quote(const char *s, char *buf, size_t size)
{
	size_t o = 0, n = 0;
	if (size < 16)
		return "\"...\"";
	buf[o++] = '"';
	for (; *s && o + 12 < size; s++, n++) {
		unsigned char c = (unsigned char)*s;
		if (n == 64) {
			o += (size_t)snprintf(buf + o, size - o, "...");
			break;
		}
		if (c == '"' || c == '\\')
			o += (size_t)snprintf(buf + o, size - o, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(buf + o, size - o, "\\u%04x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}

const char *trn_fmt_num(double v, char *buf, size_t size)
{
	if (isfinite(v) && v == floor(v) && fabs(v) < 1e15)
		snprintf(buf, size, "%.0f", v);
	else
		snprintf(buf, size, "%.15g", v);
	return buf;
}

static void append(char *buf, size_t size, size_t *o, const char *s)
{
	for (; *s && *o + 1 < size; s++)
		buf[(*o)++] = *s;
	buf[*o] = '\0';
}

const char *trn_fields_path(const struct trn_fields *f, const char *key, int index,
                            char *buf, size_t size)
{
	char sub[32];
	size_t o = 0;
	buf[0] = '\0';
	append(buf, size, &o, f->path[0] || key ? f->path : "spec");
	if (key && f->path[0])
		append(buf, size, &o, ".");
	if (key)
		append(buf, size, &o, key);
	else if (index >= 0) {
		snprintf(sub, sizeof sub, "[%d]", index);
		append(buf, size, &o, sub);
	}
	return buf;
}

int trn_fields_fail(const struct trn_fields *f, const char *key, const char *fmt, ...)
{
	char path[256], msg[TRN_ERR_TEXT];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return trn_err_set(f->err, "%s: %s", trn_fields_path(f, key, -1, path, sizeof path), msg);
}

int trn_fields_fail_type(const struct trn_fields *f, const char *key, const char *want,
                         const json_t *got)
{
	return trn_fields_fail(f, key, "must be %s (got %s)", want, trn_json_type_name(got));
}

int trn_fields_put(struct trn_fields *f, const char *key, json_t *v)
{
	if (!v || json_object_set_new(f->out, key, v) != 0)
		return trn_err_set(f->err, "spec: out of memory");
	return 0;
}

int trn_fields_root(struct trn_fields *f, json_t *in, struct trn_err *err)
{
	f->in = in;
	f->out = json_object();
	f->path[0] = '\0';
	f->err = err;
	if (!f->out)
		return trn_err_set(err, "spec: out of memory");
	if (!json_is_object(in))
		return trn_err_set(err, "spec: must be a JSON object");
	return 0;
}

int trn_fields_object(struct trn_fields *f, struct trn_fields *parent, const char *key,
                      int required)
{
	json_t *v = field(parent, key);
	f->err = parent->err;
	f->in = NULL;
	trn_fields_path(parent, key, -1, f->path, sizeof f->path);
	if (!v && required)
		return trn_fields_fail(parent, key, "is required");
	if (v && !json_is_object(v))
		return trn_fields_fail_type(parent, key, "an object", v);
	f->in = v;
	f->out = json_object();
	if (trn_fields_put(parent, key, f->out) < 0)
		return -1;
	return v != NULL;
}

int trn_fields_known(const struct trn_fields *f, const char *const *allowed,
                     const char *const *other, const char *what)
{
	const char *key;
	json_t *v;
	char q[512];
	if (!f->in)
		return 0;
	json_object_foreach(f->in, key, v) {
		if (listed(allowed, key))
			continue;
		if (listed(other, key))
			return trn_fields_fail(f, key, "not used with %s", what);
		return trn_fields_fail(f, NULL, "unknown field %s", trn_quote(key, q, sizeof q));
	}
	return 0;
}

int trn_fields_int(struct trn_fields *f, const char *key, long long lo, long long hi,
                   int required, long long def, long long *out)
{
	json_t *v = field(f, key);
	long long x = def;
	if (!v && required)
		return trn_fields_fail(f, key, "is required");
	if (v) {
		if (!json_is_integer(v))
			return trn_fields_fail_type(f, key, "an integer", v);
		x = json_integer_value(v);
		if (x < lo || x > hi) {
			if (hi == LLONG_MAX)
				return trn_fields_fail(f, key, "must be an integer >= %lld (got %lld)", lo, x);
			return trn_fields_fail(f, key, "must be an integer in [%lld, %lld] (got %lld)",
			                       lo, hi, x);
		}
	}
	*out = x;
	if (trn_fields_put(f, key, json_integer(x)) < 0)
		return -1;
	return v != NULL;
}

int trn_fields_num(struct trn_fields *f, const char *key, struct trn_range r, int required,
                   double def, double *out)
{
	json_t *v = field(f, key);
	double x = def;
	char lo[48], hi[48], got[48];
	if (!v && required)
		return trn_fields_fail(f, key, "is required");
	if (v) {
		if (!json_is_number(v))
			return trn_fields_fail_type(f, key, "a number", v);
		x = json_number_value(v);
		int bad = !isfinite(x) || (r.lo_open ? x <= r.lo : x < r.lo) ||
		          (r.hi_open ? x >= r.hi : x > r.hi);
		trn_fmt_num(r.lo, lo, sizeof lo);
		trn_fmt_num(x, got, sizeof got);
		if (bad && isinf(r.hi))
			return trn_fields_fail(f, key, "must be a number %s %s (got %s)",
			                       r.lo_open ? ">" : ">=", lo, got);
		if (bad)
			return trn_fields_fail(f, key, "must be a number in %c%s, %s%c (got %s)",
			                       r.lo_open ? '(' : '[', lo, trn_fmt_num(r.hi, hi, sizeof hi),
			                       r.hi_open ? ')' : ']', got);
	}
	*out = x;
	if (trn_fields_put(f, key, json_real(x)) < 0)
		return -1;
	return v != NULL;
}

int trn_fields_bool(struct trn_fields *f, const char *key, int def, int *out)
{
	json_t *v = field(f, key);
	if (v && !json_is_boolean(v))
		return trn_fields_fail_type(f, key, "a boolean", v);
	*out = v ? json_is_true(v) : def;
	if (trn_fields_put(f, key, json_boolean(*out)) < 0)
		return -1;
	return v != NULL;
}

int trn_fields_enum(struct trn_fields *f, const char *key, const char *const *names,
                    int required, int def, int *out)
{
	json_t *v = field(f, key);
	char list[256], q[512];
	size_t o = 0;
	int i = def;
	if (!v && required)
		return trn_fields_fail(f, key, "is required");
	if (v) {
		for (i = 0; names[i]; i++)
			if (json_is_string(v) && strcmp(json_string_value(v), names[i]) == 0)
				break;
		if (!names[i]) {
			for (int k = 0; names[k] && o < sizeof list; k++)
				o += (size_t)snprintf(list + o, sizeof list - o, "%s\"%s\"",
				                      k ? ", " : "", names[k]);
			if (!json_is_string(v))
				return trn_fields_fail(f, key, "must be one of %s (got %s)", list,
				                       trn_json_type_name(v));
			return trn_fields_fail(f, key, "must be one of %s (got %s)", list,
			                       trn_quote(json_string_value(v), q, sizeof q));
		}
	}
	*out = i;
	if (trn_fields_put(f, key, json_string(names[i])) < 0)
		return -1;
	return v != NULL;
}

int trn_name_valid(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > TRN_NAME_MAX || s[0] == '.' || s[0] == '-')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '.' || *s == '-'))
			return 0;
	return 1;
}

int trn_fields_name(struct trn_fields *f, const char *key, int required, int allow_null,
                    char *out)
{
	json_t *v = field(f, key);
	char q[512];
	out[0] = '\0';
	if (v && json_is_null(v) && allow_null)
		v = NULL;
	if (!v)
		return required ? trn_fields_fail(f, key, "is required") : 0;
	if (!json_is_string(v))
		return trn_fields_fail_type(f, key, allow_null ? "a string or null" : "a string", v);
	const char *s = json_string_value(v);
	if (!trn_name_valid(s))
		return trn_fields_fail(f, key, "must be 1-%d characters of A-Z a-z 0-9 _ . - "
		                       "not starting with . or - (got %s)", TRN_NAME_MAX,
		                       trn_quote(s, q, sizeof q));
	memcpy(out, s, strlen(s) + 1);
	if (trn_fields_put(f, key, json_string(s)) < 0)
		return -1;
	return 1;
}

static int has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 1;
	return 0;
}

int trn_fields_filepath(struct trn_fields *f, const char *key, int required, char *out)
{
	json_t *v = field(f, key);
	char q[512];
	out[0] = '\0';
	if (!v)
		return required ? trn_fields_fail(f, key, "is required") : 0;
	if (!json_is_string(v))
		return trn_fields_fail_type(f, key, "a path string", v);
	const char *s = json_string_value(v);
	size_t n = strlen(s);
	if (n == 0)
		return trn_fields_fail(f, key, "must be a non-empty path");
	if (n >= TRN_PATH_MAX)
		return trn_fields_fail(f, key, "must be shorter than %d characters (got %zu)",
		                       TRN_PATH_MAX, n);
	if (has_control(s))
		return trn_fields_fail(f, key, "must not contain control characters (got %s)",
		                       trn_quote(s, q, sizeof q));
	memcpy(out, s, n + 1);
	if (trn_fields_put(f, key, json_string(s)) < 0)
		return -1;
	return 1;
}

int trn_fields_patterns(struct trn_fields *f, const char *key, int max,
                        char (*out)[TRN_PATTERN_MAX + 1], int *n)
{
	json_t *v = field(f, key), *e;
	char path[256], q[512];
	size_t i;
	if (!v)
		return 0;
	if (!json_is_array(v))
		return trn_fields_fail(f, key, "must be an array of at most %d strings (got %s)", max,
		                       trn_json_type_name(v));
	if (json_array_size(v) > (size_t)max)
		return trn_fields_fail(f, key, "must be an array of at most %d strings (got %zu "
		                       "elements)", max,
		                       json_array_size(v));
	trn_fields_path(f, key, -1, path, sizeof path);
	json_array_foreach(v, i, e) {
		const char *s = json_is_string(e) ? json_string_value(e) : NULL;
		if (!s)
			return trn_err_set(f->err, "%s[%zu]: must be a string (got %s)", path, i,
			                   trn_json_type_name(e));
		if (strlen(s) < 1 || strlen(s) > TRN_PATTERN_MAX || has_control(s))
			return trn_err_set(f->err, "%s[%zu]: must be 1-%d characters without control "
			                   "characters (got %s)", path, i, TRN_PATTERN_MAX,
			                   trn_quote(s, q, sizeof q));
		memcpy(out[i], s, strlen(s) + 1);
	}
	*n = (int)json_array_size(v);
	if (trn_fields_put(f, key, json_deep_copy(v)) < 0)
		return -1;
	return 1;
}
