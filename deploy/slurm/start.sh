#!/usr/bin/env bash
# deploy/slurm/start.sh - starts a single-node Slurm cluster for development
# and CI from Debian 12's packages (deploy/install-deps.sh installs them):
# munged, MariaDB and slurmdbd (Slurm's accounting), slurmctld and slurmd,
# run by hand (no systemd), as root.
#
#   ./deploy/slurm/start.sh                     # the cluster in ./slurm-dev
#   ./deploy/slurm/start.sh --nodes 3           # three nodes (see below)
#   LARCH_SLURM_DIR=/tmp/s ./deploy/slurm/start.sh
#   export SLURM_CONF=$PWD/slurm-dev/slurm.conf  # what it prints at the end
#
# Everything lives in one directory ($LARCH_SLURM_DIR, else ./slurm-dev; see
# common.sh): the generated slurm.conf and slurmdbd.conf, munge's own key
# and socket, MariaDB's datadir and socket, state, spool, logs, pid files and
# the jobcomp file (jobcomp/filetxt: the job history `sacct -c` reads).
# Nothing in /etc/slurm, /etc/munge or /etc/mysql is read or written: the
# daemons and the Slurm commands find the configs through SLURM_CONF
# (slurmdbd.conf beside slurm.conf), slurm.conf's AuthInfo names munge's
# socket, MariaDB runs with --no-defaults and no network (its socket only),
# and slurmdbd finds that socket through MYSQL_UNIX_PORT.
#
# Accounting is Slurm's own: slurmdbd stores jobs and associations in
# MariaDB (database slurm_acct_db, user slurm with a password made at the
# first start and kept in slurmdbd.conf, mode 0600);
# AccountingStorageEnforce=associations,limits,qos, so a user submits only
# under an account sacctmgr gave them (root's comes with the cluster), and
# the multifactor priority plugin weighs fair share. The cluster is
# registered with slurmdbd (`sacctmgr add cluster larch-dev`) at its first
# start.
#
# The node is this machine with its real CPUs and memory (`slurmd -C`), in
# three partitions: debug (the default, MaxTime 30 min), batch (no limit) and
# urgent (MaxTime 30 min, PriorityTier 10 against 1: with
# PreemptType=preempt/partition_prio and PreemptMode=REQUEUE its jobs preempt
# the other partitions' running jobs, which Slurm requeues).
#
# --nodes N (N > 1) makes N nodes, node1 .. nodeN, each a slurmd in a
# network namespace and a UTS namespace of its own (hostname node<i>), with
# an address in a private /24 made only on this machine, reached through a
# veth pair and a bridge on the host side (nodes.sh); slurmctld, slurmdbd,
# MariaDB and munged stay on the host (slurmctld's address in slurm.conf is
# the bridge's), munge's socket is shared. The machine's CPUs and memory are
# split between the nodes (at least 1 CPU each), unless
# LARCH_SLURM_NODE_CPUS and LARCH_SLURM_NODE_MEM (MB) state them per node.
# A node whose slurmd stops answering is marked DOWN after
# LARCH_SLURM_NODE_TIMEOUT seconds (SlurmdTimeout, 10; Slurm's default is
# 300), its jobs end NODE_FAIL and are requeued; KillWait is 10 s (30).
# The shape is fixed while any daemon runs; a stopped cluster starts with
# the nodes asked for (1 without --nodes). stop.sh removes the namespaces,
# the veth pairs and the bridge.
#
# Idempotent: with the cluster up it changes nothing and exits 0; a daemon
# that died is started again (with the config it had). Then it waits until
# sinfo shows the node ready, at most $LARCH_SLURM_TIMEOUT seconds (30), and
# otherwise exits 1 with the tails of the daemons' logs.
#
# Ports: slurmctld's is $LARCH_SLURM_PORT, slurmd takes the next one and
# slurmdbd the one after. Without LARCH_SLURM_PORT it takes the first three
# free ports in a row from 6817 (Slurm's own), or from the ports the
# cluster had before, and says which. A cluster's ports are those of its
# slurm.conf (SlurmctldPort, SlurmdPort) and slurmdbd.conf (DbdPort): the
# Slurm commands and stop.sh find them there through SLURM_CONF.
#
# Environment: LARCH_SLURM_DIR, LARCH_SLURM_TIMEOUT, LARCH_SLURM_PORT,
# LARCH_SLURM_NODE_CPUS, LARCH_SLURM_NODE_MEM, LARCH_SLURM_NODE_TIMEOUT.
set -euo pipefail
# shellcheck source=deploy/slurm/common.sh
. "$(dirname "$0")/common.sh"

