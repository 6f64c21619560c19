/* tests/unit/test_ckpt.c - trainer/ckpt.c: round trip, the safetensors layout
 * on disk, corrupt files, list and prune, and a write that fails midway. */
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "check.h"
#include "trainer/ckpt.h"

static const char *tmp;

/* whole file into a new buffer; NULL when missing */
static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
	if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void spit(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	fclose(f);
}

static int contains(const char *text, const char *needle)
{
	return strstr(text, needle) != NULL;
}

/* A small checkpoint: three tensors, one of each dtype. */
struct sample {
	float w[6];
	int64_t s[4];
	uint8_t b[5];
	struct trn_ckpt_entry e[3];
	json_t *meta;
};

static void sample_init(struct sample *x, float base)
{
	for (int i = 0; i < 6; i++)
		x->w[i] = base + 0.25f * i;
	for (int i = 0; i < 4; i++)
		x->s[i] = (int64_t)0x0123456789abcdefLL * (i + 1) - (int64_t)(base * 1000);
	for (int i = 0; i < 5; i++)
		x->b[i] = (uint8_t)(250 + i);
	x->e[0] = (struct trn_ckpt_entry){ .name = "param.fc1.weight", .dtype = TRN_CKPT_F32,
	                                   .data = x->w, .ndim = 2, .shape = { 2, 3 } };
	x->e[1] = (struct trn_ckpt_entry){ .name = "rng.init", .dtype = TRN_CKPT_I64,
	                                   .data = x->s, .ndim = 1, .shape = { 4 } };
	x->e[2] = (struct trn_ckpt_entry){ .name = "extra.bytes", .dtype = TRN_CKPT_U8,
	                                   .data = x->b, .ndim = 1, .shape = { 5 } };
	x->meta = json_pack("{s:s, s:s, s:s}", "format", "larch-ckpt-1", "step", "1000",
	                    "optimizer", "adamw");
}

