/* service/admin.h - larchd's maintenance commands, run on the state dir's
 * database (also while larchd serves it: SQLite WAL):
 *
 *   larchd token create --user NAME --role user|admin   prints the new token once
 *   larchd token list                                   every token, no secrets
 *   larchd token revoke ID
 *   larchd db migrate                                   applies missing migrations
 *   larchd db check                                     integrity and foreign keys
 *   larchd db backup DEST                               an online copy to DEST
 *
 * Each also takes larchd's settings flags (--state-dir DIR, --config FILE,
 * ...; service/config.h) and their environment variables. Exit status: 0
 * done, 1 failed (no database, no such token, a corrupt database, I/O), 2
 * bad usage. Messages go to stderr as "larchd: ...".
 */
#ifndef LARCH_SERVICE_ADMIN_H
#define LARCH_SERVICE_ADMIN_H

#include <stddef.h>
#include <sys/types.h>

/* Is argv[1] one of the commands above ("token", "db")? */
int svc_admin_is_command(int argc, char **argv);

/* Runs the command; returns the exit status. */
int svc_admin_main(int argc, char **argv);

/* mkdir -p dir, mode 0700 for what it makes; dir must end up a directory.
 * 0, or -1 with err filled. */
int svc_state_dir_make(const char *dir, char *err, size_t errlen);

/* Gives the directory dir the permission bits mode_wanted (0700: only
 * larchd's user may enter it; 0711: others may reach what it holds by name,
 * never list it) where it has others, e.g. an old state dir of mode 0755
 * that let every user read the database. Returns 0 when it had them
 * already, 1 when it changed them (*was: the bits it had, for the caller's
 * log line), -1 with err filled when dir is not a directory, belongs to
 * another user (whose directory larchd does not chmod, even as root) or
 * chmod fails. */
int svc_state_dir_secure(const char *dir, mode_t mode_wanted, mode_t *was, char *err,
                         size_t errlen);

#endif