want_nodes=
while [ $# -gt 0 ]; do
	case $1 in
	--nodes) [ $# -ge 2 ] || slurm_fail "--nodes: needs a number"; want_nodes=$2; shift 2 ;;
	--nodes=*) want_nodes=${1#--nodes=}; shift ;;
	*) slurm_fail "unknown argument $1 (usage: start.sh [--nodes N])" ;;
	esac
done
if [ -n "$want_nodes" ]; then
	if ! [[ $want_nodes =~ ^[0-9]+$ ]] || [ "$want_nodes" -lt 1 ] || [ "$want_nodes" -gt 64 ]; then
		slurm_fail "--nodes: must be a number from 1 to 64 (got $want_nodes)"
	fi
fi
for v in LARCH_SLURM_NODE_CPUS LARCH_SLURM_NODE_MEM LARCH_SLURM_NODE_TIMEOUT; do
	[ -z "${!v:-}" ] || [[ ${!v} =~ ^[1-9][0-9]*$ ]] || slurm_fail "$v: must be a positive number (got ${!v})"
done

timeout_s=${LARCH_SLURM_TIMEOUT:-30}
[[ $timeout_s =~ ^[0-9]+$ ]] || slurm_fail "LARCH_SLURM_TIMEOUT: must be a number of seconds (got $timeout_s)"
if [ -n "${LARCH_SLURM_PORT:-}" ]; then
	if ! [[ $LARCH_SLURM_PORT =~ ^[0-9]+$ ]] || [ "$LARCH_SLURM_PORT" -eq 0 ] ||
		[ "$LARCH_SLURM_PORT" -ge 65534 ]; then
		slurm_fail "LARCH_SLURM_PORT: must be a port below 65534 (got $LARCH_SLURM_PORT)"
	fi
fi

for cmd in munged mungekey munge mariadbd mariadb slurmdbd sacctmgr slurmctld slurmd sinfo ip unshare sha1sum; do
	command -v "$cmd" >/dev/null ||
		slurm_fail "$cmd is missing: install Slurm, MariaDB and munge with deploy/install-deps.sh"
done

node=$(hostname -s)

print_env() {
	local ctld slurmd dbd
	ctld=$(sed -n 's/^SlurmctldPort=//p' "$slurm_conf")
	slurmd=$(sed -n 's/^SlurmdPort=//p' "$slurm_conf")
	dbd=$(sed -n 's/^DbdPort=//p' "$dbd_conf")
	local shape=
	[ "$node_count" -le 1 ] ||
		shape=" with $node_count nodes (node1-node$node_count at $net_subnet.2-$((node_count + 1)), bridge $net_bridge)"
	echo "slurm-dev: the cluster in $slurm_dir is up$shape (ports: slurmctld $ctld, slurmd $slurmd, slurmdbd $dbd); for the Slurm commands:"
	printf '  export SLURM_CONF=%q\n' "$slurm_conf"
}