static void test_round_trip(void)
{
	char path[4096], sha[65] = "", want_sha[65];
	snprintf(path, sizeof path, "%s/rt.safetensors", tmp);
	struct sample x;
	sample_init(&x, 1.5f);
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_ckpt_write(path, x.e, 3, x.meta, sha, &err), 0);
	CHECK_MSG(!err.set, "%s", err.text);

	/* the sha-256 returned is the file's, computed here independently */
	size_t len;
	unsigned char *file = slurp(path, &len);
	CHECK(file != NULL);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	EVP_Digest(file, len, md, &mdlen, EVP_sha256(), NULL);
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(want_sha + 2 * i, 3, "%02x", md[i]);
	CHECK_INT_EQ(mdlen, 32);
	CHECK_STR_EQ(sha, want_sha);

	/* the layout, read by hand */
	uint64_t hlen = 0;
	for (int i = 0; i < 8; i++)
		hlen |= (uint64_t)file[i] << (8 * i);
	CHECK_INT_EQ(hlen % 8, 0);
	CHECK(8 + hlen <= len);
	CHECK_INT_EQ(file[8], '{');
	CHECK_INT_EQ(len, 8 + hlen + 24 + 32 + 5);
	json_error_t jerr;
	json_t *h = json_loadb((const char *)file + 8, hlen, 0, &jerr);
	CHECK_MSG(h != NULL, "header JSON: %s", jerr.text);
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(h, "__metadata__"), "format")),
	             "larch-ckpt-1");
	json_t *t = json_object_get(h, "param.fc1.weight");
	CHECK_STR_EQ(json_string_value(json_object_get(t, "dtype")), "F32");
	json_t *want = json_pack("[i,i]", 2, 3);
	CHECK(json_equal(json_object_get(t, "shape"), want));
	json_decref(want);
	want = json_pack("[i,i]", 0, 24);
	CHECK(json_equal(json_object_get(t, "data_offsets"), want));
	json_decref(want);
	t = json_object_get(h, "rng.init");
	CHECK_STR_EQ(json_string_value(json_object_get(t, "dtype")), "I64");
	want = json_pack("[i,i]", 24, 56);
	CHECK(json_equal(json_object_get(t, "data_offsets"), want));
	json_decref(want);
	t = json_object_get(h, "extra.bytes");
	CHECK_STR_EQ(json_string_value(json_object_get(t, "dtype")), "U8");
	want = json_pack("[i,i]", 56, 61);
	CHECK(json_equal(json_object_get(t, "data_offsets"), want));
	json_decref(want);
	CHECK_INT_EQ(json_object_size(h), 4);
	const unsigned char *data = file + 8 + hlen;
	CHECK(memcmp(data, x.w, 24) == 0 && memcmp(data + 24, x.s, 32) == 0 &&
	      memcmp(data + 56, x.b, 5) == 0);
	json_decref(h);
	free(file);

	/* and through the reader */
	struct trn_ckpt c;
	CHECK_INT_EQ(trn_ckpt_open(&c, path, &err), 0);
	CHECK_MSG(!err.set, "%s", err.text);
	CHECK_STR_EQ(trn_ckpt_meta(&c, "step"), "1000");
	CHECK_STR_EQ(trn_ckpt_meta(&c, "optimizer"), "adamw");
	CHECK(trn_ckpt_meta(&c, "nope") == NULL);
	CHECK(trn_ckpt_has(&c, "rng.init"));
	CHECK(!trn_ckpt_has(&c, "rng.data"));
	CHECK(!trn_ckpt_has(&c, "__metadata__"));
	float w[6];
	int64_t s[4];
	uint8_t b[5];
	CHECK_INT_EQ(trn_ckpt_read(&c, "param.fc1.weight", TRN_CKPT_F32, w, 6, &err), 0);
	CHECK_INT_EQ(trn_ckpt_read(&c, "rng.init", TRN_CKPT_I64, s, 4, &err), 0);
	CHECK_INT_EQ(trn_ckpt_read(&c, "extra.bytes", TRN_CKPT_U8, b, 5, &err), 0);
	CHECK(memcmp(w, x.w, sizeof w) == 0 && memcmp(s, x.s, sizeof s) == 0 &&
	      memcmp(b, x.b, sizeof b) == 0);

	/* wrong dtype, wrong size, missing tensor */
	CHECK_INT_EQ(trn_ckpt_read(&c, "param.fc1.weight", TRN_CKPT_I64, s, 3, &err), -1);
	CHECK_MSG(contains(err.text, "param.fc1.weight") && contains(err.text, "dtype F32"),
	          "%s", err.text);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_ckpt_read(&c, "param.fc1.weight", TRN_CKPT_F32, w, 5, &err), -1);
	CHECK_MSG(contains(err.text, "6 elements, expected 5"), "%s", err.text);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_ckpt_read(&c, "param.fc2.weight", TRN_CKPT_F32, w, 6, &err), -1);
	CHECK_MSG(contains(err.text, "no tensor param.fc2.weight"), "%s", err.text);
	trn_err_clear(&err);
	trn_ckpt_close(&c);

	/* an empty tensor and no metadata */
	snprintf(path, sizeof path, "%s/empty.safetensors", tmp);
	struct trn_ckpt_entry e = { .name = "param.none", .dtype = TRN_CKPT_F32, .data = NULL,
	                            .ndim = 1, .shape = { 0 } };
	CHECK_INT_EQ(trn_ckpt_write(path, &e, 1, NULL, NULL, &err), 0);
	CHECK_INT_EQ(trn_ckpt_open(&c, path, &err), 0);
	CHECK_INT_EQ(trn_ckpt_read(&c, "param.none", TRN_CKPT_F32, w, 0, &err), 0);
	CHECK(trn_ckpt_meta(&c, "format") == NULL);
	CHECK_MSG(!err.set, "%s", err.text);
	trn_ckpt_close(&c);
	json_decref(x.meta);
}

