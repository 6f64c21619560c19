/* tests/unit/test_data.c - trainer/data*.c: IDX (gzip and plain), token and
 * text files, validation splits, errors naming the file, and the loader's
 * order across ranks, micro-batches, epochs and a resume; shapes and their
 * JSON; a file that fails to parse is not echoed; a confining policy reaches
 * every format. Specs are filled by hand (no JSON parsing). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "trainer/data.h"
#include "trainer/spec/input.h"

static const char *tmp;

static int contains(const char *text, const char *needle)
{
	return strstr(text, needle) != NULL;
}

static const char *tmp_path(const char *name)
{
	static char paths[16][4352];
	static int next;
	char *p = paths[next++ % 16];
	snprintf(p, sizeof paths[0], "%s/%s", tmp, name);
	return p;
}

/* Writes bytes to path, gzip-compressed when the name ends in ".gz". */
static void write_file(const char *path, const void *buf, size_t len)
{
	size_t n = strlen(path);
	if (n > 3 && strcmp(path + n - 3, ".gz") == 0) {
		gzFile f = gzopen(path, "wb");
		if (!f || gzwrite(f, buf, (unsigned)len) != (int)len || gzclose(f) != Z_OK) {
			fprintf(stderr, "cannot write %s\n", path);
			exit(1);
		}
		return;
	}
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* An IDX image file of n images of rows x cols with pixel(i, j) = pix[i * dim
 * + j]; keep = bytes of the file to write (0 = all). */
static void write_images(const char *path, const uint8_t *pix, uint32_t n, uint32_t rows,
                         uint32_t cols, size_t keep)
{
	size_t len = 16 + (size_t)n * rows * cols;
	uint8_t *buf = malloc(len);
	put_be32(buf, 0x803);
	put_be32(buf + 4, n);
	put_be32(buf + 8, rows);
	put_be32(buf + 12, cols);
	memcpy(buf + 16, pix, len - 16);
	write_file(path, buf, keep ? keep : len);
	free(buf);
}

static void write_labels(const char *path, const uint8_t *lab, uint32_t n)
{
	uint8_t *buf = malloc(8 + n);
	put_be32(buf, 0x801);
	put_be32(buf + 4, n);
	memcpy(buf + 8, lab, n);
	write_file(path, buf, 8 + n);
	free(buf);
}

/* llm.c token file; count_in_header lets a test lie about the count */
static void write_tokens(const char *path, const uint16_t *tok, int32_t n, int32_t magic,
                         int32_t version, int32_t count_in_header)
{
	size_t len = 1024 + 2 * (size_t)n;
	uint8_t *buf = calloc(1, len);
	int32_t head[3] = { magic, version, count_in_header };
	for (int i = 0; i < 3; i++)
		for (int b = 0; b < 4; b++)
			buf[4 * i + b] = (uint8_t)((uint32_t)head[i] >> (8 * b));
	for (int32_t i = 0; i < n; i++) {
		buf[1024 + 2 * i] = (uint8_t)tok[i];
		buf[1024 + 2 * i + 1] = (uint8_t)(tok[i] >> 8);
	}
	write_file(path, buf, len);
	free(buf);
}

static struct trn_spec *new_spec(enum trn_data_format format)
{
	struct trn_spec *s = calloc(1, sizeof *s);
	s->data.format = format;
	s->data.shuffle = 1;
	return s;
}

/* ---- IDX ----------------------------------------------------------------- */

enum { TN = 100, VN = 30, ROWS = 4, COLS = 5, DIM = ROWS * COLS };
static uint8_t train_pix[TN * DIM], val_pix[VN * DIM], train_lab[TN], val_lab[VN];

static void make_idx_files(void)
{
	uint64_t st = 99;
	for (int i = 0; i < TN * DIM; i++)
		train_pix[i] = (uint8_t)(check_rand_u64(&st) % 256);
	for (int i = 0; i < VN * DIM; i++)
		val_pix[i] = (uint8_t)(check_rand_u64(&st) % 200);
	for (int i = 0; i < TN; i++)
		train_lab[i] = (uint8_t)(i % 7);
	for (int i = 0; i < VN; i++)
		val_lab[i] = (uint8_t)(i % 9);
	write_images(tmp_path("train-images.gz"), train_pix, TN, ROWS, COLS, 0);
	write_labels(tmp_path("train-labels.gz"), train_lab, TN);
	write_images(tmp_path("val-images"), val_pix, VN, ROWS, COLS, 0);
	write_labels(tmp_path("val-labels"), val_lab, VN);
}

static struct trn_spec *idx_spec(const char *ti, const char *tl, const char *vi, const char *vl)
{
	struct trn_spec *s = new_spec(TRN_DATA_IDX);
	snprintf(s->data.train, sizeof s->data.train, "%s", tmp_path(ti));
	snprintf(s->data.train_labels, sizeof s->data.train_labels, "%s", tmp_path(tl));
	if (vi) {
		snprintf(s->data.val, sizeof s->data.val, "%s", tmp_path(vi));
		snprintf(s->data.val_labels, sizeof s->data.val_labels, "%s", tmp_path(vl));
	}
	return s;
}

static void test_idx_load(void)
{
	struct trn_spec *s = idx_spec("train-images.gz", "train-labels.gz", "val-images", "val-labels");
	struct trn_dataset ds;
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	CHECK_MSG(!err.set, "%s", err.text);
	CHECK_INT_EQ(ds.task, TRN_TASK_CLASSIFY);
	CHECK_INT_EQ(ds.dim, DIM);
	CHECK_INT_EQ(ds.train.n, TN);
	CHECK_INT_EQ(ds.val.n, VN);
	CHECK_INT_EQ(ds.n_classes, 9);       /* labels 0..6 in train, 0..8 in val */

	/* standardisation from the train pixels, applied to both splits */
	double sum = 0, sumsq = 0;
	for (int i = 0; i < TN * DIM; i++) {
		sum += train_pix[i];
		sumsq += (double)train_pix[i] * train_pix[i];
	}
	double mean = sum / (TN * DIM), sd = sqrt(sumsq / (TN * DIM) - mean * mean);
	CHECK_MSG(fabs(ds.mean - mean) < 1e-9 && fabs(ds.std - sd) < 1e-9, "mean %g std %g, want %g %g",
	          ds.mean, ds.std, mean, sd);
	double m = 0, v = 0;
	for (int i = 0; i < TN * DIM; i++)
		m += ds.train.x[i];
	m /= TN * DIM;
	for (int i = 0; i < TN * DIM; i++)
		v += (ds.train.x[i] - m) * (ds.train.x[i] - m);
	v /= TN * DIM;
	CHECK_MSG(fabs(m) < 1e-5 && fabs(v - 1) < 1e-4, "train mean %g var %g", m, v);
	float want[VN * DIM];
	for (int i = 0; i < VN * DIM; i++)
		want[i] = (float)((val_pix[i] - mean) / sd);
	check_close("val standardised", ds.val.x, want, VN * DIM, 1e-6, 1e-6);

	int labels_ok = 1;
	for (int i = 0; i < TN; i++)
		labels_ok &= ds.train.y[i] == train_lab[i];
	for (int i = 0; i < VN; i++)
		labels_ok &= ds.val.y[i] == val_lab[i];
	CHECK(labels_ok);

	/* eval batches: sequential and clipped at the end */
	struct trn_batch b;
	CHECK_INT_EQ(trn_batch_alloc(&b, &ds, 8), 0);
	CHECK_INT_EQ(trn_split_batch(&ds, &ds.val, 24, &b), 6);
	CHECK(b.targets[0] == val_lab[24] && b.targets[5] == val_lab[29]);
	CHECK(memcmp(b.x, ds.val.x + 24 * DIM, sizeof(float) * DIM * 6) == 0);
	CHECK_INT_EQ(trn_split_batch(&ds, &ds.val, 30, &b), 0);
	trn_batch_release(&b);
	trn_dataset_release(&ds);
	free(s);
}

/* data.standardize "per_feature": each pixel at mean 0 and std 1 over the
 * train split, the val split with the train's figures; a pixel that is
 * constant (0) or hardly varies (1) in train is divided by a tenth of the
 * global std instead of its own. */
static void test_idx_per_feature(void)
{
	uint8_t pix[TN * DIM];
	memcpy(pix, train_pix, sizeof pix);
	for (int i = 0; i < TN; i++) {
		pix[i * DIM + 0] = 7;
		pix[i * DIM + 1] = (uint8_t)(100 + i % 2);
	}
	write_images(tmp_path("pf-images"), pix, TN, ROWS, COLS, 0);
	struct trn_spec *s = idx_spec("pf-images", "train-labels.gz", "val-images", "val-labels");
	s->data.standardize = TRN_STANDARDIZE_PER_FEATURE;
	struct trn_dataset ds;
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	CHECK_MSG(!err.set, "%s", err.text);
	double sum = 0, sumsq = 0;
	for (int i = 0; i < TN * DIM; i++) {
		sum += pix[i];
		sumsq += (double)pix[i] * pix[i];
	}
	double gmean = sum / (TN * DIM), floor_sd = 0.1 * sqrt(sumsq / (TN * DIM) - gmean * gmean);
	float want[VN * DIM];
	int unit = 1;
	for (int j = 0; j < DIM; j++) {
		double m = 0, v = 0;
		for (int i = 0; i < TN; i++)
			m += pix[i * DIM + j];
		m /= TN;
		for (int i = 0; i < TN; i++)
			v += (pix[i * DIM + j] - m) * (pix[i * DIM + j] - m);
		double sd = sqrt(v / TN), den = sd > floor_sd ? sd : floor_sd;
		double xm = 0, xv = 0;
		for (int i = 0; i < TN; i++)
			xm += ds.train.x[i * DIM + j];
		xm /= TN;
		for (int i = 0; i < TN; i++)
			xv += (ds.train.x[i * DIM + j] - xm) * (ds.train.x[i * DIM + j] - xm);
		xv /= TN;
		/* the floored pixels keep their spread over the floor */
		double want_var = (sd / den) * (sd / den);
		unit &= fabs(xm) < 1e-4 && fabs(xv - want_var) < 1e-4;
		if (j < 2)
			CHECK_MSG(den == floor_sd && xv < 0.3, "pixel %d: std %g floored at %g, var %g", j,
			          sd, floor_sd, xv);
		for (int i = 0; i < VN; i++)
			want[i * DIM + j] = (float)((val_pix[i * DIM + j] - m) / den);
	}
	CHECK_MSG(unit, "train features at mean 0 and std 1 (the floored ones below)");
	check_close("val standardised per feature", ds.val.x, want, VN * DIM, 1e-5, 1e-5);
	trn_dataset_release(&ds);
	free(s);
}

static void test_idx_val_fraction(void)
{
	struct trn_spec *s = idx_spec("train-images.gz", "train-labels.gz", NULL, NULL);
	struct trn_dataset ds;
	struct trn_err err = { 0 };

	/* no val files and no fraction: no validation */
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	CHECK_INT_EQ(ds.train.n, TN);
	CHECK_INT_EQ(ds.val.n, 0);
	trn_dataset_release(&ds);

	/* the last 10% of the file order, standardised with the first 90% */
	s->data.val_fraction = 0.1;
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	CHECK_MSG(!err.set, "%s", err.text);
	CHECK_INT_EQ(ds.train.n, 90);
	CHECK_INT_EQ(ds.val.n, 10);
	CHECK_INT_EQ(ds.n_classes, 7);
	double sum = 0;
	for (int i = 0; i < 90 * DIM; i++)
		sum += train_pix[i];
	CHECK(fabs(ds.mean - sum / (90 * DIM)) < 1e-9);
	int ok = 1;
	for (int i = 0; i < 10; i++)
		ok &= ds.val.y[i] == train_lab[90 + i];
	for (int j = 0; j < DIM; j++)
		ok &= fabsf(ds.val.x[9 * DIM + j] -
		            (float)((train_pix[99 * DIM + j] - ds.mean) / ds.std)) < 1e-6f;
	CHECK(ok);
	trn_dataset_release(&ds);

	/* a fraction that takes everything */
	s->data.val_fraction = 0.999;
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), -1);
	CHECK_MSG(contains(err.text, "data.val_fraction"), "%s", err.text);
	free(s);
}

