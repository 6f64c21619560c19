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

# shellcheck source=deploy/slurm/nodes.sh
. "$(dirname "${BASH_SOURCE[0]}")/nodes.sh"
