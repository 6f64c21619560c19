#!/usr/bin/env bash
# tests/bench/bench_api.sh - issue #4's API targets, larchd against the
# loopback ceiling, side by side in one run.
#
#   tests/bench/bench_api.sh [BUILD] [--build DIR] [--rounds N] [--seconds S]
#                            [--connections C] [--post-connections P] [--jobs J]
#                            [--threads T] [--wrk-threads W] [--trainer park|FILE]
#                            [--log-level LEVEL]
#
# BUILD (or --build, or $LARCH_BUILD; default build) is a release tree built
# with -DWITH_SERVICE=ON: it has service/larchd and tests/bench/hello_mhd.
# Starts hello_mhd (the ceiling: libmicrohttpd + jansson with larchd's
# threading and nothing else) and larchd as deployed (request log at LEVEL,
# info by default, to a file), both with T HTTP threads, and times with wrk
# (Debian's) on loopback. It first fills the database through the API (the
# POSTs of 3.) to J (10,000) jobs, then runs N rounds of S seconds each,
# hello_mhd then larchd:
#   1. GET /v1/jobs/{id} with the admin token, C (64) connections;
#   2. GET /v1/jobs?limit=50 with those J jobs in the database;
#   3. POST /v1/jobs, P (32) connections, a small valid spec with a unique
#      name (tests/bench/bench_api_post.lua): durable submits/s (201s over
#      the window from the first request to the last 201; no submit is in
#      flight when wrk stops, and the database's new rows must equal the
#      201s), the mean group-commit size from GET /metrics; hello_mhd gets
#      the same POSTs.
# Prints per-round figures and a table of medians: larchd req/s, hello_mhd's,
# the median of the per-round ratios, the target and whether it was met.
# Never fails on timing: read the figures, repeat (the machine is shared).
#
# Jobs must not train: --trainer park (default) runs a stand-in that sleeps,
# with max_local_jobs 1, so the executor holds 1 running + 64 queued jobs and
# the rest stay PENDING (the runner has nothing to do); --trainer /bin/true
# lets every job run and end at once (the runner then competes for the CPUs).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${LARCH_BUILD:-build} rounds=2 seconds=5 connections=64 post_connections=32
jobs=10000 threads=$(nproc) wrk_threads=1 trainer=park log_level=info
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--connections) connections=$2; shift 2 ;;
	--post-connections) post_connections=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--wrk-threads) wrk_threads=$2; shift 2 ;;
	--trainer) trainer=$2; shift 2 ;;
	--log-level) log_level=$2; shift 2 ;;
	-h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "bench_api: unknown argument $1 (see --help)" >&2; exit 2 ;;
	*) build=$1; shift ;;
	esac
done
hello=$build/tests/bench/hello_mhd
larchd=$build/service/larchd
lua=tests/bench/bench_api_post.lua
for exe in "$hello" "$larchd"; do
	[ -x "$exe" ] || { echo "bench_api: $exe is missing: build with -DWITH_SERVICE=ON" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "bench_api: wrk is missing (apt-get install wrk)" >&2; exit 1; }
command -v curl >/dev/null || { echo "bench_api: curl is missing" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	# the stand-in trainers (their own process groups: larchd leaves jobs running)
	if [ -f "$tmp/trainer.pids" ]; then
		while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done <"$tmp/trainer.pids"
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

max_local=$threads
if [ "$trainer" = park ]; then
	trainer=$tmp/park-trainer.sh
	printf '#!/bin/sh\n# bench_api: a trainer that does nothing until killed\necho $$ >>%s\nexec sleep 600\n' \
		"$tmp/trainer.pids" >"$trainer"
	chmod +x "$trainer"
	max_local=1
fi

# start NAME CMD... : runs CMD, waits for its "listening on URL" line, sets url_NAME
url_hello='' url_larchd=''
start() {
	local name=$1; shift
	"$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	pids+=($!)
	for _ in $(seq 100); do
		if grep -q 'listening on http://' "$tmp/$name.out"; then
			printf -v "url_$name" '%s' "$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$tmp/$name.out")"
			return
		fi
		sleep 0.05
	done
	echo "bench_api: $name did not start: $(cat "$tmp/$name.err")" >&2
	exit 1
}
start hello "$hello" --threads "$threads"
start larchd "$larchd" --listen 127.0.0.1:0 --state-dir "$tmp/state" --threads "$threads" \
	--log-file "$tmp/larchd.log" --log-level "$log_level" --trainer-path "$trainer" \
	--max-local-jobs "$max_local"
