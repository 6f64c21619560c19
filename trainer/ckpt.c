/* trainer/ckpt.c - see ckpt.h.
 *
 * Writing: the JSON header is built first (it fixes every offset), then the
 * header and the tensors stream through one write loop that also feeds
 * SHA-256, into "<path>.tmp.<pid>"; fsync, rename, fsync of the directory.
 * Reading: the file (opened with trn_input_open) is mapped and every header
 * entry is checked against the mapping before anyone reads a byte through
 * it. A file that fails those checks is described without its bytes: no
 * header length, no tensor name (tensors are numbered), no metadata value.
 */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spec/input.h"

#define CKPT_SUBDIR "checkpoints"
#define CKPT_PREFIX "step-"
#define CKPT_SUFFIX ".safetensors"
#define CKPT_TMP ".tmp."
/* a header larger than this is not one of ours (safetensors uses 100 MB) */
#define CKPT_HEADER_MAX (100u << 20)

/* safetensors dtype names and element sizes; the first four are the ones
 * larch writes (enum trn_ckpt_dtype order), the rest are accepted on open so
 * that files from other tools can be inspected */
static const struct {
	const char *name;
	size_t size;
} dtypes[] = {
	{ "F32", 4 }, { "I64", 8 }, { "U8", 1 }, { "I8", 1 },
	{ "F64", 8 }, { "F16", 2 }, { "BF16", 2 }, { "I32", 4 }, { "I16", 2 },
	{ "U16", 2 }, { "U32", 4 }, { "U64", 8 }, { "BOOL", 1 }, { "F8_E4M3", 1 },
	{ "F8_E5M2", 1 },
};

static size_t dtype_size(const char *name)
{
	for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (strcmp(dtypes[i].name, name) == 0)
			return dtypes[i].size;
	return 0;
}

/* ---- writing -------------------------------------------------------------- */

struct writer {
	int fd;
	const char *tmp;
	EVP_MD_CTX *md;
	struct trn_err *err;
};

static int write_all(struct writer *w, const void *buf, size_t len)
{
	if (EVP_DigestUpdate(w->md, buf, len) != 1)
		return trn_err_set(w->err, "checkpoint: sha-256 update failed");
	const char *p = buf;
	while (len > 0) {
		size_t chunk = len > (1u << 30) ? (1u << 30) : len;
		ssize_t k = write(w->fd, p, chunk);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return trn_err_set(w->err, "%s: write: %s", w->tmp, strerror(errno));
		p += k;
		len -= (size_t)k;
	}
	return 0;
}

/* bytes of an entry's data, or -1 when the shape is invalid or too large */
static int entry_bytes(const struct trn_ckpt_entry *e, size_t *bytes, struct trn_err *err)
{
	if ((unsigned)e->dtype > TRN_CKPT_I8)
		return trn_err_set(err, "checkpoint: tensor %s: unknown dtype %d", e->name, (int)e->dtype);
	if (e->ndim < 0 || e->ndim > 4)
		return trn_err_set(err, "checkpoint: tensor %s: ndim %d outside 0..4", e->name, e->ndim);
	size_t n = dtypes[e->dtype].size;
	for (int d = 0; d < e->ndim; d++) {
		if (e->shape[d] < 0)
			return trn_err_set(err, "checkpoint: tensor %s: negative dimension %ld", e->name,
			                   e->shape[d]);
		if (e->shape[d] > 0 && n > SIZE_MAX / (size_t)e->shape[d])
			return trn_err_set(err, "checkpoint: tensor %s: too large", e->name);
		n *= (size_t)e->shape[d];
	}
	if (n > 0 && !e->data)
		return trn_err_set(err, "checkpoint: tensor %s: no data", e->name);
	*bytes = n;
	return 0;
}

