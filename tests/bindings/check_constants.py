"""The bindings' constants against the C header (check_declarations.py runs
this after the functions).

Every integer the headers under include/ds4tp/ define (status codes,
members of each enum, integer #defines) must be in both bindings with the
same value: in Python (bindings/python/src/ds4tp/_constants.py) as a
member of the IntEnum class whose docstring names the C enum type, the
members' shared prefix dropped (ds4tp_transport's DS4TP_TRANSPORT_RDMA is
Transport.RDMA), or else as a module-level name without DS4TP_
(DS4TP_GATE_FFN is GATE_FFN); in Rust (bindings/rust/ds4tp-sys/src/*.rs)
as `pub const DS4TP_...`. A Rust constant the header does not have is a
problem too. Names ending in "_" are the header's own sentinels.
"""

import ast
import re

# Header constants a binding leaves out on purpose, and why.
_STREAMS = "the GPU stream-ordered API, which no binding wraps (check_declarations.py)"
OMITTED = {"python": {"DS4TP_STREAM_SEQ": _STREAMS, "DS4TP_STREAM_FIXED": _STREAMS}}
OMITTED["rust"] = dict(OMITTED["python"])

_WORDS = {"UINT64_MAX": (1 << 64) - 1, "INT32_MAX": (1 << 31) - 1, "UINT32_MAX": (1 << 32) - 1}


def _number(text):
    text = text.strip().strip("()").strip()
    if text in _WORDS:
        return _WORDS[text]
    m = re.fullmatch(r"(-?)\s*(0x[0-9a-fA-F]+|\d+)[uUlL]*", text)
    if not m:
        return None
    return int(m.group(1) + m.group(2), 0)


def header_constants(root):
    """{name: (value, C enum type or None)} from every header under root."""
    raw = "\n".join(p.read_text() for p in sorted(root.glob("*.h")))
    text = re.sub(r"/\*.*?\*/", " ", raw, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out = {}
    for name, value in re.findall(r"\bXX\((\w+),\s*(-?\d+)\s*,", text):  # DS4TP_STATUS_MAP
        out["DS4TP_" + name] = (int(value), "ds4tp_status")
    for m in re.finditer(r"\benum\s*(\w*)\s*\{([^}]*)\}\s*(\w*)\s*;", text):
        ctype = m.group(3) or m.group(1) or None
        for name, value in re.findall(r"\b(DS4TP_\w+)\s*=\s*([^,]+)", m.group(2)):
            v = _number(value)
            if v is not None and not name.endswith("_"):
                out[name] = (v, ctype)
    for name, value in re.findall(r"^[ \t]*#[ \t]*define[ \t]+(DS4TP_\w+)[ \t]+([^\n\\]+)$",
                                  text, re.M):
        v = _number(value)
        if v is not None and not name.endswith("_"):
            out[name] = (v, None)
    return out


def _prefixes(consts):
    """The shared prefix of each C enum type's members ("DS4TP_TRANSPORT_"):
    the longest one ending in "_" (of two members or more)."""
    members = {}
    for name, (_, ctype) in consts.items():
        if ctype:
            members.setdefault(ctype, []).append(name)
    out = {}
    for ctype, names in members.items():
        prefix = "DS4TP_"
        if len(names) > 1:
            common = names[0]
            for n in names[1:]:
                while not n.startswith(common):
                    common = common[:-1]
            prefix = common[:common.rfind("_") + 1] or prefix
        out[ctype] = prefix
    return out


def _value(node):
    """An int from a constant expression of the binding (1 << 64) - 1, or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and \
            not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _value(node.operand)
        return None if v is None else -v
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left), _value(node.right)
        ops = {ast.LShift: lambda x, y: x << y, ast.Sub: lambda x, y: x - y,
               ast.Add: lambda x, y: x + y, ast.BitOr: lambda x, y: x | y}
        if a is not None and b is not None and type(node.op) in ops:
            return ops[type(node.op)](a, b)
    return None


def python_constants(src):
    """({C name: value} of module-level names, {C enum type: {member: value}})
    as the package's modules spell them, read without importing them."""
    flat, classes = {}, {}
    for f in sorted((src / "bindings/python/src/ds4tp").glob("*.py")):
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts))  # A, B = 0, 1
                for name, value in pairs:
                    v = _value(value)
                    if isinstance(name, ast.Name) and name.id.isupper() and v is not None:
                        flat["DS4TP_" + name.id] = v
            elif isinstance(node, ast.ClassDef):
                doc = (ast.get_docstring(node) or "").strip()
                first = re.match(r"(ds4tp_\w+|DS4TP_\* status codes)", doc)
                if not first:
                    continue
                ctype = "ds4tp_status" if first.group(1).startswith("DS4TP_*") else first.group(1)
                members = classes.setdefault(ctype, {})
                for item in node.body:
                    if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                        v = _value(item.value)
                        if v is not None:
                            members[item.targets[0].id] = v
    return flat, classes


def rust_constants(src):
    """{name: (value or None when it is an expression, file)} of ds4tp-sys."""
    out = {}
    for f in sorted((src / "bindings/rust/ds4tp-sys/src").glob("*.rs")):
        for name, value in re.findall(r"pub\s+const\s+(DS4TP_\w+)\s*:\s*\w+\s*=\s*([^;]+);",
                                      f.read_text()):
            value = " ".join(value.split())
            words = {"u64::MAX": (1 << 64) - 1, "u32::MAX": (1 << 32) - 1}
            out[name] = (words.get(value, _number(value.replace("_", ""))), f.name)
    return out


def check(src):
    """Problems (a list of lines) and how many header constants were read."""
    consts = header_constants(src / "include" / "ds4tp")
    if len(consts) < 60:
        return [f"read only {len(consts)} constants from the headers (the parser missed some)"], 0
    problems = []
    prefixes = _prefixes(consts)
    flat, classes = python_constants(src)
    for name, (value, ctype) in sorted(consts.items()):
        if name in OMITTED["python"]:
            continue
        if ctype in classes:
            member = name[len(prefixes[ctype]):]
            got = classes[ctype].get(member)
            where = f"the class for {ctype}, member {member}"
        else:
            got, where = flat.get(name), f"module-level {name[len('DS4TP_'):]}"
        if got is None:
            problems.append(f"python: {name} = {value} is in the header but not in "
                            f"_constants.py ({where})")
        elif got != value:
            problems.append(f"python: {name} is {value} in the header, {got} in _constants.py "
                            f"({where})")
    rust = rust_constants(src)
    for name, (value, _) in sorted(consts.items()):
        if name in OMITTED["rust"]:
            continue
        if name not in rust:
            problems.append(f"rust: {name} = {value} is in the header but not declared in "
                            "ds4tp-sys")
        elif rust[name][0] is not None and rust[name][0] != value:
            problems.append(f"rust: {name} is {value} in the header, {rust[name][0]} in "
                            f"ds4tp-sys/src/{rust[name][1]}")
    defined = set(re.findall(r"#[ \t]*define[ \t]+(DS4TP_\w+)",
                             "\n".join(p.read_text() for p in (src / "include/ds4tp").glob("*.h"))))
    for name in sorted(set(rust) - set(consts) - defined):
        problems.append(f"rust: {name} is declared in ds4tp-sys/src/{rust[name][1]} but is not "
                        "in the header")
    return problems, len(consts)
