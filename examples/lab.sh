#!/usr/bin/env bash
# A second host and live traffic for the README's examples, on this machine (as root):
#
#   bash examples/lab.sh up     network namespace sl-lab ("host B", 10.77.0.2, its interface
#                               eth0) joined by a veth pair to sl-lab0 here (10.77.0.1); in it,
#                               tcpreplay sends examples/sample.pcap to sl-lab0 in a loop
#                               (2,000 frames/s), so `rx dev=sl-lab0` has traffic to capture
#   bash examples/lab.sh down   stops what runs in sl-lab and deletes it (and the veth pair)
#
# Nothing leaves the machine: the replayed frames and anything sent to 10.77.0.2 stay on the
# veth pair.
set -euo pipefail
ns=sl-lab
here=sl-lab0
capture=$(dirname "$0")/sample.pcap

case "${1:-}" in
up)
  [ "$(id -u)" = 0 ] || { echo "lab.sh: needs root (network namespaces, veth)" >&2; exit 1; }
  command -v tcpreplay >/dev/null || { echo "lab.sh: needs tcpreplay (scripts/setup installs it)" >&2; exit 1; }
  if ip netns list | grep -qw "$ns"; then "$0" down; fi
  ip netns add "$ns"
  ip link add "$here" type veth peer name eth0 netns "$ns"
  # IPv6 off on both ends: no router or neighbour solicitations of our own in the captures.
  sysctl -qw "net.ipv6.conf.$here.disable_ipv6=1"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1
  ip addr add 10.77.0.1/24 dev "$here"
  ip link set "$here" up
  ip -n "$ns" addr add 10.77.0.2/24 dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip netns exec "$ns" setsid tcpreplay --loop=0 --pps=2000 -i eth0 "$capture" \
    </dev/null >/dev/null 2>&1 &
  echo "lab: $ns (10.77.0.2, eth0) <-> $here (10.77.0.1); replaying $capture into $here"
  ;;
down)
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [ -z "$pids" ] || kill $pids 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$here" 2>/dev/null || true
  echo "lab: removed"
  ;;
*)
  echo "usage: bash examples/lab.sh up|down" >&2
  exit 2
  ;;
esac
