#!/usr/bin/env bash
# tests/bench/bench_slurm.sh - larchd's Slurm executor against plain Slurm, side
# by side in one run on a fresh single-node dev cluster of its own.
#
#   tests/bench/bench_slurm.sh [BUILD] [--build DIR] [--jobs N] [--list-jobs L]
#                              [--clients C] [--rounds R] [--pollers P]
#                              [--poll-seconds S] [--poll-ms MS] [--seconds W]
#                              [--connections K] [--list-connections K2]
#                              [--slurm-submit auto|libslurm|sbatch] [--keep]
#
# BUILD (or --build, or $LARCH_BUILD; default build) is a release tree with
# service/larchd. Must run as root (deploy/slurm/start.sh does); needs
# python3 with requests, and wrk and slurmrestd for part 3.
#
# Starts its own cluster (deploy/slurm/start.sh in a new /tmp/bsl.* directory,
# free ports), larchd with --executor slurm --slurm-poll-ms MS (1000) and
# --slurm-submit (auto: libslurm where larchd has it) on its own state dir, and holds the node (State=DRAIN): every job stays PENDING in Slurm,
# so nothing runs and slurmctld only queues. Everything is stopped (stop.sh)
# and removed at exit (--keep keeps the directory: logs, slurm.conf).
#
# The figures (run in the order 3a, 2, 3b, 1 so that part 3 sees exactly L
# jobs in slurmctld; printed as 1, 2, 3 in the table at the end):
#   1. hand-over rate: C (16) client threads POST N (500) jobs to larchd; the
#      time from the first POST until none is PENDING any more (each has a
#      slurm_job_id; the end is the last "PENDING -> QUEUED" line of larchd's
#      log), against a sequential `sbatch --parsable` loop of N jobs with the
#      options larchd passes (a two-line script, the same default partition),
#      in R (3) rounds (loop first in odd rounds, larchd first in even ones),
#      everything scancelled between them. Also where the time went: the
#      bursts of QUEUED lines in larchd's log, and CPU ms per job of each
#      side (/proc: larchd itself, the sbatch/squeue it reaped, slurmctld,
#      the Python clients; the loop's sbatch processes) against the wall ms
#      per job times the CPUs.
#   2. poll load: with L jobs followed, the squeue calls larchd makes over a
#      quiet window (S/2 s, no HTTP) and over S (20) s of P (100) threads each
#      GETting /v1/jobs once per second: calls per poll interval (~1 expected:
#      HTTP reads must not reach Slurm), and the GETs served.
#   3. reads, slurmrestd against larchd, with L (1600) jobs in the cluster, all
#      submitted through larchd: wrk -c K (32) GET slurmrestd's job/{id} and
#      larchd's /v1/jobs/{id}; wrk -c K2 (8) GET slurmrestd's jobs (all L)
#      and larchd's /v1/jobs?limit=50; R rounds of W (5) s. slurmrestd runs as
#      nobody with JWT (SLURM_JWT=daemon, rest_auth/jwt): the bench appends
#      AuthAltTypes=auth/jwt and a key of its own to its cluster's slurm.conf
#      and restarts slurmctld and slurmd (start.sh has no option for extra
#      config). Skipped, saying why, without slurmrestd, the auth/jwt plugin
#      (Debian: slurmrestd, slurm-wlm-jwt-plugin) or wrk.
# Never fails on timing: read the figures, repeat (the machine is shared).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

build=${LARCH_BUILD:-build} jobs=500 list_jobs=1600 clients=16 rounds=3 pollers=100
poll_seconds=20 poll_ms=1000 seconds=5 connections=32 list_connections=8 keep=0 submit_via=auto
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--list-jobs) list_jobs=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--pollers) pollers=$2; shift 2 ;;
	--poll-seconds) poll_seconds=$2; shift 2 ;;
	--poll-ms) poll_ms=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--connections) connections=$2; shift 2 ;;
	--list-connections) list_connections=$2; shift 2 ;;
	--slurm-submit) submit_via=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	-h|--help) sed -n '2,47p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "bench_slurm: unknown argument $1 (see --help)" >&2; exit 2 ;;
	*) build=$1; shift ;;
	esac
