/* trainer/ckpt.h - checkpoint files: safetensors layout, atomic writes.
 *
 * A checkpoint is a safetensors file (readable by the safetensors and numpy
 * tools): an 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__": {"format": "larch-ckpt-1", "step": "1000", ...},
 *    "param.fc1.weight": {"dtype": "F32", "shape": [1024, 784], "data_offsets": [0, 3211264]}, ...}
 * padded with spaces to a multiple of 8, then the raw little-endian tensor data.
 * Metadata values are strings (a safetensors rule). Writes go to a temporary
 * name in the same directory, are fsync'd, renamed into place, and the
 * directory is fsync'd: a crash leaves the old file or the new one, never half.
 *
 * In a job dir checkpoints are DIR/checkpoints/step-<8 digits>.safetensors.
 */
#ifndef LARCH_TRAINER_CKPT_H
#define LARCH_TRAINER_CKPT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

enum trn_ckpt_dtype { TRN_CKPT_F32, TRN_CKPT_I64, TRN_CKPT_U8, TRN_CKPT_I8 };

struct trn_ckpt_entry {
	const char *name;
	enum trn_ckpt_dtype dtype;
	const void *data;
	int ndim;
	long shape[4];
};

/* Writes the tensors and metadata (a JSON object of string values; borrowed)
 * to path atomically. Returns 0, or -1 with err set; on failure path is
 * untouched. sha256_hex, if not NULL, receives the file's SHA-256 (65 bytes). */
int trn_ckpt_write(const char *path, const struct trn_ckpt_entry *entries, int n,
                   json_t *meta, char *sha256_hex, struct trn_err *err);

struct trn_ckpt {
	json_t *header;                /* the parsed JSON header (owned) */
	const uint8_t *data;           /* start of the data section in the mapping */
	size_t data_len;
	void *map;                     /* mmap of the whole file */
	size_t map_len;
};

struct trn_input_policy;

/* Opens and checks a checkpoint (header, offsets within the file, dtypes):
 * 0, or -1 with err "<path>: <what is wrong>", never bytes of the file
 * (a tensor is named by its number in the header, "tensor #3", from 0).
 * The file is opened with trn_input_open (input.h), unconfined. */
int trn_ckpt_open(struct trn_ckpt *c, const char *path, struct trn_err *err);
/* The same for a file a user named: opened under inputs (borrowed; NULL
 * confines nothing), messages "<field>: <path>: ..." ("init.from"). */
int trn_ckpt_open_input(struct trn_ckpt *c, const char *path,
                        const struct trn_input_policy *inputs, const char *field,
                        struct trn_err *err);
void trn_ckpt_close(struct trn_ckpt *c);

/* A metadata value, or NULL when absent. Borrowed from c. */
const char *trn_ckpt_meta(const struct trn_ckpt *c, const char *key);

/* Copies tensor name into dst, checking dtype and element count. 0 or -1. */
int trn_ckpt_read(const struct trn_ckpt *c, const char *name, enum trn_ckpt_dtype dtype,
                  void *dst, long numel, struct trn_err *err);

/* 1 when the checkpoint holds a tensor of that name. */
int trn_ckpt_has(const struct trn_ckpt *c, const char *name);

/* DIR/checkpoints/step-00001000.safetensors */
void trn_ckpt_path(char *buf, size_t len, const char *job_dir, long step);

/* Steps of the checkpoints in job_dir/checkpoints, newest first, into a new
 * array (*steps, free with free()); returns the count, or -1 with err. */
int trn_ckpt_list(const char *job_dir, long **steps, struct trn_err *err);

/* Deletes all but the newest keep checkpoints (and stray temporaries). */
int trn_ckpt_prune(const char *job_dir, int keep, struct trn_err *err);

#endif
