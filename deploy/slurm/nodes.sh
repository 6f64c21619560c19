# shellcheck shell=bash
# deploy/slurm/nodes.sh - the nodes of a multi-node dev cluster (start.sh
# --nodes N, N > 1): each slurmd in a network namespace of its own, joined
# to the host by a veth pair whose host end is in a bridge, with a UTS
# namespace of its own for its hostname. Sourced by common.sh, not run.
#
# Names and addresses come from the cluster directory, so that clusters in
# other directories on this machine never collide: net_id is the first 6 hex
# digits of the sha1 of $slurm_dir; the bridge is lbr<net_id>, node i's
# namespace larch-<net_id>-node<i> and its host-side veth lv<net_id>n<i>
# (the other end is eth0 inside the namespace). The subnet is a /24 in
# 10.64.0.0/10 picked from net_id, the next one while any address or route of
# this machine is in it; the bridge has .1 (slurmctld's address, SlurmctldHost)
# and node i .(i+1).
#
# $slurm_dir/nodes.env records what start.sh made (net_id, subnet, nodes):
# stop.sh removes exactly those namespaces, links and the bridge, nothing
# else. It stays after stop.sh (the cluster's shape, like slurm.conf); a
# single-node start removes it.
#
# With nodes.env present, the slurmd daemons are slurmd.node<i> (pid files
# run/slurmd.node<i>.pid, logs log/slurmd.node<i>.log, spool spool/node<i>)
# in place of slurmd.

# shellcheck disable=SC2154  # slurm_dir and slurm_conf are common.sh's
nodes_file=$slurm_dir/nodes.env
net_id=$(printf '%s' "$slurm_dir" | sha1sum | cut -c1-6)
net_bridge=lbr$net_id
node_count=1
net_subnet=

# net_load: reads nodes.env (node_count, net_subnet) if there is one, and
# puts the nodes' slurmd in $daemons
net_load() {
	node_count=1
	net_subnet=
	[ -f "$nodes_file" ] || return 0
	local k v
	while IFS='=' read -r k v; do
		case $k in
		nodes) [[ $v =~ ^[0-9]+$ ]] && node_count=$v ;;
		subnet) [[ $v =~ ^10\.[0-9]+\.[0-9]+$ ]] && net_subnet=$v ;;
		esac
	done <"$nodes_file"
	if [ "$node_count" -gt 1 ]; then
		daemons=(munged mariadbd slurmdbd slurmctld)
		local i
		for ((i = 1; i <= node_count; i++)); do daemons+=("slurmd.node$i"); done
	fi
}

net_ns() { echo "larch-$net_id-node$1"; }
net_veth() { echo "lv${net_id}n$1"; }
net_addr() { echo "$net_subnet.$(($1 + 1))"; }

# net_pick_subnet: sets net_subnet to a /24 (its first three octets) in
# 10.64.0.0/10 that no address or route of this machine touches
net_pick_subnet() {
	local used h a b k
	used=" $( (ip -4 -o addr show; ip -4 route show table all) 2>/dev/null |
		grep -oE '(^| )10\.[0-9]+\.[0-9]+\.' | tr -d ' ' | sort -u | tr '\n' ' ') "
	h=$((16#$net_id))
	for ((k = 0; k < 4096; k++)); do
		a=$((64 + (h / 256 + k / 256) % 64))
		b=$(((h + k) % 256))
		if [[ $used != *" 10.$a.$b. "* ]]; then
			net_subnet=10.$a.$b
			return 0
		fi
	done
	return 1
}

# net_write N: records a cluster of N nodes in nodes.env (a subnet picked
# unless it had one)
net_write() {
	[ -n "$net_subnet" ] || net_pick_subnet || slurm_fail "no free /24 in 10.64.0.0/10 for the nodes"
	printf 'nodes=%s\nsubnet=%s\nnet_id=%s\n' "$1" "$net_subnet" "$net_id" >"$nodes_file.tmp"
	mv "$nodes_file.tmp" "$nodes_file"
	net_load
}

# net_up: makes what is missing of the bridge, the namespaces and the veth
# pairs nodes.env describes (idempotent)
net_up() {
	local i ns veth
	if ! ip link show "$net_bridge" >/dev/null 2>&1; then
		ip link add "$net_bridge" type bridge || slurm_fail "ip link add $net_bridge type bridge failed"
	fi
	ip addr replace "$net_subnet.1/24" dev "$net_bridge"
	ip link set "$net_bridge" up
	for ((i = 1; i <= node_count; i++)); do
		ns=$(net_ns "$i")
		veth=$(net_veth "$i")
		[ -e "/run/netns/$ns" ] || ip netns add "$ns" || slurm_fail "ip netns add $ns failed"
		if ! ip link show "$veth" >/dev/null 2>&1; then
			ip -n "$ns" link del eth0 2>/dev/null || true
			ip link add "$veth" type veth peer name eth0 netns "$ns" ||
				slurm_fail "ip link add $veth (veth into $ns) failed"
		fi
		ip link set "$veth" master "$net_bridge" up
		ip -n "$ns" addr replace "$(net_addr "$i")/24" dev eth0
		ip -n "$ns" link set eth0 up
		ip -n "$ns" link set lo up
	done
}

# net_down: kills what still runs in the nodes' namespaces, removes the veth
# pairs, the namespaces and the bridge of nodes.env; says what it removed
net_down() {
	[ -f "$nodes_file" ] || return 0
	local i ns veth pids gone=() end
	for ((i = 1; i <= node_count; i++)); do
		ns=$(net_ns "$i")
		veth=$(net_veth "$i")
		if [ -e "/run/netns/$ns" ]; then
			pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
			if [ -n "${pids// /}" ]; then
				echo "slurm-dev: killing what still runs in $ns: $pids"
				# shellcheck disable=SC2086
				kill -KILL $pids 2>/dev/null || true
				end=$(($(now_ms) + 5000))
				while [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && [ "$(now_ms)" -lt $end ]; do
					sleep 0.05
				done
			fi
		fi
		if ip link show "$veth" >/dev/null 2>&1; then
			ip link del "$veth" && gone+=("$veth")
		fi
		if [ -e "/run/netns/$ns" ]; then
			ip netns del "$ns" && gone+=("$ns")
		fi
	done
	if ip link show "$net_bridge" >/dev/null 2>&1; then
		ip link del "$net_bridge" && gone+=("$net_bridge")
	fi
	[ ${#gone[@]} -eq 0 ] || echo "slurm-dev: removed ${gone[*]}"
}

# net_start_slurmd I: starts node I's slurmd in its network namespace, with
# its own hostname (a UTS namespace). nsenter, not `ip netns exec`: that one
# also makes a mount namespace with a fresh /sys, without the cgroup file
# system slurmd's cgroup plugin needs to start.
net_start_slurmd() {
	local name=node$1
	# shellcheck disable=SC2016  # the inner shell expands them
	nsenter --net="/run/netns/$(net_ns "$1")" unshare --uts -- /bin/sh -c \
		'hostname "$1" && exec slurmd -f "$2" -N "$1"' sh "$name" "$slurm_conf"
}

net_load