static void expect_load_error(struct trn_spec *s, const char *what, const char *path,
                              const char *needle)
{
	struct trn_dataset ds;
	struct trn_err err = { 0 };
	int rc = trn_dataset_load(&ds, s, NULL, &err);
	CHECK_MSG(rc == -1 && contains(err.text, what) && contains(err.text, path) &&
	          contains(err.text, needle), "rc %d, error \"%s\", want \"%s\" and \"%s\"", rc,
	          err.text, what, needle);
	if (rc == 0)
		trn_dataset_release(&ds);
	free(s);
}

static void test_idx_errors(void)
{
	/* truncated: the header says 100 images, the file holds 50 and a half */
	write_images(tmp_path("short-images"), train_pix, TN, ROWS, COLS, 16 + 50 * DIM + 7);
	expect_load_error(idx_spec("short-images", "train-labels.gz", NULL, NULL),
	                  "data.train.images", tmp_path("short-images"),
	                  "truncated (expected 2016 bytes");
	/* the same for a gzip file */
	write_images(tmp_path("short-images.gz"), train_pix, TN, ROWS, COLS, 16 + 50 * DIM);
	expect_load_error(idx_spec("short-images.gz", "train-labels.gz", NULL, NULL),
	                  "data.train.images", tmp_path("short-images.gz"), "truncated");
	/* a labels file where images belong */
	expect_load_error(idx_spec("train-labels.gz", "train-labels.gz", NULL, NULL),
	                  "data.train.images", tmp_path("train-labels.gz"),
	                  "not an IDX image file (wrong magic number)");
	expect_load_error(idx_spec("val-images", "val-images", NULL, NULL), "data.train.labels",
	                  tmp_path("val-images"), "not an IDX label file (wrong magic number)");
	/* counts that disagree */
	write_labels(tmp_path("labels-99"), train_lab, 99);
	expect_load_error(idx_spec("train-images.gz", "labels-99", NULL, NULL), "data.train.labels",
	                  tmp_path("labels-99"), "100 images but 99 labels");
	expect_load_error(idx_spec("train-images.gz", "train-labels.gz", "val-images", "labels-99"),
	                  "data.val.labels", tmp_path("labels-99"), "30 images but 99 labels");
	/* val images of another size */
	write_images(tmp_path("val-wide"), val_pix, VN / 2, ROWS, 2 * COLS, 0);
	write_labels(tmp_path("val-wide-labels"), val_lab, VN / 2);
	expect_load_error(idx_spec("train-images.gz", "train-labels.gz", "val-wide", "val-wide-labels"),
	                  "data.val.images", tmp_path("val-wide"), "4 x 10 images, but train has 4 x 5");
	/* trailing bytes */
	write_file(tmp_path("long-labels"), "\0\0\x08\x01\0\0\0\x01\x03\x04", 10);
	write_images(tmp_path("one-image"), train_pix, 1, ROWS, COLS, 0);
	expect_load_error(idx_spec("one-image", "long-labels", NULL, NULL), "data.train.labels",
	                  tmp_path("long-labels"), "data past the expected 9 bytes");
	/* missing files */
	expect_load_error(idx_spec("nope-images.gz", "train-labels.gz", NULL, NULL),
	                  "data.train.images", tmp_path("nope-images.gz"), "No such file");
	expect_load_error(idx_spec("train-images.gz", "train-labels.gz", "val-images", "nope"),
	                  "data.val.labels", tmp_path("nope"), "No such file");
}