token=$(cat "$tmp/state/admin.token")
auth="Authorization: Bearer $token"
db=$tmp/state/larch.db

# jobs_rows: the rows of the jobs table (the sqlite3 CLI, else GET /metrics)
jobs_rows() {
	if command -v sqlite3 >/dev/null; then
		sqlite3 "$db" 'PRAGMA busy_timeout = 5000; SELECT count(*) FROM jobs;' | tail -1
	else
		curl -sf -H "$auth" "$url_larchd/metrics" | awk '/^larch_jobs\{/ { n += $2 } END { print n + 0 }'
	fi
}
# metric NAME: a counter from GET /metrics (0 when absent)
metric() {
	curl -sf -H "$auth" "$url_larchd/metrics" | awk -v m="$1" '$1 == m { v = $2 } END { print v + 0 }'
}
# rps_get URL SECONDS [HEADER]: req/s of one wrk run; "0" and a warning on errors
rps_get() {
	local out
	out=$(wrk -t"$wrk_threads" -c"$connections" -d"$2"s ${3:+-H "$3"} "$1")
	if grep -q 'Non-2xx\|Socket errors' <<<"$out"; then
		echo "bench_api: $1: $(grep 'Non-2xx\|Socket errors' <<<"$out" | tr -s ' ')" >&2
	fi
	awk '/^Requests\/sec:/ { print $2 }' <<<"$out"
}
# post URL OK_STATUS [SECONDS [MAX]]: a POST run (MAX: requests per wrk thread);
# sets post_ok, post_window, post_rps, post_lat, post_other
post() {
	local out secs=${3:-$seconds}
	out=$(wrk -t"$wrk_threads" -c"$post_connections" -d$((secs + 2))s -s "$lua" "$1" -- \
		"$secs" "$token" "$2" "${4:-0}")
	post_ok=$(awk '$1 == "ok" { print $2 }' <<<"$out")
	post_window=$(awk '$1 == "window" { print $2 }' <<<"$out")
	post_other=$(awk -v ok="$2" '$1 == "status" && $2 != ok { printf "%s%s x%s", sep, $2, $3; sep = ", " }' <<<"$out")
	post_lat=$(awk '$1 == "Latency" { print $2 }' <<<"$out")
	post_rps=$(awk -v n="$post_ok" -v t="$post_window" 'BEGIN { print (t > 0 ? n / t : 0) }')
	if grep -q 'Socket errors' <<<"$out"; then
		post_other+=" $(grep 'Socket errors' <<<"$out" | tr -s ' ')"
	fi
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "bench_api: $(nproc) CPUs, $threads HTTP threads, wrk -t$wrk_threads, $rounds rounds of" \
     "${seconds}s; larchd log $log_level, trainer $(basename "$trainer"), max_local_jobs $max_local"

declare -A runs

# ---- fill to $jobs jobs through the API ----------------------------------------------
have=$(jobs_rows)
if [ "$have" -lt "$jobs" ]; then
	t0=$(date +%s.%N)
	while [ "$have" -lt "$jobs" ]; do     # the POSTs of phase 3, stopping at $jobs
		post "$url_larchd" 201 3 $(((jobs - have + wrk_threads - 1) / wrk_threads))
		have=$(jobs_rows)
	done
	echo "filled to $have jobs in $(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }') s"
fi
jobs_now=$(jobs_rows)
one=$(curl -sf -H "$auth" "$url_larchd/v1/jobs?limit=1" | sed -n 's/^{"jobs":\[{"id":"\([^"]*\)".*/\1/p')
one=${one:-j-000001}
for path in "/v1/jobs/$one" "/v1/jobs?limit=50"; do
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "$auth" "$url_larchd$path")
	[ "$code" = 200 ] || { echo "bench_api: GET $path answered $code" >&2; exit 1; }
done
list_bytes=$(curl -sf -H "$auth" "$url_larchd/v1/jobs?limit=50" | wc -c)
one_bytes=$(curl -sf -H "$auth" "$url_larchd/v1/jobs/$one" | wc -c)

# ---- 1. and 2. the GETs --------------------------------------------------------------
rps_get "$url_hello/v1/jobs/$one" 1 "$auth" >/dev/null       # warm-up
rps_get "$url_larchd/v1/jobs/$one" 1 "$auth" >/dev/null
rps_get "$url_larchd/v1/jobs?limit=50" 1 "$auth" >/dev/null
echo
echo "GET, wrk -c$connections, $jobs_now jobs in the database: /v1/jobs/$one ($one_bytes bytes)," \
     "/v1/jobs?limit=50 ($list_bytes bytes)"
