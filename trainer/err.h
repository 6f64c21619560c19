/* trainer/err.h - the first error and its context, for callers to print.
 *
 * Parsers, validators and loaders take a struct trn_err * and fill it on
 * failure; only the first error is kept (later ones are usually consequences).
 * Messages are lower case without a trailing period and name the thing:
 *   "batch.global: must be a multiple of batch.micro x parallel.ranks (got 1000, 256 x 4)"
 */
#ifndef LARCH_TRAINER_ERR_H
#define LARCH_TRAINER_ERR_H

#include <jansson.h>
#include <stddef.h>

#define TRN_ERR_TEXT 512

struct trn_err {
	int set;                  /* 0 until the first error */
	char text[TRN_ERR_TEXT];
};

/* Records an error unless one is already set. Always returns -1, so that
 * "return trn_err_set(err, ...);" reads as the failing return. err may be NULL. */
int trn_err_set(struct trn_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

void trn_err_clear(struct trn_err *err);

/* What jansson says is wrong with a text it could not parse, without the
 * bits of the text it quotes ("invalid token near 'root'" reads "invalid
 * token"; a byte's value is never given): error messages about a file
 * never echo its bytes. Returns buf (size bytes) or a static string. */
const char *trn_json_error_text(const json_error_t *e, char *buf, size_t size);

#endif
