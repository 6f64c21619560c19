/* tests/unit/db_fixture.h - what the db unit tests (test_db_*.c) share:
 * a fresh database in the test's temporary folder, with its users. */
#ifndef LARCH_TESTS_DB_FIXTURE_H
#define LARCH_TESTS_DB_FIXTURE_H

#include "db/db.h"

/* Opens dir/file (db_open, default options) and ensures each name of users
 * (NULL-terminated; NULL for none) as a DB_ROLE_USER. A failed open is a
 * failed check and exits 1; the caller closes the database. */
struct db *db_test_open(const char *dir, const char *file, const char *const *users);

#endif
