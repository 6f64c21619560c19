/* service/executor_slurm_name.c - the names of larch's Slurm jobs and the
 * instance id in them; see slurm_name.h. */
#include "slurm_name.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "jobfs.h"
#include "log.h"

int slurm_instance_id(const char *state_dir, char out[SLURM_INSTANCE_LEN + 1], char *err,
                      size_t errlen)
{
	char line[SLURM_INSTANCE_LEN + 2] = "";
	int fd = svc_jobfs_open(state_dir, "instance-id", O_RDONLY, 0);
	if (fd >= 0) {
		ssize_t n = read(fd, line, sizeof line - 1);
		close(fd);
		line[n > 0 ? n : 0] = '\0';
		line[strcspn(line, "\r\n")] = '\0';
		if (strlen(line) == SLURM_INSTANCE_LEN &&
		    strspn(line, "0123456789abcdef") == SLURM_INSTANCE_LEN) {
			memcpy(out, line, SLURM_INSTANCE_LEN + 1);
			return 0;
		}
	}
	unsigned char raw[SLURM_INSTANCE_LEN / 2];
	if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
		svc_msgf(err, errlen, "getrandom: %s", strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < sizeof raw; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	snprintf(line, sizeof line, "%s\n", out);
	if (svc_jobfs_write(state_dir, "instance-id", line, strlen(line), 0640, (uid_t)-1,
	                    (gid_t)-1) != 0) {
		svc_msgf(err, errlen, "cannot write %s/instance-id: %s", state_dir, strerror(errno));
		return -1;
	}
	return 0;
}

void slurm_name_prefix(const char *instance, int array, char *out, size_t len)
{
	snprintf(out, len, "larch-%s-%s-", instance, array ? "s" : "j");
}

void slurm_job_name(const char *instance, long long job, long long sweep, char *out,
                    size_t len)
{
	char prefix[SLURM_NAME_MAX];
	slurm_name_prefix(instance, sweep > 0, prefix, sizeof prefix);
	snprintf(out, len, "%s%06lld", prefix, sweep > 0 ? sweep : job);
}
