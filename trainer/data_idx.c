/* trainer/data_idx.c - IDX image and label files (MNIST, Fashion-MNIST).
 *
 * An IDX file is a big-endian header (magic 0x00000803 and dims n, rows, cols
 * for images; 0x00000801 and n for labels) followed by n * rows * cols (or n)
 * unsigned bytes. zlib's gzread reads gzip and plain files alike. Pixels are
 * standardised with the mean and std of the train split's pixels, all of
 * them (data.standardize "global") or each pixel's own ("per_feature").
 * Files are opened with trn_input_open and read through gzdopen. A file
 * whose magic number is wrong is refused without a word of what it holds;
 * past the magic, the header's counts may appear in messages.
 */
#include "data_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "spec/input.h"

#define IDX_IMAGES 0x00000803u
#define IDX_LABELS 0x00000801u
/* a file that claims more than this is corrupt, not big */
#define IDX_MAX_BYTES (1ull << 38)

struct idx {
	uint32_t n, rows, cols;        /* rows = cols = 1 for labels */
	uint8_t *data;                 /* [n * rows * cols] */
};

/* gzread until len bytes or the end; returns the count, or -1 on a read error */
static long long gz_read_full(gzFile f, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		size_t chunk = len - got > (1u << 30) ? (1u << 30) : len - got;
		int k = gzread(f, (char *)buf + got, (unsigned)chunk);
		if (k < 0)
			return -1;
		if (k == 0)
			break;
		got += (size_t)k;
	}
	return (long long)got;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int gz_fail(gzFile f, const char *what, const char *path, struct trn_err *err)
{
	int code;
	const char *msg = gzerror(f, &code);
	if (code == Z_ERRNO)
		msg = strerror(errno);
	return trn_err_set(err, "%s: %s: %s", what, path, msg);
}

/* Reads one IDX file; images selects the expected magic. header_only: the
 * dims without the data (x->data stays NULL). */
static int idx_read_part(struct idx *x, const char *what, const char *path, int images,
                         int header_only, const struct trn_input_policy *inputs,
                         struct trn_err *err)
{
	memset(x, 0, sizeof *x);
	const char *kind = images ? "image" : "label";
	int fd = trn_input_open(path, inputs, what, err);
	if (fd < 0)
		return -1;
	gzFile f = gzdopen(fd, "rb");
	if (!f) {
		close(fd);
		return trn_err_set(err, "%s: %s: out of memory", what, path);
	}
	uint8_t head[16];
	size_t head_len = images ? 16 : 8;
	long long k = gz_read_full(f, head, 4);
	if (k < 0)
		goto gz_error;
	if (k < 4) {
		trn_err_set(err, "%s: %s: not an IDX %s file (%lld bytes)", what, path, kind, k);
		goto fail;
	}
	if (be32(head) != (images ? IDX_IMAGES : IDX_LABELS)) {
		trn_err_set(err, "%s: %s: not an IDX %s file (wrong magic number)", what, path, kind);
		goto fail;
	}
	k = gz_read_full(f, head + 4, head_len - 4);
	if (k < 0)
		goto gz_error;
	if ((size_t)k < head_len - 4) {
		trn_err_set(err, "%s: %s: truncated (expected %zu header bytes, got %lld)", what, path,
		            head_len, 4 + k);
		goto fail;
	}
	x->n = be32(head + 4);
	x->rows = images ? be32(head + 8) : 1;
	x->cols = images ? be32(head + 12) : 1;
	if (x->n == 0 || x->rows == 0 || x->cols == 0) {
		trn_err_set(err, "%s: %s: empty IDX file (a dimension of 0)", what, path);
		goto fail;
	}
	unsigned long long bytes = (unsigned long long)x->n * x->rows;
	if (bytes > IDX_MAX_BYTES || bytes * x->cols > IDX_MAX_BYTES ||
	    (unsigned long long)x->rows * x->cols > INT_MAX) {
		trn_err_set(err, "%s: %s: implausible IDX dimensions (more than %llu bytes)", what,
		            path, IDX_MAX_BYTES);
		goto fail;
	}
	bytes *= x->cols;
	if (header_only) {
		gzclose(f);
		return 0;
	}
	x->data = malloc(bytes);
	if (!x->data) {
		trn_err_set(err, "%s: %s: out of memory for %llu bytes", what, path, bytes);
		goto fail;
	}
	k = gz_read_full(f, x->data, bytes);
	if (k < 0)
		goto gz_error;
	if ((unsigned long long)k < bytes) {
		trn_err_set(err, "%s: %s: truncated (expected %llu bytes, got %llu)", what, path,
		            head_len + bytes, head_len + (unsigned long long)k);
		goto fail;
	}
	uint8_t extra;
	k = gz_read_full(f, &extra, 1);
	if (k < 0)
		goto gz_error;
	if (k > 0) {
		trn_err_set(err, "%s: %s: data past the expected %llu bytes", what, path,
		            head_len + bytes);
		goto fail;
	}
	gzclose(f);
	return 0;
gz_error:
	gz_fail(f, what, path, err);
fail:
	gzclose(f);
	free(x->data);
	x->data = NULL;
	return -1;
}