/* The real Fashion-MNIST where Debian's package is installed. */
static void test_fashion_mnist(void)
{
	const char *dir = "/usr/share/datasets/fashion-mnist";
	if (access(dir, R_OK) != 0) {
		fprintf(stderr, "skip: %s not installed\n", dir);
		return;
	}
	struct trn_spec *s = new_spec(TRN_DATA_IDX);
	snprintf(s->data.train, sizeof s->data.train, "%s/train-images-idx3-ubyte.gz", dir);
	snprintf(s->data.train_labels, sizeof s->data.train_labels, "%s/train-labels-idx1-ubyte.gz", dir);
	snprintf(s->data.val, sizeof s->data.val, "%s/t10k-images-idx3-ubyte.gz", dir);
	snprintf(s->data.val_labels, sizeof s->data.val_labels, "%s/t10k-labels-idx1-ubyte.gz", dir);
	struct trn_dataset ds;
	struct trn_err err = { 0 };
	int rc = trn_dataset_load(&ds, s, NULL, &err);
	CHECK_MSG(rc == 0 && ds.train.n == 60000 && ds.val.n == 10000 && ds.dim == 784 &&
	          ds.n_classes == 10 && fabs(ds.mean - 72.94) < 0.01 && fabs(ds.std - 90.02) < 0.01,
	          "rc %d (%s): train %ld val %ld dim %d classes %d mean %.3f std %.3f", rc, err.text,
	          ds.train.n, ds.val.n, ds.dim, ds.n_classes, ds.mean, ds.std);
	if (rc == 0)
		trn_dataset_release(&ds);
	free(s);
}