static void test_bad_input_to_write(void)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/bad.safetensors", tmp);
	struct sample x;
	sample_init(&x, 0);
	struct trn_err err = { 0 };

	json_t *meta = json_pack("{s:i}", "step", 5);
	CHECK_INT_EQ(trn_ckpt_write(path, x.e, 3, meta, NULL, &err), -1);
	CHECK_MSG(contains(err.text, "metadata step"), "%s", err.text);
	json_decref(meta);
	trn_err_clear(&err);

	x.e[2].name = "param.fc1.weight";
	CHECK_INT_EQ(trn_ckpt_write(path, x.e, 3, x.meta, NULL, &err), -1);
	CHECK_MSG(contains(err.text, "duplicate"), "%s", err.text);
	trn_err_clear(&err);
	CHECK(access(path, F_OK) != 0);

	/* a directory that does not exist: a clean error naming the path */
	snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", tmp);
	json_decref(x.meta);
	sample_init(&x, 0);
	json_decref(x.meta);
	x.meta = NULL;
	CHECK_INT_EQ(trn_ckpt_write(path, x.e, 3, NULL, NULL, &err), -1);
	CHECK_MSG(contains(err.text, "no/such/dir/x.safetensors") &&
	          contains(err.text, "No such file"), "%s", err.text);
	trn_err_clear(&err);
}

/* Writes a raw file: 8-byte length, header text (padded), then data_len
 * bytes of data. */
static void write_raw(const char *path, const char *header, size_t data_len, uint64_t hlen_override)
{
	size_t hl = strlen(header), padded = (hl + 7) & ~(size_t)7;
	size_t len = 8 + padded + data_len;
	unsigned char *buf = calloc(1, len);
	uint64_t h = hlen_override ? hlen_override : padded;
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(h >> (8 * i));
	memcpy(buf + 8, header, hl);
	memset(buf + 8 + hl, ' ', padded - hl);
	spit(path, buf, len);
	free(buf);
}

static void expect_open_error(const char *path, const char *needle)
{
	struct trn_ckpt c;
	struct trn_err err = { 0 };
	int rc = trn_ckpt_open(&c, path, &err);
	CHECK_MSG(rc == -1 && contains(err.text, path) && contains(err.text, needle),
	          "opening %s: rc %d, error \"%s\", want \"%s\"", path, rc, err.text, needle);
	if (rc == 0)
		trn_ckpt_close(&c);
}

