"""The newcomer's Python program (tests/install/newcomer.sh): a local group
of three ranks (threads), one all-reduce of 8 f32 each, every rank's bits
compared; prints rank 0's bits."""
import array
import threading

import ds4tp

RANKS, COUNT = 3, 8
groups = ds4tp.Group.local(RANKS)
vecs = [array.array("f", [1.0 / (3 + i + r) for i in range(COUNT)]) for r in range(RANKS)]
ts = [threading.Thread(target=g.all_reduce, args=(v,)) for g, v in zip(groups, vecs)]
for t in ts:
    t.start()
for t in ts:
    t.join(60)
for r, v in enumerate(vecs):
    assert v.tobytes() == vecs[0].tobytes(), f"rank {r}'s bits differ from rank 0's"
print("newcomer all-reduce python:",
      " ".join(f"{b:08x}" for b in array.array("I", vecs[0].tobytes())), "from", ds4tp.library_path())
for g in groups:
    g.close()
