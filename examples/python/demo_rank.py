#!/usr/bin/python3
"""One rank of the C demo's toy model (examples/demo/ds4tp_demo.c) in Python.

It plays either side against ``ds4tp_demo``: same weights, same float32
arithmetic, same token walk, so the demo's bit-identity checks pass across
languages. Python floats are doubles; every float32 operation of the C code
is reproduced by rounding its exact double result to float32 (for +, * and
the values involved, double rounding gives the correctly rounded float).

    ds4tp_demo --role leader --port 7070 --layers 2 --embd 64 --ffn 16 --tokens 4
    demo_rank.py --role worker --connect 127.0.0.1:7070 --layers 2 --embd 64 --ffn 16 --tokens 4

    demo_rank.py --role leader --port 0 ...     (prints "port P")
    ds4tp_demo --role worker --connect 127.0.0.1:P ...

Pure Python: keep --embd and --ffn small (the demo's defaults would take
minutes per token).
"""

import argparse
import math
import struct
import sys

import ds4tp

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_M64 = (1 << 64) - 1


def f32(x):
    """Rounds a Python float to the nearest float32."""
    return _F32.unpack(_F32.pack(x))[0]


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


_TENTH = f32(0.1)
_TEN = f32(10.0)


def weight(a, b, c):
    h = mix(((a * 0x100000001B3) & _M64) ^ mix((b * 131 + c) & _M64))
    return f32(f32((h >> 40) / float(1 << 24) - 0.5) * _TENTH)


class Block:
    """One gate's half-block for one rank: up (half x embd), down (embd x half)."""

    def __init__(self, embd, ffn, layer, gate, rank):
        half = ffn // 2
        gid = layer * 2 + gate
        self.embd, self.half = embd, half
        self.up = [[weight(gid * 2, rank * half + r, e) for e in range(embd)] for r in range(half)]
        self.down = [[weight(gid * 2 + 1, e, rank * half + r) for r in range(half)]
                     for e in range(embd)]

    def forward(self, h):
        """partial = down * relu(up * rmsnorm(h)), float32 step by step."""
        ss = 0.0
        for v in h:
            ss += v * v  # exact in double, summed in double like the C code
        inv = f32(1.0 / math.sqrt(ss / self.embd + 1e-6))
        x = [f32(v * inv) for v in h]
        act = []
        for w in self.up:
            s = 0.0
            for we, xe in zip(w, x):
                s = f32(s + f32(we * xe))
            act.append(s if s > 0 else 0.0)
        out = []
        for w in self.down:
            s = 0.0
            for wr, ar in zip(w, act):
                s = f32(s + f32(wr * ar))
            out.append(s)
        return out


def embed(embd, token):
    return [f32(weight(0xE11B, token, e) * _TEN) for e in range(embd)]


def next_token(h):
    acc = 0
    for v in h:
        acc = mix(acc ^ _U32.unpack(_F32.pack(v))[0])
    return acc % 32000


def demo_identity(layers, embd, ffn):
    """The identity ds4tp_demo presents for these dimensions."""
    return ds4tp.Identity(model_bytes=layers * 2 * ffn * embd * 8, model_id=0xD3110,
                          n_layer=layers, n_embd=embd, n_vocab=32000, quant_bits=32,
                          ctx_size=4096)


def run(pair, layers, embd, ffn, tokens):
    """Plays the demo's token loop on a connected-or-not ``pair``.

    Returns (mismatches against the single-process reference, whether the
    final hidden state equals the peer's)."""
    rank = pair.rank
    ngates = layers * 2
    mine = [Block(embd, ffn, g // 2, g % 2, rank) for g in range(ngates)]
    full = [(Block(embd, ffn, g // 2, g % 2, 0), Block(embd, ffn, g // 2, g % 2, 1))
            for g in range(ngates)]
    pair.connect()
    pair.attach_slab()
    outs = [pair.out_vector(g // 2, g % 2) for g in range(ngates)]
    ins = [pair.in_vector(g // 2, g % 2) for g in range(ngates)]
    token = ref_token = 1
    mismatches = 0
    seq = 0
    for _ in range(tokens):
        h, ref = embed(embd, token), embed(embd, ref_token)
        for g in range(ngates):
            outs[g][:] = _floats(mine[g].forward(h))
            seq += 1
            pair.gate_exchange(g // 2, g % 2, seq)
            out, inp = outs[g].tolist(), ins[g].tolist()
            h = [f32(he + f32(o + i)) for he, o, i in zip(h, out, inp)]
            p0, p1 = full[g][0].forward(ref), full[g][1].forward(ref)
            ref = [f32(re + f32(a + b)) for re, a, b in zip(ref, p0, p1)]
        mismatches += h != ref
        token, ref_token = next_token(h), next_token(ref)
    final = _floats(h)
    peer = bytearray(len(final) * 4)
    pair.big_gate_exchange(0, 1, final.tobytes(), peer)
    return mismatches, bytes(peer) == final.tobytes()


def _floats(values):
    import array
    return array.array("f", values)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=["leader", "worker"], required=True)
    p.add_argument("--port", type=int, default=0, help="leader: port to listen on")
    p.add_argument("--listen", default="127.0.0.1", help="leader: address to listen on")
    p.add_argument("--connect", help="worker: HOST:PORT of the leader")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embd", type=int, default=64)
    p.add_argument("--ffn", type=int, default=16)
    p.add_argument("--tokens", type=int, default=4)
    a = p.parse_args(argv)
    if a.role == "leader":
        opt = ds4tp.Options.leader(port=a.port, host=a.listen)
    else:
        if not a.connect or ":" not in a.connect:
            p.error("--role worker needs --connect HOST:PORT")
        host, port = a.connect.rsplit(":", 1)
        opt = ds4tp.Options.worker(host, int(port))
    ident = demo_identity(a.layers, a.embd, a.ffn)
    try:
        with ds4tp.Pair(opt, ident) as pair:
            if a.role == "leader":
                print(f"port {pair.listen_port}", flush=True)
            mismatches, same = run(pair, a.layers, a.embd, a.ffn, a.tokens)
            transport = ds4tp.transport_name(pair.transport)
    except ds4tp.Error as e:
        print(f"demo_rank: {e}", file=sys.stderr)
        return 1
    print(f"python {a.role}: {a.tokens} tokens over {transport}; reference "
          f"{'bit-identical' if not mismatches else 'MISMATCH'}, peer "
          f"{'bit-identical' if same else 'MISMATCH'}")
    ok = not mismatches and same
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