static int idx_read(struct idx *x, const char *what, const char *path, int images,
                    const struct trn_input_policy *inputs, struct trn_err *err)
{
	return idx_read_part(x, what, path, images, 0, inputs, err);
}

/* Images and their labels; the counts must agree. what is "data.train" or
 * "data.val". */
static int idx_read_pair(struct idx *img, struct idx *lab, const char *what, const char *images,
                         const char *labels, const struct trn_input_policy *inputs,
                         struct trn_err *err)
{
	char name[64];
	memset(lab, 0, sizeof *lab);
	snprintf(name, sizeof name, "%s.images", what);
	if (idx_read(img, name, images, 1, inputs, err) != 0)
		return -1;
	snprintf(name, sizeof name, "%s.labels", what);
	if (!labels[0]) {
		trn_err_set(err, "%s: required with %s.images", name, what);
		goto fail;
	}
	if (idx_read(lab, name, labels, 0, inputs, err) != 0)
		goto fail;
	if (lab->n != img->n) {
		trn_err_set(err, "%s: %s: %u images but %u labels", name, labels, img->n, lab->n);
		goto fail;
	}
	return 0;
fail:
	free(img->data);
	free(lab->data);
	img->data = lab->data = NULL;
	return -1;
}

/* data.standardize "per_feature": each pixel j's mean and std over the
 * first n_train images (integer sums, exact), as x = v * scale[j] +
 * shift[j]; a std below a tenth of the global one (sd) counts as that
 * tenth. 0, or -1 when out of memory. */
static int per_feature(const struct idx *img, long n_train, double sd, float **scale,
                       float **shift)
{
	size_t dim = (size_t)img->rows * img->cols;
	uint64_t *sum = calloc(dim, sizeof *sum), *sumsq = calloc(dim, sizeof *sumsq);
	*scale = malloc(sizeof(float) * dim);
	*shift = malloc(sizeof(float) * dim);
	if (!sum || !sumsq || !*scale || !*shift) {
		free(sum);
		free(sumsq);
		free(*scale);
		free(*shift);
		*scale = *shift = NULL;
		return -1;
	}
	for (long i = 0; i < n_train; i++) {
		const uint8_t *p = img->data + (size_t)i * dim;
		for (size_t j = 0; j < dim; j++) {
			sum[j] += p[j];
			sumsq[j] += (uint64_t)p[j] * p[j];
		}
	}
	double floor_sd = 0.1 * sd;
	for (size_t j = 0; j < dim; j++) {
		double m = (double)sum[j] / (double)n_train;
		double var = (double)sumsq[j] / (double)n_train - m * m;
		double s = var > floor_sd * floor_sd ? sqrt(var) : floor_sd;
		(*scale)[j] = (float)(1.0 / s);
		(*shift)[j] = (float)(-m / s);
	}
	free(sum);
	free(sumsq);
	return 0;
}

/* Standardised features and labels of samples [first, first + n) of
 * img/lab: through lut (global), or each pixel's scale and shift
 * (per_feature, when scale is not NULL). */
static int make_split(struct trn_split *s, const struct idx *img, const struct idx *lab,
                      long first, long n, const float lut[256], const float *scale,
                      const float *shift)
{
	size_t dim = (size_t)img->rows * img->cols;
	s->n = n;
	s->x = malloc(sizeof(float) * dim * (size_t)(n > 0 ? n : 1));
	s->y = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
	if (!s->x || !s->y)
		return -1;
	const uint8_t *p = img->data + (size_t)first * dim;
	if (scale) {
		for (size_t i = 0; i < dim * (size_t)n; i++)
			s->x[i] = (float)p[i] * scale[i % dim] + shift[i % dim];
	} else {
		for (size_t i = 0; i < dim * (size_t)n; i++)
			s->x[i] = lut[p[i]];
	}
	for (long i = 0; i < n; i++)
		s->y[i] = lab->data[first + i];
	return 0;
}

static int max_label(const struct idx *lab)
{
	int m = 0;
	for (uint32_t i = 0; i < lab->n; i++)
		m = lab->data[i] > m ? lab->data[i] : m;
	return m;
}

