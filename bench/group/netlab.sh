#!/usr/bin/env bash
# Groups across hosts on a link model: each "host" is a network namespace
# (d4h0, d4h1, ...) with a veth to a bridge in this namespace, and every
# host's veth sends through a tbf rate limit that models its NIC. The
# ranks of a host share its namespace and, being on this machine, its
# memory; they claim its host id (DS4TP_HOST_ID), so ds4tp sees the
# layout a real deployment has. Open MPI sees it too: mpirun starts one
# daemon per host through an ssh stand-in that enters the host's
# namespace with a hostname of its own, so its vader BTL joins the ranks of
# a host and its tcp BTL crosses the link.
#
# For 2 hosts x 2 ranks and 4 hosts x 1: the 16 KiB and 4 MiB f32
# all-reduce p50 of ds4tp auto (tiered where ranks share a host), ds4tp
# flat (the tcp mesh between all ranks), and Open MPI (self,vader,tcp;
# default collectives; mpi_yield_when_idle, since ranks outnumber cores),
# interleaved `reps` times (the median p50 is shown), then the bus
# bandwidth (NCCL's: bytes / time x 2(n-1)/n) and the busiest link's use:
# a leader's bytes across (tiered: the vector once out; flat and Open
# MPI are not modelled, shown "-") over the raw rate measured first.
# No netem here (the kernel has no sch_netem), so the model has a rate
# and no added delay.
#
# The rate must be one raw TCP fills with every host's link busy at once
# (each host sending to the next and hearing from the one before, as a
# ring does), measured first and printed: on a 2-vCPU machine 5 Gbit/s is
# not (four busy links carry 0.87 of it, one alone 0.95), while 3 Gbit/s
# is (0.92, where 0.95 is TCP/IP's header share), hence the default.
#
# The ring section: on 3 hosts x 1 and 4 hosts x 1, the f32 all-reduce
# p50 from 64 KiB to 16 MiB with the leaders' large-call schedule forced
# to two-shot (DS4TP_GROUP_RING_BYTES=0) and to the ring (=1), the same
# run interleaved: where the ring's column wins is its crossover
# (kRingBytes, lib/group/group.hpp).
#
# Usage (root): bench/group/netlab.sh [build-dir] [rate] [reps]
#   rate: tbf rate (default 3gbit); writes bench/results/group-netlab-DATE-HOST.md
#   NETLAB_PARTS="main ring" (the default) picks the sections; a part alone
#   writes group-netlab-DATE-HOST-PART.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
rate="${2:-3gbit}"
reps="${3:-3}"
parts="${NETLAB_PARTS:-main ring}"
suffix=$([ "$parts" = "main ring" ] || echo "-${parts// /-}")
tool="$(cd "$build" && pwd)/tools/ds4tp"
[ "$(id -u)" = 0 ] || { echo "netlab.sh: needs root (namespaces, veth, tc)"; exit 2; }
for c in ip tc unshare python3; do command -v $c >/dev/null || { echo "netlab.sh: needs $c"; exit 2; }; done
"$here/../../scripts/install-deps.sh" libopenmpi-dev >/dev/null
tmp="$(mktemp -d)"
results="$(cd "$here/../results" && pwd)/group-netlab-$(date +%F)-${DS4TP_BENCH_HOST:-$(uname -n)}$suffix.md"

teardown() {
  # The bridge-side ends first: a namespace's veth goes away only later.
  for l in $(ip -o link | awk -F': ' '$2 ~ /^d4s[0-9]/ {sub(/@.*/, "", $2); print $2}'); do
    ip link del "$l" 2>/dev/null || true
  done
  for n in $(ip netns list | awk '/^d4h[0-9]/ {print $1}'); do ip netns del "$n"; done
  ip link del d4br 2>/dev/null || true
}
trap 'teardown; rm -rf "$tmp"' EXIT

# hosts: the bridge at 10.78.0.254, host i at 10.78.0.(i+1) behind its rate.
lab() {
  teardown
  ip link add d4br type bridge
  ip addr add 10.78.0.254/24 dev d4br
  ip link set d4br up
  for ((i = 0; i < $1; i++)); do
    ip netns add d4h$i
    ip link add d4v$i netns d4h$i type veth peer name d4s$i
    ip link set d4s$i master d4br up
    ip -n d4h$i addr add 10.78.0.$((i + 1))/24 dev d4v$i
    ip -n d4h$i link set d4v$i up
    ip -n d4h$i link set lo up
    ip -n d4h$i route add default via 10.78.0.254
    ip netns exec d4h$i tc qdisc add dev d4v$i root tbf rate "$rate" burst 256kb latency 5ms
  done
}

