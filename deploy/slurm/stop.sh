#!/usr/bin/env bash
# deploy/slurm/stop.sh - stops the cluster deploy/slurm/start.sh started in
# $LARCH_SLURM_DIR (else ./slurm-dev): cancels the jobs still queued or
# running (their processes would outlive slurmd), then stops slurmd,
# slurmctld, slurmdbd, mariadbd and munged, in that order, each with SIGTERM
# (SIGKILL after 15 s; MariaDB shuts down cleanly on SIGTERM), waiting until
# each is gone before the next. On a multi-node cluster (start.sh --nodes)
# it then kills what still runs in the nodes' network namespaces and removes
# the namespaces, veth pairs and bridge start.sh made, and only those.
# A zombie counts as gone: where PID 1 is not an init, it reaps them late.
# Idempotent: with nothing running it exits 0. The directory stays (state,
# logs, jobcomp file); remove it by hand for a clean slate.
set -euo pipefail
# shellcheck source=deploy/slurm/common.sh
. "$(dirname "$0")/common.sh"

if [ ! -d "$slurm_dir" ]; then
	echo "slurm-dev: nothing to stop ($slurm_dir does not exist)"
	exit 0
fi

# wait_gone PID SECONDS: succeeds once the daemon PID has exited. Its
# process, not its pid file: munged removes the file on SIGTERM before it
# writes its seed and exits, so the file went first and a check right
# after stop.sh found munged still running.
wait_gone() {
	local end=$(($(now_ms) + $2 * 1000))
	while ours_alive "$1"; do
		[ "$(now_ms)" -lt $end ] || return 1
		sleep 0.05
	done
}

if daemon_pid slurmctld >/dev/null; then
	jobs=$(timeout 10 squeue -h -o %A -t PD,R,CG,S 2>/dev/null || true)
	if [ -n "$jobs" ]; then
		echo "slurm-dev: cancelling jobs ${jobs//$'\n'/ }"
		# shellcheck disable=SC2086
		timeout 10 scancel $jobs || true
		end=$(($(now_ms) + 15000))
		while [ -n "$(timeout 10 squeue -h -o %A -t R,CG 2>/dev/null || true)" ] && [ "$(now_ms)" -lt $end ]; do
			sleep 0.2
		done
	fi
fi

stopped=()
for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
	d=${daemons[i]}
	pid=$(daemon_pid "$d") || continue
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" 15; then
		echo "slurm-dev: $d ($pid) still runs 15 s after SIGTERM: SIGKILL" >&2
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 5 || slurm_fail "$d ($pid) survives SIGKILL"
	fi
	stopped+=("$d")
done
for d in "${daemons[@]}"; do
	rm -f "$(pid_file "$d")"
done
# a multi-node cluster's namespaces, veth pairs and bridge (nodes.sh), and
# whatever still runs in the namespaces
net_down

if [ ${#stopped[@]} -eq 0 ]; then
	echo "slurm-dev: not running ($slurm_dir)"
else
	echo "slurm-dev: stopped ${stopped[*]} ($slurm_dir)"
fi
