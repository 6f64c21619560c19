/* api/metric_name.c - metric names; see metric_name.h. */
#include "metric_name.h"

#include <string.h>

int api_metric_name_ok(const char *s)
{
	size_t len = s ? strlen(s) : 0;
	if (len == 0 || len > API_METRIC_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '/' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}