# listening_ports: the TCP ports something listens on here (state 0A in
# /proc/net/tcp and tcp6), one a line
listening_ports() {
	local f addr st
	for f in /proc/net/tcp /proc/net/tcp6; do
		[ -r "$f" ] || continue
		while read -r _ addr _ st _; do
			[ "$st" = 0A ] && echo $((16#${addr##*:}))
		done < <(tail -n +2 "$f")
	done
}

# free_ports FROM: the first port p >= FROM with p, p+1 and p+2 all free
free_ports() {
	local p=$1 taken
	taken=" $(listening_ports | tr '\n' ' ') "
	while [ $((p + 2)) -lt 65536 ]; do
		if [[ $taken != *" $p "* && $taken != *" $((p + 1)) "* && $taken != *" $((p + 2)) "* ]]; then
			echo "$p"
			return 0
		fi
		p=$((p + 1))
	done
	return 1
}

# choose_ports: sets ctld_port, slurmd_port and dbd_port for a new config
choose_ports() {
	if [ -n "${LARCH_SLURM_PORT:-}" ]; then
		ctld_port=$LARCH_SLURM_PORT
	else
		local from
		from=$(sed -n 's/^SlurmctldPort=//p' "$slurm_conf" 2>/dev/null || true)
		[[ $from =~ ^[0-9]+$ ]] && [ "$from" -lt 65534 ] || from=6817
		ctld_port=$(free_ports "$from") || slurm_fail "no three free ports in a row from $from: set LARCH_SLURM_PORT"
		if [ "$ctld_port" != "$from" ]; then
			echo "slurm-dev: LARCH_SLURM_PORT is unset and ports $from-$((from + 2)) are not all free: using $ctld_port-$((ctld_port + 2))"
		fi
	fi
	slurmd_port=$((ctld_port + 1))
	dbd_port=$((ctld_port + 2))
}

up=()
down=()
for d in "${daemons[@]}"; do
	if daemon_pid "$d" >/dev/null; then up+=("$d"); else down+=("$d"); fi
done
if [ -n "$want_nodes" ] && [ "$want_nodes" != "$node_count" ] && [ ${#up[@]} -gt 0 ]; then
	slurm_fail "the cluster in $slurm_dir has $node_count node(s) and ${up[*]} run: stop it first (deploy/slurm/stop.sh) to start it with $want_nodes"
fi
if [ ${#down[@]} -eq 0 ]; then
	echo "slurm-dev: already running (${daemons[*]})"
	print_env
	exit 0
fi

# write_conf: a fresh slurm.conf and slurmdbd.conf, only while no daemon
# of the cluster runs. The database password stays what it was (MariaDB's
# datadir has it), or is made here the first time.
write_conf() {
	local pass
	pass=$(sed -n 's/^StoragePass=//p' "$dbd_conf" 2>/dev/null || true)
	[ -n "$pass" ] || pass=$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')
	(
		umask 077
		cat >"$dbd_conf.tmp" <<EOF
# generated by deploy/slurm/start.sh; rewritten at the next start of a stopped cluster
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$munge_socket
LogFile=$slurm_dir/log/slurmdbd.log
PidFile=$slurm_dir/run/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$pass
EOF
	)
	mv "$dbd_conf.tmp" "$dbd_conf"
	local hw
	hw=$(SLURM_CONF=/dev/null slurmd -C | head -n 1)
	[[ $hw == "NodeName=$node "* ]] || slurm_fail "slurmd -C printed no NodeName line for $node: $hw"
	# the node lines, the partitions' nodes, and what differs on a multi-node cluster
	local node_lines=$hw" NodeAddr=127.0.0.1 State=UNKNOWN" part_nodes=$node ctld_addr=127.0.0.1
	local slurmd_files="SlurmdSpoolDir=$slurm_dir/spool
SlurmdPidFile=$slurm_dir/run/slurmd.pid
SlurmdLogFile=$slurm_dir/log/slurmd.log"
	if [ "$node_count" -gt 1 ]; then
		local cpus mem i slurmd_timeout
		cpus=${LARCH_SLURM_NODE_CPUS:-$(($(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$hw") / node_count))}
		[ "$cpus" -ge 1 ] || cpus=1
		mem=${LARCH_SLURM_NODE_MEM:-$(($(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$hw") / node_count))}
		# a node whose slurmd stops answering is DOWN (its jobs NODE_FAIL,
		# requeued) this many seconds later: 300 by default. KillWait: a
		# job's processes get SIGKILL 10 s after SIGTERM, not 30 (a rank whose
		# peer died waits in MPI and ignores TERM: the requeue waits for it)
		slurmd_timeout=${LARCH_SLURM_NODE_TIMEOUT:-10}
		node_lines=
		for ((i = 1; i <= node_count; i++)); do
			node_lines+="NodeName=node$i NodeHostname=node$i NodeAddr=$(net_addr "$i") CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$mem State=UNKNOWN"$'\n'
		done
		node_lines=${node_lines%$'\n'}
		part_nodes="node[1-$node_count]"
		ctld_addr=$net_subnet.1
		# %n: each slurmd's own node name. TmpFS too: Slurm's PMIx plugin
		# makes TmpFS/spmix_appdir_<uid>_<job>.<step> on each node of a step,
		# and in a /tmp all nodes share the second node finds the first's.
		slurmd_files="SlurmdSpoolDir=$slurm_dir/spool/%n
SlurmdPidFile=$slurm_dir/run/slurmd.%n.pid
SlurmdLogFile=$slurm_dir/log/slurmd.%n.log
TmpFS=$slurm_dir/tmp/%n
SlurmdParameters=config_overrides
SlurmdTimeout=$slurmd_timeout
KillWait=10"
	fi
	cat >"$slurm_conf.tmp" <<EOF
# generated by deploy/slurm/start.sh; rewritten at the next start of a stopped cluster
ClusterName=larch-dev
SlurmctldHost=$node($ctld_addr)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
StateSaveLocation=$slurm_dir/state
SlurmctldPidFile=$slurm_dir/run/slurmctld.pid
SlurmctldLogFile=$slurm_dir/log/slurmctld.log
$slurmd_files
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
MpiDefault=none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
AccountingStoragePass=$munge_socket
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
GresTypes=gpu
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
PriorityWeightAge=1000
PriorityWeightPartition=1000
JobCompType=jobcomp/filetxt
JobCompLoc=$slurm_dir/jobcomp.txt
SchedulerParameters=batch_sched_delay=0
MinJobAge=300
ReturnToService=2
MailProg=/bin/true
$node_lines
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=$part_nodes Default=YES MaxTime=30 PriorityTier=1 State=UP
PartitionName=batch Nodes=$part_nodes MaxTime=INFINITE PriorityTier=1 State=UP
PartitionName=urgent Nodes=$part_nodes MaxTime=30 PriorityTier=10 State=UP
EOF
	mv "$slurm_conf.tmp" "$slurm_conf"
}

# port_free PORT NAME: fails naming the holder (as ss can) if something
# listens on PORT
port_free() {
	listening_ports | grep -qx "$1" || return 0
	local held
	held=$(ss -Hltnp "sport = :$1" 2>/dev/null || true)
	slurm_fail "port $1 for $2 is taken${held:+ ($held)}: set LARCH_SLURM_PORT to a free one (and the two after it), or leave it unset to have free ones picked"
}

mkdir -p "$slurm_dir"/{munge,state,spool,log,run}
chmod 0755 "$slurm_dir" "$slurm_dir/munge" "$slurm_dir/run"
if [ ${#up[@]} -eq 0 ] || [ ! -f "$slurm_conf" ] || [ ! -f "$dbd_conf" ]; then
	[ ${#up[@]} -eq 0 ] || slurm_fail "$slurm_conf or $dbd_conf is missing while ${up[*]} run: stop the cluster first (deploy/slurm/stop.sh)"
	# the shape asked for: a network made for nodes no more asked for goes
	if [ "${want_nodes:-1}" -gt 1 ]; then
		[ "$want_nodes" = "$node_count" ] || net_down
		net_write "$want_nodes"
	elif [ -f "$nodes_file" ]; then
		net_down
		rm -f "$nodes_file"
		daemons=(munged mariadbd slurmdbd slurmctld slurmd)
		node_count=1
	fi
	choose_ports
	write_conf
fi
# the ports of the config in use (a restarted daemon keeps the old config)
ctld_port=$(sed -n 's/^SlurmctldPort=//p' "$slurm_conf")
slurmd_port=$(sed -n 's/^SlurmdPort=//p' "$slurm_conf")
dbd_port=$(sed -n 's/^DbdPort=//p' "$dbd_conf")
cluster=$(sed -n 's/^ClusterName=//p' "$slurm_conf")
deadline=$(($(now_ms) + timeout_s * 1000))

# wait_for WHAT DAEMON COMMAND...: runs COMMAND until it succeeds; past the
# deadline, or once DAEMON has died (its pid file names no live process of
# ours: start it with no pid file left over), fails with the logs
wait_for() {
	local what=$1 daemon=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		if { [ -f "$(pid_file "$daemon")" ] && ! daemon_pid "$daemon" >/dev/null; } ||
			[ "$(now_ms)" -ge $deadline ]; then
			log_tails
			slurm_fail "$what after ${timeout_s}s; the logs are in $slurm_dir/log; deploy/slurm/stop.sh stops what runs"
		fi
		sleep 0.05
	done
}

key=$slurm_dir/munge/munge.key
if [ ! -s "$key" ]; then
	mungekey --create --keyfile="$key" || slurm_fail "mungekey could not create $key"
fi
chmod 0400 "$key"

# the ports first, before anything starts
daemon_pid slurmctld >/dev/null || port_free "$ctld_port" slurmctld
[ "$node_count" -gt 1 ] || daemon_pid slurmd >/dev/null || port_free "$slurmd_port" slurmd
daemon_pid slurmdbd >/dev/null || port_free "$dbd_port" slurmdbd

if ! daemon_pid munged >/dev/null; then
	rm -f "$munge_socket" "$munge_socket.lock"
	munged --force --key-file="$key" --socket="$munge_socket" --pid-file="$(pid_file munged)" \
		--log-file="$slurm_dir/log/munged.log" --seed-file="$slurm_dir/munge/munged.seed" ||
		{ log_tails; slurm_fail "munged did not start"; }
fi
munge --socket="$munge_socket" -n >/dev/null ||
	{ log_tails; slurm_fail "munged does not answer on $munge_socket"; }

# MariaDB: a datadir of its own, made at the first start (in a temporary
# directory, renamed when complete) with the system tables only (no help
# tables, sys schema or test database: what mariadb-install-db adds costs
# seconds), slurmdbd's database and user. The InnoDB sizes are those
# slurmdbd asks for (it logs an error for less).
mariadb_opts=(--no-defaults --user=root --skip-name-resolve --innodb-buffer-pool-size=1G
	--innodb-log-file-size=64M --innodb-lock-wait-timeout=900)
if ! daemon_pid mariadbd >/dev/null && [ ! -d "$slurm_dir/mariadb" ]; then
	pass=$(sed -n 's/^StoragePass=//p' "$dbd_conf")
	rm -rf "$slurm_dir/mariadb.new"
	mkdir -m 0700 "$slurm_dir/mariadb.new"
	{
		printf 'CREATE DATABASE mysql;\nUSE mysql;\n'
		cat /usr/share/mysql/mysql_system_tables.sql /usr/share/mysql/mysql_system_tables_data.sql
		printf "FLUSH PRIVILEGES;\nCREATE DATABASE slurm_acct_db;\n"
		printf "CREATE USER 'slurm'@'localhost' IDENTIFIED BY '%s';\n" "$pass"
		printf "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';\n"
	} | mariadbd "${mariadb_opts[@]}" --datadir="$slurm_dir/mariadb.new" --bootstrap \
		--silent-startup --log-warnings=0 >"$slurm_dir/log/mariadbd.log" 2>&1 ||
		{ log_tails; slurm_fail "mariadbd --bootstrap could not make the database in $slurm_dir/mariadb.new"; }
	mv "$slurm_dir/mariadb.new" "$slurm_dir/mariadb"
fi
if ! daemon_pid mariadbd >/dev/null; then
	rm -f "$db_socket" "$(pid_file mariadbd)"
	setsid mariadbd "${mariadb_opts[@]}" --datadir="$slurm_dir/mariadb" --skip-networking --socket="$db_socket" \
		--pid-file="$(pid_file mariadbd)" --log-error="$slurm_dir/log/mariadbd.log" \
		</dev/null >/dev/null 2>&1 &
	wait_for "mariadbd does not answer on $db_socket" mariadbd \
		mariadb --no-defaults --socket="$db_socket" -u root -e 'SELECT 1'
fi

if ! daemon_pid slurmdbd >/dev/null; then
	rm -f "$(pid_file slurmdbd)"
	MYSQL_UNIX_PORT=$db_socket slurmdbd || { log_tails; slurm_fail "slurmdbd did not start"; }
fi
# slurmdbd answers, and knows the cluster (root's account and association
# come with it)
wait_for "slurmdbd does not answer on port $dbd_port" slurmdbd \
	timeout 10 sacctmgr -n show cluster
if [ -z "$(timeout 10 sacctmgr -nP show cluster "$cluster" format=cluster 2>/dev/null)" ]; then
	timeout 10 sacctmgr -i add cluster "$cluster" >/dev/null ||
		{ log_tails; slurm_fail "sacctmgr could not add cluster $cluster"; }
fi

[ "$node_count" -le 1 ] || net_up
slurm_fresh_job_ids
if ! daemon_pid slurmctld >/dev/null; then
	slurmctld -i -f "$slurm_conf" || { log_tails; slurm_fail "slurmctld did not start"; }
fi
if [ "$node_count" -le 1 ]; then
	if ! daemon_pid slurmd >/dev/null; then
		slurmd -f "$slurm_conf" || { log_tails; slurm_fail "slurmd did not start"; }
	fi
else
	for ((i = 1; i <= node_count; i++)); do
		daemon_pid "slurmd.node$i" >/dev/null && continue
		rm -f "$(pid_file "slurmd.node$i")"
		mkdir -p "$slurm_dir/spool/node$i" "$slurm_dir/tmp/node$i"
		chmod 1777 "$slurm_dir/tmp/node$i"
		net_start_slurmd "$i" || { log_tails; slurm_fail "slurmd of node$i did not start"; }
	done
fi

# ready when every node takes jobs: idle, or busy with jobs kept from before
nodes=$node
[ "$node_count" -le 1 ] || nodes="node[1-$node_count]"
states=
while :; do
	states=$(timeout 10 sinfo -h -N -n "$nodes" -o %T 2>/dev/null | tr '\n' ' ' || true)
	ready=0
	for s in $states; do
		case $s in idle | mixed | allocated) ready=$((ready + 1)) ;; esac
	done
	[ "$ready" -lt "$node_count" ] || break
	if [ "$(now_ms)" -ge $deadline ]; then
		for d in "${daemons[@]}"; do
			daemon_pid "$d" >/dev/null || echo "slurm-dev: $d is not running" >&2
		done
		log_tails
		slurm_fail "$nodes not ready after ${timeout_s}s (sinfo says '${states:-nothing}'); the logs are in $slurm_dir/log; deploy/slurm/stop.sh stops what runs"
	fi
	sleep 0.1
done
printf 'export SLURM_CONF=%q\n' "$slurm_conf" >"$slurm_dir/env.sh"
print_env
