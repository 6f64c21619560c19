/* trainer/data_tokens.c - token streams: llm.c's uint16 token files and plain
 * text read one byte per token.
 *
 * llm.c's format: 256 little-endian int32 (magic 20240520, version 1, token
 * count), then count little-endian uint16 tokens; the file size must match.
 */
#include "data_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spec/input.h"

#define TOK_MAGIC 20240520
#define TOK_VERSION 1
#define TOK_HEADER_BYTES (256 * 4)

/* Reads len bytes at offset off; 0, or -1 with err. */
static int read_at(int fd, void *buf, size_t len, off_t off, const char *what, const char *path,
                   struct trn_err *err)
{
	size_t got = 0;
	while (got < len) {
		size_t chunk = len - got > (1u << 30) ? (1u << 30) : len - got;
		ssize_t k = pread(fd, (char *)buf + got, chunk, off + (off_t)got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return trn_err_set(err, "%s: %s: read: %s", what, path, strerror(errno));
		if (k == 0)
			return trn_err_set(err, "%s: %s: truncated (expected %lld bytes, got %lld)", what,
			                   path, (long long)(off + (off_t)len), (long long)(off + (off_t)got));
		got += (size_t)k;
	}
	return 0;
}

/* The file through the opener (input.h) and its size. */
static int open_sized(const char *what, const char *path, const struct trn_input_policy *inputs,
                      long long *size, struct trn_err *err)
{
	int fd = trn_input_open(path, inputs, what, err);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int saved = errno;
		close(fd);
		return trn_err_set(err, "%s: %s: %s", what, path, strerror(saved));
	}
	*size = (long long)st.st_size;
	return fd;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Checks a token file's header against its size; *count: its tokens.
 * Nothing read from a file that is not one is put in a message. */
static int read_header(int fd, long long size, const char *what, const char *path,
                       int32_t *count, struct trn_err *err)
{
	uint8_t head[TOK_HEADER_BYTES];
	if (size < TOK_HEADER_BYTES)
		return trn_err_set(err, "%s: %s: not an llm.c token file (%lld bytes, the header alone "
		                   "is %d)", what, path, size, TOK_HEADER_BYTES);
	if (read_at(fd, head, sizeof head, 0, what, path, err) != 0)
		return -1;
	if ((int32_t)le32(head) != TOK_MAGIC)
		return trn_err_set(err, "%s: %s: not an llm.c token file (wrong magic number)", what,
		                   path);
	if ((int32_t)le32(head + 4) != TOK_VERSION)
		return trn_err_set(err, "%s: %s: unsupported llm.c token file version (this reads "
		                   "version %d)", what, path, TOK_VERSION);
	*count = (int32_t)le32(head + 8);
	long long want = TOK_HEADER_BYTES + 2LL * *count;
	if (*count < 0 || size < want)
		return trn_err_set(err, "%s: %s: truncated (expected %lld bytes for %d tokens, file "
		                   "has %lld)", what, path, want, *count, size);
	if (size > want)
		return trn_err_set(err, "%s: %s: %lld bytes, but the header's %d tokens need %lld",
		                   what, path, size, *count, want);
	return 0;
}

static int read_tokens_u16(struct trn_split *s, const char *what, const char *path,
                           const struct trn_input_policy *inputs, struct trn_err *err)
{
	long long size = 0;
	int fd = open_sized(what, path, inputs, &size, err);
	if (fd < 0)
		return -1;
	int rc = -1;
	int32_t count;
	if (read_header(fd, size, what, path, &count, err) != 0)
		goto out;
	s->n_tokens = count;
	s->tokens = malloc(sizeof(uint16_t) * (size_t)(count > 0 ? count : 1));
	if (!s->tokens) {
		trn_err_set(err, "%s: %s: out of memory for %d tokens", what, path, count);
		goto out;
	}
	if (read_at(fd, s->tokens, 2 * (size_t)count, TOK_HEADER_BYTES, what, path, err) != 0)
		goto out;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	for (long i = 0; i < s->n_tokens; i++)
		s->tokens[i] = (uint16_t)(s->tokens[i] >> 8 | s->tokens[i] << 8);
#endif
	rc = 0;
out:
	close(fd);
	return rc;
}

static int read_text(struct trn_split *s, const char *what, const char *path,
                     const struct trn_input_policy *inputs, struct trn_err *err)
{
	long long size = 0;
	int fd = open_sized(what, path, inputs, &size, err);
	if (fd < 0)
		return -1;
	int rc = -1;
	uint8_t *bytes = malloc((size_t)(size > 0 ? size : 1));
	s->tokens = malloc(sizeof(uint16_t) * (size_t)(size > 0 ? size : 1));
	if (!bytes || !s->tokens) {
		trn_err_set(err, "%s: %s: out of memory for %lld bytes", what, path, size);
		goto out;
	}
	if (read_at(fd, bytes, (size_t)size, 0, what, path, err) != 0)
		goto out;
	for (long long i = 0; i < size; i++)
		s->tokens[i] = bytes[i];
	s->n_tokens = (long)size;
	rc = 0;
out:
	free(bytes);
	close(fd);
	return rc;
}

/* Samples in a split: (n_tokens - 1) / seq, at least one. */
static int count_samples(struct trn_split *s, int seq, const char *what, const char *path,
                         struct trn_err *err)
{
	s->n = s->n_tokens > 0 ? (s->n_tokens - 1) / seq : 0;
	if (s->n < 1)
		return trn_err_set(err, "%s: %s: %ld tokens, too few for one sample of %d + 1 tokens",
		                   what, path, s->n_tokens, seq);
	return 0;
}

static int max_token(const struct trn_split *s)
{
	int m = 0;
	for (long i = 0; i < s->n_tokens; i++)
		m = s->tokens[i] > m ? s->tokens[i] : m;
	return m;
}

int trn_data_tokens_load(struct trn_dataset *ds, const struct trn_spec *spec,
                         const struct trn_input_policy *inputs, struct trn_err *err)
{
	const struct trn_spec_data *d = &spec->data;
	int text = d->format == TRN_DATA_TEXT;
	int (*load)(struct trn_split *, const char *, const char *, const struct trn_input_policy *,
	            struct trn_err *) = text ? read_text : read_tokens_u16;
	/* the spec names a text corpus "data.path" */
	const char *train_name = text ? "data.path" : "data.train";
	int seq = spec->model.seq;
	if (seq < 1)
		return trn_err_set(err, "model.seq: must be > 0 for token data (got %d)", seq);
	ds->task = TRN_TASK_TOKENS;
	ds->seq = seq;

	if (load(&ds->train, train_name, d->train, inputs, err) != 0)
		return -1;
	if (d->val[0]) {
		if (load(&ds->val, "data.val", d->val, inputs, err) != 0 ||
		    count_samples(&ds->val, seq, "data.val", d->val, err) != 0)
			return -1;
	} else if (d->val_fraction > 0) {
		/* the last val_fraction of the train stream, by tokens */
		long n = ds->train.n_tokens, held = trn_data_holdout(n, d->val_fraction);
		if (n - held < seq + 1 || held < seq + 1)
			return trn_err_set(err, "data.val_fraction: %g of %s (%ld tokens) leaves %ld "
			                   "tokens to train and %ld to validate; each needs at least "
			                   "seq + 1 = %d", d->val_fraction, d->train, n, n - held, held,
			                   seq + 1);
		ds->val.tokens = malloc(sizeof(uint16_t) * (size_t)held);
		if (!ds->val.tokens)
			return trn_err_set(err, "data: out of memory for %ld tokens", held);
		memcpy(ds->val.tokens, ds->train.tokens + (n - held), sizeof(uint16_t) * (size_t)held);
		ds->val.n_tokens = held;
		ds->train.n_tokens = n - held;
		uint16_t *shrunk = realloc(ds->train.tokens, sizeof(uint16_t) * (size_t)(n - held));
		if (shrunk)
			ds->train.tokens = shrunk;
		count_samples(&ds->val, seq, "data.val", d->train, err);
	}
	if (count_samples(&ds->train, seq, train_name, d->train, err) != 0)
		return -1;

	if (text) {
		ds->vocab = 256;
	} else {
		int m = max_token(&ds->train);
		if (ds->val.tokens && max_token(&ds->val) > m)
			m = max_token(&ds->val);
		ds->vocab = m + 1;
	}
	return 0;
}

/* The tokens in one file, for the shape: its header's count (tokens_u16)
 * or its bytes (text). */
static int shape_count(const char *what, const char *path, int text,
                       const struct trn_input_policy *inputs, long *n, struct trn_err *err)
{
	long long size = 0;
	int fd = open_sized(what, path, inputs, &size, err);
	if (fd < 0)
		return -1;
	int rc = 0;
	int32_t count = 0;
	if (text)
		*n = (long)size;
	else if ((rc = read_header(fd, size, what, path, &count, err)) == 0)
		*n = count;
	close(fd);
	return rc;
}

/* Samples of seq + 1 tokens in n tokens (the loader's count_samples), or 0. */
static long samples_in(long n, int seq)
{
	return n > 0 ? (n - 1) / seq : 0;
}

int trn_data_tokens_shape(struct trn_dataset *ds, const struct trn_spec *spec,
                          const struct trn_input_policy *inputs, struct trn_err *err)
{
	const struct trn_spec_data *d = &spec->data;
	int text = d->format == TRN_DATA_TEXT;
	int seq = spec->model.seq;
	if (seq < 1)
		return trn_err_set(err, "model.seq: must be > 0 for token data (got %d)", seq);
	ds->task = TRN_TASK_TOKENS;
	ds->seq = seq;
	ds->vocab = text ? 256 : 0;    /* tokens_u16: known once the tokens are read */
	if (shape_count(text ? "data.path" : "data.train", d->train, text, inputs,
	                &ds->train.n_tokens, err) != 0 ||
	    (d->val[0] && shape_count("data.val", d->val, text, inputs, &ds->val.n_tokens, err) != 0))
		return -1;
	if (!d->val[0] && d->val_fraction > 0) {
		ds->val.n_tokens = trn_data_holdout(ds->train.n_tokens, d->val_fraction);
		ds->train.n_tokens -= ds->val.n_tokens;
	}
	ds->train.n = samples_in(ds->train.n_tokens, seq);
	ds->val.n = samples_in(ds->val.n_tokens, seq);
	return 0;
}
