/* service/state_dir.h - larchd's state directory: made and kept closed to
 * other users, and held by one larchd at a time.
 *
 * The lock is a POSIX record lock (fcntl F_SETLK, F_WRLCK, the whole file)
 * on <state dir>/larchd.lock, taken at start and held until larchd exits:
 * two larchd on one state dir would run two runners, reconcilers and
 * executors on the same jobs (each adopting, starting and ending them).
 * A record lock belongs to the process, not to the open file: a child
 * larchd forks (a job, a probe, an export) never holds it, even between
 * its fork and its exec, so a larchd killed with SIGKILL leaves no holder
 * behind however busy its children were (the file stays, naming a pid
 * that no longer holds it). flock(2) would be shared with such a child
 * until it closed its copy. The catch of record locks: closing any
 * descriptor of the file drops the lock, so larchd opens it once, here,
 * and nowhere else. The descriptor is close-on-exec.
 *
 * The file holds the holder's pid on its first line, written once the lock
 * is taken, and the URL it listens on on the second (svc_state_dir_lock_note),
 * for the message that refuses a second larchd. Only the holder writes it;
 * nobody removes it (a file removed while a starting larchd opened it would
 * let two hold "the" lock on two files).
 *
 * `larchd token ...` and `larchd db ...` (admin.h) take no lock: they are
 * short SQLite transactions meant to run beside the larchd that serves the
 * database (WAL; SQLite's own locks keep the database whole).
 */
#ifndef LARCH_SERVICE_STATE_DIR_H
#define LARCH_SERVICE_STATE_DIR_H

#include <stddef.h>
#include <sys/types.h>

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

/* svc_state_dir_secure's refusals, with nothing changed: 0 when it would
 * go ahead, else -1 with err filled. */
int svc_state_dir_check(const char *dir, mode_t mode_wanted, char *err, size_t errlen);

/* Takes the state dir's lock, without waiting, and writes this process's
 * pid into the lock file. Returns the lock's descriptor (the caller keeps
 * it open while it serves and gives it to svc_state_dir_unlock), or -1 with
 * err filled; when another process holds the lock, err names the state dir
 * and the holder's pid and URL as its lock file has them. */
int svc_state_dir_lock(const char *dir, char *err, size_t errlen);

/* Adds the URL the holder listens on (http://HOST:PORT) to the lock file.
 * 0, or -1 with err filled (the lock stays held). */
int svc_state_dir_lock_note(int fd, const char *url, char *err, size_t errlen);

/* Empties the lock file and releases the lock (fd < 0: nothing). */
void svc_state_dir_unlock(int fd);

#endif