/* ---- token streams ------------------------------------------------------- */

static struct trn_spec *tok_spec(enum trn_data_format format, const char *train, const char *val,
                                 int seq)
{
	struct trn_spec *s = new_spec(format);
	s->model.type = TRN_MODEL_GPT;
	s->model.seq = seq;
	snprintf(s->data.train, sizeof s->data.train, "%s", tmp_path(train));
	if (val)
		snprintf(s->data.val, sizeof s->data.val, "%s", tmp_path(val));
	return s;
}

static void test_tokens_u16(void)
{
	enum { N = 1000, SEQ = 16 };
	uint16_t tok[N];
	for (int i = 0; i < N; i++)
		tok[i] = (uint16_t)((i * 7919) % 50257);
	write_tokens(tmp_path("train.bin"), tok, N, 20240520, 1, N);
	write_tokens(tmp_path("val.bin"), tok, 100, 20240520, 1, 100);

	struct trn_spec *s = tok_spec(TRN_DATA_TOKENS_U16, "train.bin", "val.bin", SEQ);
	struct trn_dataset ds;
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	CHECK_MSG(!err.set, "%s", err.text);
	CHECK_INT_EQ(ds.task, TRN_TASK_TOKENS);
	CHECK_INT_EQ(ds.seq, SEQ);
	CHECK_INT_EQ(ds.train.n_tokens, N);
	CHECK_INT_EQ(ds.train.n, (N - 1) / SEQ);
	CHECK_INT_EQ(ds.val.n, (100 - 1) / SEQ);
	int max = 0;
	for (int i = 0; i < N; i++)
		max = tok[i] > max ? tok[i] : max;
	CHECK_INT_EQ(ds.vocab, max + 1);

	/* sample i: input tokens [i*seq, i*seq + seq), targets one further */
	struct trn_batch b;
	CHECK_INT_EQ(trn_batch_alloc(&b, &ds, 4), 0);
	CHECK_INT_EQ(b.seq, SEQ);
	CHECK_INT_EQ(trn_split_batch(&ds, &ds.train, 60, &b), 2);   /* samples 60, 61 of 62 */
	int ok = 1;
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < SEQ; j++) {
			ok &= b.tokens[k * SEQ + j] == tok[(60 + k) * SEQ + j];
			ok &= b.targets[k * SEQ + j] == tok[(60 + k) * SEQ + j + 1];
		}
	CHECK(ok);
	trn_batch_release(&b);
	trn_dataset_release(&ds);
	free(s);

	/* the last tenth of the tokens held out */
	s = tok_spec(TRN_DATA_TOKENS_U16, "train.bin", NULL, SEQ);
	s->data.val_fraction = 0.1;
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	CHECK_INT_EQ(ds.train.n_tokens, 900);
	CHECK_INT_EQ(ds.val.n_tokens, 100);
	CHECK_INT_EQ(ds.train.n, 899 / SEQ);
	CHECK_INT_EQ(ds.val.n, 99 / SEQ);
	CHECK(memcmp(ds.val.tokens, tok + 900, 200) == 0 && memcmp(ds.train.tokens, tok, 1800) == 0);
	trn_dataset_release(&ds);
	s->data.val_fraction = 0.01;   /* 10 tokens: too few for a sample */
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), -1);
	CHECK_MSG(contains(err.text, "data.val_fraction"), "%s", err.text);
	free(s);

	/* bad files */
	write_tokens(tmp_path("magic.bin"), tok, 10, 20240521, 1, 10);
	expect_load_error(tok_spec(TRN_DATA_TOKENS_U16, "magic.bin", NULL, 4), "data.train",
	                  tmp_path("magic.bin"), "not an llm.c token file (wrong magic number)");
	write_tokens(tmp_path("version.bin"), tok, 10, 20240520, 2, 10);
	expect_load_error(tok_spec(TRN_DATA_TOKENS_U16, "version.bin", NULL, 4), "data.train",
	                  tmp_path("version.bin"), "unsupported llm.c token file version");
	write_tokens(tmp_path("short.bin"), tok, 10, 20240520, 1, 11);
	expect_load_error(tok_spec(TRN_DATA_TOKENS_U16, "short.bin", NULL, 4), "data.train",
	                  tmp_path("short.bin"), "truncated (expected 1046 bytes");
	write_tokens(tmp_path("long.bin"), tok, 10, 20240520, 1, 9);
	expect_load_error(tok_spec(TRN_DATA_TOKENS_U16, "long.bin", NULL, 4), "data.train",
	                  tmp_path("long.bin"), "9 tokens need 1042");
	write_file(tmp_path("tiny.bin"), "abc", 3);
	expect_load_error(tok_spec(TRN_DATA_TOKENS_U16, "tiny.bin", NULL, 4), "data.train",
	                  tmp_path("tiny.bin"), "not an llm.c token file");
	expect_load_error(tok_spec(TRN_DATA_TOKENS_U16, "train.bin", "version.bin", 4), "data.val",
	                  tmp_path("version.bin"), "unsupported llm.c token file version");
	/* 10 tokens hold one sample of seq 9, none of seq 10 */
	write_tokens(tmp_path("ten.bin"), tok, 10, 20240520, 1, 10);
	s = tok_spec(TRN_DATA_TOKENS_U16, "ten.bin", NULL, 9);
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	CHECK_INT_EQ(ds.train.n, 1);
	trn_dataset_release(&ds);
	free(s);
	expect_load_error(tok_spec(TRN_DATA_TOKENS_U16, "ten.bin", NULL, 10), "data.train",
	                  tmp_path("ten.bin"), "10 tokens, too few for one sample");
	expect_load_error(tok_spec(TRN_DATA_TOKENS_U16, "nope.bin", NULL, 4), "data.train",
	                  tmp_path("nope.bin"), "No such file");
}

