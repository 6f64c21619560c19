/* api/metric_name.c - metric names; see metric_name.h. */
#include "metric_name.h"

#include <string.h>

int api_metric_name_ok(const char *s)
{
	size_t len = s ? strlen(s) : 0;
	if (len == 0 || len > API_METRIC_NAME_MAX)
		return 0;
	size_t seg = 0;                 /* where the current '/' segment starts */
	for (size_t i = 0; i <= len; i++) {
		char c = s[i];
		if (c == '/' || c == '\0') {
			size_t n = i - seg;
			/* no empty, "." or ".." segment: a name never reads as a path */
			if (n == 0 || (n == 1 && s[seg] == '.') ||
			    (n == 2 && s[seg] == '.' && s[seg + 1] == '.'))
				return 0;
			seg = i + 1;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}