/* The header JSON padded with spaces to a multiple of 8; a new string. */
static char *build_header(const struct trn_ckpt_entry *entries, int n, json_t *meta,
                          size_t *len, struct trn_err *err)
{
	json_t *h = json_object();
	char *text = NULL;
	if (!h)
		goto oom;
	if (meta) {
		const char *key;
		json_t *v;
		if (!json_is_object(meta)) {
			trn_err_set(err, "checkpoint: metadata must be a JSON object");
			goto fail;
		}
		json_object_foreach(meta, key, v)
			if (!json_is_string(v)) {
				trn_err_set(err, "checkpoint: metadata %s: values must be strings", key);
				goto fail;
			}
		if (json_object_set(h, "__metadata__", meta) != 0)
			goto oom;
	}
	size_t off = 0;
	for (int i = 0; i < n; i++) {
		const struct trn_ckpt_entry *e = &entries[i];
		size_t bytes;
		if (!e->name || !e->name[0] || strcmp(e->name, "__metadata__") == 0) {
			trn_err_set(err, "checkpoint: tensor %d: invalid name \"%s\"", i,
			            e->name ? e->name : "(null)");
			goto fail;
		}
		if (json_object_get(h, e->name)) {
			trn_err_set(err, "checkpoint: tensor %s: duplicate name", e->name);
			goto fail;
		}
		if (entry_bytes(e, &bytes, err) != 0)
			goto fail;
		json_t *shape = json_array();
		for (int d = 0; shape && d < e->ndim; d++)
			if (json_array_append_new(shape, json_integer(e->shape[d])) != 0) {
				json_decref(shape);
				shape = NULL;
			}
		json_t *t = json_pack("{s:s, s:o, s:[I,I]}", "dtype", dtypes[e->dtype].name,
		                      "shape", shape, "data_offsets", (json_int_t)off,
		                      (json_int_t)(off + bytes));
		if (!t || json_object_set_new(h, e->name, t) != 0)
			goto oom;
		off += bytes;
	}
	/* insertion order is kept by jansson (>= 2.8), so keys follow the layout */
	char *raw = json_dumps(h, JSON_COMPACT);
	if (!raw)
		goto oom;
	size_t raw_len = strlen(raw), padded = (raw_len + 7) & ~(size_t)7;
	text = malloc(padded);
	if (!text) {
		free(raw);
		goto oom;
	}
	memcpy(text, raw, raw_len);
	memset(text + raw_len, ' ', padded - raw_len);
	free(raw);
	json_decref(h);
	*len = padded;
	return text;
oom:
	trn_err_set(err, "checkpoint: out of memory building the header");
fail:
	json_decref(h);
	return NULL;
}

static int fsync_dir_of(const char *path, struct trn_err *err)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == path)
		snprintf(dir, sizeof dir, "/");
	else
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return trn_err_set(err, "%s: open: %s", dir, strerror(errno));
	int rc = fsync(fd);
	int saved = errno;
	close(fd);
	/* some file systems cannot sync a directory; the rename itself stands */
	if (rc != 0 && saved != EINVAL && saved != EROFS)
		return trn_err_set(err, "%s: fsync: %s", dir, strerror(saved));
	return 0;
}

static void to_hex(const unsigned char *md, unsigned len, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (unsigned i = 0; i < len; i++) {
		out[2 * i] = digits[md[i] >> 4];
		out[2 * i + 1] = digits[md[i] & 15];
	}
	out[2 * len] = '\0';
}