# Raw TCP from host 0 to host 1 for 3 s: Gbit/s.
cat >"$tmp/blast.py" <<'EOF'
import socket, sys, time
if sys.argv[1] == "s":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 5999)); s.listen(1); c, _ = s.accept()
    n, t0, buf = 0, time.time(), bytearray(1 << 20)
    while True:
        k = c.recv_into(buf)
        if not k: break
        n += k
    print(f"{n * 8 / (time.time() - t0) / 1e9:.2f}")
else:
    c = socket.create_connection((sys.argv[2], 5999)); b = b"x" * (1 << 20); t0 = time.time()
    while time.time() - t0 < 3: c.sendall(b)
    c.close()
EOF
raw_gbit() {
  ip netns exec d4h1 python3 "$tmp/blast.py" s >"$tmp/raw" &
  sleep 0.5
  ip netns exec d4h0 python3 "$tmp/blast.py" c 10.78.0.2
  wait
  cat "$tmp/raw"
}
# Raw TCP from every one of $1 hosts to the next at once: the slowest
# link's Gbit/s (a ring waits for it).
raw_all_gbit() {
  for ((i = 0; i < $1; i++)); do
    ip netns exec d4h$(((i + 1) % $1)) python3 "$tmp/blast.py" s >"$tmp/raw$i" &
  done
  sleep 0.5
  for ((i = 0; i < $1; i++)); do
    ip netns exec d4h$i python3 "$tmp/blast.py" c 10.78.0.$(((i + 1) % $1 + 1)) &
  done
  wait
  cat "$tmp"/raw[0-9]* | sort -g | head -1
  rm -f "$tmp"/raw[0-9]*
}

# mpirun's ssh stand-in (not named ssh: mpirun would add ssh's options):
# "host" hN is namespace d4hN, with hostname hN.
cat >"$tmp/enter-host" <<'EOF'
#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host="$1"; shift
exec ip netns exec "d4h${host#h}" unshare --uts sh -c "hostname $host; $*"
EOF
chmod +x "$tmp/enter-host"
mpicc -O2 -o "$tmp/mpi" "$here/mpi_ops.c"

