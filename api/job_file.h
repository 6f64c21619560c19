/* api/job_file.h - a file of a job's directory sent as the body of a reply:
 * checkpoints (api/jobs_checkpoint_file_get.c) and exports
 * (api/jobs_export_file_get.c), and the one safe way larchd opens such a
 * file.
 *
 * The file is named by a record larchd trusts (a database row, or an
 * export's manifest with names from a fixed table), never by the request,
 * and is sent only if it lies in the job's directory: its path must be
 * <job dir>/<plain components>, every component below the job directory
 * is opened with O_NOFOLLOW relative to the one before (the directories
 * and the file belong to the job's Unix user, who may replace any of them
 * by a link), and the file must be a regular file of one link owned by the
 * owner of the job directory. larchd reads it as itself, possibly root, and
 * so serves nothing the job's user could not read (another user's file
 * moved or hard-linked into the job directory is refused). Refusals are a
 * 409 conflict naming what is wrong, never bytes; a file that is not there
 * is a 404.
 *
 * Integrity: the file must have the size and sha256 the record says. A
 * verdict is kept per file, keyed by its identity (device, inode, size,
 * mtime, ctime: a rewrite or a rename over it changes the key; ctime cannot
 * be set by the file's owner) and the recorded sha256. A file not verified
 * yet is hashed before its first byte is sent (one read: about a second per
 * 1-2 GB, on the request's MHD thread), a mismatch answered 409. Before
 * the last piece of an answer is sent the file's identity is checked again
 * (fstat: size, mtime, ctime, the verdict's own key; not a second hash of
 * every byte), and a file rewritten in place meanwhile cuts the connection
 * there: the client sees a short body, never a silently wrong one.
 * larchd's import at a job's end hashes its checkpoints and records those
 * hashes (service/job_import.c); it seeds their verdicts here
 * (api_job_file_trust), so the first download after the job ends is not
 * hashed again. larch_download_hashes_total in /metrics counts the files
 * hashed for an answer (api_job_file_hashes).
 *
 * HTTP: the body is read in pieces (pread), never whole in memory. ETag is
 * the quoted sha256; If-None-Match naming it is a 304 without opening the
 * file. Range: one range (bytes=a-b, a-, -n) is a 206 with Content-Range;
 * one past the end a 416 with Content-Range: bytes * / size; several ranges
 * or a malformed header give the whole file (RFC 9110 allows ignoring
 * Range). If-Range: the range is served only when it names the current
 * ETag (strong comparison); another tag, a weak one or a date gives the
 * whole file, 200. HEAD (the router sends it to the GET handler) answers
 * the same status and headers, Content-Length included, without the body
 * (libmicrohttpd sends none for HEAD).
 */
#ifndef LARCH_API_JOB_FILE_H
#define LARCH_API_JOB_FILE_H

#include <stdint.h>
#include <stddef.h>
#include <sys/stat.h>

#include "request.h"

/* What to send; every string borrowed for the call. */
struct api_job_file {
	const char *dir;            /* the job's directory */
	const char *path;           /* the file: dir/<plain components> */
	int64_t bytes;              /* its recorded size */
	const char *sha256;         /* its recorded sha256, 64 lower-case hex digits */
	const char *what;           /* names it in messages: "checkpoint 10 of j-000001" */
	const char *filename;       /* Content-Disposition's file name (plain, no quotes) */
	const char *content_type;   /* "application/octet-stream", "application/json" */
};

/* Replies with the file (200, 206, 304, 404, 409, 416, 500 as above): the
 * request's one reply. Reads the Range, If-Range and If-None-Match
 * headers. */
enum MHD_Result api_job_file_reply(struct api_request *req, const struct api_job_file *f);

/* Opens path, which must be dir/<components>, following no link below dir,
 * and checks it (a regular file of one link, owned by dir's owner).
 * Returns the descriptor (O_RDONLY, close-on-exec) and fills *st, or -1
 * with why (a message naming what is wrong, for a 409) and *gone set when
 * it does not exist. For the service too (service/export.c). */
int api_job_file_open(const char *dir, const char *path, struct stat *st, int *gone, char *why,
                      size_t whylen);

/* Seeds the verdict "good" of a file hashed outside a reply (the import
 * at a job's end): before and after are fstat(2) of the descriptor that
 * was hashed, taken before the first read and after the last, sha256 the
 * digest of what was read (the hash that gets recorded for it). Seeds
 * only when the file's identity (device, inode, size, mtime, ctime) is
 * the same in both, else the bytes hashed may not be the file's: returns
 * 1 when seeded, 0 when not. Thread-safe. */
int api_job_file_trust(const struct stat *before, const struct stat *after,
                       const char *sha256);

/* Files hashed to answer a request since start (a verdict not known yet):
 * for GET /metrics. */
unsigned long long api_job_file_hashes(void);

#endif
