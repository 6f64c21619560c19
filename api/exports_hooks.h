/* api/exports_hooks.h - what the export endpoints (api/jobs_export_*.c) ask
 * of the service: exports of a job's checkpoint to Hugging Face's layout,
 * made off the HTTP threads by `larch-train --export` run as the job's
 * owner (service/export.h), and what it knows of them.
 *
 * An export is named by its step and format ("10-hf-gpt2"): the same
 * checkpoint in the same format is the same export. Its files lie in the
 * job's directory, exports/<id>/ (config.json, model.safetensors), and its
 * manifest, exports/<id>/export.json, is larchd's record of them (sizes
 * and sha256s) once it is done.
 */
#ifndef LARCH_API_EXPORTS_HOOKS_H
#define LARCH_API_EXPORTS_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#define API_EXPORT_ID_MAX 40           /* "<step>-<format>" and the NUL */
#define API_EXPORT_FILES 2
#define API_EXPORT_ERROR_MAX 512

enum api_export_state {
	API_EXPORT_QUEUED,
	API_EXPORT_RUNNING,
	API_EXPORT_DONE,
	API_EXPORT_FAILED,
};

/* "queued", "running", "done", "failed" (static). */
const char *api_export_state_name(enum api_export_state s);

/* The formats an export may have, NULL-terminated: "hf-gpt2", "hf-mlp". */
extern const char *const api_export_formats[];
/* The files an export of any format writes, NULL-terminated:
 * "config.json", "model.safetensors". */
extern const char *const api_export_file_names[];

/* Parses an export id: "<step>-<format>", the step in decimal without
 * leading zeros, the format one of api_export_formats. 0 with *step and
 * *format (static) filled, or -1. */
int api_export_id_parse(const char *id, int64_t *step, const char **format);

struct api_export_file {
	char name[24];                 /* one of api_export_file_names */
	int64_t bytes;
	char sha256[65];
};

struct api_export {
	char id[API_EXPORT_ID_MAX];
	int64_t step;
	char format[16];
	enum api_export_state state;
	char error[API_EXPORT_ERROR_MAX];  /* failed: why; else "" */
	char checkpoint_sha256[65];    /* the checkpoint it was made from */
	int64_t created_ms, finished_ms;   /* 0 = not yet (or unknown) */
	int n_files;                   /* done: API_EXPORT_FILES; else 0 */
	struct api_export_file files[API_EXPORT_FILES];
};

/* What POST /v1/jobs/{id}/exports hands the service; borrowed for the call. */
struct api_export_request {
	long long job;
	const char *owner;             /* the job's owner (a larch user) */
	const char *unix_user;         /* the Unix user the job ran as; NULL: larchd's own */
	int64_t step;
	const char *format;            /* one of api_export_formats */
	const char *checkpoint;        /* the checkpoint's recorded path */
	const char *checkpoint_sha256; /* and sha256 */
};

struct api_exports_hooks {
	/* Starts the export, or finds it: 0 a new one was queued (out: it);
	 * 1 it exists (out: a queued or running one, or a done one of this
	 * checkpoint); -1 larchd is stopping or its queue is full (503); -2 the
	 * owner has too many queued or running (429). */
	int (*start)(void *arg, const struct api_export_request *in, struct api_export *out);
	/* The job's exports by id into *out (a new array, the caller frees it):
	 * the count, or -1 (out of memory). */
	int (*list)(void *arg, long long job, struct api_export **out);
	void *arg;
};

#endif
