/* kernels/tune_table.c - the tuned GEMMs' picks in a text file (see
 * tune_table.h). */
#include "tune_table.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a line: the key, then a space and 16 hex digits for each word */
#define LINE_MAX_LEN (KERN_TUNE_KEY + KERN_TUNE_WORDS * 17 + 2)

int kern_tune_key_ok(const char *key)
{
	size_t n = strlen(key);
	if (n == 0 || n >= KERN_TUNE_KEY)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (key[i] <= ' ' || key[i] > '~')
			return 0;
	return 1;
}

/* one line (its newline removed) into e; 0, or -1 when it does not parse */
static int parse_line(char *line, struct kern_tune_entry *e)
{
	char *sp = strchr(line, ' ');
	if (!sp)
		return -1;
	*sp = '\0';
	if (!kern_tune_key_ok(line))
		return -1;
	const char *p = sp + 1;
	for (int w = 0; w < KERN_TUNE_WORDS; w++) {
		uint64_t v = 0;
		for (int d = 0; d < 16; d++, p++) {
			int c = *p, x = c >= '0' && c <= '9' ? c - '0'
			              : c >= 'a' && c <= 'f' ? c - 'a' + 10
			                                     : -1;
			if (x < 0)
				return -1;
			v = v << 4 | (uint64_t)x;
		}
		e->algo[w] = v;
		if (*p != (w + 1 < KERN_TUNE_WORDS ? ' ' : '\0'))
			return -1;
		if (w + 1 < KERN_TUNE_WORDS)
			p++;
	}
	memcpy(e->key, line, strlen(line) + 1);
	return 0;
}

static int push(struct kern_tune_table *t, const struct kern_tune_entry *e)
{
	if (t->n == t->cap) {
		int cap = t->cap ? 2 * t->cap : 32;
		struct kern_tune_entry *grown = realloc(t->e, sizeof *grown * (size_t)cap);
		if (!grown)
			return -1;
		t->e = grown;
		t->cap = cap;
	}
	t->e[t->n++] = *e;
	return 0;
}

int kern_tune_table_load(struct kern_tune_table *t, const char *path, int *skipped, char *why,
                         size_t why_len)
{
	t->n = 0;
	if (skipped)
		*skipped = 0;
	FILE *f = fopen(path, "re");
	if (!f) {
		if (errno == ENOENT)
			return 0;
		snprintf(why, why_len, "%s: %s", path, strerror(errno));
		return -1;
	}
	char line[LINE_MAX_LEN + 2];
	int rc = 0;
	while (fgets(line, sizeof line, f)) {
		size_t len = strlen(line);
		struct kern_tune_entry e;
		if (len > 0 && line[len - 1] == '\n') {
			line[--len] = '\0';
		} else if (!feof(f)) {         /* longer than any line written: skip it */
			int c;
			while ((c = fgetc(f)) != EOF && c != '\n')
				;
			if (skipped)
				(*skipped)++;
			continue;
		}
		if (len == 0)
			continue;
		if (parse_line(line, &e) != 0) {
			if (skipped)
				(*skipped)++;
			continue;
		}
		if (kern_tune_table_find(t, e.key))
			continue;              /* the first line of a key counts */
		if (push(t, &e) != 0) {
			snprintf(why, why_len, "%s: out of memory", path);
			rc = -1;
			break;
		}
	}
	if (rc == 0 && ferror(f)) {
		snprintf(why, why_len, "%s: read error", path);
		rc = -1;
	}
	fclose(f);
	return rc;
}

const uint64_t *kern_tune_table_find(const struct kern_tune_table *t, const char *key)
{
	for (int i = 0; i < t->n; i++)
		if (strcmp(t->e[i].key, key) == 0)
			return t->e[i].algo;
	return NULL;
}

int kern_tune_table_add(struct kern_tune_table *t, const char *path, const char *key,
                        const uint64_t algo[KERN_TUNE_WORDS], char *why, size_t why_len)
{
	if (!kern_tune_key_ok(key)) {
		snprintf(why, why_len, "a tuned GEMM's key is empty, too long or has a space");
		return -1;
	}
	if (kern_tune_table_find(t, key))
		return 0;
	struct kern_tune_entry e;
	memcpy(e.key, key, strlen(key) + 1);
	memcpy(e.algo, algo, sizeof e.algo);
	if (push(t, &e) != 0) {
		snprintf(why, why_len, "out of memory");
		return -1;
	}
	if (!path)
		return 0;
	char line[LINE_MAX_LEN + 1];
	int len = snprintf(line, sizeof line, "%s", key);
	for (int w = 0; w < KERN_TUNE_WORDS; w++)
		len += snprintf(line + len, sizeof line - (size_t)len, " %016" PRIx64, algo[w]);
	line[len++] = '\n';
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(why, why_len, "%s: %s", path, strerror(errno));
		return -1;
	}
	ssize_t put = write(fd, line, (size_t)len);
	int err = put < 0 ? errno : 0;
	if (close(fd) != 0 && !err)
		err = errno;
	if (put != len || err) {
		snprintf(why, why_len, "%s: %s", path, err ? strerror(err) : "short write");
		return -1;
	}
	return 0;
}

void kern_tune_table_free(struct kern_tune_table *t)
{
	free(t->e);
	t->e = NULL;
	t->n = t->cap = 0;
}

int kern_tune_fastest(const float *ms, int n, double margin)
{
	int best = -1;
	for (int i = 0; i < n; i++)
		if (ms[i] >= 0.0f && (best < 0 || ms[i] < ms[best]))
			best = i;
	if (best <= 0)
		return best < 0 ? 0 : best;
	if (ms[0] >= 0.0f && (double)ms[best] >= (double)ms[0] * (1.0 - margin))
		return 0;
	return best;
}

int kern_tune_picks_parse(struct kern_tune_table *t, const char *text, char *why,
                          size_t why_len)
{
	int added = 0;
	const char *p = text;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\n')
			p++;
		if (!*p)
			return added;
		size_t len = strcspn(p, " \t\n");
		char entry[KERN_TUNE_KEY + 8];
		if (len >= sizeof entry) {
			snprintf(why, why_len, "a pick longer than %zu characters: %.40s...",
			         sizeof entry - 1, p);
			return -1;
		}
		memcpy(entry, p, len);
		entry[len] = '\0';
		p += len;
		char *eq = strrchr(entry, '=');
		char *end = NULL;
		long v = eq ? strtol(eq + 1, &end, 10) : -1;
		if (!eq || eq == entry || !end || end == eq + 1 || *end || v < 0 || v > 63) {
			snprintf(why, why_len, "pick %s: not KEY=N with N from 0 to 63", entry);
			return -1;
		}
		*eq = '\0';
		if (!kern_tune_key_ok(entry)) {
			snprintf(why, why_len, "pick %s=%ld: not a key", entry, v);
			return -1;
		}
		uint64_t word[KERN_TUNE_WORDS] = { (uint64_t)v };
		if (kern_tune_table_add(t, NULL, entry, word, why, why_len) != 0)
			return -1;
		added++;
	}
}
