#!/bin/sh
# Runs an example's leader ("$1 leader 0", which prints "port P" first) and
# its worker ("$1 worker 127.0.0.1 P") against each other; both must exit 0
# within 60 s. Prints both outputs for the test's pass regex.
set -u
exe=$1
dir=$(mktemp -d)
trap 'kill $lpid 2>/dev/null; rm -rf "$dir"' EXIT
timeout 60 "$exe" leader 0 >"$dir/leader" 2>&1 &
lpid=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's/^port \([0-9]*\)$/\1/p' "$dir/leader")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "leader printed no port:"; cat "$dir/leader"; exit 1; }
timeout 60 "$exe" worker 127.0.0.1 "$port" >"$dir/worker" 2>&1
wrc=$?
wait $lpid
lrc=$?
echo "--- leader (exit $lrc)"; cat "$dir/leader"
echo "--- worker (exit $wrc)"; cat "$dir/worker"
[ $lrc -eq 0 ] && [ $wrc -eq 0 ]
