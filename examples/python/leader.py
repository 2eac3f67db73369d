#!/usr/bin/python3
"""Minimal leader: swaps one partial per gate with worker.py for one token,
then mirrors one EVAL to the worker and reads its logits half.

    ./leader.py 7070          (then ./worker.py 127.0.0.1 7070)
    ./leader.py 0             (prints "port P": a free port)
"""
import array
import sys

import ds4tp

ident = ds4tp.Identity(model_bytes=1, n_layer=2, n_embd=64, n_vocab=1000)
port = int(sys.argv[1]) if len(sys.argv) > 1 else 7070
with ds4tp.Pair(ds4tp.Options.leader(port=port), ident) as tp:
    print(f"port {tp.listen_port}", flush=True)  # port 0 picks a free one
    tp.connect()                      # waits for the worker, checks its identity
    tp.attach_slab()
    seq = 0
    for layer in range(ident.n_layer):
        for gate in (ds4tp.GATE_ATTN, ds4tp.GATE_FFN):
            tp.out_vector(layer, gate)[:] = array.array("f", [1.0] * 64)  # this rank's partial
            seq += 1
            tp.gate_exchange(layer, gate, seq)
            print(f"layer {layer} gate {gate}: worker sent {tp.in_vector(layer, gate)[0]}")
    tp.send_session_create(1, 4096)
    tp.wait_ack(1)
    tp.send_eval(1, seq=1, token=42, logits_floats=8)
    print("worker logits half:", list(tp.recv_logits(8)))
    tp.send_stop()
