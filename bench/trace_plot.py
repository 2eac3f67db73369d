#!/usr/bin/python3
"""Per-token breakdown of a ds4tp trace: for each decoded token, the time its
row gates spent waiting for the peer vs moving bytes, one stacked bar per
token.

    /usr/bin/python3 bench/trace_plot.py TRACE.json OUT.png [--rank R] [--per-token N]

TRACE.json is what DS4TP_TRACE / ds4tp_trace_start / `ds4tp pair --trace`
wrote, or a `ds4tp trace merge` of two (then --rank picks one, default 0).
A token is `gates_per_token` consecutive row gates (from the trace's
otherData, or --per-token). Needs python3-matplotlib only.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    args = [a for a in argv[1:]]
    rank, per_token = 0, 0
    if "--rank" in args:
        i = args.index("--rank")
        rank = int(args[i + 1])
        del args[i:i + 2]
    if "--per-token" in args:
        i = args.index("--per-token")
        per_token = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(args[0]) as f:
        trace = json.load(f)
    per_token = per_token or int(trace.get("otherData", {}).get("gates_per_token", 0) or 16)
    rows = [e for e in trace["traceEvents"]
            if e.get("cat") == "gate" and e.get("name") == "row gate" and e.get("pid") == rank
            and e["args"].get("rc", 0) == 0]
    if not rows:
        print(f"no row gates of rank {rank} in {args[0]}", file=sys.stderr)
        return 1
    rows.sort(key=lambda e: e["args"]["seq"])
    wait, move = {}, {}
    for e in rows:
        tok = (e["args"]["seq"] - 1) // per_token
        w = max(e["args"].get("wait_us", -1), 0.0)
        wait[tok] = wait.get(tok, 0.0) + w
        move[tok] = move.get(tok, 0.0) + max(e["dur"] - w, 0.0)
    toks = sorted(wait)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.bar(toks, [move[t] for t in toks], label="moving bytes (after the peer's first data)",
           color="#1f77b4", width=1.0)
    ax.bar(toks, [wait[t] for t in toks], bottom=[move[t] for t in toks],
           label="waiting for the peer", color="#ff7f0e", width=1.0)
    ax.set_xlabel(f"token ({per_token} row gates each)")
    ax.set_ylabel("time in row gates per token (us)")
    other = trace.get("otherData", {})
    tr = other.get("transport", "")
    ax.set_title(f"Where a token's gate time goes: rank {rank}{', ' + tr if tr else ''}")
    ax.legend(loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args[1], dpi=110)
    tw, tm = sum(wait.values()), sum(move.values())
    print(f"{args[1]}: {len(toks)} tokens, {len(rows)} row gates; peer wait {tw / 1e3:.1f} ms, "
          f"moving {tm / 1e3:.1f} ms ({100 * tw / max(tw + tm, 1e-9):.0f}% waiting)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
