/* service/cli/admin.h - larch admin: queues, nodes, drain, resume, hold,
 * release, requeue, set-priority, accounts, set-limits and the audit log
 * (docs/api.md, "Admin" and "Accounting").
 * Sources: service/cli/admin.c. */
#ifndef LARCH_CLI_ADMIN_H
#define LARCH_CLI_ADMIN_H

#include "cli.h"

/* The command's usage line and help (for main.c's command table). */
#define CLI_ADMIN_ARGS                                                                     \
	"queues|nodes|drain NODE --reason R|resume NODE|hold ID|release ID|requeue ID|"     \
	"set-priority ID N [--nice]|audit [--actor A] [--action X] [--target T] [--limit N] " \
	"[--all]|accounts|set-limits ACCOUNT [--user U] [--max-jobs N] [--max-wall T] "        \
	"[--cpus N] [--gpus N]"
#define CLI_ADMIN_HELP                                                                     \
	"Manages the executor's queues, nodes, jobs and Slurm accounts (an admin's token\n"  \
	"is needed):\n\n"                                                                   \
	"  queues                  the queues (Slurm partitions): state, nodes, CPUs\n"      \
	"                          (allocated/idle/other/total), time limit, jobs pending\n" \
	"                          and running (all, and larch's own)\n"                     \
	"  nodes                   the nodes: state, CPUs, memory, partitions, reason\n"     \
	"  drain NODE --reason R   drain a Slurm node (or a hostlist such as n[1-4])\n"     \
	"  resume NODE             put a drained or down node back in service\n"            \
	"  hold ID                 keep a job that has not started from starting\n"         \
	"  release ID              let a held job start\n"                                   \
	"  requeue ID              send a running Slurm job back to the queue\n"            \
	"  set-priority ID N       set a job's priority (1-4294967294); with --nice, its\n"  \
	"                          nice value instead (a negative one after --: -- -5)\n"    \
	"  audit                   the audit log of admin actions, newest first:\n"         \
	"    --actor A             only A's actions\n"                                       \
	"    --action X            only action X (node.drain, job.hold, job.update, ...)\n" \
	"    --target T            only actions on T (nodes/NAME, jobs/ID)\n"               \
	"    --limit N             at most N entries (1-500; with --all: per request)\n"     \
	"    --all                 every entry, following the pages\n"                      \
	"  accounts                Slurm's accounts and their users: limits (max jobs,\n"   \
	"                          max wall time, CPUs and GPUs at once) and fair share\n"  \
	"  set-limits ACCOUNT      set limits of an account (with --user U, of U's\n"      \
	"                          association with it) through sacctmgr; \"none\" removes\n" \
	"                          one:\n"                                                   \
	"    --max-jobs N          jobs running at once (MaxJobs)\n"                       \
	"    --max-wall T          longest time limit, HH:MM:SS, D-HH:MM:SS or minutes\n"  \
	"    --cpus N, --gpus N    CPUs, GPUs the association's jobs hold at once (GrpTRES)\n"

int cli_cmd_admin(struct cli *cli, int argc, char **argv);

#endif
