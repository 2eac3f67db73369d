"""Writes a bench script's table to results/<kind>-<date>-<host>.md (the
host from DS4TP_BENCH_HOST, else the hostname), one file per host, day
and kind; shared by the scripts that generate results files."""

import datetime
import os
import socket
import sys


def write(out_dir, kind, script, text):
    """The file's path, after writing "# script: day on host" and text."""
    os.makedirs(out_dir, exist_ok=True)
    host = os.environ.get("DS4TP_BENCH_HOST", socket.gethostname())
    day = datetime.date.today().isoformat()
    path = os.path.join(out_dir, f"{kind}-{day}-{host}.md")
    with open(path, "w") as f:
        f.write(f"# {script}: {day} on {host}\n\n{text}")
    print(f"{script}: wrote {path}", file=sys.stderr)
    return path
