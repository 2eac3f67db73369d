#!/usr/bin/python3
"""Minimal worker for leader.py: mirrors its gates, then serves its
commands with Python callbacks until STOP.

    ./worker.py 127.0.0.1 7070
"""
import array
import sys

import ds4tp


class Engine:
    """One method per command kind this worker supports (ds4tp_worker_ops names)."""

    def session_create(self, pair, cmd, reply):
        print(f"session {cmd.session_id} with ctx {cmd.ctx_size}")

    def eval(self, pair, cmd, reply):
        reply.logits[:] = array.array("f", [float(cmd.token)] * reply.logits_floats)


ident = ds4tp.Identity(model_bytes=1, n_layer=2, n_embd=64, n_vocab=1000)
host, port = (sys.argv[1], int(sys.argv[2])) if len(sys.argv) > 2 else ("127.0.0.1", 7070)
with ds4tp.Pair(ds4tp.Options.worker(host, port), ident) as tp:
    tp.connect()                      # dials with retry until the leader answers
    tp.attach_slab()
    seq = 0
    for layer in range(ident.n_layer):
        for gate in (ds4tp.GATE_ATTN, ds4tp.GATE_FFN):
            tp.out_vector(layer, gate)[:] = array.array("f", [2.0] * 64)
            seq += 1
            tp.gate_exchange(layer, gate, seq)
            print(f"layer {layer} gate {gate}: leader sent {tp.in_vector(layer, gate)[0]}")
    tp.worker_run(Engine())           # returns at the leader's STOP