static void test_corrupt_files(void)
{
	char good[4096], path[4096];
	snprintf(good, sizeof good, "%s/good.safetensors", tmp);
	struct sample x;
	sample_init(&x, 2);
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_ckpt_write(good, x.e, 3, x.meta, NULL, &err), 0);
	json_decref(x.meta);
	size_t len;
	unsigned char *file = slurp(good, &len);

	/* truncated data: the last tensor now reaches past the end */
	snprintf(path, sizeof path, "%s/truncated.safetensors", tmp);
	spit(path, file, len - 3);
	expect_open_error(path, "outside the data section");

	/* shorter than the length prefix */
	snprintf(path, sizeof path, "%s/tiny.safetensors", tmp);
	spit(path, file, 5);
	expect_open_error(path, "not a safetensors file");

	/* a header length past the end of the file */
	snprintf(path, sizeof path, "%s/hlen.safetensors", tmp);
	write_raw(path, "{}", 0, 1000);
	expect_open_error(path, "the header's length is past the end of the file");

	/* JSON that does not parse, and JSON that is not an object */
	snprintf(path, sizeof path, "%s/json.safetensors", tmp);
	write_raw(path, "{\"a\": {\"dtype\": ", 16, 0);
	expect_open_error(path, "not valid JSON");
	write_raw(path, "[1, 2]", 0, 0);
	expect_open_error(path, "not a JSON object");

	/* offsets outside the data section, reversed, or not matching the shape */
	snprintf(path, sizeof path, "%s/offsets.safetensors", tmp);
	write_raw(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, 0);
	expect_open_error(path, "tensor #0: data_offsets outside the data section of 8 bytes");
	write_raw(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, 0);
	expect_open_error(path, "outside");
	write_raw(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, 0);
	expect_open_error(path, "data_offsets span another size than its shape");

	/* unknown dtype, missing fields, negative shapes, non-string metadata */
	write_raw(path, "{\"t\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8, 0);
	expect_open_error(path, "tensor #0: unknown dtype");
	write_raw(path, "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 8, 0);
	expect_open_error(path, "data_offsets");
	write_raw(path, "{\"t\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 8, 0);
	expect_open_error(path, "shape must hold integers");
	write_raw(path, "{\"__metadata__\":{\"step\":3}}", 0, 0);
	expect_open_error(path, "a metadata value is not a string");
	write_raw(path, "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
	          "\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8, 0);
	expect_open_error(path, "not valid JSON");

	/* a missing file */
	snprintf(path, sizeof path, "%s/missing.safetensors", tmp);
	expect_open_error(path, "No such file");

	/* a file from another tool, with dtypes larch does not write, opens */
	write_raw(path, "{\"h\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 8, 0);
	struct trn_ckpt c;
	CHECK_INT_EQ(trn_ckpt_open(&c, path, &err), 0);
	float f[2];
	CHECK_INT_EQ(trn_ckpt_read(&c, "h", TRN_CKPT_F32, f, 2, &err), -1);
	CHECK_MSG(contains(err.text, "dtype BF16, expected F32"), "%s", err.text);
	trn_ckpt_close(&c);
	free(file);
}

static void touch(const char *dir, const char *name)
{
	char path[8400];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	spit(path, "x", 1);
}

static int count_temps(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += strstr(de->d_name, ".tmp.") != NULL;
	if (d)
		closedir(d);
	return n;
}

/* A file that is not a checkpoint, or one whose header carries a secret in
 * its names and values, fails without its bytes in the message. */
static void test_secret_not_echoed(void)
{
	static const char secret[] = "root:$y$j9T$Zq7Vb3kXw2Pn0Lr5:19700:0:99999:7:::\n";
	char path[4096], header[512];
	struct trn_ckpt c;
	struct trn_err err = { 0 };
	snprintf(path, sizeof path, "%s/secret.safetensors", tmp);
	spit(path, secret, sizeof secret - 1);
	CHECK_INT_EQ(trn_ckpt_open_input(&c, path, NULL, "init.from", &err), -1);
	CHECK_MSG(strncmp(err.text, "init.from: ", 11) == 0 &&
	          contains(err.text, "not a safetensors file"), "%s", err.text);
	CHECK_NO_LEAK(err.text, secret, sizeof secret - 1);
	/* a length that fits, then the secret where the JSON belongs */
	write_raw(path, secret, 0, 0);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_ckpt_open(&c, path, &err), -1);
	CHECK_MSG(contains(err.text, "header is not valid JSON") && !contains(err.text, "near"),
	          "%s", err.text);
	CHECK_NO_LEAK(err.text, secret, sizeof secret - 1);
	/* the secret as a tensor's name, its dtype, and a metadata key */
	const char *const headers[] = {
		"{\"%s\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		"{\"t\":{\"dtype\":\"%s\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		"{\"__metadata__\":{\"%s\":3}}",
		"{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99]}}",
	};
	char quoted[128];
	snprintf(quoted, sizeof quoted, "%.*s", (int)strcspn(secret, "\n"), secret);
	for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
		snprintf(header, sizeof header, headers[i], quoted);
		write_raw(path, header, 8, 0);
		trn_err_clear(&err);
		CHECK_INT_EQ(trn_ckpt_open(&c, path, &err), -1);
		CHECK_NO_LEAK(err.text, secret, sizeof secret - 1);
	}
	/* a FIFO is refused, not opened for reading (which would block) */
	snprintf(path, sizeof path, "%s/fifo.safetensors", tmp);
	CHECK(mkfifo(path, 0600) == 0);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_ckpt_open_input(&c, path, NULL, "init.from", &err), -1);
	CHECK_MSG(contains(err.text, "not a regular file"), "%s", err.text);
}

static void test_list_prune(void)
{
	char job[4096], dir[4200], path[4300];
	snprintf(job, sizeof job, "%s/job", tmp);
	mkdir(job, 0755);
	struct trn_err err = { 0 };
	long *steps;

	/* no checkpoints dir yet: none */
	CHECK_INT_EQ(trn_ckpt_list(job, &steps, &err), 0);
	free(steps);
	CHECK_INT_EQ(trn_ckpt_prune(job, 2, &err), 0);

	snprintf(dir, sizeof dir, "%s/checkpoints", job);
	mkdir(dir, 0755);
	trn_ckpt_path(path, sizeof path, job, 1000);
	CHECK_STR_EQ(path + strlen(job), "/checkpoints/step-00001000.safetensors");

	struct sample x;
	sample_init(&x, 0);
	const long written[] = { 300, 100, 500, 200, 400 };
	for (int i = 0; i < 5; i++) {
		trn_ckpt_path(path, sizeof path, job, written[i]);
		CHECK_INT_EQ(trn_ckpt_write(path, x.e, 3, x.meta, NULL, &err), 0);
	}
	json_decref(x.meta);
	touch(dir, "notes.txt");
	touch(dir, "step-abc.safetensors");
	touch(dir, "step-00000600.safetensors.tmp.99999");
	touch(dir, "step-00000100.safetensors.tmp.12");

	int n = trn_ckpt_list(job, &steps, &err);
	CHECK_INT_EQ(n, 5);
	for (int i = 0; i < n && i < 5; i++)
		CHECK_INT_EQ(steps[i], 500 - 100 * i);
	free(steps);

	CHECK_INT_EQ(trn_ckpt_prune(job, 2, &err), 0);
	CHECK_MSG(!err.set, "%s", err.text);
	n = trn_ckpt_list(job, &steps, &err);
	CHECK_INT_EQ(n, 2);
	if (n == 2)
		CHECK(steps[0] == 500 && steps[1] == 400);
	free(steps);
	CHECK_INT_EQ(count_temps(dir), 0);
	snprintf(path, sizeof path, "%s/notes.txt", dir);
	CHECK(access(path, F_OK) == 0);
	snprintf(path, sizeof path, "%s/step-abc.safetensors", dir);
	CHECK(access(path, F_OK) == 0);

	/* keeping more than there are deletes nothing */
	CHECK_INT_EQ(trn_ckpt_prune(job, 10, &err), 0);
	n = trn_ckpt_list(job, &steps, &err);
	CHECK_INT_EQ(n, 2);
	free(steps);
}

/* A write that fails midway (file size limit) leaves the previous checkpoint
 * byte-identical and no temporary behind. */
static void test_failing_write(void)
{
	char dir[4096], path[4200];
	snprintf(dir, sizeof dir, "%s/fail", tmp);
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/step-00000001.safetensors", dir);
	struct sample x;
	sample_init(&x, 7);
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_ckpt_write(path, x.e, 3, x.meta, NULL, &err), 0);
	size_t before_len;
	unsigned char *before = slurp(path, &before_len);

	enum { N = 64 * 1024 };
	float *big = calloc(N, sizeof(float));
	for (int i = 0; i < N; i++)
		big[i] = (float)i;
	struct trn_ckpt_entry e = { .name = "param.big", .dtype = TRN_CKPT_F32, .data = big,
	                            .ndim = 2, .shape = { 256, 256 } };

	struct rlimit old, lim;
	getrlimit(RLIMIT_FSIZE, &old);
	lim = old;
	lim.rlim_cur = 16 * 1024;
	void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
	CHECK_INT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
	char sha[65] = "untouched";
	int rc = trn_ckpt_write(path, &e, 1, x.meta, sha, &err);
	setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, prev);

	CHECK_INT_EQ(rc, -1);
	CHECK_MSG(err.set && contains(err.text, "write") && contains(err.text, ".tmp."), "%s",
	          err.text);
	CHECK_STR_EQ(sha, "untouched");
	size_t after_len;
	unsigned char *after = slurp(path, &after_len);
	CHECK(after && after_len == before_len && memcmp(before, after, before_len) == 0);
	CHECK_INT_EQ(count_temps(dir), 0);

	/* and once the limit is gone the same write succeeds */
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_ckpt_write(path, &e, 1, x.meta, sha, &err), 0);
	struct trn_ckpt c;
	CHECK_INT_EQ(trn_ckpt_open(&c, path, &err), 0);
	float *back = calloc(N, sizeof(float));
	CHECK_INT_EQ(trn_ckpt_read(&c, "param.big", TRN_CKPT_F32, back, N, &err), 0);
	CHECK(memcmp(back, big, sizeof(float) * N) == 0);
	CHECK(!trn_ckpt_has(&c, "rng.init"));
	trn_ckpt_close(&c);
	free(back);
	free(big);
	free(before);
	free(after);
	json_decref(x.meta);
}

int main(void)
{
	tmp = check_tmpdir("ckpt");
	CHECK_RUN(test_round_trip);
	CHECK_RUN(test_bad_input_to_write);
	CHECK_RUN(test_corrupt_files);
	CHECK_RUN(test_secret_not_echoed);
	CHECK_RUN(test_list_prune);
	CHECK_RUN(test_failing_write);
	return check_finish();
}