int trn_data_idx_load(struct trn_dataset *ds, const struct trn_spec *spec,
                      const struct trn_input_policy *inputs, struct trn_err *err)
{
	const struct trn_spec_data *d = &spec->data;
	struct idx ti, tl, vi = { 0 }, vl = { 0 };
	int rc = -1;
	if (idx_read_pair(&ti, &tl, "data.train", d->train, d->train_labels, inputs, err) != 0)
		return -1;

	long n_train = ti.n, n_val = 0;
	int held_out = 0;
	if (d->val[0]) {
		if (idx_read_pair(&vi, &vl, "data.val", d->val, d->val_labels, inputs, err) != 0)
			goto out;
		if (vi.rows != ti.rows || vi.cols != ti.cols) {
			trn_err_set(err, "data.val.images: %s: %u x %u images, but train has %u x %u",
			            d->val, vi.rows, vi.cols, ti.rows, ti.cols);
			goto out;
		}
		n_val = vi.n;
	} else if (d->val_fraction > 0) {
		n_val = trn_data_holdout(n_train, d->val_fraction);
		if (n_val >= n_train) {
			trn_err_set(err, "data.val_fraction: %g of %ld samples leaves none to train on",
			            d->val_fraction, n_train);
			goto out;
		}
		n_train -= n_val;
		held_out = 1;
	}

	/* mean and std over the train split's pixels; integer sums are exact */
	size_t dim = (size_t)ti.rows * ti.cols, count = dim * (size_t)n_train;
	uint64_t hist[256] = { 0 };
	for (size_t i = 0; i < count; i++)
		hist[ti.data[i]]++;
	double sum = 0, sumsq = 0;
	for (int v = 0; v < 256; v++) {
		sum += (double)hist[v] * v;
		sumsq += (double)hist[v] * v * v;
	}
	double mean = sum / (double)count, var = sumsq / (double)count - mean * mean;
	double sd = var > 0 ? sqrt(var) : 1.0;       /* constant pixels: only centre */
	float lut[256];
	for (int v = 0; v < 256; v++)
		lut[v] = (float)((v - mean) / sd);

	ds->task = TRN_TASK_CLASSIFY;
	ds->dim = (int)dim;
	ds->mean = mean;
	ds->std = sd;
	float *scale = NULL, *shift = NULL;          /* per_feature: x = v * scale + shift */
	if (d->standardize == TRN_STANDARDIZE_PER_FEATURE &&
	    per_feature(&ti, n_train, sd, &scale, &shift) != 0) {
		trn_err_set(err, "data: out of memory for the per-feature standardisation");
		goto out;
	}
	if (make_split(&ds->train, &ti, &tl, 0, n_train, lut, scale, shift) != 0 ||
	    (n_val > 0 && held_out &&
	     make_split(&ds->val, &ti, &tl, n_train, n_val, lut, scale, shift) != 0) ||
	    (n_val > 0 && !held_out &&
	     make_split(&ds->val, &vi, &vl, 0, n_val, lut, scale, shift) != 0)) {
		free(scale);
		free(shift);
		trn_err_set(err, "data: out of memory for %ld samples of %zu features",
		            n_train + n_val, dim);
		goto out;
	}
	free(scale);
	free(shift);
	int classes = max_label(&tl) + 1;
	if (vl.data && max_label(&vl) + 1 > classes)
		classes = max_label(&vl) + 1;
	ds->n_classes = classes;
	rc = 0;
out:
	free(ti.data);
	free(tl.data);
	free(vi.data);
	free(vl.data);
	return rc;
}

int trn_data_idx_shape(struct trn_dataset *ds, const struct trn_spec *spec,
                       const struct trn_input_policy *inputs, struct trn_err *err)
{
	const struct trn_spec_data *d = &spec->data;
	struct idx ti, tl = { 0 }, vi = { 0 }, vl = { 0 };
	int rc = -1;
	if (idx_read_part(&ti, "data.train.images", d->train, 1, 1, inputs, err) != 0)
		return -1;
	if (!d->train_labels[0])
		return trn_err_set(err, "data.train.labels: required with data.train.images");
	if (idx_read(&tl, "data.train.labels", d->train_labels, 0, inputs, err) != 0)
		return -1;
	if (tl.n != ti.n) {
		trn_err_set(err, "data.train.labels: %s: %u images but %u labels", d->train_labels,
		            ti.n, tl.n);
		goto out;
	}
	long n_train = ti.n, n_val = 0;
	int classes = max_label(&tl) + 1;
	if (d->val[0]) {
		if (idx_read_part(&vi, "data.val.images", d->val, 1, 1, inputs, err) != 0)
			goto out;
		if (!d->val_labels[0]) {
			trn_err_set(err, "data.val.labels: required with data.val.images");
			goto out;
		}
		if (idx_read(&vl, "data.val.labels", d->val_labels, 0, inputs, err) != 0)
			goto out;
		if (vl.n != vi.n) {
			trn_err_set(err, "data.val.labels: %s: %u images but %u labels", d->val_labels,
			            vi.n, vl.n);
			goto out;
		}
		if (vi.rows != ti.rows || vi.cols != ti.cols) {
			trn_err_set(err, "data.val.images: %s: %u x %u images, but train has %u x %u",
			            d->val, vi.rows, vi.cols, ti.rows, ti.cols);
			goto out;
		}
		n_val = vi.n;
		if (max_label(&vl) + 1 > classes)
			classes = max_label(&vl) + 1;
	} else if (d->val_fraction > 0) {
		n_val = trn_data_holdout(n_train, d->val_fraction);
		n_train -= n_val;
	}
	ds->task = TRN_TASK_CLASSIFY;
	ds->dim = (int)(ti.rows * ti.cols);
	ds->n_classes = classes;
	ds->train.n = n_train;
	ds->val.n = n_val;
	rc = 0;
out:
	free(tl.data);
	free(vl.data);
	return rc;
}