static void test_text(void)
{
	enum { N = 500, SEQ = 16 };
	char text[N];
	for (int i = 0; i < N; i++)
		text[i] = (char)(i % 3 ? 'a' + i % 26 : 0xe9);   /* bytes past 127 too */
	write_file(tmp_path("corpus.txt"), text, N);
	struct trn_spec *s = tok_spec(TRN_DATA_TEXT, "corpus.txt", NULL, SEQ);
	s->data.val_fraction = 0.2;
	struct trn_dataset ds;
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	CHECK_MSG(!err.set, "%s", err.text);
	CHECK_INT_EQ(ds.vocab, 256);
	CHECK_INT_EQ(ds.train.n_tokens, 400);
	CHECK_INT_EQ(ds.val.n_tokens, 100);
	CHECK_INT_EQ(ds.train.n, 399 / SEQ);
	CHECK_INT_EQ(ds.val.n, 99 / SEQ);
	int ok = 1;
	for (int i = 0; i < 100; i++)
		ok &= ds.val.tokens[i] == (uint8_t)text[400 + i];
	CHECK(ok);
	CHECK_INT_EQ(ds.train.tokens[0], 0xe9);
	trn_dataset_release(&ds);
	free(s);

	write_file(tmp_path("empty.txt"), "", 0);
	expect_load_error(tok_spec(TRN_DATA_TEXT, "empty.txt", NULL, SEQ), "data.path",
	                  tmp_path("empty.txt"), "is empty");
}

/* ---- what a file that fails to parse may not say ------------------------------ */

/* The start of a file the job's user may not read (a hostile spec names
 * /etc/shadow as data): every format refuses it without its bytes. */
static const char secret[] = "root:$y$j9T$Zq7Vb3kXw2Pn0Lr5:19700:0:99999:7:::\n"
                             "larch:$y$j9T$Kp2Qm8Rt4Lz6:19700:0:99999:7:::\n";

static void expect_no_leak(struct trn_spec *s, const char *field)
{
	struct trn_dataset ds;
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), -1);
	CHECK_MSG(contains(err.text, field), "%s", err.text);
	CHECK_NO_LEAK(err.text, secret, sizeof secret - 1);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_dataset_shape(&ds, s, NULL, &err), -1);
	CHECK_MSG(contains(err.text, field), "%s", err.text);
	CHECK_NO_LEAK(err.text, secret, sizeof secret - 1);
	free(s);
}

static void test_secret_not_echoed(void)
{
	write_file(tmp_path("secret"), secret, sizeof secret - 1);
	write_file(tmp_path("secret.gz"), secret, sizeof secret - 1);
	expect_no_leak(idx_spec("secret", "train-labels.gz", NULL, NULL), "data.train.images");
	expect_no_leak(idx_spec("secret.gz", "train-labels.gz", NULL, NULL), "data.train.images");
	expect_no_leak(idx_spec("train-images.gz", "secret", NULL, NULL), "data.train.labels");
	expect_no_leak(idx_spec("train-images.gz", "train-labels.gz", "secret.gz", "val-labels"),
	               "data.val.images");
	expect_no_leak(tok_spec(TRN_DATA_TOKENS_U16, "secret", NULL, 4), "data.train");
	expect_no_leak(tok_spec(TRN_DATA_TOKENS_U16, "train.bin", "secret", 4), "data.val");
	/* past the header's size, too: a secret of 1024 bytes and more */
	char big[2048];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = secret[i % (sizeof secret - 1)];
	write_file(tmp_path("secret-big"), big, sizeof big);
	expect_no_leak(tok_spec(TRN_DATA_TOKENS_U16, "secret-big", NULL, 4), "data.train");
	expect_no_leak(idx_spec("secret-big", "train-labels.gz", NULL, NULL), "data.train.images");
}

/* ---- shapes ---------------------------------------------------------------- */