int trn_ckpt_write(const char *path, const struct trn_ckpt_entry *entries, int n,
                   json_t *meta, char *sha256_hex, struct trn_err *err)
{
	size_t hlen;
	char *header = build_header(entries, n, meta, &hlen, err);
	if (!header)
		return -1;

	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof tmp, "%s" CKPT_TMP "%ld", path, (long)getpid()) >= (int)sizeof tmp) {
		free(header);
		return trn_err_set(err, "%s: path too long", path);
	}
	struct writer w = { .fd = -1, .tmp = tmp, .md = EVP_MD_CTX_new(), .err = err };
	int rc = -1;
	if (!w.md || EVP_DigestInit_ex(w.md, EVP_sha256(), NULL) != 1) {
		trn_err_set(err, "checkpoint: cannot set up sha-256");
		goto out;
	}
	w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w.fd < 0) {
		trn_err_set(err, "%s: open: %s", tmp, strerror(errno));
		goto out;
	}
	unsigned char len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	if (write_all(&w, len8, 8) != 0 || write_all(&w, header, hlen) != 0)
		goto fail;
	for (int i = 0; i < n; i++) {
		size_t bytes;
		entry_bytes(&entries[i], &bytes, NULL);    /* checked by build_header */
		if (bytes && write_all(&w, entries[i].data, bytes) != 0)
			goto fail;
	}
	if (fsync(w.fd) != 0) {
		trn_err_set(err, "%s: fsync: %s", tmp, strerror(errno));
		goto fail;
	}
	int fd = w.fd;
	w.fd = -1;
	if (close(fd) != 0) {
		trn_err_set(err, "%s: close: %s", tmp, strerror(errno));
		goto fail;
	}
	if (rename(tmp, path) != 0) {
		trn_err_set(err, "%s: rename to %s: %s", tmp, path, strerror(errno));
		goto fail;
	}
	if (fsync_dir_of(path, err) != 0)
		goto out;              /* the new file is in place; report, keep it */
	if (sha256_hex) {
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned mdlen = 0;
		if (EVP_DigestFinal_ex(w.md, md, &mdlen) != 1) {
			trn_err_set(err, "checkpoint: sha-256 final failed");
			goto out;
		}
		to_hex(md, mdlen, sha256_hex);
	}
	rc = 0;
	goto out;
fail:
	if (w.fd >= 0)
		close(w.fd);
	w.fd = -1;
	unlink(tmp);
out:
	EVP_MD_CTX_free(w.md);
	free(header);
	return rc;
}

/* ---- reading -------------------------------------------------------------- */

/* Tensor number k of the header (from 0, in the header's order): named by
 * its number, since a name is bytes of the file. who: "<path>" or
 * "<field>: <path>". */
static int check_entry(const char *who, int k, json_t *t, size_t data_len, struct trn_err *err)
{
	json_t *dtype = json_object_get(t, "dtype"), *shape = json_object_get(t, "shape");
	json_t *offs = json_object_get(t, "data_offsets");
	if (!json_is_object(t) || !json_is_string(dtype) || !json_is_array(shape) ||
	    !json_is_array(offs) || json_array_size(offs) != 2)
		return trn_err_set(err, "%s: tensor #%d: needs dtype, shape and data_offsets [begin, "
		                   "end]", who, k);
	size_t numel_bytes = dtype_size(json_string_value(dtype));
	if (!numel_bytes)
		return trn_err_set(err, "%s: tensor #%d: unknown dtype", who, k);
	size_t i;
	json_t *d;
	json_array_foreach(shape, i, d) {
		json_int_t v = json_is_integer(d) ? json_integer_value(d) : -1;
		if (v < 0)
			return trn_err_set(err, "%s: tensor #%d: shape must hold integers >= 0", who, k);
		if (v > 0 && numel_bytes > SIZE_MAX / (uint64_t)v)
			return trn_err_set(err, "%s: tensor #%d: shape too large", who, k);
		numel_bytes *= (size_t)v;
	}
	json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
	if (!json_is_integer(b) || !json_is_integer(e))
		return trn_err_set(err, "%s: tensor #%d: data_offsets must be integers", who, k);
	json_int_t begin = json_integer_value(b), end = json_integer_value(e);
	if (begin < 0 || end < begin || (uint64_t)end > data_len)
		return trn_err_set(err, "%s: tensor #%d: data_offsets outside the data section of "
		                   "%zu bytes", who, k, data_len);
	if ((uint64_t)(end - begin) != numel_bytes)
		return trn_err_set(err, "%s: tensor #%d: data_offsets span another size than its "
		                   "shape and dtype need", who, k);
	return 0;
}

int trn_ckpt_open(struct trn_ckpt *c, const char *path, struct trn_err *err)
{
	return trn_ckpt_open_input(c, path, NULL, NULL, err);
}