done
larchd=$root/$build/service/larchd
[[ $build == /* ]] && larchd=$build/service/larchd
py=(python3 "$root/tests/bench/bench_slurm.py")
# pyrun ARGS...: the helper, in the background so that a signal reaches the trap at once
pyrun() {
	local rc=0
	"${py[@]}" "$@" &
	py_pid=$!
	wait "$py_pid" || rc=$?
	py_pid=''
	return $rc
}
[ -x "$larchd" ] || { echo "bench_slurm: $larchd is missing: build larchd first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "bench_slurm: must run as root (the dev cluster does)" >&2; exit 1; }
python3 -c 'import requests' 2>/dev/null || { echo "bench_slurm: python3 lacks requests" >&2; exit 1; }
for cmd in sbatch squeue scancel scontrol curl; do
	command -v $cmd >/dev/null || { echo "bench_slurm: $cmd is missing (deploy/install-deps.sh)" >&2; exit 1; }
done

# the cluster's directory: world-traversable (slurmrestd runs as nobody), short
# (munge's socket path)
dir=$(mktemp -d /tmp/bsl.XXXXXX)
chmod 0755 "$dir"
export LARCH_SLURM_DIR=$dir/slurm
export SLURM_CONF=$LARCH_SLURM_DIR/slurm.conf
larchd_pid='' rest_pid='' py_pid='' node=$(hostname -s)
cleanup() {
	set +e
	[ -z "$py_pid" ] || { kill -TERM "$py_pid" 2>/dev/null; wait "$py_pid" 2>/dev/null; }
	[ -z "$rest_pid" ] || kill -TERM "$rest_pid" 2>/dev/null
	[ -z "$larchd_pid" ] || kill -TERM "$larchd_pid" 2>/dev/null
	[ -z "$rest_pid" ] || wait "$rest_pid" 2>/dev/null
	[ -z "$larchd_pid" ] || wait "$larchd_pid" 2>/dev/null
	if [ -f "$SLURM_CONF" ]; then
		timeout 10 scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1
		"$root/deploy/slurm/stop.sh" >/dev/null || echo "bench_slurm: stop.sh failed (cluster in $LARCH_SLURM_DIR)" >&2
	fi
	if [ "$keep" = 1 ]; then echo "bench_slurm: kept $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# kv FILE KEY: a "key value" line's value from the helper's output
kv() { awk -v k="$2" '$1 == k { $1 = ""; sub(/^ /, ""); print; f = 1 } END { if (!f) print "" }' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { if (!NR) print 0; else print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
now() { date +%s.%N; }
since() { awk -v t0="$1" -v t1="$(now)" 'BEGIN { printf "%.3f", t1 - t0 }'; }

# ---- the cluster -------------------------------------------------------------------
port=$("${py[@]}" freeport --cluster)
LARCH_SLURM_PORT=$port "$root/deploy/slurm/start.sh" >"$dir/start.out" 2>&1 ||
	{ cat "$dir/start.out" >&2; echo "bench_slurm: the cluster did not start" >&2; exit 1; }

# JWT for slurmrestd: only where the plugin is there (a slurmctld that cannot
# load it would not start)
rest_skip=''
plugin_dir=$(scontrol show config | awk -F' = ' '$1 ~ /^PluginDir/ { print $2 }')
if ! command -v slurmrestd >/dev/null; then
	rest_skip="slurmrestd is not installed (Debian: apt-get install slurmrestd)"
elif ! ls "${plugin_dir:-/usr/lib/x86_64-linux-gnu/slurm-wlm}"/auth_jwt.so >/dev/null 2>&1; then
	rest_skip="Slurm's auth/jwt plugin is missing in ${plugin_dir:-?} (Debian: apt-get install slurm-wlm-jwt-plugin); slurmrestd over TCP needs JWT (rest_auth/local takes unix sockets only)"
elif ! command -v wrk >/dev/null; then
	rest_skip="wrk is missing (apt-get install wrk)"
fi
# stop_daemon NAME: SIGTERM to this cluster's daemon, wait until it is gone
stop_daemon() {
	local pid
	pid=$(cat "$LARCH_SLURM_DIR/run/$1.pid" 2>/dev/null) || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 300); do
		[ -e "/proc/$pid" ] || return 0
		[ "$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)" != Z ] || return 0
		sleep 0.05
	done
	echo "bench_slurm: $1 ($pid) did not stop" >&2
	return 1
}
if [ -z "$rest_skip" ]; then
	cp "$SLURM_CONF" "$dir/slurm.conf.orig"
	dd if=/dev/urandom of="$LARCH_SLURM_DIR/jwt.key" bs=32 count=1 status=none
	chmod 0600 "$LARCH_SLURM_DIR/jwt.key"
	printf '# added by tests/bench/bench_slurm.sh: JWT for slurmrestd\nAuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key=%s\n' \
		"$LARCH_SLURM_DIR/jwt.key" >>"$SLURM_CONF"
	# munged stays up, so start.sh starts the two again with this config
	stop_daemon slurmd && stop_daemon slurmctld
	if ! "$root/deploy/slurm/start.sh" >"$dir/start2.out" 2>&1; then
		rest_skip="slurmctld did not start with AuthAltTypes=auth/jwt: $(grep -m1 -i 'error\|fatal' "$LARCH_SLURM_DIR/log/slurmctld.log" | tail -c 200)"
		stop_daemon slurmd; stop_daemon slurmctld
		cp "$dir/slurm.conf.orig" "$SLURM_CONF"
		"$root/deploy/slurm/start.sh" >"$dir/start3.out" 2>&1 ||
			{ cat "$dir/start3.out" >&2; echo "bench_slurm: the cluster did not start again" >&2; exit 1; }
	fi
fi

max_job_count=$(scontrol show config | awk -F' = ' '$1 ~ /^MaxJobCount/ { print $2 + 0 }')
min_job_age=$(scontrol show config | awk -F' = ' '$1 ~ /^MinJobAge/ { print $2 }')
need=$((list_jobs + 2 * rounds * jobs))
if [ "${max_job_count:-0}" -lt "$need" ]; then
	echo "bench_slurm: MaxJobCount is $max_job_count, the run keeps up to $need jobs in slurmctld (MinJobAge $min_job_age): use fewer --jobs/--list-jobs" >&2
	exit 1
fi
scontrol update NodeName="$node" State=DRAIN Reason=bench_slurm
[[ $(sinfo -h -n "$node" -o %T) == drain* ]] || { echo "bench_slurm: node $node did not drain" >&2; exit 1; }

# cancel_all: scancel every job of this cluster, wait until none is pending
cancel_all() {
	scancel -u "$(id -un)" || true
	for _ in $(seq 300); do
		[ -n "$(squeue -h -t PD,R,CG,CF -o %A)" ] || return 0
		sleep 0.1
	done
	echo "bench_slurm: jobs left in the queue after scancel" >&2
}

# ---- larchd ------------------------------------------------------------------------
state=$dir/larchd
"$larchd" --executor slurm --listen 127.0.0.1:0 --state-dir "$state" --slurm-poll-ms "$poll_ms" \
	--slurm-submit "$submit_via" --log-file "$dir/larchd.log" >"$dir/larchd.out" 2>"$dir/larchd.err" &
larchd_pid=$!
url=''
for _ in $(seq 100); do
	url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$dir/larchd.out")
	[ -z "$url" ] || break
	kill -0 $larchd_pid 2>/dev/null || break
	sleep 0.05
done
[ -n "$url" ] || { echo "bench_slurm: larchd did not start: $(cat "$dir/larchd.err")" >&2; exit 1; }
token=$(cat "$state/admin.token")
auth="Authorization: Bearer $token"
metric() { "${py[@]}" counter --url "$url" --token "$token" --metric "$1"; }
# larchd_settle: wait until larchd holds no QUEUED job (after a scancel)
larchd_settle() {
	for _ in $(seq 300); do
		[ "$(metric 'larch_jobs{state="QUEUED"}')" = 0 ] && [ "$(metric 'larch_jobs{state="PENDING"}')" = 0 ] && return 0
		sleep 0.1
	done
	echo "bench_slurm: larchd still has QUEUED jobs after the scancel" >&2
}

via=$(grep -ho 'submits with [a-z]*' "$dir/larchd.log" "$dir/larchd.out" "$dir/larchd.err" | head -n1)
echo "bench_slurm: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start; cluster in $LARCH_SLURM_DIR (slurmctld port $port, node $node drained);" \
     "MaxJobCount $max_job_count, MinJobAge $min_job_age, at most $need jobs kept; larchd $url (${via:-?})," \
     "squeue every $poll_ms ms; $rounds rounds"

# ---- 3a. L jobs through larchd ---------------------------------------------------------
echo
echo "3a. $list_jobs jobs POSTed to larchd by $clients threads (they stay pending in Slurm)"
pyrun submit --url "$url" --token "$token" --jobs "$list_jobs" --clients "$clients" \
	--name list --log "$dir/larchd.log" >"$dir/list.kv" || { cat "$dir/list.kv"; exit 1; }
printf '    POSTs %s in %s s (%s/s); all handed over in %s s: %s jobs/s; %s with a slurm_job_id (%s)\n' \
	"$(kv "$dir/list.kv" posted)" "$(kv "$dir/list.kv" post_s)" "$(kv "$dir/list.kv" post_rate)" \
	"$(kv "$dir/list.kv" handover_s)" "$(kv "$dir/list.kv" rate)" \
	"$(kv "$dir/list.kv" with_slurm_id)" "$(kv "$dir/list.kv" states)"
in_slurm=$(squeue -h -t all -o %A | wc -l)
echo "    jobs in slurmctld: $in_slurm"

# ---- 2. poll load ------------------------------------------------------------------------
echo
quiet=$(((poll_seconds + 1) / 2))
echo "2. squeue calls while larchd follows $list_jobs jobs (squeue every $poll_ms ms)"
pyrun poll --url "$url" --token "$token" --pollers 0 --seconds "$quiet" --poll-ms "$poll_ms" >"$dir/quiet.kv"
printf '    quiet, no HTTP:           %5s s, %4s squeue calls, %6s intervals: %s calls/interval\n' \
	"$(kv "$dir/quiet.kv" window_s)" "$(kv "$dir/quiet.kv" squeue_calls)" \
	"$(kv "$dir/quiet.kv" intervals)" "$(kv "$dir/quiet.kv" calls_per_interval)"
pyrun poll --url "$url" --token "$token" --pollers "$pollers" --seconds "$poll_seconds" \
	--poll-ms "$poll_ms" >"$dir/poll.kv"
printf '    %3s clients GET /v1/jobs: %5s s, %4s squeue calls, %6s intervals: %s calls/interval\n' \
	"$pollers" "$(kv "$dir/poll.kv" window_s)" "$(kv "$dir/poll.kv" squeue_calls)" \
	"$(kv "$dir/poll.kv" intervals)" "$(kv "$dir/poll.kv" calls_per_interval)"
echo "    all Slurm calls of larchd in the windows: quiet $(kv "$dir/quiet.kv" slurm_calls), loaded $(kv "$dir/poll.kv" slurm_calls)"
printf '    GETs served: %s (%s/s, %s errors), p50 %s ms, p99 %s ms, %s bytes each\n' \
	"$(kv "$dir/poll.kv" gets)" "$(kv "$dir/poll.kv" get_rate)" "$(kv "$dir/poll.kv" get_errors)" \
	"$(kv "$dir/poll.kv" get_p50_ms)" "$(kv "$dir/poll.kv" get_p99_ms)" "$(kv "$dir/poll.kv" get_bytes)"

# ---- 3b. reads: slurmrestd against larchd ------------------------------------------------------
echo
declare -A runs
# rps URL CONNECTIONS SECONDS HEADER...: req/s of one wrk run (warnings on errors)
rps() {
	local u=$1 c=$2 s=$3 out hdr=()
	shift 3
	for h in "$@"; do hdr+=(-H "$h"); done
	out=$(wrk -t1 -c"$c" -d"$s"s --timeout 30s "${hdr[@]}" "$u")
	if grep -q 'Non-2xx\|Socket errors' <<<"$out"; then
		echo "    bench_slurm: $u: $(grep 'Non-2xx\|Socket errors' <<<"$out" | tr -s ' ' | tr '\n' ' ')" >&2
	fi
	awk '/^Requests\/sec:/ { print $2 }' <<<"$out"
}
if [ -z "$rest_skip" ]; then
	rest_port=$("${py[@]}" freeport)
	jwt=$(scontrol token username="$(id -un)" lifespan=3600 | sed -n 's/^SLURM_JWT=//p')
	SLURM_JWT=daemon slurmrestd -u nobody -s openapi/v0.0.38 -a rest_auth/jwt "127.0.0.1:$rest_port" \
		>"$dir/slurmrestd.log" 2>&1 &
	rest_pid=$!
	rest=http://127.0.0.1:$rest_port/slurm/v0.0.38
	rh=("X-SLURM-USER-NAME: $(id -un)" "X-SLURM-USER-TOKEN: $jwt")
	for _ in $(seq 100); do
		curl -sf -o /dev/null -H "${rh[0]}" -H "${rh[1]}" "$rest/ping" && break
		kill -0 "$rest_pid" 2>/dev/null || break
		sleep 0.1
	done
	if ! curl -sf -o /dev/null -H "${rh[0]}" -H "${rh[1]}" "$rest/ping"; then
		rest_skip="slurmrestd did not answer: $(tail -n 3 "$dir/slurmrestd.log" | tr '\n' ' ')"
		kill -TERM "$rest_pid" 2>/dev/null || true
		wait "$rest_pid" 2>/dev/null || true
		rest_pid=''
	fi
fi
if [ -n "$rest_skip" ]; then
	echo "3b. skipped: $rest_skip"
else
	one=$(curl -sf -H "$auth" "$url/v1/jobs?name=list&limit=1" | sed -n 's/^{"jobs":\[{"id":"\([^"]*\)".*"slurm_job_id":"\([0-9]*\)".*/\1 \2/p')
	lid=${one% *} sid=${one#* }
	if [ -z "$lid" ] || [ -z "$sid" ]; then echo "bench_slurm: no job with a Slurm id to read" >&2; exit 1; fi
	bytes() { curl -sf "$@" | wc -c; }
	n_rest=$(curl -sf -H "${rh[0]}" -H "${rh[1]}" "$rest/jobs" | grep -c '"job_id":' || true)
	echo "3b. reads with $in_slurm jobs in slurmctld: wrk -t1, $rounds rounds of ${seconds}s;" \
	     "slurmrestd (nobody, JWT, 22.05 openapi/v0.0.38) vs larchd (admin token)"
	echo "    one job:  slurmrestd job/$sid ($(bytes -H "${rh[0]}" -H "${rh[1]}" "$rest/job/$sid") bytes)," \
	     "larchd /v1/jobs/$lid ($(bytes -H "$auth" "$url/v1/jobs/$lid") bytes); -c$connections"
	echo "    list:     slurmrestd jobs ($n_rest jobs, $(bytes -H "${rh[0]}" -H "${rh[1]}" "$rest/jobs") bytes)," \
	     "larchd /v1/jobs?limit=50 ($(bytes -H "$auth" "$url/v1/jobs?limit=50") bytes); -c$list_connections"
	rps "$rest/job/$sid" "$connections" 1 "${rh[@]}" >/dev/null   # warm-up
	rps "$url/v1/jobs/$lid" "$connections" 1 "$auth" >/dev/null
	printf '    %-6s %14s %12s %8s %14s %12s %8s\n' round "rest job/{id}" "larchd" ratio "rest jobs" "larchd" ratio
	for r in $(seq "$rounds"); do
		a=$(rps "$rest/job/$sid" "$connections" "$seconds" "${rh[@]}")
		b=$(rps "$url/v1/jobs/$lid" "$connections" "$seconds" "$auth")
		c=$(rps "$rest/jobs" "$list_connections" "$seconds" "${rh[@]}")
		d=$(rps "$url/v1/jobs?limit=50" "$list_connections" "$seconds" "$auth")
		runs[rest_one]+="$a " runs[larchd_one]+="$b " runs[rest_list]+="$c " runs[larchd_list]+="$d "
		runs[one_ratio]+="$(ratio "$b" "$a") " runs[list_ratio]+="$(ratio "$d" "$c") "
		printf '    %-6s %14.1f %12.1f %8s %14.1f %12.1f %8s\n' "$r" "$a" "$b" "$(ratio "$b" "$a")" \
			"$c" "$d" "$(ratio "$d" "$c")"
	done
	kill -TERM "$rest_pid" 2>/dev/null || true
	wait "$rest_pid" 2>/dev/null || true
	rest_pid=''
fi

# ---- 1. hand-over rate ------------------------------------------------------------------------
echo
echo "1. hand-over of $jobs jobs: sequential sbatch --parsable loop vs $clients threads POSTing to larchd"
cancel_all
larchd_settle
sb=$dir/sbatch
mkdir -p "$sb"
printf '#!/bin/bash\ntrue\n' >"$sb/job.sh"
chmod +x "$sb/job.sh"
# cpu PID: "self children" CPU seconds of a process (children: the ones it reaped)
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{ sub(/^.*\) /, ""); printf "%.2f %.2f", ($12 + $13) / t, ($14 + $15) / t }' "/proc/$1/stat"; }
ctld_cpu() { cpu "$(cat "$LARCH_SLURM_DIR/run/slurmctld.pid")" | cut -d' ' -f1; }
# per_job BEFORE AFTER: CPU ms per job
per_job() { awk -v a="$1" -v b="$2" -v n="$jobs" 'BEGIN { printf "%.1f", (b - a) * 1000 / n }'; }
# the sbatch loop: sets loop_s, loop_rate, loop_cpu
run_loop() {
	local r=$1 t0 c0 s0
	c0=$(ctld_cpu) s0=$(cpu $$ | cut -d' ' -f2)
	t0=$(now)
	for i in $(seq "$jobs"); do
		sbatch --parsable --job-name="bench-sbatch-$r-$i" --comment="bench $i" --chdir="$sb" \
			--output="$sb/stdout.log" --error="$sb/stderr.log" --open-mode=append --requeue \
			--nodes=1 --ntasks=1 --cpus-per-task=1 "$sb/job.sh" >/dev/null
	done
	loop_s=$(since "$t0")
	loop_rate=$(awk -v n="$jobs" -v t="$loop_s" 'BEGIN { printf "%.1f", n / t }')
	loop_cpu="sbatch $(per_job "$s0" "$(cpu $$ | cut -d' ' -f2)"), slurmctld $(per_job "$c0" "$(ctld_cpu)")"
	cancel_all
}
# larchd: sets k (the helper's output) and larchd_cpu
run_larchd() {
	local r=$1 c0 l0 l1
	k=$dir/hand-$r.kv
	c0=$(ctld_cpu) l0=$(cpu "$larchd_pid")
	pyrun submit --url "$url" --token "$token" --jobs "$jobs" --clients "$clients" \
		--name "hand-$r" --log "$dir/larchd.log" >"$k" || { cat "$k"; exit 1; }
	l1=$(cpu "$larchd_pid")
	larchd_cpu="larchd $(per_job "${l0% *}" "${l1% *}"), its sbatch+squeue $(per_job "${l0#* }" "${l1#* }"),"
	larchd_cpu+=" slurmctld $(per_job "$c0" "$(ctld_cpu)"), clients $(per_job 0 "$(kv "$k" client_cpu_s)")"
	[ "$(kv "$k" with_slurm_id)" = "$jobs" ] ||
		echo "    round $r: only $(kv "$k" with_slurm_id) of $jobs jobs have a slurm_job_id ($(kv "$k" states))" >&2
	cancel_all
	larchd_settle
}
printf '    %-6s %10s %9s %10s %9s %7s  %s\n' round "loop s" "loop/s" "larchd s" "larchd/s" ratio \
	"larchd: POSTs/s, first QUEUED, tail after last POST, QUEUED bursts (sizes)"
cpu_lines=()
for r in $(seq "$rounds"); do
	if [ $((r % 2)) = 1 ]; then run_loop "$r"; run_larchd "$r"; else run_larchd "$r"; run_loop "$r"; fi
	rate=$(kv "$k" rate)
	runs[loop]+="$loop_rate " runs[larchd]+="$rate " runs[hand_ratio]+="$(ratio "$rate" "$loop_rate") "
	printf '    %-6s %10s %9s %10s %9s %7s  %s/s, %ss, %ss, %s (%s)\n' "$r" "$loop_s" "$loop_rate" \
		"$(kv "$k" handover_s)" "$rate" "$(ratio "$rate" "$loop_rate")" "$(kv "$k" post_rate)" \
		"$(kv "$k" first_queued_s)" "$(kv "$k" tail_after_last_post_s)" "$(kv "$k" bursts)" \
		"$(kv "$k" burst_sizes)"
	cpu_lines+=("    round $r, CPU ms per job: loop: $loop_cpu ($(awk -v t="$loop_s" -v n="$jobs" 'BEGIN { printf "%.1f", t * 1000 / n }') ms wall);" \
	            "    $(printf '%9s' '') larchd: $larchd_cpu ($(awk -v t="$(kv "$k" handover_s)" -v n="$jobs" 'BEGIN { printf "%.1f", t * 1000 / n }') ms wall, x $(nproc) CPUs)")
done
printf '%s\n' "${cpu_lines[@]}"
echo "    larchd's submissions in round 1: sbatch $(kv "$dir/hand-1.kv" sbatch_calls), libslurm $(kv "$dir/hand-1.kv" slurm_submit_batch_job_calls); squeue calls: $(kv "$dir/hand-1.kv" squeue_calls);" \
     "round 1's QUEUED bursts at (s after the first POST): $(kv "$dir/hand-1.kv" burst_spans)"

# ---- the table ------------------------------------------------------------------------------
m() { echo "${runs[$1]:-}" | median; }
met() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { ok = (op == ">=") ? v >= t : (v >= t * 0.8 && v <= t * 1.2); print ok ? "yes" : "no" }'; }
echo
printf '%-44s %12s %14s %8s  %-10s %s\n' test larchd baseline ratio target met
printf '%-44s %12s %14s %8s  %-10s %s\n' "1. hand-over, $jobs jobs (jobs/s)" "$(m larchd)" "$(m loop)" \
	"$(m hand_ratio)" ">= 1" "$(met "$(m hand_ratio)" ">=" 1)"
printf '%-44s %12s %14s %8s  %-10s %s\n' "2. squeue calls per ${poll_ms} ms, $pollers GET/s" \
	"$(kv "$dir/poll.kv" calls_per_interval)" "$(kv "$dir/quiet.kv" calls_per_interval)" \
	"$(ratio "$(kv "$dir/poll.kv" calls_per_interval)" "$(kv "$dir/quiet.kv" calls_per_interval)")" "~1" \
	"$(met "$(kv "$dir/poll.kv" calls_per_interval)" "~" 1)"
if [ -z "$rest_skip" ]; then
	printf '%-44s %12.1f %14.1f %8s  %-10s %s\n' "3. GET one job (req/s)" "$(m larchd_one)" "$(m rest_one)" \
		"$(m one_ratio)" ">= 10" "$(met "$(m one_ratio)" ">=" 10)"
	printf '%-44s %12.1f %14.1f %8s  %-10s %s\n' "3. GET list, $in_slurm jobs (req/s)" "$(m larchd_list)" \
		"$(m rest_list)" "$(m list_ratio)" ">= 100" "$(met "$(m list_ratio)" ">=" 100)"
else
	printf '%-44s %s\n' "3. GET one job, GET list" "skipped: $rest_skip"
fi
echo "baselines: 1. sequential sbatch loop (same options), 2. the same count over a quiet window" \
     "(no HTTP), 3. slurmrestd; medians of per-round ratios"