static void test_shape(void)
{
	struct trn_spec *s = idx_spec("train-images.gz", "train-labels.gz", "val-images", "val-labels");
	struct trn_dataset ds, back;
	struct trn_err err = { 0 };
	CHECK_MSG(trn_dataset_shape(&ds, s, NULL, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(ds.task, TRN_TASK_CLASSIFY);
	CHECK_INT_EQ(ds.dim, DIM);
	CHECK_INT_EQ(ds.n_classes, 9);              /* val's labels reach 8 */
	CHECK_INT_EQ(ds.train.n, TN);
	CHECK_INT_EQ(ds.val.n, VN);
	CHECK(!ds.train.x && !ds.train.y && !ds.val.x);
	json_t *j = trn_dataset_shape_to_json(&ds);
	char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	CHECK_STR_EQ(text, "{\"dim\":20,\"n_classes\":9,\"seq\":0,\"task\":\"classify\","
	             "\"train_samples\":100,\"train_tokens\":0,\"val_samples\":30,"
	             "\"val_tokens\":0,\"vocab\":0}");
	free(text);
	CHECK_INT_EQ(trn_dataset_shape_from_json(&back, j, &err), 0);
	CHECK(back.task == ds.task && back.dim == ds.dim && back.n_classes == ds.n_classes &&
	      back.train.n == ds.train.n && back.val.n == ds.val.n);
	json_decref(j);
	/* labels that disagree with their images: the shape says so as the load does */
	write_labels(tmp_path("labels-99"), train_lab, 99);
	snprintf(s->data.train_labels, sizeof s->data.train_labels, "%s", tmp_path("labels-99"));
	CHECK_INT_EQ(trn_dataset_shape(&ds, s, NULL, &err), -1);
	CHECK_MSG(contains(err.text, "data.train.labels") && contains(err.text, "100 images but 99"),
	          "%s", err.text);
	free(s);

	/* tokens: counts from the checked header; held-out validation by tokens */
	s = tok_spec(TRN_DATA_TOKENS_U16, "train.bin", NULL, 16);
	s->data.val_fraction = 0.1;
	trn_err_clear(&err);
	CHECK_MSG(trn_dataset_shape(&ds, s, NULL, &err) == 0, "%s", err.text);
	CHECK_INT_EQ(ds.task, TRN_TASK_TOKENS);
	CHECK_INT_EQ(ds.seq, 16);
	CHECK_INT_EQ(ds.train.n_tokens, 900);
	CHECK_INT_EQ(ds.val.n_tokens, 100);
	CHECK_INT_EQ(ds.train.n, 899 / 16);
	CHECK_INT_EQ(ds.val.n, 99 / 16);
	j = trn_dataset_shape_to_json(&ds);
	CHECK_INT_EQ(trn_dataset_shape_from_json(&back, j, &err), 0);
	CHECK(back.task == TRN_TASK_TOKENS && back.seq == 16 && back.train.n_tokens == 900 &&
	      back.val.n_tokens == 100 && back.train.n == ds.train.n);
	json_decref(j);
	free(s);

	/* what from_json refuses */
	static const char *const bad[][2] = {
		{ "[]", "shape: must be a JSON object" },
		{ "{\"task\": \"images\"}", "shape.task: must be \"classify\" or \"tokens\"" },
		{ "{\"task\": \"classify\", \"n_classes\": 10}", "shape.dim: must be an integer in [1, " },
		{ "{\"task\": \"tokens\", \"seq\": 8, \"train_tokens\": -1}",
		  "shape.train_tokens: must be an integer in [0, " },
		{ "{\"task\": \"tokens\", \"seq\": 8, \"vocab\": 1.5}", "shape.vocab: must be an integer" },
		{ "{\"task\": \"tokens\"}", "shape.seq: must be an integer in [1, " },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		j = json_loads(bad[i][0], JSON_DECODE_ANY, NULL);
		trn_err_clear(&err);
		CHECK_INT_EQ(trn_dataset_shape_from_json(&back, j, &err), -1);
		CHECK_MSG(strncmp(err.text, bad[i][1], strlen(bad[i][1])) == 0, "%s: %s", bad[i][0],
		          err.text);
		json_decref(j);
	}
}

/* A confining policy reaches every file of every format; a named data set
 * is not confined. */
static void test_confined(void)
{
	struct trn_input_policy pol;
	struct trn_err err = { 0 };
	struct trn_dataset ds;
	const char *root = tmp_path("root");
	CHECK(mkdir(root, 0755) == 0);
	trn_input_policy_init(&pol);
	CHECK_INT_EQ(trn_input_policy_add_root(&pol, root, &err), 0);
	struct trn_spec *s = idx_spec("train-images.gz", "train-labels.gz", NULL, NULL);
	CHECK_INT_EQ(trn_dataset_load(&ds, s, &pol, &err), -1);
	CHECK_MSG(contains(err.text, "data.train.images: ") &&
	          contains(err.text, " is outside the directories this job may read"), "%s",
	          err.text);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_dataset_shape(&ds, s, &pol, &err), -1);
	CHECK_MSG(contains(err.text, "is outside the directories"), "%s", err.text);
	/* the same files named a data set are read (their own root) */
	snprintf(s->data.name, sizeof s->data.name, "test");
	trn_err_clear(&err);
	CHECK_MSG(trn_dataset_shape(&ds, s, &pol, &err) == 0, "%s", err.text);
	free(s);
	/* a root of its own: allowed */
	trn_input_policy_release(&pol);
	CHECK_INT_EQ(trn_input_policy_add_root(&pol, tmp, &err), 0);
	s = tok_spec(TRN_DATA_TOKENS_U16, "train.bin", "val.bin", 4);
	CHECK_MSG(trn_dataset_load(&ds, s, &pol, &err) == 0, "%s", err.text);
	trn_dataset_release(&ds);
	free(s);
	trn_input_policy_release(&pol);
}

/* ---- the loader ---------------------------------------------------------- */

/* A classify dataset of n samples of one feature whose value is the index. */
static void toy_dataset(struct trn_dataset *ds, long n)
{
	memset(ds, 0, sizeof *ds);
	ds->task = TRN_TASK_CLASSIFY;
	ds->dim = 1;
	ds->n_classes = 1;
	ds->train.n = n;
	ds->train.x = malloc(sizeof(float) * (size_t)n);
	ds->train.y = calloc((size_t)n, sizeof(int32_t));
	for (long i = 0; i < n; i++)
		ds->train.x[i] = (float)i;
}

enum { RANKS = 2, ACCUM = 2, MICRO = 5, GLOBAL = RANKS * ACCUM * MICRO };

/* Sample ids of one step, in (rank, micro-batch, slot) order: ids[r][a][k]. */
static void one_step(struct trn_loader *l, struct trn_batch *b, long ids[RANKS][ACCUM][MICRO])
{
	for (int r = 0; r < RANKS; r++)
		for (int a = 0; a < ACCUM; a++) {
			trn_loader_micro(&l[r], a, b);
			for (int k = 0; k < MICRO; k++)
				ids[r][a][k] = k < b->n ? (long)b->x[k] : -1;
		}
	for (int r = 0; r < RANKS; r++)
		trn_loader_advance(&l[r]);
}

static void loaders_init(struct trn_loader *l, struct trn_dataset *ds, int shuffle)
{
	for (int r = 0; r < RANKS; r++) {
		struct trn_err err = { 0 };
		int rc = trn_loader_init(&l[r], ds, &ds->train, 42, shuffle, r, RANKS, GLOBAL, MICRO, &err);
		CHECK_MSG(rc == 0, "%s", err.text);
	}
}

static void loaders_release(struct trn_loader *l)
{
	for (int r = 0; r < RANKS; r++)
		trn_loader_release(&l[r]);
}

static void test_loader_epochs(void)
{
	enum { N = 100 };
	struct trn_dataset ds;
	toy_dataset(&ds, N);
	struct trn_loader l[RANKS];
	loaders_init(l, &ds, 1);
	struct trn_batch b;
	CHECK_INT_EQ(trn_batch_alloc(&b, &ds, MICRO), 0);
	CHECK_INT_EQ(trn_loader_steps_per_epoch(&l[0]), N / GLOBAL);

	long first[N], ids[RANKS][ACCUM][MICRO];
	for (int e = 0; e < 3; e++) {
		int seen[N] = { 0 }, bad = 0;
		long order[N], perm[N], m = 0;
		CHECK_INT_EQ(l[0].epoch, e);
		memcpy(perm, l[0].order, sizeof perm);
		for (int step = 0; step < N / GLOBAL; step++) {
			CHECK_INT_EQ(l[1].pos, step * GLOBAL);
			one_step(l, &b, ids);
			for (int r = 0; r < RANKS; r++)
				for (int a = 0; a < ACCUM; a++)
					for (int k = 0; k < MICRO; k++) {
						long id = ids[r][a][k];
						if (id < 0 || id >= N || seen[id]++)
							bad++;
						/* position within the global batch */
						long p = step * GLOBAL + (a * RANKS + r) * MICRO + k;
						order[p] = id;
						m++;
					}
		}
		CHECK_MSG(bad == 0 && m == N, "epoch %d: %d samples missing or repeated", e, bad);
		/* the positions follow the loader's own permutation */
		CHECK(memcmp(order, perm, sizeof order) == 0);
		if (e == 0)
			memcpy(first, order, sizeof order);
		else
			CHECK_MSG(memcmp(first, order, sizeof order) != 0, "epoch %d repeats epoch 0", e);
	}
	CHECK_INT_EQ(l[0].epoch, 3);
	CHECK_INT_EQ(l[0].pos, 0);
	trn_batch_release(&b);
	loaders_release(l);
	trn_dataset_release(&ds);
}

static void test_loader_partial_and_order(void)
{
	/* 103 samples: 5 full steps of 20, the last 3 samples are dropped */
	enum { N = 103 };
	struct trn_dataset ds;
	toy_dataset(&ds, N);
	struct trn_loader l[RANKS];
	struct trn_batch b;
	CHECK_INT_EQ(trn_batch_alloc(&b, &ds, MICRO), 0);
	long ids[RANKS][ACCUM][MICRO];

	/* without shuffling: 0..n-1 in order, micro-batch a of rank r at
	 * positions (a * ranks + r) * micro */
	loaders_init(l, &ds, 0);
	int ok = 1;
	for (int step = 0; step < 5; step++) {
		one_step(l, &b, ids);
		for (int r = 0; r < RANKS; r++)
			for (int a = 0; a < ACCUM; a++)
				for (int k = 0; k < MICRO; k++)
					ok &= ids[r][a][k] == step * GLOBAL + (a * RANKS + r) * MICRO + k;
	}
	CHECK(ok);
	CHECK_INT_EQ(l[0].epoch, 1);
	CHECK_INT_EQ(l[0].pos, 0);
	one_step(l, &b, ids);
	CHECK(ids[0][0][0] == 0 && ids[1][1][4] == 19);
	loaders_release(l);

	/* with shuffling: 100 distinct samples a epoch, 3 of them left out */
	loaders_init(l, &ds, 1);
	int seen[N] = { 0 }, dup = 0, count = 0;
	for (int step = 0; step < 5; step++) {
		one_step(l, &b, ids);
		for (int r = 0; r < RANKS; r++)
			for (int a = 0; a < ACCUM; a++)
				for (int k = 0; k < MICRO; k++) {
					dup += seen[ids[r][a][k]]++ > 0;
					count++;
				}
	}
	CHECK_INT_EQ(count, 100);
	CHECK_INT_EQ(dup, 0);
	CHECK_INT_EQ(l[0].epoch, 1);
	loaders_release(l);
	trn_batch_release(&b);
	trn_dataset_release(&ds);
}

static void test_loader_seek(void)
{
	enum { N = 100, STEPS = 7, MORE = 8 };
	struct trn_dataset ds;
	toy_dataset(&ds, N);
	struct trn_loader a[RANKS], c[RANKS];
	struct trn_batch b;
	CHECK_INT_EQ(trn_batch_alloc(&b, &ds, MICRO), 0);
	long ids[RANKS][ACCUM][MICRO], again[RANKS][ACCUM][MICRO];

	/* 7 steps cross into epoch 1 (5 steps an epoch); resume from there */
	loaders_init(a, &ds, 1);
	for (int s = 0; s < STEPS; s++)
		one_step(a, &b, ids);
	CHECK_INT_EQ(a[0].epoch, 1);
	CHECK_INT_EQ(a[0].pos, 2 * GLOBAL);
	loaders_init(c, &ds, 1);
	for (int r = 0; r < RANKS; r++)
		trn_loader_seek(&c[r], a[0].epoch, a[0].pos);
	int same = 1;
	for (int s = 0; s < MORE; s++) {
		one_step(a, &b, ids);
		one_step(c, &b, again);
		same &= memcmp(ids, again, sizeof ids) == 0;
	}
	CHECK(same);
	CHECK(a[0].epoch == c[0].epoch && a[0].pos == c[0].pos);

	/* seek back to the start of epoch 0 reproduces the first step */
	loaders_release(c);
	loaders_init(c, &ds, 1);
	one_step(c, &b, ids);
	for (int r = 0; r < RANKS; r++)
		trn_loader_seek(&c[r], 0, 0);
	one_step(c, &b, again);
	CHECK(memcmp(ids, again, sizeof ids) == 0);
	loaders_release(a);
	loaders_release(c);
	trn_batch_release(&b);
	trn_dataset_release(&ds);
}

static void test_loader_tokens(void)
{
	/* the loader hands out token windows too */
	enum { SEQ = 8 };
	struct trn_spec *s = tok_spec(TRN_DATA_TOKENS_U16, "train.bin", NULL, SEQ);
	struct trn_dataset ds;
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_dataset_load(&ds, s, NULL, &err), 0);
	struct trn_loader l;
	CHECK_INT_EQ(trn_loader_init(&l, &ds, &ds.train, 1, 1, 0, 1, 32, 16, &err), 0);
	struct trn_batch b;
	CHECK_INT_EQ(trn_batch_alloc(&b, &ds, 16), 0);
	trn_loader_micro(&l, 1, &b);
	CHECK_INT_EQ(b.n, 16);
	int ok = 1;
	for (int k = 0; k < 16; k++) {
		long i = l.order[16 + k];
		for (int j = 0; j < SEQ; j++)
			ok &= b.tokens[k * SEQ + j] == ds.train.tokens[i * SEQ + j] &&
			      b.targets[k * SEQ + j] == ds.train.tokens[i * SEQ + j + 1];
	}
	CHECK(ok);
	trn_batch_release(&b);
	trn_loader_release(&l);
	trn_dataset_release(&ds);
	free(s);
}

