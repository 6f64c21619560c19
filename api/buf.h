/* api/buf.h - a growing byte buffer for reply bodies written by hand.
 *
 * jansson builds a tree and then serialises it; for the hot replies (a job,
 * a page of fifty jobs, a metric series) the API writes the JSON text
 * directly instead, and embeds text that is JSON already (a job's stored
 * spec) as it is. Every append is checked once, at the end: an allocation
 * failure makes the buffer sticky-failed (oom set, appends ignored) and the
 * reply a 500 (api_reply_buf in api/reply.h).
 *
 * Ownership: the buffer owns data; api_buf_release frees it, api_reply_buf
 * takes it over.
 */
#ifndef LARCH_API_BUF_H
#define LARCH_API_BUF_H

#include <stddef.h>
#include <stdint.h>

struct api_buf {
	char *data;          /* NUL-terminated while not oom */
	size_t len, cap;
	int oom;
};

/* An empty buffer with room for at least hint bytes (0: a small default). */
void api_buf_init(struct api_buf *b, size_t hint);
void api_buf_release(struct api_buf *b);

void api_buf_add(struct api_buf *b, const void *data, size_t len);
void api_buf_adds(struct api_buf *b, const char *s);
void api_buf_addc(struct api_buf *b, char c);
void api_buf_printf(struct api_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* JSON values. Strings are quoted and escaped; bytes that are not
 * well-formed UTF-8 become U+FFFD. A NULL string is written as null. */
void api_buf_json_str(struct api_buf *b, const char *s);
void api_buf_json_strn(struct api_buf *b, const char *s, size_t len);
void api_buf_json_int(struct api_buf *b, int64_t v);
/* A number in the shortest form that reads back as v; NaN and the
 * infinities (which JSON lacks) are written as null. */
void api_buf_json_num(struct api_buf *b, double v);
/* "key": (a key that needs no escaping: the API's own field names). */
void api_buf_json_key(struct api_buf *b, const char *key);

/* How many bytes at the start of s[0..len) form complete UTF-8 sequences
 * (or invalid bytes, which are complete in the sense that they will be
 * replaced): a chunk of a file cut there splits no character. */
size_t api_utf8_complete(const char *s, size_t len);

#endif
