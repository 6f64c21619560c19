/* trainer/sha256.h - the sha256 of a whole file, in larch_spec so that
 * larchd (a checkpoint's ETag and its check before a download) and the larch
 * CLI (the check after one) hash the same way. */
#ifndef LARCH_TRAINER_SHA256_H
#define LARCH_TRAINER_SHA256_H

/* The sha256 of the file at fd, read with pread from its start to its end
 * (the offset is left alone), as 64 lower-case hex digits and a NUL in hex.
 * 0, or -1 with errno (ENOMEM, a read's error, or EIO when the digest
 * fails). Thread-safe. */
int trn_sha256_fd(int fd, char hex[65]);

#endif
