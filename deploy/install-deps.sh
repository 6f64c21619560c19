#!/usr/bin/env bash
# deploy/install-deps.sh - installs every Debian 12 package larch needs to
# build, run and test. Idempotent; run as root or as a user with sudo.
#
#   ./deploy/install-deps.sh           build + test dependencies
#
# Nothing is vendored: the C libraries come from Debian, and the Python test
# dependencies are Debian's python3-* packages (no pip needed so far).
set -euo pipefail

packages=(
	# toolchain
	build-essential cmake ninja-build pkg-config git ca-certificates
	# C libraries
	libjansson-dev zlib1g-dev libssl-dev libsqlite3-dev libmicrohttpd-dev libcurl4-openssl-dev
	# BLAS: the OpenMP build of OpenBLAS is what larch loads first (it shares
	# the OpenMP thread pool with our kernels); the pthread build backs numpy
	libopenblas0-openmp libopenblas0-pthread
	# data: Fashion-MNIST (IDX files under /usr/share/datasets/fashion-mnist)
	dataset-fashion-mnist
	# tests and benchmarks
	python3 python3-numpy python3-pytest python3-requests sqlite3 curl wrk
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#packages[@]} packages are installed"
	exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "install-deps: run as root (or install sudo)" >&2; exit 1; }
	sudo=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
