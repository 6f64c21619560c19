/* service/export_manifest.h - an export's manifest (service/export.c's):
 * exports/<id>/export.json in the job's directory, larchd's record of a
 * done export: its id, step, format, the checkpoint's sha256, its times and
 * its two files' names, sizes and sha256s.
 *
 * It lies in a directory the job's user owns and may rewrite, so it is
 * read as what it is: through jobfs (no link followed, a regular file of
 * one link, at most 64 KiB), its id must be the directory's, its file names
 * those of api_export_file_names in order, every sha256 64 hex digits. A
 * user who forges one describes only files of the same job directory that
 * the download route still checks against it; the names never come from
 * it.
 */
#ifndef LARCH_SERVICE_EXPORT_MANIFEST_H
#define LARCH_SERVICE_EXPORT_MANIFEST_H

#include "api/exports_hooks.h"
#include "identity.h"

/* The manifest of export id in job directory dir into *x (state done): 0,
 * or -1 when there is none or it is not one larchd would write. */
int svc_export_manifest_read(const char *dir, const char *id, struct api_export *x);

/* Writes x's manifest (svc_jobfs_write: a new file renamed into place),
 * owned by owner (NULL: larchd's user). 0, or -1 with errno. */
int svc_export_manifest_write(const char *dir, const struct api_export *x,
                              const struct svc_unix_id *owner);

#endif
