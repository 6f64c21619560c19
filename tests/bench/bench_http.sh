#!/usr/bin/env bash
# tests/bench/bench_http.sh - larchd's HTTP path against the loopback ceiling.
#
#   tests/bench/bench_http.sh [--build DIR] [--rounds N] [--seconds S]
#                             [--connections C] [--threads T] [--wrk-threads W]
#
# Starts tests/bench/hello_mhd (libmicrohttpd + jansson with larchd's
# threading and nothing else: the ceiling) and larchd twice - as deployed
# (request log at info, to a file) and with the request log off (log_level
# warn) - each with T HTTP threads, and times GET /healthz on each with wrk
# (Debian's), A/B/C/A/B/C for N rounds after a warm-up. Prints req/s per round,
# the medians and the median of the per-round ratios to the ceiling. The
# machine is shared with wrk (and anything else running): read the ratios,
# and repeat. GET /v1/jobs/{id} and the other API targets (issue #4) are
# timed by bench_api.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."

build=build rounds=5 seconds=5 connections=64 threads=$(nproc) wrk_threads=1
while [ $# -gt 0 ]; do
	case "$1" in
	--build) build=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--connections) connections=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--wrk-threads) wrk_threads=$2; shift 2 ;;
	-h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench_http: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
hello=$build/tests/bench/hello_mhd
larchd=$build/service/larchd
for exe in "$hello" "$larchd"; do
	[ -x "$exe" ] || { echo "bench_http: $exe is missing: build with -DWITH_SERVICE=ON" >&2; exit 1; }
done
command -v wrk >/dev/null || { echo "bench_http: wrk is missing (apt-get install wrk)" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# start NAME CMD... : runs CMD, waits for its "listening on URL" line, sets url_NAME
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
	echo "bench_http: $name did not start: $(cat "$tmp/$name.err")" >&2
	exit 1
}
start hello "$hello" --threads "$threads"
start larchd "$larchd" --listen 127.0.0.1:0 --state-dir "$tmp/state1" --threads "$threads" \
	--log-file "$tmp/larchd.log"
start quiet "$larchd" --listen 127.0.0.1:0 --state-dir "$tmp/state2" --threads "$threads" \
	--log-level warn

# rps URL SECONDS: requests per second of one wrk run
rps() {
	wrk -t"$wrk_threads" -c"$connections" -d"$2"s "$1" | awk '/^Requests\/sec:/ { print $2 }'
}

names=(hello larchd quiet)
labels=("hello_mhd (ceiling)" "larchd GET /healthz" "larchd, no request log")
declare -A runs
for name in "${names[@]}"; do
	url_var=url_$name
	rps "${!url_var}/healthz" 1 >/dev/null      # warm-up
done
echo "bench_http: wrk -t$wrk_threads -c$connections -d${seconds}s, $threads HTTP threads," \
     "$(nproc) CPUs, $rounds rounds"
printf '%-6s %14s %14s %14s %9s %9s\n' round hello_mhd larchd no-log ratio ratio-nolog
for r in $(seq "$rounds"); do
	line=()
	for name in "${names[@]}"; do
		url_var=url_$name
		v=$(rps "${!url_var}/healthz" "$seconds")
		runs[$name]+="$v "
		line+=("$v")
	done
	awk -v r="$r" -v a="${line[0]}" -v b="${line[1]}" -v c="${line[2]}" \
		'BEGIN { printf "%-6s %14.0f %14.0f %14.0f %9.3f %9.3f\n", r, a, b, c, b / a, c / a }' 
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratios() {   # per-round ratios of $1 to hello
	paste -d' ' <(echo "${runs[$1]}" | tr ' ' '\n' | grep .) <(echo "${runs[hello]}" | tr ' ' '\n' | grep .) |
		awk '{ print $1 / $2 }'
}
echo
for i in 0 1 2; do
	name=${names[$i]}
	m=$(echo "${runs[$name]}" | median)
	if [ "$name" = hello ]; then
		printf '%-26s %10.0f req/s (median)\n' "${labels[$i]}" "$m"
	else
		printf '%-26s %10.0f req/s (median), %.3f x the ceiling (median of round ratios)\n' \
			"${labels[$i]}" "$m" "$(ratios "$name" | median)"
	fi
done
lines=$(grep -c 'GET /healthz 200' "$tmp/larchd.log" || true)
echo "larchd logged $lines request lines"
