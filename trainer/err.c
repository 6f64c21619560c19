/* trainer/err.c - see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int trn_err_set(struct trn_err *err, const char *fmt, ...)
{
	if (!err || err->set)
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->text, sizeof err->text, fmt, ap);
	va_end(ap);
	err->set = 1;
	return -1;
}

void trn_err_clear(struct trn_err *err)
{
	err->set = 0;
	err->text[0] = '\0';
}

const char *trn_json_error_text(const json_error_t *e, char *buf, size_t size)
{
	switch (json_error_code(e)) {
	case json_error_invalid_utf8: return "invalid UTF-8";    /* jansson gives the byte */
	case json_error_null_character: return "a NUL character in a string";
	case json_error_null_byte_in_key: return "a NUL character in an object key";
	default: break;
	}
	/* jansson's own words ("invalid token", "',' or '}' expected"), cut
	 * before " near '<input>'" (" near end of file" stays); the two that
	 * print a character's code, and anything else with a digit in it, read
	 * generically */
	snprintf(buf, size, "%s", e->text);
	char *near = strstr(buf, " near ");
	if (near && strcmp(near, " near end of file") != 0)
		*near = '\0';
	if (strncmp(buf, "control character", 17) == 0)
		return "a control character in a string";
	if (strncmp(buf, "invalid Unicode", 15) == 0)
		return "an invalid \\u escape";
	if (!buf[0] || strpbrk(buf, "0123456789"))
		return "invalid syntax";
	return buf;
}
