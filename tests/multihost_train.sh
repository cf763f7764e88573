#!/usr/bin/env bash
# `tessera train` across 2 "hosts" x 2 ranks (scripts/netns_hosts.sh: network namespaces, TCP
# between them, shared memory within each), against the same job on one host:
#   ring          4 ranks on one host           vs  2 hosts x 2 ranks
#   hierarchical  4 ranks on one host, pretend  vs  2 hosts x 2 ranks, the real node split
#                 nodes of 2 (RANKS_PER_NODE)
# Each pair must end on the same bits: the transport and where the node split comes from do not
# change what an algorithm computes. (Different algorithms do not agree bit for bit: they sum in
# different orders, and this short job magnifies that to the third digit of the loss.)
# Usage: tests/multihost_train.sh TESSERA_BINARY OUT_DIR        (exit 77: no namespaces here)
set -uo pipefail
tessera=$1 out=$2
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out" && mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 TESSERA_FUSION_THRESHOLD=0 TESSERA_TIMEOUT=120
args=(train --model resnet18 --image-size 32 --batch-size 4 --steps 12 --train-size 256
      --val-size 16 --log-every 4 --seed 11)
status=0
for algo in ring hierarchical; do
  per_node=0
  [[ $algo == hierarchical ]] && per_node=2
  TESSERA_ALLREDUCE=$algo TESSERA_RANKS_PER_NODE=$per_node \
    mpirun --oversubscribe --bind-to none -np 4 "$tessera" "${args[@]}" \
    --checkpoint "$out/one_host_$algo.pt" > "$out/one_host_$algo.log" 2>&1 ||
    { echo "the one-host $algo run failed:"; tail -20 "$out/one_host_$algo.log"; exit 1; }
  TESSERA_ALLREDUCE=$algo "$here/scripts/netns_hosts.sh" --hosts 2 --slots 2 -- -np 4 \
    -x OMP_NUM_THREADS -x TESSERA_FUSION_THRESHOLD -x TESSERA_TIMEOUT -x TESSERA_ALLREDUCE \
    "$tessera" "${args[@]}" --checkpoint "$out/two_hosts_$algo.pt" > "$out/two_hosts_$algo.log" 2>&1
  rc=$?
  [[ $rc -eq 77 ]] && { cat "$out/two_hosts_$algo.log"; exit 77; }
  [[ $rc -eq 0 ]] ||
    { echo "the 2-host $algo run failed (exit $rc):"; tail -20 "$out/two_hosts_$algo.log"; exit 1; }
  grep -h "netns_hosts.sh: h" "$out/two_hosts_$algo.log"
  loss=$(grep -o 'loss [0-9.]*' "$out/two_hosts_$algo.log" | tail -1)
  if cmp -s "$out/one_host_$algo.pt" "$out/two_hosts_$algo.pt"; then
    echo "$algo: 2 hosts x 2 ranks ended on the one-host run's bits (last $loss)"
  else
    echo "$algo: the 2-host checkpoint differs from the one-host one"; status=1
  fi
done
exit $status
