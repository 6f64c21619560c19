# shellcheck shell=bash
# deploy/slurm/common.sh - what start.sh and stop.sh share: the cluster's
# directory and the paths inside it, and how to tell whether a daemon of this
# cluster is alive. Sourced, not run.
#
# The directory is $LARCH_SLURM_DIR, else ./slurm-dev. Everything the cluster
# writes lives under it:
#
#   slurm.conf  slurmdbd.conf (0600: the database password)  env.sh  jobcomp.txt
#   munge/      munge.key munge.socket.2 munged.pid munged.seed
#   mariadb/    MariaDB's datadir (slurmdbd's database, slurm_acct_db)
#   state/      slurmctld's StateSaveLocation
#   spool/      slurmd's SlurmdSpoolDir (spool/node<i>/ on a multi-node cluster)
#   log/        munged.log mariadbd.log slurmdbd.log slurmctld.log slurmd.log
#   run/        mariadbd.pid mariadbd.sock slurmdbd.pid slurmctld.pid slurmd.pid
#   nodes.env   a multi-node cluster's nodes and subnet (nodes.sh); its slurmd
#               are slurmd.node<i> (log/slurmd.node<i>.log, run/slurmd.node<i>.pid)

slurm_fail() {
	echo "${0##*/}: $*" >&2
	exit 1
}

[ "$(id -u)" -eq 0 ] ||
	slurm_fail "must run as root (slurmd launches jobs as their users and SlurmUser is root); try: sudo $0"

slurm_dir=$(realpath -m "${LARCH_SLURM_DIR:-./slurm-dev}")
slurm_conf=$slurm_dir/slurm.conf
dbd_conf=$slurm_dir/slurmdbd.conf
munge_socket=$slurm_dir/munge/munge.socket.2
db_socket=$slurm_dir/run/mariadbd.sock

# the daemons in the order they start (stop.sh stops them in reverse);
# nodes.sh puts the nodes' slurmd in place of slurmd on a multi-node cluster
daemons=(munged mariadbd slurmdbd slurmctld slurmd)

# unix socket paths are limited to 107 bytes
[ ${#munge_socket} -le 107 ] && [ ${#db_socket} -le 107 ] ||
	slurm_fail "$slurm_dir: path too long for munge's and MariaDB's sockets (at most 107 bytes): set LARCH_SLURM_DIR to a shorter one"

export SLURM_CONF=$slurm_conf

# pid_file NAME: where daemon NAME (one of $daemons) keeps its pid
pid_file() {
	case $1 in
	munged) echo "$slurm_dir/munge/munged.pid" ;;
	*) echo "$slurm_dir/run/$1.pid" ;;
	esac
}

# daemon_pid NAME: prints the pid of this cluster's daemon NAME and succeeds
# if it runs. A zombie counts as gone (where PID 1 is not an init, exited
# daemons are reaped late), and so does a process that is not this
# cluster's (ours_alive: a pid file left over, the pid reused).
daemon_pid() {
	local pid
	pid=$(cat "$(pid_file "$1")" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	ours_alive "$pid" || return 1
	echo "$pid"
}

# ours_alive PID: succeeds while PID is a live process (not a zombie) of
# this cluster: its command line names $slurm_dir, or (slurmdbd, which has
# no option for its config) its environment holds this cluster's SLURM_CONF
ours_alive() {
	local state
	state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1) || return 1
	[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ] || return 1
	tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qF "$slurm_dir/" ||
		tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" | grep -qxF "SLURM_CONF=$slurm_conf"
}

# now_ms: milliseconds since the epoch, for deadlines (SECONDS ticks on whole seconds)
now_ms() {
	local t=${EPOCHREALTIME/[.,]/}
	echo $((t / 1000))
}

# log_tails: the last lines of each daemon's log, for a failure report
log_tails() {
	local f
	for f in "${daemons[@]}"; do
		f=$slurm_dir/log/$f.log
		[ -f "$f" ] || continue
		echo "--- last lines of $f" >&2
		tail -n 15 "$f" >&2
	done
}

# slurm_fresh_job_ids: before slurmctld starts, makes sure it hands out no
# job id it handed out before. slurmctld killed before it saved its state
# comes back on an older one: it gives the ids of the jobs it lost to new
# jobs while slurmd may still run the lost ones under those ids, and a node
# asked to launch a second job of an id it runs refuses ("Duplicate
# jobid") and is drained. So FirstJobId in slurm.conf becomes one above the
# highest id any record of the cluster names (slurmctld's and slurmd's
# logs, the job completion log, slurmstepd's sockets in slurmd's spool);
# slurmctld takes it where its saved state has a lower next id. The jobs
# slurmd still runs that slurmctld does not know it kills (orphans) once
# the node registers. Says what it did; does nothing while slurmctld runs.
slurm_fresh_job_ids() {
	daemon_pid slurmctld >/dev/null && return 0
	[ -f "$slurm_conf" ] || return 0
	local ids max cur left=""
	ids=$(
		cat "$slurm_dir"/log/slurm*.log "$slurm_dir/jobcomp.txt" 2>/dev/null |
			grep -oE 'JobId=[0-9]+(_[0-9]+\([0-9]+\))?' | grep -oE '[0-9]+'
		find "$slurm_dir/spool" -name '*_*.*' 2>/dev/null | sed -nE 's/.*_([0-9]+)\.[^/]*$/\1/p'
	)
	max=$(printf '%s\n' "$ids" | sort -n | tail -n 1)
	[ -n "$max" ] || return 0
	cur=$(sed -n 's/^FirstJobId=//p' "$slurm_conf" | tail -n 1)
	[[ $cur =~ ^[0-9]+$ ]] || cur=0
	[ $((max + 1)) -gt "$cur" ] || return 0
	if grep -q '^FirstJobId=' "$slurm_conf"; then
		sed -i "s/^FirstJobId=.*/FirstJobId=$((max + 1))/" "$slurm_conf"
	else
		echo "FirstJobId=$((max + 1))" >>"$slurm_conf"
	fi
	left=$(find "$slurm_dir/spool" -name '*_*.*' 2>/dev/null |
		sed -nE 's/.*_([0-9]+)\.[^/]*$/\1/p' | sort -nu | tr '\n' ' ')
	echo "slurm-dev: slurmctld starts job ids at $((max + 1)) (FirstJobId in slurm.conf), above the highest its logs, slurmd's and the job completion log name, so that no id is handed out twice${left:+; slurmd still runs jobs ${left% } from before, which slurmctld stops unless it knows them}"
}

# shellcheck source=deploy/slurm/nodes.sh
. "$(dirname "${BASH_SOURCE[0]}")/nodes.sh"
