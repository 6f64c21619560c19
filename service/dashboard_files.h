/* service/dashboard_files.h - the dashboard's files built into larchd:
 * service/dashboard/ as a table, generated at build time by
 * service/embed_files.cmake (served by api/static_get.c). */
#ifndef LARCH_SVC_DASHBOARD_FILES_H
#define LARCH_SVC_DASHBOARD_FILES_H

#include <stddef.h>

#include "api/static.h"

extern const struct api_static_file svc_dashboard_files[];
extern const size_t svc_dashboard_files_count;

#endif
