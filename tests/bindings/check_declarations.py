"""The bindings' declarations against the C header.

Parses include/ds4tp/ds4tp.h and every header it includes from
include/ds4tp/ (recursively: the header may be split into topic headers)
for each DS4TP_API function prototype, then checks that
bindings/python/src/ds4tp/_declarations.py (DECLARATIONS) and the
`extern "C"` blocks of bindings/rust/ds4tp-sys/src/*.rs declare every one
with the same number of parameters and ABI-compatible types: integers of
the same size and signedness, floating point of the same size, pointers
as pointers (any pointee: the bindings type those their own way). The
return type is checked the same way. Functions a binding leaves out on
purpose are named in OMITTED with the reason. The header's constants
(status codes, enum values, integer #defines) are checked the same way by
check_constants.py. Each failure names the function or constant and what
differs; the exit status is 1 when any is found.

    python3 check_declarations.py SOURCE_DIR
"""

import ctypes
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_constants  # noqa: E402  (the constants: the same check for the header's numbers)

# Functions a binding does not declare, and why.
_STREAMS = ("the GPU stream-ordered API (README: GPU streams): an engine's C/CUDA code "
            "registers its words with the GPU runtime; no binding wraps it yet")
OMITTED = {
    "python": {f: _STREAMS for f in ("ds4tp_stream_options_init", "ds4tp_gate_stream_start",
                                     "ds4tp_group_stream_start", "ds4tp_group_stream_stop",
                                     "ds4tp_group_stream_state", "ds4tp_group_stream_seq")},
}
OMITTED["rust"] = dict(OMITTED["python"])

PTR = ("ptr",)
VOID = ("void",)


def c_int_type(size, signed):
    return ("int", size, signed)


