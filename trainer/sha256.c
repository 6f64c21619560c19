/* trainer/sha256.c - see sha256.h. */
#include "trainer/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#define PIECE (1 << 20)

int trn_sha256_fd(int fd, char hex[65])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char *buf = malloc(PIECE);
	int rc = -1, e = ENOMEM;
	if (!md || !buf || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
		goto out;
	e = EIO;
	for (off_t at = 0;;) {
		ssize_t n = pread(fd, buf, PIECE, at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			e = errno;
			goto out;
		}
		if (n == 0)
			break;
		if (EVP_DigestUpdate(md, buf, (size_t)n) != 1)
			goto out;
		at += n;
	}
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned dlen = 0;
	if (EVP_DigestFinal_ex(md, d, &dlen) != 1 || dlen != 32)
		goto out;
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
	rc = 0;
out:
	free(buf);
	EVP_MD_CTX_free(md);
	if (rc)
		errno = e;
	return rc;
}
