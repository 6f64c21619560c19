/* trainer/spec/spec_fields.h - the field layer under the spec validator (private to
 * spec*.c).
 *
 * A struct trn_fields is one JSON object being read (in, borrowed; NULL when
 * the object is absent, so that every field takes its default) together with
 * its canonical copy being built (out, owned by the canonical tree) and its
 * path from the spec root ("schedule.warmup"; "" for the root). Each getter
 * reads one field, checks its type and range, stores the value (or the
 * default) in the struct and in out, and returns 1 when the field was given,
 * 0 when it was absent, -1 with err set when it is wrong. Messages name the
 * field by its path: "optimizer.lr: must be a number in (0, 100] (got 0)".
 */
#ifndef LARCH_TRAINER_SPEC_FIELDS_H
#define LARCH_TRAINER_SPEC_FIELDS_H

#include <jansson.h>

#include "trainer/err.h"
#include "spec.h"

struct trn_fields {
	json_t *in;                    /* borrowed; NULL = absent */
	json_t *out;                   /* borrowed from the canonical tree */
	char path[128];
	struct trn_err *err;
};

enum { TRN_OPTIONAL = 0, TRN_REQUIRED = 1 };

/* Bounds of a real field; hi = INFINITY for none. */
struct trn_range {
	double lo, hi;
	int lo_open, hi_open;          /* 1: the bound itself is excluded */
};

/* The root: in must be an object; out receives a new object that the caller
 * owns (set even on failure, NULL only when out of memory). */
int trn_fields_root(struct trn_fields *f, json_t *in, struct trn_err *err);

/* Opens parent.key as a child object, attached to parent's canonical copy.
 * An absent optional object reads as empty (every field defaults). */
int trn_fields_object(struct trn_fields *f, struct trn_fields *parent, const char *key,
                      int required);

/* Rejects any key of f->in not in allowed (NULL-terminated). A key found in
 * other (may be NULL) is reported as not used with `what` ("type \"adamw\""). */
int trn_fields_known(const struct trn_fields *f, const char *const *allowed,
                     const char *const *other, const char *what);

/* Fills the path of f.key (or f[index] when key is NULL) into buf. */
const char *trn_fields_path(const struct trn_fields *f, const char *key, int index,
                            char *buf, size_t size);

/* Error helpers: "<path of key>: <message>". Return -1. */
int trn_fields_fail(const struct trn_fields *f, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int trn_fields_fail_type(const struct trn_fields *f, const char *key, const char *want,
                         const json_t *got);

/* "string", "integer", "real number", "boolean", ... */
const char *trn_json_type_name(const json_t *v);
/* s as a quoted, escaped string of at most ~80 characters. */
const char *trn_quote(const char *s, char *buf, size_t size);
/* A number without noise: integers in full, others with 15 digits. */
const char *trn_fmt_num(double v, char *buf, size_t size);

int trn_fields_int(struct trn_fields *f, const char *key, long long lo, long long hi,
                   int required, long long def, long long *out);
int trn_fields_num(struct trn_fields *f, const char *key, struct trn_range r, int required,
                   double def, double *out);
int trn_fields_bool(struct trn_fields *f, const char *key, int def, int *out);
/* names is NULL-terminated; *out is the index of the value. */
int trn_fields_enum(struct trn_fields *f, const char *key, const char *const *names,
                    int required, int def, int *out);
/* A name: 1..64 of [A-Za-z0-9_.-], not starting with '.' or '-'. null reads as
 * absent when allow_null. out must hold TRN_NAME_MAX + 1; "" when absent. */
int trn_fields_name(struct trn_fields *f, const char *key, int required, int allow_null,
                    char *out);
/* A path: a non-empty string shorter than TRN_PATH_MAX without control
 * characters. out must hold TRN_PATH_MAX; "" when absent. */
int trn_fields_filepath(struct trn_fields *f, const char *key, int required, char *out);
/* An array of at most max short strings (1..TRN_PATTERN_MAX characters, no
 * control characters). out is [max][TRN_PATTERN_MAX + 1]. */
int trn_fields_patterns(struct trn_fields *f, const char *key, int max,
                        char (*out)[TRN_PATTERN_MAX + 1], int *n);

/* Sets out.key to v (a new reference, stolen). */
int trn_fields_put(struct trn_fields *f, const char *key, json_t *v);

int trn_name_valid(const char *s);

#define TRN_STEPS_MAX 1000000000LL  /* steps, step counts and intervals */

/* The sections that name things outside the spec (spec_data.c). */
int trn_spec_parse_data(struct trn_fields *root, struct trn_spec_data *d);
int trn_spec_parse_resources(struct trn_fields *root, struct trn_spec_resources *r);

#endif
