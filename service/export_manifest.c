/* service/export_manifest.c - an export's manifest, exports/<id>/export.json
 * in the job's directory; see export_manifest.h. */
#include "export_manifest.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobfs.h"

#define MANIFEST_MAX 65536

static int is_hex64(const char *s)
{
	if (!s || strlen(s) != 64)
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return 0;
	return 1;
}

int svc_export_manifest_read(const char *dir, const char *id, struct api_export *x)
{
	int64_t step;
	const char *format;
	if (api_export_id_parse(id, &step, &format) != 0)
		return -1;
	char rel[128];
	snprintf(rel, sizeof rel, "exports/%s/export.json", id);
	FILE *f = svc_jobfs_fopen(dir, rel);
	if (!f)
		return -1;
	char *buf = malloc(MANIFEST_MAX);
	size_t n = buf ? fread(buf, 1, MANIFEST_MAX, f) : 0;
	fclose(f);
	json_t *root = buf && n < MANIFEST_MAX ? json_loadb(buf, n, 0, NULL) : NULL;
	free(buf);
	json_t *files = json_object_get(root, "files");
	const char *ck = json_string_value(json_object_get(root, "checkpoint_sha256"));
	const char *rid = json_string_value(json_object_get(root, "id"));
	int ok = rid && strcmp(rid, id) == 0 && is_hex64(ck) && json_is_array(files) &&
	         json_array_size(files) == API_EXPORT_FILES;
	memset(x, 0, sizeof *x);
	for (int i = 0; ok && i < API_EXPORT_FILES; i++) {
		json_t *e = json_array_get(files, (size_t)i);
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *sha = json_string_value(json_object_get(e, "sha256"));
		json_t *bytes = json_object_get(e, "bytes");
		ok = name && strcmp(name, api_export_file_names[i]) == 0 && is_hex64(sha) &&
		     json_is_integer(bytes) && json_integer_value(bytes) >= 0;
		if (ok) {
			snprintf(x->files[i].name, sizeof x->files[i].name, "%s", name);
			snprintf(x->files[i].sha256, sizeof x->files[i].sha256, "%s", sha);
			x->files[i].bytes = json_integer_value(bytes);
		}
	}
	if (ok) {
		snprintf(x->id, sizeof x->id, "%s", id);
		x->step = step;
		snprintf(x->format, sizeof x->format, "%s", format);
		x->state = API_EXPORT_DONE;
		snprintf(x->checkpoint_sha256, sizeof x->checkpoint_sha256, "%s", ck);
		x->created_ms = json_integer_value(json_object_get(root, "created_ms"));
		x->finished_ms = json_integer_value(json_object_get(root, "finished_ms"));
		if (x->created_ms < 0 || x->finished_ms < 0)
			x->created_ms = x->finished_ms = 0;     /* not larchd's: times unknown */
		x->n_files = API_EXPORT_FILES;
	}
	json_decref(root);
	return ok ? 0 : -1;
}

int svc_export_manifest_write(const char *dir, const struct api_export *x,
                          const struct svc_unix_id *owner)
{
	json_t *files = json_array();
	for (int i = 0; i < x->n_files; i++)
		json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", x->files[i].name,
		                                       "bytes", (json_int_t)x->files[i].bytes,
		                                       "sha256", x->files[i].sha256));
	json_t *root = json_pack("{s:s, s:I, s:s, s:s, s:I, s:I, s:o}", "id", x->id, "step",
	                         (json_int_t)x->step, "format", x->format, "checkpoint_sha256",
	                         x->checkpoint_sha256, "created_ms", (json_int_t)x->created_ms,
	                         "finished_ms", (json_int_t)x->finished_ms, "files", files);
	char *text = root ? json_dumps(root, JSON_INDENT(1)) : NULL;
	json_decref(root);
	if (!text) {
		errno = ENOMEM;
		return -1;
	}
	char rel[128];
	snprintf(rel, sizeof rel, "exports/%s/export.json", x->id);
	int rc = svc_jobfs_write(dir, rel, text, strlen(text), 0644,
	                         owner ? owner->uid : (uid_t)-1, owner ? owner->gid : (gid_t)-1);
	free(text);
	return rc;
}

