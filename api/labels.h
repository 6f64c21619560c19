/* api/labels.h - labels on jobs and sweeps: {"project": "fmnist"}.
 *
 * At most API_LABELS_MAX of them; a key is 1 to 63 characters of a-z 0-9
 * _ . - starting with a letter or digit; a value is 0 to 128 characters of
 * A-Z a-z 0-9 _ . - (so that `label=key:value` in a query needs no
 * quoting). */
#ifndef LARCH_API_LABELS_H
#define LARCH_API_LABELS_H

#include <jansson.h>
#include <stddef.h>

#define API_LABELS_MAX 16
#define API_LABEL_KEY_MAX 63
#define API_LABEL_VALUE_MAX 128

/* 1 if s is a valid key (value: a valid value). */
int api_label_key_ok(const char *s);
int api_label_value_ok(const char *s);

/* Checks v (an object of label strings; field names it in messages,
 * "labels"). Returns a new string, the labels as compact JSON with sorted
 * keys (free it), or NULL with why[] filled ("labels.Project: a key is 1 to
 * ..."), and bad[] the field at fault. */
char *api_labels_json(const json_t *v, const char *field, char *bad, size_t bad_len, char *why,
                      size_t why_len);

#endif
