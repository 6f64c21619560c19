/* api/buf.c - the reply buffer and its JSON writers; see buf.h. */
#include "buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_buf_init(struct api_buf *b, size_t hint)
{
	b->len = 0;
	b->oom = 0;
	b->cap = hint ? hint + 1 : 256;
	b->data = malloc(b->cap);
	if (!b->data) {
		b->cap = 0;
		b->oom = 1;
		return;
	}
	b->data[0] = '\0';
}

void api_buf_release(struct api_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* Room for n more bytes and the NUL; 0, or -1 (and oom) when there is none. */
static int reserve(struct api_buf *b, size_t n)
{
	if (b->oom)
		return -1;
	if (b->len + n + 1 <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n + 1) {
		if (cap > SIZE_MAX / 2) {
			b->oom = 1;
			return -1;
		}
		cap *= 2;
	}
	char *data = realloc(b->data, cap);
	if (!data) {
		b->oom = 1;
		return -1;
	}
	b->data = data;
	b->cap = cap;
	return 0;
}

void api_buf_add(struct api_buf *b, const void *data, size_t len)
{
	if (reserve(b, len))
		return;
	memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
}

void api_buf_adds(struct api_buf *b, const char *s)
{
	api_buf_add(b, s, strlen(s));
}

void api_buf_addc(struct api_buf *b, char c)
{
	if (reserve(b, 1))
		return;
	b->data[b->len++] = c;
	b->data[b->len] = '\0';
}

void api_buf_printf(struct api_buf *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = 1;
		return;
	}
	if ((size_t)n < sizeof small) {
		api_buf_add(b, small, (size_t)n);
		return;
	}
	if (reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* The length of the well-formed UTF-8 sequence at p (n bytes left), or 0
 * when p starts no such sequence (a stray, overlong, surrogate or
 * out-of-range byte, or one cut short). */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0];
	size_t len;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0) ||
	    (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))
		return 0;
	return len;
}

size_t api_utf8_complete(const char *s, size_t len)
{
	/* only the last three bytes can start a sequence that runs past the end */
	size_t start = len > 3 ? len - 3 : 0;
	for (size_t i = start; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		size_t want = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3
		            : c >= 0xc2 && c <= 0xdf ? 2 : 1;
		if (want > 1 && i + want > len) {
			/* a lead byte whose sequence is cut: keep it for the next
			 * chunk unless what follows it already shows it is invalid */
			int ok = 1;
			for (size_t k = i + 1; k < len; k++)
				if (((unsigned char)s[k] & 0xc0) != 0x80)
					ok = 0;
			if (ok)
				return i;
		}
	}
	return len;
}

static const char hex[] = "0123456789abcdef";

void api_buf_json_strn(struct api_buf *b, const char *s, size_t len)
{
	if (!s) {
		api_buf_add(b, "null", 4);
		return;
	}
	/* worst case: every byte becomes \ufffd (6 bytes) */
	if (len > (SIZE_MAX - 2) / 6 || reserve(b, 6 * len + 2))
		return;
	const unsigned char *p = (const unsigned char *)s, *end = p + len;
	char *o = b->data + b->len;
	*o++ = '"';
	while (p < end) {
		unsigned char c = *p;
		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			*o++ = (char)c;
			p++;
			continue;
		}
		if (c >= 0x80) {
			size_t n = utf8_seq(p, (size_t)(end - p));
			if (n) {
				memcpy(o, p, n);
				o += n;
				p += n;
			} else {
				memcpy(o, "\\ufffd", 6);
				o += 6;
				p++;
			}
			continue;
		}
		*o++ = '\\';
		switch (c) {
		case '"': *o++ = '"'; break;
		case '\\': *o++ = '\\'; break;
		case '\n': *o++ = 'n'; break;
		case '\r': *o++ = 'r'; break;
		case '\t': *o++ = 't'; break;
		case '\b': *o++ = 'b'; break;
		case '\f': *o++ = 'f'; break;
		default:
			*o++ = 'u';
			*o++ = '0';
			*o++ = '0';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
		p++;
	}
	*o++ = '"';
	*o = '\0';
	b->len = (size_t)(o - b->data);
}

void api_buf_json_str(struct api_buf *b, const char *s)
{
	api_buf_json_strn(b, s, s ? strlen(s) : 0);
}

void api_buf_json_int(struct api_buf *b, int64_t v)
{
	/* by hand: the list endpoint writes thousands of these per page */
	char text[24], *p = text + sizeof text;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	do
		*--p = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--p = '-';
	api_buf_add(b, p, (size_t)(text + sizeof text - p));
}

void api_buf_json_num(struct api_buf *b, double v)
{
	if (!isfinite(v)) {
		api_buf_add(b, "null", 4);
		return;
	}
	char text[32];
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(text, sizeof text, "%.*g", prec, v);
		if (prec == 17 || strtod(text, NULL) == v)
			break;
	}
	api_buf_adds(b, text);
}

void api_buf_json_key(struct api_buf *b, const char *key)
{
	api_buf_addc(b, '"');
	api_buf_adds(b, key);
	api_buf_add(b, "\":", 2);
}