printf '%-6s %12s %12s %8s %12s %8s\n' round hello_mhd "GET job" ratio "GET list" ratio
for r in $(seq "$rounds"); do
	h=$(rps_get "$url_hello/v1/jobs/$one" "$seconds" "$auth")
	g=$(rps_get "$url_larchd/v1/jobs/$one" "$seconds" "$auth")
	l=$(rps_get "$url_larchd/v1/jobs?limit=50" "$seconds" "$auth")
	runs[hello]+="$h " runs[get]+="$g " runs[list]+="$l "
	rg=$(awk -v a="$g" -v b="$h" 'BEGIN { print (b > 0 ? a / b : 0) }')
	rl=$(awk -v a="$l" -v b="$h" 'BEGIN { print (b > 0 ? a / b : 0) }')
	runs[get_ratio]+="$rg " runs[list_ratio]+="$rl "
	printf '%-6s %12.0f %12.0f %8.3f %12.0f %8.3f\n' "$r" "$h" "$g" "$rg" "$l" "$rl"
done

# ---- 3. POST /v1/jobs --------------------------------------------------------------
echo
echo "POST /v1/jobs, wrk -c$post_connections: 201s over the window (first request to last 201)"
printf '%-6s %12s %12s %8s %10s %10s %9s %8s  %s\n' round hello_mhd larchd ratio 201s \
	"new rows" "per group" latency other
for r in $(seq "$rounds"); do
	post "$url_hello" 200
	h=$post_rps
	rows0=$(jobs_rows) g0=$(metric larch_db_submit_groups_total) s0=$(metric larch_db_submits_total)
	post "$url_larchd" 201
	rows1=$(jobs_rows) g1=$(metric larch_db_submit_groups_total) s1=$(metric larch_db_submits_total)
	new=$((rows1 - rows0))
	group=$(awk -v s=$((s1 - s0)) -v g=$((g1 - g0)) 'BEGIN { printf "%.1f", (g > 0 ? s / g : 0) }')
	runs[post_hello]+="$h " runs[post]+="$post_rps " runs[post_group]+="$group "
	runs[post_ratio]+="$(awk -v a="$post_rps" -v b="$h" 'BEGIN { print (b > 0 ? a / b : 0) }') "
	[ "$new" -eq "$post_ok" ] || runs[post_mismatch]+="round $r: $post_ok 201s, $new new rows; "
	printf '%-6s %12.0f %12.0f %8.3f %10d %10d %9s %8s  %s\n' "$r" "$h" "$post_rps" \
		"$(awk -v a="$post_rps" -v b="$h" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$post_ok" "$new" \
		"$group" "$post_lat" "${post_other:-}"
done

# ---- the table --------------------------------------------------------------------
m() { echo "${runs[$1]}" | median; }
row() {   # test larchd baseline ratio target met
	printf '%-34s %12.0f %12.0f %8.3f  %-22s %s\n' "$@"
}
echo
printf '%-34s %12s %12s %8s  %-22s %s\n' test "larchd req/s" "baseline" ratio target met
get_met=$(awk -v r="$(m get_ratio)" 'BEGIN { print (r >= 0.7 ? "yes" : "no") }')
list_met=$(awk -v v="$(m list)" 'BEGIN { print (v >= 5000 ? "yes" : "no") }')
post_met=$(awk -v v="$(m post)" 'BEGIN { print (v >= 2000 ? "yes" : "no") }')
[ -z "${runs[post_mismatch]:-}" ] || post_met="no (rows != 201s)"
row "GET /v1/jobs/{id}" "$(m get)" "$(m hello)" "$(m get_ratio)" ">= 0.7 x hello_mhd" "$get_met"
row "GET /v1/jobs?limit=50 ($jobs_now jobs)" "$(m list)" "$(m hello)" "$(m list_ratio)" \
	">= 5000 req/s" "$list_met"
row "POST /v1/jobs (-c$post_connections, durable)" "$(m post)" "$(m post_hello)" "$(m post_ratio)" \
	">= 2000 submits/s" "$post_met"
echo "baseline: hello_mhd (same threads, same wrk); ratios are medians of per-round ratios;" \
     "POST: $(m post_group) submits per group commit (median)"
if [ -n "${runs[post_mismatch]:-}" ]; then
	echo "POST: database rows differ from the 201s counted: ${runs[post_mismatch]}"
else
	echo "POST: every round's new rows equal its 201s"
fi
