/* tests/unit/db_fixture.c - see db_fixture.h. */
#include "db_fixture.h"

#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "db/tokens.h"

struct db *db_test_open(const char *dir, const char *file, const char *const *users)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	struct db_err err = { 0 };
	struct db *db = db_open(path, NULL, &err);
	CHECK_MSG(db != NULL, "db_open %s: %s", path, err.text);
	if (!db)
		exit(1);
	for (const char *const *u = users; u && *u; u++)
		CHECK_INT_EQ(db_users_ensure(db, *u, DB_ROLE_USER, NULL), 0);
	return db;
}
