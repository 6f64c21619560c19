/* service/executor_slurm_array.c - job array index lists (slurm_array.h). */
#include "slurm_array.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int slurm_array_spec(const int *tasks, int n, int max_parallel, char *out, size_t len)
{
	if (n <= 0 || len == 0)
		return -1;
	size_t o = 0;
	for (int i = 0; i < n;) {
		int j = i;
		while (j + 1 < n && tasks[j + 1] == tasks[j] + 1)
			j++;
		int w = j > i ? snprintf(out + o, len - o, "%s%d-%d", o ? "," : "", tasks[i], tasks[j])
		              : snprintf(out + o, len - o, "%s%d", o ? "," : "", tasks[i]);
		if (w < 0 || (size_t)w >= len - o)
			return -1;
		o += (size_t)w;
		i = j + 1;
	}
	if (max_parallel > 0) {
		int w = snprintf(out + o, len - o, "%%%d", max_parallel);
		if (w < 0 || (size_t)w >= len - o)
			return -1;
	}
	return 0;
}

/* a decimal number at *p, moving p past it; -1 when there is none */
static long number(const char **p)
{
	if (!isdigit((unsigned char)**p))
		return -1;
	char *end;
	long v = strtol(*p, &end, 10);
	*p = end;
	return v;
}

int slurm_array_has(const char *tasks, long task)
{
	const char *p = tasks;
	if (*p == '[')                     /* as JobArrayID writes it: "123_[5-9%2]" */
		p++;
	while (*p) {
		long lo = number(&p), hi = lo;
		if (lo < 0)
			return 0;
		if (*p == '-') {
			p++;
			if ((hi = number(&p)) < lo)
				return 0;
		}
		if (*p == ':') {               /* a step ("0-15:4"): not written by larch */
			p++;
			long step = number(&p);
			if (step <= 0)
				return 0;
			if (task >= lo && task <= hi && (task - lo) % step == 0)
				return 1;
		} else if (task >= lo && task <= hi) {
			return 1;
		}
		if (*p == ',')
			p++;
		else if (*p == '%' || *p == ']' || !*p)
			return 0;
		else
			return 0;
	}
	return 0;
}

int slurm_array_sid(const char *sid, char *array_id, size_t len, long *task)
{
	const char *us = strchr(sid, '_');
	if (!us || us == sid || (size_t)(us - sid) >= len)
		return -1;
	for (const char *p = sid; p < us; p++)
		if (!isdigit((unsigned char)*p))
			return -1;
	const char *p = us + 1;
	long t = number(&p);
	if (t < 0 || *p)
		return -1;
	memcpy(array_id, sid, (size_t)(us - sid));
	array_id[us - sid] = '\0';
	*task = t;
	return 0;
}