int trn_ckpt_open_input(struct trn_ckpt *c, const char *path,
                        const struct trn_input_policy *inputs, const char *field,
                        struct trn_err *err)
{
	memset(c, 0, sizeof *c);
	char who[TRN_ERR_TEXT];
	if (field)
		snprintf(who, sizeof who, "%s: %s", field, path);
	else
		snprintf(who, sizeof who, "%s", path);
	int fd = trn_input_open(path, inputs, field ? field : "checkpoint", err);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int saved = errno;
		close(fd);
		return trn_err_set(err, "%s: stat: %s", who, strerror(saved));
	}
	if (st.st_size < 8) {
		close(fd);
		return trn_err_set(err, "%s: not a safetensors file (%lld bytes)", who,
		                   (long long)st.st_size);
	}
	size_t size = (size_t)st.st_size;
	void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	int saved = errno;
	close(fd);
	if (map == MAP_FAILED)
		return trn_err_set(err, "%s: mmap: %s", who, strerror(saved));
	c->map = map;
	c->map_len = size;

	/* nothing read from a file that fails here goes into a message */
	const uint8_t *p = map;
	uint64_t hlen = 0;
	for (int i = 0; i < 8; i++)
		hlen |= (uint64_t)p[i] << (8 * i);
	if (hlen > size - 8) {
		trn_err_set(err, "%s: not a safetensors file (the header's length is past the end of "
		            "the file, %zu bytes)", who, size);
		goto fail;
	}
	if (hlen > CKPT_HEADER_MAX) {
		trn_err_set(err, "%s: the header is larger than %u MiB", who, CKPT_HEADER_MAX >> 20);
		goto fail;
	}
	json_error_t jerr;
	char why[JSON_ERROR_TEXT_LENGTH];
	c->header = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!c->header) {
		trn_err_set(err, "%s: header is not valid JSON: %s (at byte %d)", who,
		            trn_json_error_text(&jerr, why, sizeof why), jerr.position);
		goto fail;
	}
	if (!json_is_object(c->header)) {
		trn_err_set(err, "%s: header is not a JSON object", who);
		goto fail;
	}
	c->data = p + 8 + hlen;
	c->data_len = size - 8 - (size_t)hlen;

	const char *key;
	json_t *v;
	int k = 0;
	json_object_foreach(c->header, key, v) {
		if (strcmp(key, "__metadata__") == 0) {
			const char *mk;
			json_t *mv;
			if (!json_is_object(v)) {
				trn_err_set(err, "%s: __metadata__ is not an object", who);
				goto fail;
			}
			json_object_foreach(v, mk, mv)
				if (!json_is_string(mv)) {
					trn_err_set(err, "%s: a metadata value is not a string", who);
					goto fail;
				}
			continue;
		}
		if (check_entry(who, k++, v, c->data_len, err) != 0)
			goto fail;
	}
	return 0;
fail:
	trn_ckpt_close(c);
	return -1;
}

void trn_ckpt_close(struct trn_ckpt *c)
{
	json_decref(c->header);
	if (c->map)
		munmap(c->map, c->map_len);
	memset(c, 0, sizeof *c);
}

const char *trn_ckpt_meta(const struct trn_ckpt *c, const char *key)
{
	return json_string_value(json_object_get(json_object_get(c->header, "__metadata__"), key));
}

int trn_ckpt_has(const struct trn_ckpt *c, const char *name)
{
	return strcmp(name, "__metadata__") != 0 && json_object_get(c->header, name) != NULL;
}