_C_SCALARS = {
    "char": c_int_type(1, True), "signed char": c_int_type(1, True),
    "unsigned char": c_int_type(1, False), "bool": c_int_type(1, False),
    "_Bool": c_int_type(1, False), "short": c_int_type(2, True),
    "unsigned short": c_int_type(2, False), "int": c_int_type(4, True),
    "signed": c_int_type(4, True), "signed int": c_int_type(4, True),
    "unsigned": c_int_type(4, False), "unsigned int": c_int_type(4, False),
    "long": c_int_type(ctypes.sizeof(ctypes.c_long), True),
    "unsigned long": c_int_type(ctypes.sizeof(ctypes.c_long), False),
    "long long": c_int_type(8, True), "unsigned long long": c_int_type(8, False),
    "size_t": c_int_type(ctypes.sizeof(ctypes.c_size_t), False),
    "ssize_t": c_int_type(ctypes.sizeof(ctypes.c_ssize_t), True),
    "float": ("float", 4), "double": ("float", 8), "void": VOID,
}
for _bits in (8, 16, 32, 64):
    _C_SCALARS[f"int{_bits}_t"] = c_int_type(_bits // 8, True)
    _C_SCALARS[f"uint{_bits}_t"] = c_int_type(_bits // 8, False)


# ---------------------------------------------------------------------------
# The header.

def read_headers(path, root, seen=None):
    """The text of ``path`` and, in place of each include of a header under
    ``root`` (include/ds4tp), that header's text, recursively."""
    seen = set() if seen is None else seen
    if path in seen:
        return ""
    seen.add(path)
    out = []
    for line in path.read_text().splitlines():
        m = re.match(r'\s*#\s*include\s*[<"](?:ds4tp/)?([^>"]+)[>"]', line)
        if m and (root / m.group(1)).is_file():
            out.append(read_headers(root / m.group(1), root, seen))
        elif not line.lstrip().startswith("#"):
            out.append(line)
    return "\n".join(out)


def strip_c_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def split_params(params):
    """Top-level comma split (function pointer parameters keep theirs)."""
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


class Header:
    def __init__(self, text):
        self.text = strip_c_comments(text)
        self.enums = set(re.findall(r"typedef\s+enum\s+\w*\s*\{[^}]*\}\s*(\w+)\s*;", self.text))
        self.fn_types = set(re.findall(r"typedef\s+[^;(]*\(\s*\*\s*(\w+)\s*\)", self.text))
        self.functions = {}
        proto = r"DS4TP_(?:EXPERIMENTAL_)?API\s+([^;{}()]*?)\b(ds4tp_\w+)\s*\(([^;{}]*?)\)\s*;"
        for m in re.finditer(proto, self.text):
            ret, name, params = m.groups()
            ps = split_params(params)
            if ps == ["void"]:
                ps = []
            self.functions[name] = (self.c_type(ret, name), [self.c_type(p, name) for p in ps])

    def c_type(self, decl, fn):
        decl = " ".join(decl.replace("*", " * ").split())
        if "(" in decl:  # a function pointer parameter
            return PTR
        words = [w for w in decl.split() if w not in ("const", "volatile", "restrict", "struct",
                                                       "enum", "DS4TP_API",
                                                       "DS4TP_EXPERIMENTAL_API")]
        if "*" in words:
            return PTR
        # Drop the parameter name: the last word when what is left is a type.
        for n in (len(words), len(words) - 1):
            t = " ".join(words[:n])
            if t in _C_SCALARS:
                return _C_SCALARS[t]
            if t in self.enums:
                return c_int_type(4, True)
            if t in self.fn_types:
                return PTR
        raise SystemExit(f"check_declarations: cannot read the C type {decl!r} in {fn}")


# ---------------------------------------------------------------------------
# The Python declarations.

def py_type(t):
    if t is None:
        return VOID
    if t in (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p) or \
            (isinstance(t, type) and issubclass(t, (ctypes._Pointer, ctypes._CFuncPtr))):
        return PTR
    if t in (ctypes.c_float, ctypes.c_double):
        return ("float", ctypes.sizeof(t))
    if t is ctypes.c_bool:
        return c_int_type(1, False)
    signed = t(-1).value == -1
    return c_int_type(ctypes.sizeof(t), signed)


def python_functions(src):
    sys.path.insert(0, str(src / "bindings" / "python" / "src"))
    from ds4tp._declarations import DECLARATIONS  # the package's own table
    out = {}
    for block in DECLARATIONS.values():
        for name, restype, argtypes in block:
            out[name] = (py_type(restype), [py_type(a) for a in argtypes])
    return out


# ---------------------------------------------------------------------------
# The Rust declarations.

_RUST_SCALARS = {
    "c_char": c_int_type(1, True), "c_schar": c_int_type(1, True), "c_uchar": c_int_type(1, False),
    "c_short": c_int_type(2, True), "c_ushort": c_int_type(2, False),
    "c_int": c_int_type(4, True), "c_uint": c_int_type(4, False),
    "c_long": _C_SCALARS["long"], "c_ulong": _C_SCALARS["unsigned long"],
    "c_longlong": c_int_type(8, True), "c_ulonglong": c_int_type(8, False),
    "usize": _C_SCALARS["size_t"], "isize": _C_SCALARS["ssize_t"], "bool": c_int_type(1, False),
    "f32": ("float", 4), "f64": ("float", 8), "c_float": ("float", 4), "c_double": ("float", 8),
}
for _bits in (8, 16, 32, 64):
    _RUST_SCALARS[f"i{_bits}"] = c_int_type(_bits // 8, True)
    _RUST_SCALARS[f"u{_bits}"] = c_int_type(_bits // 8, False)


def rust_functions(src):
    texts = [p.read_text() for p in sorted((src / "bindings/rust/ds4tp-sys/src").glob("*.rs"))]
    text = re.sub(r"//[^\n]*", " ", "\n".join(texts))
    aliases = dict(re.findall(r"pub\s+type\s+(\w+)\s*=\s*([^;]+);", text))

    def rtype(t, fn):
        t = " ".join(t.split())
        if t in ("", "()"):
            return VOID
        if t.startswith("*") or t.startswith("Option<") or t.startswith("unsafe extern") \
                or t.startswith("extern"):
            return PTR
        t = t.split("::")[-1]
        if t in _RUST_SCALARS:
            return _RUST_SCALARS[t]
        if t in aliases:
            return rtype(aliases[t], fn)
        raise SystemExit(f"check_declarations: cannot read the Rust type {t!r} in {fn}")

    out = {}
    for block in re.finditer(r'extern\s+"C"\s*\{(.*?)\n\}', text, flags=re.S):
        proto = r"pub\s+fn\s+(ds4tp_\w+)\s*\((.*?)\)\s*(->\s*([^;]+))?;"
        for m in re.finditer(proto, block.group(1), flags=re.S):
            name, params, _, ret = m.groups()
            ps = [p.split(":", 1)[1] for p in split_params(params) if p]
            out[name] = (rtype(ret or "", name), [rtype(p, name) for p in ps])
    return out


# ---------------------------------------------------------------------------

def show(t):
    if t[0] == "int":
        return f"{'' if t[2] else 'u'}int{8 * t[1]}"
    if t[0] == "float":
        return f"float{8 * t[1]}"
    return t[0]


def compare(binding, declared, header, where):
    problems = []
    for name, (ret, params) in sorted(header.functions.items()):
        if name in OMITTED[binding]:
            continue
        if name not in declared:
            problems.append(f"{binding}: {name} is in the header but not declared in {where}")
            continue
        dret, dparams = declared[name]
        if len(dparams) != len(params):
            problems.append(f"{binding}: {name} takes {len(params)} parameters in the header, "
                            f"{len(dparams)} in {where}")
            continue
        if dret != ret:
            problems.append(f"{binding}: {name} returns {show(ret)} in the header, "
                            f"{show(dret)} in {where}")
        for i, (a, b) in enumerate(zip(params, dparams)):
            if a != b:
                problems.append(f"{binding}: {name} parameter {i + 1} is {show(a)} in the header, "
                                f"{show(b)} in {where}")
    for name in sorted(set(declared) - set(header.functions)):
        problems.append(f"{binding}: {name} is declared in {where} but is not in the header")
    return problems


def check(src):
    """The problems found in the source tree ``src`` (a list of lines)."""
    root = src / "include" / "ds4tp"
    header = Header(read_headers(root / "ds4tp.h", root))
    # Declarations start a line with the export macro (the macros' own
    # definitions do not, nor the attribute line inside one).
    n_api = len([ln for ln in re.findall(r"^[ \t]*DS4TP_(?:EXPERIMENTAL_)?API\b.*$", header.text, re.M)
                 if "__attribute__" not in ln])
    if len(header.functions) < 50 or len(header.functions) != n_api:
        return [f"read {len(header.functions)} prototypes but the headers have {n_api} "
                "DS4TP_API declarations (the parser missed some)"], header
    problems = compare("python", python_functions(src), header,
                       "bindings/python/src/ds4tp/_declarations.py")
    problems += compare("rust", rust_functions(src), header, "bindings/rust/ds4tp-sys/src/*.rs")
    const_problems, header.constants = check_constants.check(src)
    return problems + const_problems, header


def self_test(src):
    """The check on altered copies of the tree: a header split into a topic
    header still passes; a parameter dropped, a type changed or a function
    added fails, naming it. Each alteration runs in a fresh interpreter
    (the Python table is imported)."""
    import shutil
    import subprocess
    import tempfile
    cases = [
        ("split", "include/ds4tp/ds4tp_groups.h", None, None),
        ("python count", "bindings/python/src/ds4tp/_declarations.py",
         '("ds4tp_group_broadcast", c_int, [c_void_p, c_void_p, c_uint64, c_int])',
         '("ds4tp_group_broadcast", c_int, [c_void_p, c_void_p, c_uint64])'),
        ("rust type", "bindings/rust/ds4tp-sys/src/lib.rs",
         "pub fn ds4tp_slab_bytes(pair: *const ds4tp_pair) -> u64;",
         "pub fn ds4tp_slab_bytes(pair: *const ds4tp_pair) -> u32;"),
        ("new function", "include/ds4tp/ds4tp_groups.h",
         "DS4TP_EXPERIMENTAL_API int ds4tp_group_barrier(",
         "DS4TP_EXPERIMENTAL_API int ds4tp_group_fresh(ds4tp_group *g, int x);\n"
         "DS4TP_EXPERIMENTAL_API int ds4tp_group_barrier("),
        ("rust constant", "bindings/rust/ds4tp-sys/src/lib.rs",
         "pub const DS4TP_TRANSPORT_RDMA: c_int = 3;", "pub const DS4TP_TRANSPORT_RDMA: c_int = 4;"),
        ("new transport", "include/ds4tp/ds4tp.h", "DS4TP_TRANSPORT_RDMA = 3\n",
         "DS4TP_TRANSPORT_RDMA = 3,\n  DS4TP_TRANSPORT_NEW = 4\n"),
    ]
    want = {"split": None, "python count": "ds4tp_group_broadcast takes 4 parameters",
            "rust type": "ds4tp_slab_bytes returns uint64 in the header, uint32",
            "new function": "ds4tp_group_fresh is in the header but not declared",
            "rust constant": "rust: DS4TP_TRANSPORT_RDMA is 3 in the header, 4",
            "new transport": "python: DS4TP_TRANSPORT_NEW = 4 is in the header but not in"}
    failed = []
    for name, rel, old, new in cases:
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            for d in ("include/ds4tp", "bindings/python/src", "bindings/rust/ds4tp-sys/src"):
                shutil.copytree(src / d, t / d, ignore=shutil.ignore_patterns("__pycache__"))
            f = t / rel
            text = f.read_text()
            if old is None:  # the groups topic split again, into a header of its own
                at = text.index("typedef struct ds4tp_group ds4tp_group;")
                end = text.index("#endif /* DS4TP_GROUPS_H */", at)
                (t / "include/ds4tp/ds4tp_topic_groups.h").write_text(text[at:end])
                text = text[:at] + '#include "ds4tp/ds4tp_topic_groups.h"\n' + text[end:]
            else:
                assert old in text, f"self-test {name}: {old!r} not found in {rel}"
                text = text.replace(old, new)
            f.write_text(text)
            r = subprocess.run([sys.executable, __file__, str(t)], capture_output=True, text=True)
            if want[name] is None and r.returncode != 0:
                failed.append(f"self-test {name}: the check failed:\n{r.stdout}{r.stderr}")
            elif want[name] is not None and (r.returncode == 0 or want[name] not in r.stdout):
                failed.append(f"self-test {name}: want a failure saying {want[name]!r}, got "
                              f"exit {r.returncode}:\n{r.stdout}{r.stderr}")
    return failed


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    src = Path(args[0] if args else Path(__file__).resolve().parents[2])
    if "--self-test" in sys.argv:
        failed = self_test(src)
        for f in failed:
            print("check_declarations FAIL:", f)
        if failed:
            return 1
        print("self-test OK: a split header passes; a dropped parameter, a changed type, a "
              "new function, a changed constant and a new enum value are named")
    problems, header = check(src)
    for p in problems:
        print("check_declarations FAIL:", p)
    if problems:
        return 1
    print(f"declarations OK: {len(header.functions)} C functions and {header.constants} "
          "constants, each declared alike in the Python and Rust bindings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
