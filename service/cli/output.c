/* service/cli/output.c - buffers, inert text, tables, times (output.h). */
#include "output.h"

#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "trainer/env.h"

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q) {
		fputs("larch: out of memory\n", stderr);
		abort();
	}
	return q;
}

static void buf_reserve(struct cli_buf *b, size_t more)
{
	if (b->len + more + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->len + more + 1)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

void cli_buf_add(struct cli_buf *b, const void *p, size_t n)
{
	buf_reserve(b, n);
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void cli_buf_adds(struct cli_buf *b, const char *s)
{
	cli_buf_add(b, s, strlen(s));
}

void cli_buf_addf(struct cli_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	buf_reserve(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void cli_buf_clear(struct cli_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void cli_buf_release(struct cli_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

const char *cli_buf_str(const struct cli_buf *b)
{
	return b->data ? b->data : "";
}

/* The UTF-8 sequence at s (n bytes left): its code point and length, or
 * length 0 when it is not valid UTF-8 (overlong, surrogate, past U+10FFFF). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len;
	uint32_t c, min;
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	} else if ((s[0] & 0xe0) == 0xc0) {
		len = 2, c = s[0] & 0x1f, min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3, c = s[0] & 0x0f, min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4, c = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

/* Characters that change how the rest of a line displays. */
static int unsafe_code_point(uint32_t c)
{
	return c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f) ||
	       (c >= 0x200e && c <= 0x200f) || (c >= 0x2028 && c <= 0x202e) ||
	       (c >= 0x2066 && c <= 0x2069) || c == 0xfeff;
}

static const char *ellipsis(void)
{
	static const char *e;
	if (!e) {
		setlocale(LC_CTYPE, "");
		e = strcasecmp(nl_langinfo(CODESET), "UTF-8") == 0 ? "\xe2\x80\xa6" : "~";
	}
	return e;
}

/* One character of s made inert into out (room for 8 bytes + NUL); its
 * bytes in s via *used. */
static void inert_char(const unsigned char *s, size_t n, char out[16], size_t *used)
{
	uint32_t c;
	size_t len = utf8_decode(s, n, &c);
	if (len == 0) {
		snprintf(out, 16, "\\x%02x", s[0]);
		*used = 1;
		return;
	}
	*used = len;
	if (!unsafe_code_point(c)) {
		memcpy(out, s, len);
		out[len] = '\0';
	} else if (c == '\n') {
		strcpy(out, "\\n");
	} else if (c == '\t') {
		strcpy(out, "\\t");
	} else if (c == '\r') {
		strcpy(out, "\\r");
	} else if (c < 0x80) {
		snprintf(out, 16, "\\x%02x", (unsigned)c);
	} else {
		snprintf(out, 16, "\\u%04x", (unsigned)c);
	}
}

/* Appends the characters of s made inert while they fit in limit columns
 * (SIZE_MAX: all) to b (NULL: counts only); returns the columns taken. */
static size_t add_inert(struct cli_buf *b, const char *s, size_t len, size_t limit)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t cols = 0, used;
	char piece[16];
	for (size_t i = 0; i < len; i += used) {
		inert_char(p + i, len - i, piece, &used);
		/* an escape takes one column per character, a character one */
		size_t w = piece[0] == '\\' ? strlen(piece) : 1;
		if (cols + w > limit)
			break;
		if (b)
			cli_buf_adds(b, piece);
		cols += w;
	}
	return cols;
}

size_t cli_buf_add_inert(struct cli_buf *b, const char *s, size_t len, size_t max_cols)
{
	if (max_cols == 0 || add_inert(NULL, s, len, SIZE_MAX) <= max_cols)
		return add_inert(b, s, len, SIZE_MAX);
	size_t cols = add_inert(b, s, len, max_cols - 1);
	cli_buf_adds(b, ellipsis());
	return cols + 1;
}

char *cli_inert(const char *s)
{
	struct cli_buf b = { 0 };
	if (!s)
		s = "-";
	cli_buf_add_inert(&b, s, strlen(s), 0);
	if (!b.data)
		cli_buf_add(&b, "", 0);
	return b.data;
}

size_t cli_term_width(void)
{
	struct winsize ws;
	if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	long n;
	return trn_env_long("COLUMNS", 1, 99999, 0, &n, NULL, 0) == 0 ? (size_t)n : 0;
}

/* ---- tables ---------------------------------------------------------------- */

struct cli_table {
	const struct cli_column *cols;
	size_t ncols, nrows, cap;
	char **cells;        /* nrows * ncols, raw text; made inert when printed */
};

struct cli_table *cli_table_new(const struct cli_column *cols, size_t ncols)
{
	struct cli_table *t = xrealloc(NULL, sizeof *t);
	*t = (struct cli_table){ .cols = cols, .ncols = ncols };
	return t;
}

void cli_table_row(struct cli_table *t, const char *const *cells)
{
	if (t->nrows == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		t->cells = xrealloc(t->cells, t->cap * t->ncols * sizeof *t->cells);
	}
	for (size_t c = 0; c < t->ncols; c++) {
		const char *s = cells[c] ? cells[c] : "-";
		t->cells[t->nrows * t->ncols + c] = strcpy(xrealloc(NULL, strlen(s) + 1), s);
	}
	t->nrows++;
}

/* Columns the cell takes once inert (no limit). */
static size_t inert_width(const char *s)
{
	return add_inert(NULL, s, strlen(s), SIZE_MAX);
}

void cli_table_print(const struct cli_table *t, FILE *out, size_t width)
{
	size_t *w = xrealloc(NULL, t->ncols * sizeof *w);
	size_t total = 0, elastic = t->ncols;
	for (size_t c = 0; c < t->ncols; c++) {
		w[c] = inert_width(t->cols[c].head);   /* heads may be metric names */
		for (size_t r = 0; r < t->nrows; r++) {
			size_t cw = inert_width(t->cells[r * t->ncols + c]);
			if (cw > w[c])
				w[c] = cw;
		}
		total += w[c] + (c ? 2 : 0);
		if (t->cols[c].elastic)
			elastic = c;
	}
	if (width && total > width && elastic < t->ncols) {
		size_t floor = inert_width(t->cols[elastic].head), excess = total - width;
		w[elastic] = w[elastic] - floor > excess ? w[elastic] - excess : floor;
	}
	struct cli_buf line = { 0 };
	for (size_t r = 0; r <= t->nrows; r++) {
		cli_buf_clear(&line);
		for (size_t c = 0; c < t->ncols; c++) {
			const char *s = r == 0 ? t->cols[c].head : t->cells[(r - 1) * t->ncols + c];
			struct cli_buf cell = { 0 };
			size_t cw = cli_buf_add_inert(&cell, s, strlen(s), w[c]);
			size_t pad = w[c] - cw;
			int last = c + 1 == t->ncols;
			if (c)
				cli_buf_adds(&line, "  ");
			if (t->cols[c].right)
				cli_buf_addf(&line, "%*s", (int)pad, "");
			cli_buf_add(&line, cli_buf_str(&cell), cell.len);
			if (!t->cols[c].right && !last)
				cli_buf_addf(&line, "%*s", (int)pad, "");
			cli_buf_release(&cell);
		}
		while (line.len > 0 && line.data[line.len - 1] == ' ')   /* a blank last cell */
			line.data[--line.len] = '\0';
		fprintf(out, "%s\n", cli_buf_str(&line));
	}
	cli_buf_release(&line);
	free(w);
}

void cli_table_free(struct cli_table *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	free(t);
}

/* ---- times ----------------------------------------------------------------- */

double cli_parse_time(const char *s)
{
	struct tm tm = { 0 };
	int n = 0;
	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
	                 &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
		return -1;
	double frac = 0;
	const char *p = s + n;
	if (*p == '.') {
		char *end;
		frac = strtod(p, &end);
		p = end;
	}
	if (strcmp(p, "Z") != 0)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (double)timegm(&tm) + frac;
}

void cli_format_age(double s, char *buf, size_t len)
{
	if (!(s >= 0))
		s = 0;
	if (s < 60)
		snprintf(buf, len, "%.0fs", floor(s));
	else if (s < 3600)
		snprintf(buf, len, "%.0fm", floor(s / 60));
	else if (s < 86400 * 2)
		snprintf(buf, len, "%.0fh", floor(s / 3600));
	else
		snprintf(buf, len, "%.0fd", floor(s / 86400));
}

void cli_format_duration(double s, char *buf, size_t len)
{
	if (!(s >= 0) || s > 1e9) {
		snprintf(buf, len, "-");
		return;
	}
	long long t = (long long)(s + 0.5);
	if (t < 60)
		snprintf(buf, len, "%llds", t);
	else if (t < 3600)
		snprintf(buf, len, "%lldm%02llds", t / 60, t % 60);
	else if (t < 86400)
		snprintf(buf, len, "%lldh%02lldm", t / 3600, t % 3600 / 60);
	else
		snprintf(buf, len, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
}

void cli_format_number(double v, char *buf, size_t len)
{
	if (isfinite(v))
		snprintf(buf, len, "%.4g", v);
	else
		snprintf(buf, len, "-");
}
