#!/usr/bin/env bash
# Soak: pairs and groups over every transport this host has, through mixed
# traffic with faults injected at random, for MINUTES; then one table of
# the long-lived processes' fds, threads and RSS and of the host's
# /dev/shm entries (start after the warm-up, end, max), and of the cycles,
# faults and outcomes (docs/RELIABILITY.md, "Soak (bench/soak.sh)").
#   bench/soak.sh MINUTES [--results-dir DIR]
#   bench/soak.sh --report RUN_DIR [--results-dir DIR]   the table again from a run's logs
# Needs build/bench/ds4tp_soak (DS4TP_BUILD_DIR overrides build/):
#   cmake --build build --target ds4tp_soak
# Output: bench-out/soak/ (OUT overrides it): soak.md (the table), each
# driver's log and stderr, host.tsv (the host's samples). --results-dir DIR
# also writes the table to DIR/soak-<YYYY-MM-DD>-<host>.md (host:
# DS4TP_BENCH_HOST, default uname -n).
# Exit status: 0 clean; 1 when a long-lived process grew (fds or threads at
# all, RSS past max(2 MiB, 5%)), a /dev/shm entry of the soak outlived it,
# a cycle ended in a hang, an unnamed or late error or wrong bits, or a
# process did not end by itself; 2 for a usage or setup error.
#
# Each driver (ds4tp_soak, bench/soak/) is one long-lived process that
# re-forms its pair or group every cycle with restarted children, so a
# leak shows up as growth inside it; it samples itself after each cycle's
# free, when nothing of the cycle should be left. Its first WARMUP seconds
# (default min(60, a quarter of the run)) and first 10 cycles are the
# warm-up: state built once (allocator arenas, the first big buffers) is
# no leak.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bench/soak.sh MINUTES [--results-dir DIR] | --report RUN_DIR [--results-dir DIR]" >&2
  exit 2
}
minutes="" report_of="" results_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --results-dir) [ $# -ge 2 ] || usage; results_dir=$2; shift 2 ;;
    --report) [ $# -ge 2 ] || usage; report_of=$2; shift 2 ;;
    -*) usage ;;
    *) [ -z "$minutes" ] || usage; minutes=$1; shift ;;
  esac
done
if [ -n "$report_of" ]; then
  [ -z "$minutes" ] && [ -f "$report_of/run.txt" ] || usage
else
  [ -n "$minutes" ] || usage
fi
host_name="${DS4TP_BENCH_HOST:-$(uname -n)}"