p50() { sed -n 's/.*p50 *\([0-9.]*\) *us.*/\1/p' | head -1; }
# ds4tp over H hosts x R ranks; rank r on host r / R. $4: extra options;
# $6: extra environment (NAME=VALUE ...).
ds4tp_run() {
  local hosts=$1 per=$2 count=$3 extra=$4 iters=$5 envs=${6:-} n=$(($1 * $2))
  local port=$((29700 + RANDOM % 200))
  for ((r = n - 1; r >= 0; r--)); do
    local h=$((r / per))
    ip netns exec d4h$h env DS4TP_HOST_ID=h$h $envs "$tool" group --rank $r --size $n \
      --rendezvous 10.78.0.1:$port --count "$count" --iters "$iters" $extra >"$tmp/r$r" 2>&1 &
  done
  wait
  p50 <"$tmp/r0"
}
mpi_run() {
  local hosts=$1 per=$2 count=$3 iters=$4
  : >"$tmp/hostfile"
  for ((h = 0; h < hosts; h++)); do echo "h$h slots=$per" >>"$tmp/hostfile"; done
  (cd "$tmp" && timeout 300 mpirun --allow-run-as-root -np $((hosts * per)) --hostfile hostfile \
    --mca plm_rsh_agent "$tmp/enter-host" --mca oob_tcp_if_include 10.78.0.0/24 \
    --mca btl_tcp_if_include 10.78.0.0/24 --mca btl self,vader,tcp --mca mpi_yield_when_idle 1 \
    "$tmp/mpi" all_reduce "$count" "$iters" 2>&1) | p50
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

declare -A got plan
layouts=("2 2" "4 1")
ring_layouts=("3 1" "4 1")
ring_sizes=("16384 400" "65536 200" "262144 60" "1048576 20" "4194304 8")  # 64 KiB .. 16 MiB
[[ " $parts " == *" main "* ]] || layouts=()
[[ " $parts " == *" ring "* ]] || ring_layouts=()
sizes=("4096 2000" "1048576 40")  # 16 KiB, 4 MiB of f32
for lay in "${layouts[@]}"; do
  set -- $lay
  lab "$1"
  got[raw $lay]=$(raw_gbit)
  got[rawall $lay]=$(raw_all_gbit "$1")
  for ((k = 0; k < reps; k++)); do
    for sz in "${sizes[@]}"; do
      set -- $lay $sz
      got[auto $lay $3]+="$(ds4tp_run $1 $2 $3 "" $4) "
      got[flat $lay $3]+="$(ds4tp_run $1 $2 $3 "--transport tcp" $4) "
      got[mpi $lay $3]+="$(mpi_run $1 $2 $3 $4) "
    done
  done
  set -- $lay
  plan[$lay]=$(ds4tp_run $1 $2 1 "" 1 >/dev/null; sed -n 's/^ *\(plan: .*\)/\1/p' "$tmp/r0")
done
for lay in "${ring_layouts[@]}"; do
  set -- $lay
  lab "$1"
  got[raw $lay]=$(raw_gbit)
  got[rawall $lay]=$(raw_all_gbit "$1")
  for ((k = 0; k < reps; k++)); do
    for sz in "${ring_sizes[@]}"; do
      set -- $lay $sz
      got[two $lay $3]+="$(ds4tp_run $1 $2 $3 "" $4 DS4TP_GROUP_RING_BYTES=0) "
      got[ring $lay $3]+="$(ds4tp_run $1 $2 $3 "" $4 DS4TP_GROUP_RING_BYTES=1) "
    done
  done
done
teardown

med() { echo "${got[$*]}" | median; }
rate_gbit=$(awk -v r="$rate" 'BEGIN { v = r + 0; if (r ~ /mbit/) v /= 1000; print v }')
{
  echo "# bench/group/netlab.sh: $(date +%F) on ${DS4TP_BENCH_HOST:-$(uname -n)}"
  echo
  echo "Link model: tbf $rate per host, no added delay; $(nproc) cores; median of $reps p50s."
  echo "Raw tcp: one link alone, and the slowest link while every host sends to the next at once."
  echo
  for lay in "${layouts[@]}"; do
    set -- $lay
    n=$(($1 * $2))
    raw=${got[raw $lay]}
    echo "## $1 hosts x $2 ranks (raw tcp: $raw Gbit/s alone, ${got[rawall $lay]} with every link busy)"
    echo
    echo "    ${plan[$lay]}"
    echo
    echo "| implementation | 16 KiB p50 (us) | 4 MiB p50 (us) | 4 MiB bus bw (Gbit/s) | bus bw / rate | busiest link used |"
    echo "|---|---|---|---|---|---|"
    for impl in auto flat mpi; do
      name=$([ $impl = auto ] && echo "ds4tp auto" || ([ $impl = flat ] && echo "ds4tp flat tcp mesh" || echo "Open MPI vader+tcp"))
      a=$(med $impl $lay 4096) b=$(med $impl $lay 1048576)
      awk -v nm="$name" -v a="$a" -v b="$b" -v n=$n -v raw="$raw" -v rate="$rate_gbit" -v tiered=$([ $impl = auto ] && [ $2 -gt 1 ] && echo 1 || echo 0) 'BEGIN {
        bus = 4194304 * 8 / (b * 1e3) * 2 * (n - 1) / n
        use = tiered ? sprintf("%.2f of raw", 4194304 * 8 / (b * 1e3) / raw) : "-"
        printf "| %s | %s | %s | %.2f | %.2f | %s |\n", nm, a, b, bus, bus / rate, use }'
    done
    echo
    a=$(med auto $lay 4096) f=$(med flat $lay 4096) m=$(med mpi $lay 4096)
    awk -v a="$a" -v f="$f" -v m="$m" 'BEGIN {
      printf "16 KiB: ds4tp auto / Open MPI = %.2fx; ds4tp auto / flat mesh = %.2fx\n\n", a / m, a / f }'
  done
  for lay in "${ring_layouts[@]}"; do
    set -- $lay
    n=$(($1 * $2))
    echo "## Ring or two-shot across $1 hosts x $2 rank (raw tcp: ${got[raw $lay]} Gbit/s alone, ${got[rawall $lay]} with every link busy)"
    echo
    echo "| f32 all-reduce | two-shot p50 (us) | ring p50 (us) | ring / two-shot | ring bus bw (Gbit/s) |"
    echo "|---|---|---|---|---|"
    for sz in "${ring_sizes[@]}"; do
      set -- $sz
      a=$(med two $lay $1) b=$(med ring $lay $1)
      awk -v c="$1" -v a="$a" -v b="$b" -v n=$n 'BEGIN {
        bytes = c * 4
        name = bytes >= 1048576 ? sprintf("%d MiB", bytes / 1048576) : sprintf("%d KiB", bytes / 1024)
        printf "| %s | %s | %s | %.2f | %.2f |\n", name, a, b, b / a, bytes * 8 / (b * 1e3) * 2 * (n - 1) / n }'
    done
    echo
  done
} | tee "$results"
echo "results: $results"
