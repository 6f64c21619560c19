/* api/routes.h - larchd's route table (api/routes.c). */
#ifndef LARCH_API_ROUTES_H
#define LARCH_API_ROUTES_H

#include <stddef.h>

#include "router.h"

extern const struct api_route api_routes[];
extern const size_t api_routes_count;

/* The version larchd reports ("0.1.0"), from the CMake project. */
const char *api_version(void);

#endif