# ---- the report -------------------------------------------------------------
# Reads DIR's logs (the drivers' key=value lines), host.tsv, shm-start.txt,
# drivers.txt ("TAG STATUS", STATUS "hung" for one killed past the run) and
# run.txt (warmup=SECONDS); prints the tables and the verdict, exits 1 when
# something grew, was left behind, hung or failed.
report() {
  local dir=$1 warmup
  warmup=$(sed -n 's/^warmup=//p' "$dir/run.txt")
  awk -v warmup="$warmup" -v shm_start="$(paste -sd, "$dir/shm-start.txt")" '
    function kv(  i, p) {
      delete F
      for (i = 2; i <= NF; i++) {
        if ($i ~ /^msg=/) break
        p = index($i, "=")
        if (p) F[substr($i, 1, p - 1)] = substr($i, p + 1)
      }
    }
    function addpids(s,  a, i, n) { n = split(s, a, ","); for (i = 1; i <= n; i++) ours[a[i]] = 1 }
    function shm_owner(name,  m) {
      if (match(name, /^ds4tp-[gp][0-9]+-/)) return substr(name, 8, RLENGTH - 8)
      if (match(name, /^ds4tp-[0-9a-f]+-r[0-9]+-[0-9]+-/)) {
        m = substr(name, 1, RLENGTH - 1); sub(/^ds4tp-[0-9a-f]+-r[0-9]+-/, "", m); return m
      }
      return ""
    }
    function count_ours(list,  a, i, n, c) {
      if (list == "-" || list == "") return 0
      n = split(list, a, ","); c = 0
      for (i = 1; i <= n; i++) if (!(a[i] in start_names) && (shm_owner(a[i]) in ours)) c++
      return c
    }
    function count_all(list,  a) { return list == "-" || list == "" ? 0 : split(list, a, ",") }
    function mib(kb) { return sprintf("%.1f", kb / 1024) }
    function median(arr, lo, hi,  tmp, i, j, n, v) {
      n = 0
      for (i = lo; i <= hi; i++) tmp[++n] = arr[i]
      for (i = 2; i <= n; i++) { v = tmp[i]; for (j = i - 1; j >= 1 && tmp[j] > v; j--) tmp[j + 1] = tmp[j]; tmp[j + 1] = v }
      return n ? tmp[int((n + 1) / 2)] : 0
    }
    BEGIN {
      ns = split(shm_start, a, ",")
      for (i = 1; i <= ns; i++) if (a[i] != "") start_names[a[i]] = 1
      bad = 0
    }
    FILENAME ~ /\.log$/ && $1 == "start" { kv(); ours[F["pid"]] = 1; if ("rank1" in F) ours[F["rank1"]] = 1 }
    FILENAME ~ /\.log$/ && $1 == "end" { kv(); ended[F["tag"]] = 1 }
    FILENAME ~ /\.log$/ && $1 == "sample" {
      kv(); r = F["role"]
      if (!(r in nsamp)) { roles[++nroles] = r }
      k = ++nsamp[r]
      st[r, k] = F["t"] + 0; sn[r, k] = F["n"] + 0; sf[r, k] = F["fds"] + 0; sr[r, k] = F["rss_kb"] + 0
      sh[r, k] = F["threads"] + 0
    }
    FILENAME ~ /\.log$/ && $1 == "cycle" {
      kv(); g = F["tag"]
      if (!(g in cycles)) tags[++ntags] = g
      cycles[g]++; ops[g] += F["ops"]; fault[g, F["fault"]]++; outc[g, F["outcome"]]++
      addpids(F["pids"])
      if (F["code"] != "-") { codes[g, F["code"]]++; seen[g, F["code"]] = 1 }
      if ("code1" in F && F["code1"] != "-") { codes[g, F["code1"]]++; seen[g, F["code1"]] = 1 }
      f = F["fault"]
      if (F["ms"] + 0 > worst[g, f]) worst[g, f] = F["ms"] + 0
      if ("ms1" in F && F["ms1"] + 0 > worst[g, f]) worst[g, f] = F["ms1"] + 0
      if (f == "bringup-kill" && $0 ~ /msg="bring-up/) inside[g]++
    }
    FILENAME ~ /\.log$/ && $1 == "fail" { f = FILENAME; sub(/.*\//, "", f); fails[++nfails] = f ": " $0 }
    $1 == "driver" { kv(); if (F["status"] == "hung") { bad = 1; notes[++nnotes] = F["tag"] " hung past the run and was killed" }
      else if (F["status"] != "0") { bad = 1; notes[++nnotes] = F["tag"] " exited with status " F["status"] } }
    FILENAME ~ /host\.tsv$/ {
      kv()
      if ($1 == "final") { final_procs = F["procs"] + 0; final_shm = F["shm"]; next }
      k = ++nh
      ht[k] = F["t"] + 0; hp[k] = F["procs"] + 0; hf[k] = F["fds"] + 0; hth[k] = F["threads"] + 0
      hr[k] = F["rss_kb"] + 0; hs[k] = F["shm"]
    }
    END {
      print "| Process | Samples | Warm-up until | fds start / end / max | threads start / end / max | RSS MiB start / end / max | Verdict |"
      print "|---|---:|---|---|---|---|---|"
      for (i = 1; i <= nroles; i++) {
        r = roles[i]; n = nsamp[r]; b = 0
        for (k = 1; k <= n; k++) if (sn[r, k] >= 10 && st[r, k] >= warmup) { b = k; break }
        if (!b) { printf "| %s | %d | – | – | – | – | too short: no sample after the warm-up |\n", r, n; bad = 1; continue }
        mf = mh = mr = 0
        for (k = b; k <= n; k++) {
          if (sf[r, k] > mf) mf = sf[r, k]; if (sh[r, k] > mh) mh = sh[r, k]; if (sr[r, k] > mr) mr = sr[r, k]
        }
        v = ""
        if (sf[r, n] > sf[r, b]) v = v "fds grew by " sf[r, n] - sf[r, b] "; "
        if (sh[r, n] > sh[r, b]) v = v "threads grew by " sh[r, n] - sh[r, b] "; "
        tol = sr[r, b] * 0.05; if (tol < 2048) tol = 2048
        if (sr[r, n] - sr[r, b] > tol) v = v "RSS grew by " mib(sr[r, n] - sr[r, b]) " MiB; "
        if (v != "") { bad = 1; sub(/; $/, "", v); v = "**" v "**" } else v = sprintf("ok (RSS %+.1f MiB)", (sr[r, n] - sr[r, b]) / 1024)
        printf "| %s | %d | cycle %d, %.0f s | %d / %d / %d | %d / %d / %d | %s / %s / %s | %s |\n", r, n, sn[r, b], st[r, b],
          sf[r, b], sf[r, n], mf, sh[r, b], sh[r, n], mh, mib(sr[r, b]), mib(sr[r, n]), mib(mr), v
      }
      # Host: the first sample after the warm-up, the last one while drivers ran, the max.
      b = 0
      for (k = 1; k <= nh; k++) if (ht[k] >= warmup) { b = k; break }
      if (!b) b = 1
      mp = mf = mh = mr = ms = ma = 0
      for (k = 1; k <= nh; k++) {
        so = count_ours(hs[k]); sa = count_all(hs[k])
        if (so > ms) ms = so; if (sa > ma) ma = sa
        if (k < b) continue
        if (hp[k] > mp) mp = hp[k]; if (hf[k] > mf) mf = hf[k]; if (hth[k] > mh) mh = hth[k]; if (hr[k] > mr) mr = hr[k]
      }
      # The end: the last sample with every long-lived process still up.
      e = nh
      while (e > b && hp[e] < nroles) e--
      # A leak that lives outside the long-lived processes (children left
      # behind) would move the median: compare the first and last quarters
      # after the warm-up; single samples land at random moments of the cycles.
      q = int((e - b + 1) / 4); if (q < 1) q = 1
      for (k = b; k <= e; k++) { P[k] = hp[k]; FD[k] = hf[k]; TH[k] = hth[k] }
      p1 = median(P, b, b + q - 1); p2 = median(P, e - q + 1, e)
      f1 = median(FD, b, b + q - 1); f2 = median(FD, e - q + 1, e)
      t1 = median(TH, b, b + q - 1); t2 = median(TH, e - q + 1, e)
      left_ours = count_ours(final_shm); left_all = count_all(final_shm)
      print ""
      print "| Host | Start | End | Max | Verdict |"
      print "|---|---:|---:|---:|---|"
      v = left_ours ? "**" left_ours " left behind: " final_shm "**" : "ok: none left"
      if (left_ours) bad = 1
      printf "| /dev/shm ds4tp* entries of the soak (by the pid in the name) | 0 | %d | %d | %s |\n", left_ours, ms, v
      printf "| /dev/shm ds4tp* entries, all users (other tests included) | %d | %d | %d | not judged |\n", ns, left_all, ma
      v = final_procs > 0 ? "**" final_procs " still running after the run**" : "ok: all ended by themselves"
      if (p2 > p1 * 1.1 + 1) v = v "; **median grew**"
      if (final_procs > 0 || p2 > p1 * 1.1 + 1) bad = 1
      printf "| soak processes (drivers and their children) | %d | %d | %d | %s; quarter medians %d → %d |\n", hp[b], hp[e], mp, v, p1, p2
      v = f2 > f1 * 1.1 + 2 ? "**median grew**" : "ok"; if (v != "ok") bad = 1
      printf "| fds of the soak processes (sum) | %d | %d | %d | %s: quarter medians %d → %d |\n", hf[b], hf[e], mf, v, f1, f2
      v = t2 > t1 * 1.1 + 2 ? "**median grew**" : "ok"; if (v != "ok") bad = 1
      printf "| threads of the soak processes (sum) | %d | %d | %d | %s: quarter medians %d → %d |\n", hth[b], hth[e], mh, v, t1, t2
      printf "| RSS of the soak processes (sum, MiB) | %s | %s | %s | see the processes above |\n", mib(hr[b]), mib(hr[e]), mib(mr)

      print ""
      print "| Driver | Cycles | Calls done | No fault | SIGKILL | SIGSTOP + SIGCONT | Clean exit | SIGKILL in bring-up (inside it) | OK | Named error | Failed | Survivors'"'"' codes | Worst ms to the error: kill / stop / bring-up |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
      for (i = 1; i <= ntags; i++) {
        g = tags[i]; cs = ""
        for (key in seen) { split(key, kk, SUBSEP); if (kk[1] == g) cs = cs (cs == "" ? "" : ", ") kk[2] " " codes[g, kk[2]] }
        gsub(/DS4TP_/, "", cs)
        if (outc[g, "fail"] > 0) bad = 1
        printf "| %s | %d | %d | %d | %d | %d | %d | %d (%d) | %d | %d | %s | %s | %.0f / %.0f / %.0f |\n", g, cycles[g], ops[g],
          fault[g, "none"], fault[g, "kill"], fault[g, "stop"], fault[g, "exit"], fault[g, "bringup-kill"], inside[g],
          outc[g, "ok"], outc[g, "named"], (outc[g, "fail"] > 0 ? "**" outc[g, "fail"] "**" : "0"), (cs == "" ? "–" : cs),
          worst[g, "kill"], worst[g, "stop"], worst[g, "bringup-kill"]
        if (!(g in ended)) { bad = 1; notes[++nnotes] = g " did not finish (no end line)" }
      }
      if (nfails || nnotes) {
        print ""
        print "Failures:"
        print ""
        for (i = 1; i <= nnotes; i++) print "- " notes[i]
        for (i = 1; i <= nfails && i <= 30; i++) print "- `" fails[i] "`"
        if (nfails > 30) print "- … " nfails - 30 " more in the logs"
      }
      print ""
      print bad ? "Verdict: FAILED" : "Verdict: clean: nothing grew, nothing left behind, every cycle ended ok or with a named error in time"
      exit bad
    }' "$dir"/*.log "$dir/drivers.txt" "$dir/host.tsv"
}

# The header, the tables, and the results file when asked for.
publish() {
  local dir=$1 verdict=0 f
  { cat "$dir/header.md"; report "$dir" || verdict=$?; } >"$dir/soak.md"
  cat "$dir/soak.md"
  if [ -n "$results_dir" ]; then
    mkdir -p "$results_dir"
    f="$results_dir/soak-$(sed -n 's/^date=//p' "$dir/run.txt")-$host_name.md"
    { echo "# Soak: bench/soak.sh $(sed -n 's/^minutes=//p' "$dir/run.txt")"; echo; cat "$dir/soak.md"; } >"$f"
    echo "soak.sh: wrote $f"
  fi
  return "$verdict"
}

if [ -n "$report_of" ]; then
  verdict=0
  publish "$report_of" || verdict=$?
  exit "$verdict"
fi

# ---- set-up -------------------------------------------------------------------
secs=$(awk -v m="$minutes" 'BEGIN { if (m !~ /^[0-9]+(\.[0-9]+)?$/ || m <= 0) exit 1; printf "%d", m * 60 + 0.5 }') || usage
warmup=${WARMUP:-$((secs / 4 < 60 ? secs / 4 : 60))}
build="${DS4TP_BUILD_DIR:-build}"
[ -x "$build/bench/ds4tp_soak" ] || {
  echo "soak.sh: $build/bench/ds4tp_soak is not built: cmake --build $build --target ds4tp_soak" >&2
  exit 2
}
out="${OUT:-bench-out/soak}"
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
# A private copy: a rebuild of the tree during the run changes nothing
# here, and the processes running it are exactly the soak's (by /proc/PID/exe).
cp "$build/bench/ds4tp_soak" "$out/ds4tp_soak"
bin="$out/ds4tp_soak"
drivers=() names=()  # the long-lived drivers' pids and tags

soak_pids() {
  { find /proc -mindepth 2 -maxdepth 2 -name exe -lname "$bin" 2>/dev/null || true; } | cut -d/ -f3
}
shm_names() {
  local f
  for f in /dev/shm/ds4tp*; do [ -e "$f" ] && printf '%s\n' "${f#/dev/shm/}"; done
  return 0
}
# The pid that created a segment, from its name: ds4tp-gPID-..., ds4tp-pPID-...
# (groups, probes) or ds4tp-COOKIE-rN-PID-... (pairs).
shm_pid() {
  sed -E -n 's/^ds4tp-[gp]([0-9]+)-.*/\1/p; s/^ds4tp-[0-9a-f]{8}-r[0-9]+-([0-9]+)-.*/\1/p' <<<"$1"
}

cleanup() {
  local p n pid pids
  for p in "${drivers[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in 1 2 3 4 5; do
    [ -z "$(soak_pids)" ] && break
    sleep 1
  done
  # Children die with their driver (PR_SET_PDEATHSIG); anything left is killed one by one.
  for p in $(soak_pids); do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${drivers[@]}"; do wait "$p" 2>/dev/null || true; done
  # The soak's own segments still there (the logs name every pid it
  # started) have been reported by now: remove them.
  pids=" $(cat "$out"/*.log 2>/dev/null | grep -o -E '(pid|rank1|pids)=[0-9,]+' | cut -d= -f2 | tr ',\n' '  ') "
  for n in $(shm_names); do
    pid=$(shm_pid "$n")
    if [ -n "$pid" ] && [[ "$pids" == *" $pid "* ]]; then rm -f "/dev/shm/$n"; fi
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$bin" probe >"$out/probe.txt"
avail() { awk -v t="$1" '$1 == t { print $2 }' "$out/probe.txt"; }
why() { awk -v t="$1" '$1 == t { $1 = ""; $2 = ""; sub(/^  /, ""); print }' "$out/probe.txt"; }
pair_tr=() group_tr=() skipped=()
for t in tcp shm rdma; do
  if [ "$(avail "$t")" = 1 ]; then
    pair_tr+=("$t")
    [ "$t" = rdma ] || group_tr+=("$t")  # groups run over shm and tcp only
  else
    skipped+=("$t: not run: $(why "$t")")
  fi
done
for s in "${skipped[@]}"; do echo "soak: $s"; done

shm_names >"$out/shm-start.txt"
printf 'minutes=%s\nwarmup=%s\ndate=%s\n' "$minutes" "$warmup" "$(date -u +%F)" >"$out/run.txt"
{
  echo "Soak of $minutes min (warm-up $warmup s) started $(date -u '+%Y-%m-%d %H:%M UTC') on $host_name" \
    "($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) CPUs, Linux $(uname -r)), nice $(nice)," \
    "load at start $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Pairs over ${pair_tr[*]}; groups of 3 or 4 ranks over ${group_tr[*]}.$(for s in "${skipped[@]}"; do printf ' %s.' "$s"; done)"
  echo "Driver built $(date -u -r "$build/bench/ds4tp_soak" '+%Y-%m-%d %H:%M UTC'); the tree is at $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- lib include capi 2>/dev/null || echo ', lib/ or include/ changed since')."
  echo
} >"$out/header.md"
echo "soak: $minutes min ($secs s), warm-up $warmup s; pairs over ${pair_tr[*]}, groups over ${group_tr[*]}; logs in $out"

# ---- run ----------------------------------------------------------------------
launch() {  # tag, mode, transport
  "$bin" "$2" --transport "$3" --seconds "$secs" --seed "$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')" \
    --tag "$1" >"$out/$1.log" 2>"$out/$1.err" &
  drivers+=($!)
  names+=("$1")
}
for t in "${pair_tr[@]}"; do launch "pair-$t" pair "$t"; done
for t in "${group_tr[@]}"; do launch "group-$t" group "$t"; done

# The host every 2 s while a driver runs: the soak's processes, their fds,
# threads and RSS, and every ds4tp* entry in /dev/shm.
t0=$(date +%s)
host_sample() {  # label
  local pids dirs=() p procs=0 fds=0 thr=0 rss=0 shm
  pids=$(soak_pids)
  for p in $pids; do dirs+=("/proc/$p/fd"); procs=$((procs + 1)); done
  if [ "$procs" -gt 0 ]; then
    fds=$({ find "${dirs[@]}" -mindepth 1 -maxdepth 1 2>/dev/null || true; } | wc -l)
    read -r thr rss < <(for p in $pids; do cat "/proc/$p/status" 2>/dev/null || true; done |
      awk '/^Threads:/ { t += $2 } /^VmRSS:/ { r += $2 } END { print t + 0, r + 0 }')
  fi
  shm=$(shm_names | paste -sd, -)
  printf '%s t=%d procs=%d fds=%d threads=%d rss_kb=%d shm=%s\n' "$1" $(($(date +%s) - t0)) \
    "$procs" "$fds" "$thr" "$rss" "${shm:--}" >>"$out/host.tsv"
}
# Past the run plus 120 s of grace a driver counts as hung and is killed.
deadline=$((t0 + secs + 120))
while :; do
  host_sample host
  running=0
  for p in "${drivers[@]}"; do kill -0 "$p" 2>/dev/null && running=$((running + 1)); done
  [ "$running" -eq 0 ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then
    for p in "${drivers[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    break
  fi
  sleep 2
done
: >"$out/drivers.txt"
for i in "${!drivers[@]}"; do
  rc=0
  wait "${drivers[$i]}" 2>/dev/null || rc=$?
  [ "$rc" -eq 137 ] && [ "$(date +%s)" -ge "$deadline" ] && rc=hung
  echo "driver tag=${names[$i]} status=$rc" >>"$out/drivers.txt"
done
drivers=()
sleep 1  # the last children's exit and their segments' removal
host_sample final
echo "Load at the end: $(cut -d' ' -f1-3 /proc/loadavg)." >>"$out/header.md"
echo >>"$out/header.md"

verdict=0
publish "$out" || verdict=$?
exit "$verdict"