int trn_ckpt_read(const struct trn_ckpt *c, const char *name, enum trn_ckpt_dtype dtype,
                  void *dst, long numel, struct trn_err *err)
{
	if (!trn_ckpt_has(c, name))
		return trn_err_set(err, "checkpoint: no tensor %s", name);
	if ((unsigned)dtype > TRN_CKPT_I8)
		return trn_err_set(err, "checkpoint: tensor %s: unknown dtype %d", name, (int)dtype);
	json_t *t = json_object_get(c->header, name);
	const char *have = json_string_value(json_object_get(t, "dtype"));
	if (strcmp(have, dtypes[dtype].name) != 0)
		return trn_err_set(err, "checkpoint: tensor %s: dtype %s, expected %s", name, have,
		                   dtypes[dtype].name);
	json_t *offs = json_object_get(t, "data_offsets");
	size_t begin = (size_t)json_integer_value(json_array_get(offs, 0));
	size_t end = (size_t)json_integer_value(json_array_get(offs, 1));
	size_t have_numel = (end - begin) / dtypes[dtype].size;
	if (numel < 0 || have_numel != (size_t)numel)
		return trn_err_set(err, "checkpoint: tensor %s: %zu elements, expected %ld", name,
		                   have_numel, numel);
	if (end > begin)
		memcpy(dst, c->data + begin, end - begin);
	return 0;
}

/* ---- the checkpoints of a job dir ------------------------------------------- */

void trn_ckpt_path(char *buf, size_t len, const char *job_dir, long step)
{
	snprintf(buf, len, "%s/" CKPT_SUBDIR "/" CKPT_PREFIX "%08ld" CKPT_SUFFIX, job_dir, step);
}

/* step of "step-<digits>.safetensors", or -1 */
static long parse_name(const char *name)
{
	size_t np = strlen(CKPT_PREFIX), ns = strlen(CKPT_SUFFIX), len = strlen(name);
	if (len <= np + ns || strncmp(name, CKPT_PREFIX, np) != 0 ||
	    strcmp(name + len - ns, CKPT_SUFFIX) != 0 || len - np - ns > 18)
		return -1;
	long step = 0;
	for (const char *p = name + np; p < name + len - ns; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		step = step * 10 + (*p - '0');
	}
	return step;
}

/* a temporary of trn_ckpt_write: "step-<...>.safetensors.tmp.<pid>" */
static int is_temp(const char *name)
{
	const char *t = strstr(name, CKPT_SUFFIX CKPT_TMP);
	return strncmp(name, CKPT_PREFIX, strlen(CKPT_PREFIX)) == 0 && t &&
	       t[strlen(CKPT_SUFFIX CKPT_TMP)] != '\0';
}

static int cmp_desc(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x < y) - (x > y);
}

int trn_ckpt_list(const char *job_dir, long **steps, struct trn_err *err)
{
	*steps = NULL;
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/" CKPT_SUBDIR, job_dir);
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return trn_err_set(err, "%s: %s", dir, strerror(errno));
	}
	long *v = NULL;
	int n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		long step = parse_name(de->d_name);
		if (step < 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			long *grown = realloc(v, sizeof *v * (size_t)cap);
			if (!grown) {
				free(v);
				closedir(d);
				return trn_err_set(err, "%s: out of memory", dir);
			}
			v = grown;
		}
		v[n++] = step;
	}
	closedir(d);
	if (n > 1)
		qsort(v, (size_t)n, sizeof *v, cmp_desc);
	*steps = v;
	return n;
}

int trn_ckpt_prune(const char *job_dir, int keep, struct trn_err *err)
{
	if (keep < 0)
		return trn_err_set(err, "checkpoint: prune: keep must be >= 0 (got %d)", keep);
	long *steps;
	int n = trn_ckpt_list(job_dir, &steps, err);
	if (n < 0)
		return -1;
	int rc = 0;
	char path[PATH_MAX];
	for (int i = keep; i < n; i++) {
		trn_ckpt_path(path, sizeof path, job_dir, steps[i]);
		if (unlink(path) != 0 && errno != ENOENT)
			rc = trn_err_set(err, "%s: unlink: %s", path, strerror(errno));
	}
	free(steps);

	/* temporaries left behind by a writer that crashed */
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/" CKPT_SUBDIR, job_dir);
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? rc : trn_err_set(err, "%s: %s", dir, strerror(errno));
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!is_temp(de->d_name))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) != 0 && errno != ENOENT)
			rc = trn_err_set(err, "%s/%s: unlink: %s", dir, de->d_name, strerror(errno));
	}
	closedir(d);
	return rc;
}
