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
 * bad usage. Messages go to stderr as "larchd: ...". They take no lock on
 * the state dir (state_dir.h): they run beside the larchd that serves it.
 */
#ifndef LARCH_SERVICE_ADMIN_H
#define LARCH_SERVICE_ADMIN_H

/* Is argv[1] one of the commands above ("token", "db")? */
int svc_admin_is_command(int argc, char **argv);

/* Runs the command; returns the exit status. */
int svc_admin_main(int argc, char **argv);

#endif
