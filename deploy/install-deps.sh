#!/usr/bin/env bash
# deploy/install-deps.sh - installs every Debian 12 package larch needs to
# build, run and test. Idempotent; run as root or as a user with sudo.
#
#   ./deploy/install-deps.sh           build + test dependencies
#
# Nothing is vendored: the C libraries come from Debian, the Python test
# dependencies are Debian's python3-* packages, and what Debian lacks
# (schemathesis and selenium, pinned below) goes into a virtual environment, .venv at the
# top of the checkout, that also sees Debian's packages.
set -euo pipefail

packages=(
	# toolchain
	build-essential cmake ninja-build pkg-config git ca-certificates
	# C libraries
	libjansson-dev zlib1g-dev libssl-dev libsqlite3-dev libmicrohttpd-dev libgnutls28-dev
	libcurl4-openssl-dev
	# BLAS: the OpenMP build of OpenBLAS is what larch loads first (it shares
	# the OpenMP thread pool with our kernels); the pthread build backs numpy
	libopenblas0-openmp libopenblas0-pthread
	# data parallel training over MPI (larch-train, mpirun); libpmix-dev has the
	# libpmix.so that Slurm's PMIx plugin loads (srun --mpi=pmix under Slurm)
	openmpi-bin libopenmpi-dev libpmix-dev
	# data: Fashion-MNIST (IDX files under /usr/share/datasets/fashion-mnist)
	dataset-fashion-mnist
	# tests and benchmarks
	python3 python3-venv python3-numpy python3-pytest python3-requests sqlite3 curl wrk
	# the single-node Slurm cluster for development and CI: deploy/slurm/start.sh
	# runs these daemons with its own config, key and sockets
	slurmctld slurmd slurm-client munge
	# ... and its accounting: slurmdbd over a MariaDB of its own (the server
	# and client without their service scripts: start.sh runs mariadbd)
	slurmdbd mariadb-server-core mariadb-client-core
	# start.sh --nodes N: each node's slurmd in a network namespace (ip netns,
	# veth, bridge; nsenter and unshare are util-linux's, always there)
	iproute2
	# larchd submits through libslurm (in-process, no sbatch per job)
	libslurm-dev
	# tests/bench/bench_slurm.sh compares larchd with slurmrestd (JWT auth over TCP)
	slurmrestd slurm-wlm-jwt-plugin
	# the dashboard: Chart.js, which larchd serves to it; and the browser its
	# tests drive (headless Chromium through chromedriver and selenium)
	libjs-chart.js chromium chromium-driver fonts-dejavu-core
	# the Debian package (cpack -G DEB: dpkg-shlibdeps, file), its postinst
	# (adduser), and systemd-analyze, which tests/integration/test_install.py
	# checks the unit with
	dpkg-dev file adduser systemd
)
schemathesis_version=4.32.5
# the last selenium that takes Debian's urllib3 1.26 (later ones pull urllib3
# 2 into .venv, under Debian's requests, which wants 1.x)
selenium_version=4.27.1

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#packages[@]} Debian packages are installed"
else
	sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || { echo "install-deps: run as root (or install sudo)" >&2; exit 1; }
		sudo=(sudo)
	fi
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update -q
	"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# What Debian lacks, in a virtual environment made from Debian's interpreter
# (whatever python3 comes first on PATH) that also sees its python3-* packages
venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
if ! "$venv/bin/python" -c "import schemathesis, selenium, sys; sys.exit(schemathesis.__version__ != '$schemathesis_version' or selenium.__version__ != '$selenium_version')" 2>/dev/null; then
	echo "install-deps: making $venv with schemathesis $schemathesis_version, selenium $selenium_version"
	[ -x "$venv/bin/pip" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$schemathesis_version" \
		"selenium==$selenium_version"
fi
echo "install-deps: done"
