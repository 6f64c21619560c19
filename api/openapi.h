/* api/openapi.h - api/openapi.json, embedded at build time (api/embed.cmake
 * turns it into api_openapi_json.c in the build tree), so that larchd needs
 * no data files. The build fails when the file is not valid JSON. */
#ifndef LARCH_API_OPENAPI_H
#define LARCH_API_OPENAPI_H

#include <stddef.h>

extern const unsigned char api_openapi_json[];   /* NUL-terminated */
extern const size_t api_openapi_json_len;        /* without the NUL */

#endif
