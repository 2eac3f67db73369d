#!/usr/bin/env bash
# The group fault matrix's long run (docs/RELIABILITY.md, "Group faults"):
# PARALLEL copies of test_group_faults at DS4TP_FAULT_TRIALS=TRIALS each
# (24 x TRIALS trials per copy: 12 x TRIALS kill / stop, 6 x TRIALS kill /
# stop over rdma where the test verbs provider builds, 6 x TRIALS relay),
# then one table that adds their group-fault-summary lines up per axis.
#   bench/group_faults.sh TRIALS [PARALLEL] [--results-dir DIR]
#   bench/group_faults.sh --report RUN_DIR [--results-dir DIR]   the table again
# Needs build/tests/test_group_faults (DS4TP_BUILD_DIR overrides build/);
# the binary is copied first, so a rebuild during the run changes nothing.
# Output: bench-out/group-faults/ (OUT overrides it): run<i>.log and
# table.md. --results-dir DIR also writes the table to
# DIR/group-faults-<YYYY-MM-DD>-<host>.md (host: DS4TP_BENCH_HOST, default
# uname -n). Exit status: 0 when every trial ended well, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

trials="" parallel=4 report_of="" results_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --report) report_of=$2; shift 2 ;;
    --results-dir) results_dir=$2; shift 2 ;;
    *) if [ -z "$trials" ]; then trials=$1; else parallel=$1; fi; shift ;;
  esac
done

if [ -n "$report_of" ]; then
  out=$report_of
else
  [ -n "$trials" ] || { echo "usage: bench/group_faults.sh TRIALS [PARALLEL] [--results-dir DIR]" >&2; exit 2; }
  bin="${DS4TP_BUILD_DIR:-build}/tests/test_group_faults"
  [ -x "$bin" ] || { echo "bench/group_faults.sh: no $bin (build the tests first)" >&2; exit 2; }
  out=${OUT:-bench-out/group-faults}
  rm -rf "$out" && mkdir -p "$out"
  cp "$bin" "$out/test_group_faults"
  started=$(date +%s)
  for i in $(seq 1 "$parallel"); do
    DS4TP_FAULT_TRIALS=$trials "$out/test_group_faults" >"$out/run$i.log" 2>&1 &
  done
  wait || true
  echo "$(( $(date +%s) - started ))" >"$out/seconds"
fi

set +e
/usr/bin/env python3 - "$out" >"$out/table.md" <<'EOF'
import glob, os, re, sys
out = sys.argv[1]
cols = ["trials", "named-within-deadline", "late", "hang", "crash", "not-named-or-wrong-bits",
        "split", "other cause"]
rows, notes, logs = {}, [], sorted(glob.glob(os.path.join(out, "run*.log")))
for path in logs:
    for line in open(path, errors="replace"):
        if line.startswith("  note: "):
            notes.append(line.strip()[len("note: "):])
        if not line.startswith("group-fault-summary: "):
            continue
        parts = [p.strip() for p in line[len("group-fault-summary: "):].split("|")]
        r = rows.setdefault(parts[0], {"codes": {}, "worst": 0.0, **{c: 0 for c in cols}})
        for p in parts[1:]:
            m = re.match(r"([a-z -]+?) (\S+)( ms)?$", p)
            if not m:
                continue
            k, v = m.group(1), m.group(2)
            if k in cols:
                r[k] += int(v)
            elif k == "codes":
                for kv in filter(None, v.split(",")):
                    name, n = kv.split("=")
                    r["codes"][name] = r["codes"].get(name, 0) + int(n)
            elif k == "worst":
                r["worst"] = max(r["worst"], float(v))
secs = open(os.path.join(out, "seconds")).read().strip() if os.path.exists(os.path.join(out, "seconds")) else "?"
print(f"{len(logs)} parallel runs, {secs} s; each axis adds the three matrices' trials "
      "(kill / stop, kill / stop over rdma, relay) of every run.\n")
print("| Axis | Trials | Named in time | Late | Hang | Crash | Unnamed or wrong bits | Split | "
      "Other cause | Worst | Codes |")
print("|---|" + "---|" * 10)
order = sorted(rows, key=lambda k: (k != "all", k))
for k in order:
    r = rows[k]
    codes = ", ".join(f"{n.replace('DS4TP_', '')} {v}" for n, v in sorted(r["codes"].items()))
    print(f"| {k} | " + " | ".join(str(r[c]) for c in cols) + f" | {r['worst']:.0f} ms | {codes} |")
if notes:
    print("\nNotes of the trials that did not end well:\n")
    for n in notes:
        print(f"- {n}")
bad = sum(rows.get("all", {}).get(c, 0) for c in cols[2:])
sys.exit(1 if bad or "all" not in rows else 0)
EOF
rc=$?
set -e
cat "$out/table.md"
if [ -n "$results_dir" ]; then
  mkdir -p "$results_dir"
  f="$results_dir/group-faults-$(date +%F)-${DS4TP_BENCH_HOST:-$(uname -n)}.md"
  { echo "# bench/group_faults.sh: $(date +%F) on ${DS4TP_BENCH_HOST:-$(uname -n)}"; echo; cat "$out/table.md"; } >"$f"
  echo "bench/group_faults.sh: wrote $f" >&2
fi
exit $rc
