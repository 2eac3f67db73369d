#!/usr/bin/env python3
"""Checks that every relative link target in the repository's *.md files
exists (and, for a link with #anchor into a .md file, that the heading
exists).  Usage: scripts/check-md-links.py [REPO_ROOT]"""
import os, re, subprocess, sys
root = sys.argv[1] if len(sys.argv) > 1 else "."
files = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "*.md"],
                       capture_output=True, text=True, check=True).stdout.split()
link = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
def anchors(path):
    out = set()
    in_code = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"): in_code = not in_code
        if in_code: continue
        m = re.match(r"#+\s+(.*)", line)
        if m:
            a = m.group(1).strip().lower()
            a = re.sub(r"[^\w\- ]", "", a).replace(" ", "-")
            out.add(a)
    return out
bad = 0
for f in files:
    text = open(os.path.join(root, f), encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    for m in link.finditer(text):
        t = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", t): continue
        path, _, frag = t.partition("#")
        target = os.path.normpath(os.path.join(root, os.path.dirname(f), path)) if path else os.path.join(root, f)
        if not os.path.exists(target):
            print(f"{f}: missing {t}"); bad += 1
        elif frag and target.endswith(".md") and frag not in anchors(target):
            print(f"{f}: no anchor {t}"); bad += 1
print(f"{len(files)} files checked, {bad} bad links")
sys.exit(1 if bad else 0)
