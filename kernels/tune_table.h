/* kernels/tune_table.h - the picks of tuned GEMMs kept in a text file, so
 * that a later run on the same job directory (a resume) takes the same
 * algorithm for each problem without timing the candidates again, and so
 * gives the same bits (kern_matmul_cuda_gemm_tune_file, matmul_cuda.h); the
 * same table, without a file, keeps the picks of the kernels' own timed
 * variants (kern_cuda_variant_pick, cuda_common.h), and kern_tune_fastest
 * makes both kinds of pick.
 *
 * One line a problem: its key (printable, no spaces: the device, the
 * library's version and the problem's shape, types and alignments), a
 * space, then the algorithm's KERN_TUNE_WORDS 64-bit words as 16 hex
 * digits each, space-separated. cuBLASLt's cublasLtMatmulAlgo_t is eight
 * such words and may be stored and restored so for the same library
 * version (cublasLt.h), which the key names. Plain C, no CUDA: the unit
 * suite tests it (tests/unit/test_tune_table.c).
 */
#ifndef LARCH_KERNELS_TUNE_TABLE_H
#define LARCH_KERNELS_TUNE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KERN_TUNE_WORDS 8
#define KERN_TUNE_KEY 320              /* a key's most characters, with its NUL */

struct kern_tune_entry {
	char key[KERN_TUNE_KEY];
	uint64_t algo[KERN_TUNE_WORDS];
};

struct kern_tune_table {
	struct kern_tune_entry *e;
	int n, cap;
};

/* Whether key can be a line's key: 1 to KERN_TUNE_KEY - 1 printable
 * characters, none a space. */
int kern_tune_key_ok(const char *key);

/* t (emptied first) from path's lines; a missing file gives an empty
 * table. A line that does not parse is left out and counted in *skipped
 * (when not NULL); of two lines with one key the first counts. Returns 0,
 * or -1 with why when the file cannot be read or memory runs out. */
int kern_tune_table_load(struct kern_tune_table *t, const char *path, int *skipped, char *why,
                         size_t why_len);

/* key's algorithm in t, or NULL. */
const uint64_t *kern_tune_table_find(const struct kern_tune_table *t, const char *key);

/* key's pick into t and, when path is not NULL, its line onto the end of
 * path (created mode 0644 if missing), in one write to a file opened to
 * append: ranks that share the file do not interleave their lines. A key
 * already in t keeps its pick (nothing written). Returns 0, or -1 with why
 * (a key kern_tune_key_ok refuses, out of memory, the file not written). */
int kern_tune_table_add(struct kern_tune_table *t, const char *path, const char *key,
                        const uint64_t algo[KERN_TUNE_WORDS], char *why, size_t why_len);

void kern_tune_table_free(struct kern_tune_table *t);

/* Picks given as text into t: entries "KEY=N" (KEY as kern_tune_key_ok
 * takes it, N a variant from 0 to 63) apart by spaces, as
 * kern_cuda_variant_pick names them on stderr ("larch: kernels timed:
 * KEY=N ..."), the pick in word 0. Returns the entries added, or -1 with
 * why at the first that does not parse (those before it added). */
int kern_tune_picks_parse(struct kern_tune_table *t, const char *text, char *why,
                          size_t why_len);

/* The pick among n timings ms[0..n) of one problem's candidates (ms[i] < 0:
 * candidate i did not run): the fastest, except that candidate 0 (the
 * default) stays unless the fastest beats it by more than the fraction
 * margin of its time (timings that close are within a GPU's run-to-run
 * spread). The fastest that ran where candidate 0 did not; 0 when none
 * ran. */
int kern_tune_fastest(const float *ms, int n, double margin);

#ifdef __cplusplus
}
#endif

#endif
