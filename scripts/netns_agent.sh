#!/bin/sh
# mpirun's launcher agent for scripts/netns_hosts.sh, in place of ssh: Open MPI calls
# `AGENT HOST COMMAND...` to start its daemon on HOST; this runs COMMAND in HOST's network
# namespace with HOST as the host name, through a shell, as sshd would.
host=$1
shift
[ -n "${TESSERA_NETNS_TAG:-}" ] || { echo "netns_agent.sh: TESSERA_NETNS_TAG is not set (run through scripts/netns_hosts.sh)" >&2; exit 2; }
exec ip netns exec "${TESSERA_NETNS_TAG}$host" unshare --uts /bin/sh -c "hostname $host && $*"
