#!/usr/bin/env bash
# ctest driver for the `ds4tp` operator tool: probe, a loopback pair per
# transport, and the failures an operator must be told about clearly.
#   cli_test.sh PATH_TO_DS4TP CASE
set -u
DS4TP="$1"
CASE="$2"
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT

fail() { echo "FAIL: $*"; for f in "$T"/*; do echo "--- $f"; cat "$f"; done; exit 1; }

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Runs a leader in the background and a worker in the foreground.
# pair_run NAME "leader args" "worker args"
pair_run() {
  local port; port=$(free_port)
  timeout 60 "$DS4TP" pair --listen "127.0.0.1:$port" --timeout 20 $2 >"$T/$1.leader.out" 2>"$T/$1.leader.err" &
  local lpid=$!
  timeout 60 "$DS4TP" pair --connect "127.0.0.1:$port" --timeout 20 $3 >"$T/$1.worker.out" 2>"$T/$1.worker.err"
  WRC=$?
  wait $lpid
  LRC=$?
}

# The Prometheus text `--metrics` printed after a 300-gate, 3 big-gate run
# (16 KiB rows, 4 MiB big gates): exact counts and bytes, format checked.
check_metrics() {
  local tr=$1 out=$2
  grep -q "^ds4tp_gates_total{rank=\"0\",transport=\"$tr\",kind=\"row\"} 300\$" "$out" || fail "metrics: row gates not 300 in $out"
  grep -q "^ds4tp_gates_total{rank=\"0\",transport=\"$tr\",kind=\"big\"} 3\$" "$out" || fail "metrics: big gates not 3"
  grep -q "^ds4tp_bytes_total{rank=\"0\",transport=\"$tr\",direction=\"sent\"} 17498112\$" "$out" || fail "metrics: bytes sent not 300 x 16384 + 3 x 4194304"
  grep -q "^# TYPE ds4tp_gate_duration_seconds histogram\$" "$out" || fail "metrics: no histogram TYPE line"
  grep -q "^ds4tp_gate_duration_seconds_count{rank=\"0\",transport=\"$tr\",kind=\"row\"} 300\$" "$out" || fail "metrics: row histogram count not 300"
}

case "$CASE" in
  probe)
    "$DS4TP" probe >"$T/probe.out" || fail "probe exited non-zero"
    grep -q "libds4tp" "$T/probe.out" || fail "probe names no library version"
    grep -qE "platform (linux|linux-posix|darwin)" "$T/probe.out" || fail "probe names no platform"
    grep -qE "^  tcp +available" "$T/probe.out" || fail "probe does not list tcp as available"
    grep -qE "^  rdma " "$T/probe.out" || fail "probe does not report rdma"
    grep -q "auto would pick" "$T/probe.out" || fail "probe does not say what auto picks"
    "$DS4TP" probe --json >"$T/probe.json" || fail "probe --json exited non-zero"
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert {t["name"] for t in d["transports"]} >= {"tcp","shm","rdma"}; assert all(t["detail"] for t in d["transports"]); assert d["platform"] in ("linux","linux-posix","darwin")' "$T/probe.json" || fail "probe --json is not the expected JSON"
    ;;
  verbs-provider)
    # The README's two-host RDMA check rehearsed on one host through the
    # test verbs provider (DS4TP_VERBS_LIB set by ctest): rdma must be there.
    [ -n "${DS4TP_VERBS_LIB:-}" ] || fail "DS4TP_VERBS_LIB is not set"
    "$DS4TP" probe >"$T/probe.out" || fail "probe exited non-zero"
    grep -qE "^  rdma +available.*fv0 port 1" "$T/probe.out" || fail "probe does not find the provider's port"
    # With rdma here, auto takes it to another host but still shm (where
    # this host has it) to a peer on the same host, as bring-up decides.
    "$DS4TP" probe --json >"$T/probe.json" || fail "probe --json exited non-zero"
    /usr/bin/python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
shm=any(t["name"]=="shm" and t["available"] for t in d["transports"])
assert d["auto_two_hosts"]=="rdma", d
assert d["auto_same_host"]==("shm" if shm else "rdma"), d' "$T/probe.json" || fail "probe's auto answer is not the library's rule: $(cat "$T/probe.json")"
    pair_run rdma "--transport rdma --count 300 --big 4194304 --metrics" "--transport rdma --count 300 --big 4194304 --json"
    [ $LRC -eq 0 ] || fail "leader exited $LRC"
    [ $WRC -eq 0 ] || fail "worker exited $WRC"
    grep -q "ds4tp pair OK: leader, transport rdma" "$T/rdma.leader.out" || fail "leader output"
    check_metrics rdma "$T/rdma.leader.out"
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["transport"]=="rdma" and d["gates"]==300' "$T/rdma.worker.out" || fail "worker JSON"
    # The leader gives the rdma link up after 100 gates: both ranks report
    # both links and the gate that moved to the standby tcp link.
    pair_run fo "--transport rdma --count 300 --big 1048576 --fail-primary-after 100" "--transport rdma --count 300 --big 1048576 --json"
    [ $LRC -eq 0 ] && [ $WRC -eq 0 ] || fail "a pair that fails over must finish ($LRC/$WRC): $(cat "$T/fo.leader.err")"
    grep -q "ds4tp pair OK: leader, transport rdma, then tcp after a failover at gate 101" "$T/fo.leader.out" || fail "leader failover output: $(cat "$T/fo.leader.out")"
    grep -qE "^  link tcp +gates from 102: 199, p50 [0-9.]+ us" "$T/fo.leader.out" || fail "no tcp link line: $(cat "$T/fo.leader.out")"
    /usr/bin/python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
assert d["ok"] and d["failover_at_gate"]==101 and d["failover_gate_ms"]>0, d
assert [l["transport"] for l in d["links"]]==["rdma","tcp"], d
assert all(l["gate_p50_us"]>0 and l["big_gate_gbps"]>0 for l in d["links"]), d' "$T/fo.worker.out" || fail "worker failover JSON: $(cat "$T/fo.worker.out")"
    # RDMA rails: fv0 and the provider's fv1 (cabled to the peer's fv1),
    # both measured and listed; every big gate split over both. The row
    # gates stay on fv0 (a test option): the two links' round trips tie,
    # and a busy machine's noise would otherwise choose.
    export DS4TP_ROW_LINK=0
    pair_run rrail "--transport rdma --rdma-device fv0 --rdma-rail fv1 --count 200 --big 4194304" "--transport rdma --rdma-device fv0 --rdma-rail fv1 --count 200 --big 4194304 --json"
    unset DS4TP_ROW_LINK
    [ $LRC -eq 0 ] && [ $WRC -eq 0 ] || fail "an rdma rails pair must finish ($LRC/$WRC): $(cat "$T/rrail.leader.err")"
    grep -qE "^  data link 1: rdma rail, carries gates, measured [0-9]+ Mbit/s" "$T/rrail.leader.out" || fail "no rdma rail line: $(cat "$T/rrail.leader.out")"
    /usr/bin/python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
assert d["ok"] and d["transport"]=="rdma", d
assert [(l["transport"],l["role"]) for l in d["data_links"]]==[("rdma","data"),("rdma","rail"),("tcp","standby")], d
assert sum(l["share"] for l in d["data_links"][:2])==1000 and all(l["share"]>0 for l in d["data_links"][:2]), d' "$T/rrail.worker.out" || fail "worker rdma rails JSON: $(cat "$T/rrail.worker.out")"
    # A group over rdma (3 processes), and 2 claimed hosts x 2 under auto:
    # rdma between the leaders.
    "$DS4TP" group --local 3 --transport rdma >"$T/group.out" 2>&1 || fail "group over rdma: $(cat "$T/group.out")"
    grep -q "rdma between every two ranks (flat)" "$T/group.out" || fail "group plan: $(cat "$T/group.out")"
    grep -q "ds4tp group OK: 3 ranks, transport rdma" "$T/group.out" || fail "group output: $(cat "$T/group.out")"
    "$DS4TP" group --local 4 --hosts 2 >"$T/tiers.out" 2>&1 || fail "tiered group: $(cat "$T/tiers.out")"
    grep -q "shm within a host, rdma across hosts between leaders 0 and 2" "$T/tiers.out" || fail "tiered plan: $(cat "$T/tiers.out")"
    ;;
  pair-*)
    tr="${CASE#pair-}"
    if ! "$DS4TP" probe --json | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if any(t["name"]==sys.argv[1] and t["available"] for t in d["transports"]) else 1)' "$tr"; then
      echo "SKIP: transport $tr is not available on this host"; exit 0
    fi
    pair_run ok "--transport $tr --count 300 --big 4194304 --metrics --trace $T/trace.%r.json" "--transport $tr --count 300 --big 4194304 --json --trace $T/trace.%r.json"
    [ $LRC -eq 0 ] || fail "leader exited $LRC"
    [ $WRC -eq 0 ] || fail "worker exited $WRC"
    grep -q "ds4tp pair OK: leader, transport $tr" "$T/ok.leader.out" || fail "leader output"
    check_metrics "$tr" "$T/ok.leader.out"
    "$DS4TP" trace merge "$T/trace.0.json" "$T/trace.1.json" -o "$T/both.json" >"$T/merge.out" 2>&1 || fail "trace merge: $(cat "$T/merge.out")"
    /usr/bin/python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
g=[e for e in d["traceEvents"] if e.get("cat")=="gate" and e["ph"]=="X"]
for pid in (0,1):
    n=sum(1 for e in g if e["pid"]==pid and e["name"]=="row gate")
    b=sum(1 for e in g if e["pid"]==pid and e["name"]=="big gate")
    assert (n,b)==(300,3), (pid,n,b)' "$T/both.json" || fail "merged trace: not 300 row + 3 big gate X events per rank"
    grep -qE "p50 [0-9.]+ us, p99 [0-9.]+ us" "$T/ok.leader.out" || fail "no latency line"
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["transport"]==sys.argv[2] and d["gates"]==300 and d["gate_p50_us"]>0 and d["big_gate_gbps"]>0' "$T/ok.worker.out" "$tr" || fail "worker JSON"
    ;;
  rails)
    # A loopback tcp pair with a rail (127.0.0.2): both links measured and
    # listed with the standby; the leader gives the striped links up after
    # 100 gates and both ranks report the move to the standby. With the row
    # gates on the rail (a test option) the rail goes with them.
    export DS4TP_ROW_LINK=1
    pair_run rails "--transport tcp --rail 127.0.0.2 --count 300 --big 4194304 --fail-primary-after 100" "--transport tcp --rail 127.0.0.2 --count 300 --big 4194304 --json"
    unset DS4TP_ROW_LINK
    [ $LRC -eq 0 ] && [ $WRC -eq 0 ] || fail "a rails pair that fails over must finish ($LRC/$WRC): $(cat "$T/rails.leader.err")"
    grep -q "ds4tp pair OK: leader, transport tcp, then tcp after a failover at gate 101" "$T/rails.leader.out" || fail "leader failover output: $(cat "$T/rails.leader.out")"
    grep -qE "^  data link 1: tcp rail, lost, measured [0-9]+ Mbit/s" "$T/rails.leader.out" || fail "no rail line: $(cat "$T/rails.leader.out")"
    grep -q "^  data link 2: tcp standby, carries gates, row gates" "$T/rails.leader.out" || fail "no standby line: $(cat "$T/rails.leader.out")"
    /usr/bin/python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
assert d["ok"] and d["failover_at_gate"]==101, d
assert [(l["role"],l["state"]) for l in d["data_links"]]==[("data","lost"),("rail","lost"),("standby","carries gates")], d
assert sum(l["share"] for l in d["data_links"][:2])==1000, d
assert all(l["big_gate_gbps"]>0 for l in d["links"]), d' "$T/rails.worker.out" || fail "worker rails JSON: $(cat "$T/rails.worker.out")"
    # The row gates on the data connection: the rail, which no gate left
    # bytes on, stays beside the standby and the big gates after go on
    # striped over both.
    export DS4TP_ROW_LINK=0
    pair_run kept "--transport tcp --rail 127.0.0.2 --count 300 --big 4194304 --fail-primary-after 100" "--transport tcp --rail 127.0.0.2 --count 300 --big 4194304 --json"
    unset DS4TP_ROW_LINK
    [ $LRC -eq 0 ] && [ $WRC -eq 0 ] || fail "a rails pair that keeps its rail must finish ($LRC/$WRC): $(cat "$T/kept.leader.err")"
    grep -qE "^  data link 1: tcp rail, carries gates" "$T/kept.leader.out" || fail "the rail is not kept: $(cat "$T/kept.leader.out")"
    /usr/bin/python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
assert d["ok"] and d["failover_at_gate"]==101, d
assert [(l["role"],l["state"]) for l in d["data_links"]]==[("data","lost"),("rail","carries gates"),("standby","carries gates")], d
assert d["data_links"][1]["share"]+d["data_links"][2]["share"]==1000, d' "$T/kept.worker.out" || fail "worker kept-rail JSON: $(cat "$T/kept.worker.out")"
    ;;
  pair-auto)
    # `ds4tp pair` prints the transport bring-up negotiated, and probe's
    # auto answer is the library's: for two ranks on this host they agree.
    want=$("$DS4TP" probe --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["auto_same_host"])') || fail "probe --json did not say what auto picks"
    pair_run auto "--count 50 --big 0" "--count 50 --big 0 --json"
    [ $LRC -eq 0 ] && [ $WRC -eq 0 ] || fail "an auto pair must pair ($LRC/$WRC)"
    grep -q "ds4tp pair OK: leader, transport $want\$" "$T/auto.leader.out" || fail "probe says auto picks $want on this host, but the leader reported: $(head -1 "$T/auto.leader.out")"
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] and d["transport"]==sys.argv[2], d' "$T/auto.worker.out" "$want" || fail "worker JSON does not report transport $want"
    ;;
  identity-mismatch)
    pair_run id "--identity n_layer=43,n_embd=4096,n_vocab=129280" "--identity n_layer=61,n_embd=4096,n_vocab=129280"
    [ $LRC -ne 0 ] && [ $WRC -ne 0 ] || fail "a mismatched identity must fail on both hosts ($LRC/$WRC)"
    grep -q "n_layer is 43 here but 61 on the peer" "$T/id.leader.err" || fail "leader must name the field and both values"
    grep -q "DS4TP_EIDENTITY" "$T/id.worker.err" || fail "worker must report an identity error"
    ;;
  wrong-key)
    head -c 32 /dev/urandom >"$T/key.a"; head -c 32 /dev/urandom >"$T/key.b"
    chmod 600 "$T/key.a" "$T/key.b"
    port=$(free_port)
    timeout 60 "$DS4TP" pair --listen "127.0.0.1:$port" --timeout 3 --key-file "$T/key.a" >"$T/wk.leader.out" 2>"$T/wk.leader.err" &
    lpid=$!
    timeout 60 "$DS4TP" pair --connect "127.0.0.1:$port" --timeout 3 --key-file "$T/key.b" >"$T/wk.worker.out" 2>"$T/wk.worker.err"
    WRC=$?
    wait $lpid; LRC=$?
    [ $WRC -eq 1 ] || fail "a worker with the wrong key must exit 1 (got $WRC)"
    grep -q "DS4TP_EAUTH" "$T/wk.worker.err" || fail "the worker must report an authentication error"
    [ $LRC -eq 1 ] || fail "the leader must give up at its deadline (got $LRC)"
    grep -qi "key" "$T/wk.leader.err" || fail "the leader must say connections failed on the key"
    # The same key on both sides pairs.
    pair_run key "--key-file $T/key.a --count 50 --big 0" "--key-file $T/key.a --count 50 --big 0"
    [ $LRC -eq 0 ] && [ $WRC -eq 0 ] || fail "the same key must pair ($LRC/$WRC)"
    ;;
  nothing-listening)
    port=$(free_port)
    start=$(date +%s)
    "$DS4TP" pair --connect "127.0.0.1:$port" --timeout 1 >"$T/nl.out" 2>"$T/nl.err"
    rc=$?
    [ $rc -eq 1 ] || fail "exit code $rc, want 1"
    [ $(( $(date +%s) - start )) -lt 10 ] || fail "did not give up at its deadline"
    grep -q "is the leader running, and is the port open on its firewall" "$T/nl.err" || fail "no advice on what to check"
    ;;
  bad-usage)
    "$DS4TP" pair >"$T/u.out" 2>"$T/u.err"; [ $? -eq 2 ] || fail "missing role must exit 2"
    grep -q "needs --listen or --connect" "$T/u.err" || fail "usage error not explained"
    "$DS4TP" frobnicate 2>"$T/u2.err"; [ $? -eq 2 ] || fail "unknown command must exit 2"
    ;;
  *) fail "unknown case $CASE" ;;
esac
echo "PASS: $CASE"
