#!/usr/bin/env bash
# Several "hosts" on one machine (docs/cluster.md): each host is a network namespace with its own
# address and its own host name (a UTS namespace), all on one bridge (a "switch"), so ranks on
# different hosts talk over TCP and Open MPI sees a real node split (MPI_Comm_split_type shared
# gives one communicator per host). mpirun runs on h0, like on a cluster's first node, and
# starts the daemons of the other hosts through scripts/netns_agent.sh, the way it would start
# them through ssh. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; without them it
# exits 77, which CTest reports as skipped.
#
# Usage: scripts/netns_hosts.sh [--hosts N] [--slots S] -- MPIRUN_ARGS...
#   runs `mpirun --hostfile <h0..hN-1 with S slots each> <transport settings> MPIRUN_ARGS` on h0;
#   the host names are h0, h1, ... and the addresses 10.213.<run>.1, .2, ...
#        scripts/netns_hosts.sh [--hosts N] --command -- COMMAND...
#   runs COMMAND on h0 with the transport settings in the environment (OMPI_MCA_*), for a
#   program that starts mpirun itself on hosts it picks (`tessera run`'s elastic supervisor).
# Everything it creates (namespaces, links, /etc/netns/<ns>) is removed on exit, also on
# failure and on SIGTERM/SIGINT.
set -uo pipefail
hosts=2
slots=2
command=0
here=$(cd "$(dirname "$0")" && pwd)
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --command) command=1; shift ;;
    --) shift; break ;;
    *) echo "netns_hosts.sh: unknown argument '$1'; usage: netns_hosts.sh [--hosts N] [--slots S] -- MPIRUN_ARGS..." >&2
       exit 2 ;;
  esac
done
if ! [[ $hosts =~ ^[0-9]+$ && $hosts -ge 2 && $hosts -le 16 && $slots =~ ^[0-9]+$ && $slots -ge 1 ]]; then
  echo "netns_hosts.sh: --hosts is 2..16 and --slots >= 1 (got $hosts, $slots)" >&2
  exit 2
fi
[[ $# -gt 0 ]] || { echo "netns_hosts.sh: nothing to run after --" >&2; exit 2; }

skip() { echo "netns_hosts.sh: SKIPPED: $*" >&2; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip > /dev/null || skip "needs iproute2's ip (apt-get install iproute2)"
command -v unshare > /dev/null || skip "needs util-linux's unshare"

# Names unique to this run: interface names are at most 15 characters.
tag=t$(( $$ % 100000 ))
octet=$(( $$ % 250 + 1 ))
ns() { echo "${tag}h$1"; }  # host h is namespace ${tag}h<h>, host name h<h>
# Processes still inside the hosts' namespaces (a daemon mpirun started on h1, ranks whose
# launcher died) get DRAIN_S seconds to end by themselves, with the switch still up, and are
# then killed, said on stderr: deleting the switch under a running job would cut its hosts
# apart and leave mpirun waiting forever for a daemon it can no longer reach.
DRAIN_S=${NETNS_DRAIN_S:-20}
drain() {
  local deadline=$((SECONDS + DRAIN_S)) left h
  while :; do
    left=$(for ((h = 0; h < hosts; ++h)); do ip netns pids "$(ns $h)" 2> /dev/null; done)
    [[ -z $left ]] && return 0
    ((SECONDS >= deadline)) && break
    sleep 0.5
  done
  echo "netns_hosts.sh: $(echo $left | wc -w) processes still in the hosts' namespaces" \
       "$DRAIN_S s after the command ended: killed" >&2
  kill -9 $left 2> /dev/null
  sleep 0.5
}
cleanup() {
  drain
  for ((h = 0; h < hosts; ++h)); do
    ip netns del "$(ns $h)" 2> /dev/null
    rm -rf "/etc/netns/$(ns $h)"
  done
  ip netns del "${tag}sw" 2> /dev/null
  rm -rf "$work"
}
work=$(mktemp -d)
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

ip netns add "$(ns 0)" 2> "$work/err" || skip "cannot create a network namespace ($(cat "$work/err"))"
for ((h = 1; h < hosts; ++h)); do ip netns add "$(ns $h)" || exit 1; done
# A switch: one more namespace holding a bridge, with one veth pair per host (eth0 in the host,
# pH on the bridge). A namespace of its own, so no firewall rule of the machine sees the traffic.
sw=${tag}sw
ip netns add "$sw" || exit 1
ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || exit 1
for ((h = 0; h < hosts; ++h)); do
  ip -n "$(ns $h)" link set lo up || exit 1
  ip link add eth0 netns "$(ns $h)" type veth peer name "p$h" netns "$sw" || exit 1
  ip -n "$sw" link set "p$h" master br0 && ip -n "$sw" link set "p$h" up || exit 1
  ip -n "$(ns $h)" addr add "10.213.$octet.$((h + 1))/24" dev eth0 || exit 1
  ip -n "$(ns $h)" link set eth0 up || exit 1
  mkdir -p "/etc/netns/$(ns $h)"
  {
    echo "127.0.0.1 localhost"
    for ((k = 0; k < hosts; ++k)); do echo "10.213.$octet.$((k + 1)) h$k"; done
  } > "/etc/netns/$(ns $h)/hosts"
done

hostfile=$work/hostfile
for ((h = 0; h < hosts; ++h)); do echo "h$h slots=$slots"; done > "$hostfile"
export TESSERA_NETNS_TAG=$tag
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml=ob1 OMPI_MCA_mtl=^ofi
# Between hosts only TCP over the namespaces' links; within a host shared memory (vader).
if [[ $command -eq 1 ]]; then
  export OMPI_MCA_plm_rsh_agent=$here/netns_agent.sh OMPI_MCA_plm_rsh_no_tree_spawn=1
  export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=10.213.$octet.0/24
  export OMPI_MCA_oob_tcp_if_include=10.213.$octet.0/24
  ip netns exec "$(ns 0)" unshare --uts /bin/sh -c 'hostname h0 && exec "$@"' sh "$@" &
else
  ip netns exec "$(ns 0)" unshare --uts /bin/sh -c 'hostname h0 && exec "$@"' sh \
    mpirun --hostfile "$hostfile" --bind-to none \
    --mca plm_rsh_agent "$here/netns_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include "10.213.$octet.0/24" \
    --mca oob_tcp_if_include "10.213.$octet.0/24" "$@" &
fi
child=$!
trap 'kill -TERM $child 2> /dev/null; wait $child; exit 143' TERM
wait $child
rc=$?
# What crossed the links, host by host: the proof that ranks on different hosts talked over TCP.
for ((h = 0; h < hosts; ++h)); do
  ip netns exec "$(ns $h)" sh -c 'echo "netns_hosts.sh: h'$h' eth0 sent $(cat /sys/class/net/eth0/statistics/tx_bytes) bytes, received $(cat /sys/class/net/eth0/statistics/rx_bytes)"' >&2
done
exit $rc
