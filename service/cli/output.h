/* service/cli/output.h - what larch prints: a growable text buffer, inert
 * text (control characters escaped), tables sized to the terminal, times
 * and durations.
 *
 * Anything that came from the server or a user (job names, messages, spec
 * values) goes through cli_buf_add_inert before it reaches a terminal, so
 * that no stored text can move the cursor, change colours or fake a line.
 */
#ifndef LARCH_CLI_OUTPUT_H
#define LARCH_CLI_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

/* data is NUL-terminated once anything was added; release frees it and
 * leaves the buffer empty (a zeroed buffer is empty). Out of memory aborts:
 * a command-line client has nothing better to do. */
struct cli_buf {
	char *data;
	size_t len, cap;
};

void cli_buf_add(struct cli_buf *b, const void *p, size_t n);
void cli_buf_adds(struct cli_buf *b, const char *s);
void cli_buf_addf(struct cli_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_buf_clear(struct cli_buf *b);
void cli_buf_release(struct cli_buf *b);
/* The text so far ("" when empty); borrowed from b. */
const char *cli_buf_str(const struct cli_buf *b);

/* Appends s (len bytes) with C0/C1 control characters, DEL, bidirectional
 * overrides and invalid UTF-8 escaped (\n, \t, \x1b, \u202e), cut to at most
 * max_cols columns (0: no limit; a cut ends in an ellipsis). Returns the
 * columns appended (one per character; no wide-character widths). */
size_t cli_buf_add_inert(struct cli_buf *b, const char *s, size_t len, size_t max_cols);
/* s made inert (NULL -> "-"); a new string, free it. */
char *cli_inert(const char *s);

/* Columns of the terminal on stdout; 0 when stdout is not a terminal and
 * COLUMNS is unset (no limit). */
size_t cli_term_width(void);

/* A table: column heads, rows of cells (copied and made inert), printed
 * with each column as wide as its widest cell. When the table is wider than
 * width (0: no limit), the elastic column shrinks (to no less than its head)
 * and its cells are cut with an ellipsis. */
struct cli_column {
	const char *head;
	int right;                    /* right-aligned (numbers) */
	int elastic;                  /* the one that gives way */
};

struct cli_table;

/* Returns a new table over cols (borrowed; static). */
struct cli_table *cli_table_new(const struct cli_column *cols, size_t ncols);
/* Adds a row of ncols cells (NULL -> "-"); copies them. */
void cli_table_row(struct cli_table *t, const char *const *cells);
void cli_table_print(const struct cli_table *t, FILE *out, size_t width);
void cli_table_free(struct cli_table *t);

/* "2026-11-22T23:01:02.123Z" -> seconds since the epoch; -1 when s is not
 * such a time. */
double cli_parse_time(const char *s);
/* A short age or duration: "42s", "3m", "5h", "2d" (coarse) into buf. */
void cli_format_age(double seconds, char *buf, size_t len);
/* An ETA or elapsed time: "14s", "3m14s", "1h02m", "2d03h". */
void cli_format_duration(double seconds, char *buf, size_t len);
/* A value as %.4g, or "-" for a non-number; into buf. */
void cli_format_number(double v, char *buf, size_t len);

#endif
