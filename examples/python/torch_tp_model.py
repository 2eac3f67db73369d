"""A small decoder split for tensor parallelism the way Megatron-LM and vLLM
split it, for examples/python/torch_tp.py.

Every rank builds the whole model from one seed and keeps its share:

* embedding: vocab-parallel (rank r holds rows r*V/N..); a token outside
  a rank's rows embeds to zeros, and an all_reduce sums the one row in;
* attention: q, k and v column-parallel (rank r computes heads r*H/N..,
  with their own KV cache); the output projection row-parallel (the rows
  of those heads), its partials summed by an all_reduce;
* MLP (SwiGLU): gate and up column-parallel, down row-parallel, summed by
  an all_reduce;
* LM head: column-parallel over the vocabulary; an all_gather joins the
  logits.

So one token costs 2 * layers + 1 all_reduces and one all_gather.
The collectives come in as functions, so the same code runs over Gloo,
over ds4tp, or as the single-process reference (every shard in turn,
partials summed in rank order in float32: what ds4tp documents).
"""

import math
from dataclasses import dataclass

import torch


@dataclass
class Config:
    layers: int = 4
    d_model: int = 256
    heads: int = 8
    ffn: int = 768
    vocab: int = 2048
    max_len: int = 256
    seed: int = 1234


def make_weights(cfg):
    """The whole model, the same on every rank (float32, from cfg.seed)."""
    g = torch.Generator().manual_seed(cfg.seed)

    def w(*shape, scale=None):
        s = scale if scale is not None else 1.0 / math.sqrt(shape[0])
        return torch.randn(*shape, generator=g) * s

    d = cfg.d_model
    layers = [dict(norm1=1 + 0.1 * w(d, scale=1), wq=w(d, d), wk=w(d, d), wv=w(d, d), wo=w(d, d),
                   norm2=1 + 0.1 * w(d, scale=1), w_gate=w(d, cfg.ffn), w_up=w(d, cfg.ffn),
                   w_down=w(cfg.ffn, d))
              for _ in range(cfg.layers)]
    return dict(embed=w(cfg.vocab, d, scale=1), pos=w(cfg.max_len, d, scale=0.1), layers=layers,
                norm_f=1 + 0.1 * w(d, scale=1), lm_head=w(d, cfg.vocab))


def rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


class Shard:
    """Rank `rank` of `size`: its slices of the weights and its KV cache."""

    def __init__(self, cfg, weights, rank, size):
        assert cfg.heads % size == 0 and cfg.ffn % size == 0 and cfg.vocab % size == 0, \
            f"heads, ffn and vocab must divide by {size} ranks"
        self.cfg, self.rank = cfg, rank
        d, hd = cfg.d_model, cfg.d_model // cfg.heads
        self.heads, self.head_dim = cfg.heads // size, hd
        cols = slice(rank * self.heads * hd, (rank + 1) * self.heads * hd)   # this rank's heads
        ff = slice(rank * cfg.ffn // size, (rank + 1) * cfg.ffn // size)
        self.vocab = slice(rank * cfg.vocab // size, (rank + 1) * cfg.vocab // size)
        c = lambda t: t.contiguous()  # noqa: E731 - each shard owns compact slices
        self.embed = c(weights["embed"][self.vocab])
        self.pos, self.norm_f = weights["pos"], weights["norm_f"]
        self.lm_head = c(weights["lm_head"][:, self.vocab])
        self.layers = [dict(norm1=L["norm1"], norm2=L["norm2"],
                            wqkv=c(torch.cat([L["wq"][:, cols], L["wk"][:, cols], L["wv"][:, cols]], 1)),
                            wo=c(L["wo"][cols, :]),
                            w_gate=c(L["w_gate"][:, ff]), w_up=c(L["w_up"][:, ff]),
                            w_down=c(L["w_down"][ff, :]))
                       for L in weights["layers"]]
        self.reset()

    def reset(self):
        n = self.heads * self.head_dim
        self.k = [torch.zeros(self.cfg.max_len, n) for _ in self.layers]
        self.v = [torch.zeros(self.cfg.max_len, n) for _ in self.layers]

    # Each step below is this rank's part; `reduce` turns a list of the
    # ranks' partials into their sum (the caller's all_reduce).
    def embed_partial(self, token):
        lo = self.vocab.start
        if lo <= token < self.vocab.stop:
            return self.embed[token - lo].clone()
        return torch.zeros(self.cfg.d_model)

    def attention_partial(self, i, x, pos):
        L, hd, h = self.layers[i], self.head_dim, self.heads
        q, k, v = (rms_norm(x, L["norm1"]) @ L["wqkv"]).split(h * hd)
        self.k[i][pos], self.v[i][pos] = k, v
        keys = self.k[i][:pos + 1].view(pos + 1, h, hd).transpose(0, 1)     # h, t, hd
        vals = self.v[i][:pos + 1].view(pos + 1, h, hd).transpose(0, 1)
        att = torch.softmax((keys @ q.view(h, hd, 1)).squeeze(-1) / math.sqrt(hd), -1)
        out = (att.unsqueeze(1) @ vals).reshape(h * hd)
        return out @ L["wo"]

    def mlp_partial(self, i, x):
        L = self.layers[i]
        m = rms_norm(x, L["norm2"])
        return (torch.nn.functional.silu(m @ L["w_gate"]) * (m @ L["w_up"])) @ L["w_down"]

    def logits_part(self, x):
        return rms_norm(x, self.norm_f) @ self.lm_head


def forward(shards, token, pos, reduce, gather):
    """Logits of the next token. `shards` are the ranks this process runs
    (one in a rank process, all of them for the reference); reduce(parts)
    sums one partial per shard, gather(parts) joins them in rank order."""
    x = reduce([s.embed_partial(token) for s in shards]) + shards[0].pos[pos]
    for i in range(len(shards[0].layers)):
        x = x + reduce([s.attention_partial(i, x, pos) for s in shards])
        x = x + reduce([s.mlp_partial(i, x) for s in shards])
    return gather([s.logits_part(x) for s in shards])


def rank_order_sum(parts):
    """The reference's reduce: float32, rank 0 first (docs/GROUPS.md)."""
    acc = parts[0]
    for p in parts[1:]:
        acc = acc + p
    return acc
