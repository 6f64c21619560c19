/* api/labels.c - labels on jobs and sweeps; see labels.h. */
#include "labels.h"

#include <stdio.h>
#include <string.h>

static int label_char(char c, int upper)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
	       c == '-' || (upper && c >= 'A' && c <= 'Z');
}

int api_label_key_ok(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > API_LABEL_KEY_MAX || !((s[0] >= 'a' && s[0] <= 'z') ||
	                                         (s[0] >= '0' && s[0] <= '9')))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!label_char(s[i], 0))
			return 0;
	return 1;
}

int api_label_value_ok(const char *s)
{
	size_t n = strlen(s);
	if (n > API_LABEL_VALUE_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!label_char(s[i], 1))
			return 0;
	return 1;
}

char *api_labels_json(const json_t *v, const char *field, char *bad, size_t bad_len, char *why,
                      size_t why_len)
{
	snprintf(bad, bad_len, "%s", field);
	if (!json_is_object(v)) {
		snprintf(why, why_len, "%s: must be an object of label strings", field);
		return NULL;
	}
	if (json_object_size(v) > API_LABELS_MAX) {
		snprintf(why, why_len, "%s: at most %d labels (got %zu)", field, API_LABELS_MAX,
		         json_object_size(v));
		return NULL;
	}
	const char *key;
	json_t *value;
	json_object_foreach((json_t *)v, key, value) {
		if (!api_label_key_ok(key)) {
			snprintf(bad, bad_len, "%s", field);
			snprintf(why, why_len, "%s: key \"%.80s\": must be 1 to %d characters of a-z 0-9 "
			         "_ . - starting with a letter or digit", field, key, API_LABEL_KEY_MAX);
			return NULL;
		}
		if (!json_is_string(value) || !api_label_value_ok(json_string_value(value))) {
			snprintf(bad, bad_len, "%s.%s", field, key);
			snprintf(why, why_len, "%s.%s: must be a string of 0 to %d characters of A-Z a-z "
			         "0-9 _ . -", field, key, API_LABEL_VALUE_MAX);
			return NULL;
		}
	}
	char *text = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	if (!text)
		snprintf(why, why_len, "%s: out of memory", field);
	return text;
}
