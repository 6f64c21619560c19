/* trainer/err.c - see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

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