static void test_loader_errors(void)
{
	struct trn_dataset ds;
	toy_dataset(&ds, 50);
	struct trn_loader l;
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_loader_init(&l, &ds, &ds.train, 0, 1, 0, 1, 256, 256, &err), -1);
	CHECK_STR_EQ(err.text, "data: the train split holds 50 samples, fewer than one global batch of 256");
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_loader_init(&l, &ds, &ds.train, 0, 1, 0, 4, 30, 4, &err), -1);
	CHECK_MSG(contains(err.text, "not a multiple"), "%s", err.text);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_loader_init(&l, &ds, &ds.train, 0, 1, 4, 4, 32, 4, &err), -1);
	CHECK_MSG(contains(err.text, "rank 4"), "%s", err.text);
	/* exactly one global batch is enough */
	CHECK_INT_EQ(trn_loader_init(&l, &ds, &ds.train, 0, 1, 0, 1, 50, 25, &err), 0);
	CHECK_INT_EQ(trn_loader_steps_per_epoch(&l), 1);
	trn_loader_advance(&l);
	CHECK(l.epoch == 1 && l.pos == 0);
	trn_loader_release(&l);
	trn_dataset_release(&ds);
}

int main(void)
{
	tmp = check_tmpdir("data");
	make_idx_files();
	CHECK_RUN(test_idx_load);
	CHECK_RUN(test_idx_per_feature);
	CHECK_RUN(test_idx_val_fraction);
	CHECK_RUN(test_idx_errors);
	CHECK_RUN(test_fashion_mnist);
	CHECK_RUN(test_tokens_u16);
	CHECK_RUN(test_text);
	CHECK_RUN(test_secret_not_echoed);
	CHECK_RUN(test_shape);
	CHECK_RUN(test_confined);
	CHECK_RUN(test_loader_epochs);
	CHECK_RUN(test_loader_partial_and_order);
	CHECK_RUN(test_loader_seek);
	CHECK_RUN(test_loader_tokens);
	CHECK_RUN(test_loader_errors);
	return check_finish();
}
