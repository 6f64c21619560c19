/* service/cli/download.h - one file of larchd's (a checkpoint, an export's
 * file) into a local file, never held in memory.
 *
 * The file goes to FILE.part, written as it arrives. A FILE.part already
 * there is resumed with a Range request from its size (larchd's ETag must
 * still be the expected sha256, else it is refused: the file changed); a
 * transfer that breaks is resumed the same way, a few times, and when it
 * cannot be, FILE.part is kept for the next run. At the end the whole
 * FILE.part is hashed: the expected sha256 renames it to FILE; another hash
 * is an error that keeps FILE.part (delete it to download again).
 */
#ifndef LARCH_CLI_DOWNLOAD_H
#define LARCH_CLI_DOWNLOAD_H

#include "cli.h"

/* GETs path (escaped already) into out, expecting bytes bytes of sha256
 * expected (64 hex digits). id names the job in larchd's refusals, what the
 * file in messages ("checkpoint 10 of j-000001"). Prints why on failure;
 * returns CLI_OK or an exit status. */
int cli_download(struct cli *cli, const char *path, const char *id, const char *what,
                 const char *expected, long long bytes, const char *out);

#endif
