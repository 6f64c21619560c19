/* trainer/reporter_queue.c - the reporter's bounded queue of metric points
 * and the JSON body of a batch; see reporter.h. No locking here: the
 * reporter holds its mutex around every call. */
#include "reporter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int trn_mqueue_init(struct trn_mqueue *q, size_t cap)
{
	memset(q, 0, sizeof *q);
	size_t c = 1;
	while (c < cap)
		c <<= 1;
	q->ring = malloc(c * sizeof *q->ring);
	if (!q->ring)
		return -1;
	q->cap = c;
	return 0;
}

void trn_mqueue_release(struct trn_mqueue *q)
{
	free(q->ring);
	q->ring = NULL;
	q->cap = 0;
}

/* The index of name, added when new; -1 when it cannot be. A run reports
 * the same few names in the same order every step, so the guess (the name
 * after the last one) makes this one strcmp in the usual case. */
static int intern(struct trn_mqueue *q, const char *name)
{
	int guess = q->next_name < q->n_names ? q->next_name : 0;
	for (int k = 0; k < q->n_names; k++) {
		int i = (guess + k) % q->n_names;
		if (strcmp(q->names[i], name) == 0)
			return i;
	}
	size_t len = strlen(name);
	if (len > TRN_MQ_NAME_MAX || q->n_names == TRN_MQ_NAMES)
		return -1;
	memcpy(q->names[q->n_names], name, len + 1);
	return q->n_names++;
}

int trn_mqueue_push(struct trn_mqueue *q, long step, double time, const char *name,
                    double value)
{
	int idx = intern(q, name);
	if (idx < 0)
		return -1;
	q->next_name = idx + 1;
	int dropped = 0;
	if (q->head - q->tail == q->cap) {
		/* the oldest unsent point gives way; metrics.jsonl still has it */
		q->tail++;
		q->dropped++;
		dropped = 1;
	}
	q->ring[q->head & (q->cap - 1)] = (struct trn_mpoint){ .step = step, .time = time,
	                                                       .value = value, .name = idx };
	q->head++;
	return dropped;
}

size_t trn_mqueue_take(struct trn_mqueue *q, struct trn_mpoint *out, size_t max)
{
	size_t n = trn_mqueue_count(q);
	if (n > max)
		n = max;
	for (size_t i = 0; i < n; i++)
		out[i] = q->ring[(q->tail + i) & (q->cap - 1)];
	q->tail += n;
	return n;
}

size_t trn_mqueue_count(const struct trn_mqueue *q)
{
	return (size_t)(q->head - q->tail);
}

size_t trn_mqueue_clear(struct trn_mqueue *q)
{
	size_t n = trn_mqueue_count(q);
	q->tail = q->head;
	return n;
}

/* A growable output buffer; fails sticky on out of memory. */
struct out {
	char **buf;
	size_t *cap, len;
	int oom;
};

static void reserve(struct out *o, size_t more)
{
	if (o->oom || o->len + more < *o->cap)
		return;
	size_t cap = *o->cap ? *o->cap : 4096;
	while (cap <= o->len + more)
		cap *= 2;
	char *b = realloc(*o->buf, cap);
	if (!b) {
		o->oom = 1;
		return;
	}
	*o->buf = b;
	*o->cap = cap;
}

static void put(struct out *o, const char *s, size_t n)
{
	reserve(o, n);
	if (o->oom)
		return;
	memcpy(*o->buf + o->len, s, n);
	o->len += n;
	(*o->buf)[o->len] = '\0';
}

/* name as a JSON string body: quote, backslash and control characters escaped */
static void put_escaped(struct out *o, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[8];
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			put(o, esc, 2);
		} else if (c < 0x20) {
			snprintf(esc, sizeof esc, "\\u%04x", c);
			put(o, esc, 6);
		} else {
			put(o, (const char *)&c, 1);
		}
	}
}

void trn_format_value(char *buf, size_t size, double v)
{
	for (int digits = 9; digits <= 17; digits++) {
		snprintf(buf, size, "%.*g", digits, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

long trn_mqueue_format(const struct trn_mqueue *q, const struct trn_mpoint *pts, size_t n,
                       char **buf, size_t *cap)
{
	struct out o = { .buf = buf, .cap = cap };
	put(&o, "{\"metrics\":[", 12);
	for (size_t i = 0; i < n; i++) {
		const struct trn_mpoint *p = &pts[i];
		char num[128];
		/* the same text as the point's line in metrics.jsonl (report.c) */
		int len = snprintf(num, sizeof num, "%s{\"step\":%ld,\"time\":%.3f,\"name\":\"",
		                   i ? "," : "", p->step, p->time);
		put(&o, num, (size_t)len);
		put_escaped(&o, q->names[p->name]);
		if (isfinite(p->value)) {
			char v[32];
			trn_format_value(v, sizeof v, p->value);
			len = snprintf(num, sizeof num, "\",\"value\":%s}", v);
		} else
			len = snprintf(num, sizeof num, "\",\"value\":null}");
		put(&o, num, (size_t)len);
	}
	put(&o, "]}", 2);
	return o.oom ? -1 : (long)o.len;
}
