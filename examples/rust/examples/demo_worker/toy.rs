//! The C demo's toy model (examples/demo/ds4tp_demo.c), ported exactly: the
//! same weights, the same f32 arithmetic in the same order (Rust never
//! fuses or reorders float operations), so a Rust rank and a C rank walk
//! bit-identical hidden states and the demo's checks pass across languages.

use ds4tp::{Identity, Pair, Result};

#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub layers: u32,
    pub embd: usize,
    pub ffn: usize,
    pub tokens: u32,
}

/// The identity ds4tp_demo presents for these dimensions.
pub fn identity(d: &Dims) -> Identity {
    Identity {
        model_bytes: u64::from(d.layers) * 2 * d.ffn as u64 * d.embd as u64 * 8,
        model_id: 0xD3110,
        n_layer: d.layers,
        n_embd: d.embd as u32,
        n_vocab: 32000,
        quant_bits: 32,
        ctx_size: 4096,
        ..Identity::default()
    }
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

fn weight(a: u64, b: u64, c: u64) -> f32 {
    let h = mix(a.wrapping_mul(0x100000001b3) ^ mix(b.wrapping_mul(131).wrapping_add(c)));
    ((h >> 40) as f64 / (1u64 << 24) as f64 - 0.5) as f32 * 0.1f32
}

/// One gate's half-block for one rank: up (half x embd), down (embd x half).
struct Block {
    up: Vec<f32>,
    down: Vec<f32>,
}

impl Block {
    fn new(d: &Dims, layer: u32, gate: u32, rank: u32) -> Block {
        let half = d.ffn / 2;
        let id = u64::from(layer) * 2 + u64::from(gate);
        let row0 = u64::from(rank) * half as u64;
        let mut up = vec![0f32; half * d.embd];
        let mut down = vec![0f32; half * d.embd];
        for r in 0..half {
            for e in 0..d.embd {
                up[r * d.embd + e] = weight(id * 2, row0 + r as u64, e as u64);
            }
        }
        for e in 0..d.embd {
            for r in 0..half {
                down[e * half + r] = weight(id * 2 + 1, e as u64, row0 + r as u64);
            }
        }
        Block { up, down }
    }

    /// partial = down * relu(up * rmsnorm(h)).
    fn forward(&self, d: &Dims, h: &[f32], x: &mut [f32], act: &mut [f32], partial: &mut [f32]) {
        let half = d.ffn / 2;
        let mut ss = 0f64;
        for &v in h {
            ss += v as f64 * v as f64;
        }
        let inv = (1.0 / (ss / d.embd as f64 + 1e-6).sqrt()) as f32;
        for e in 0..d.embd {
            x[e] = h[e] * inv;
        }
        for r in 0..half {
            let w = &self.up[r * d.embd..(r + 1) * d.embd];
            let mut s = 0f32;
            for e in 0..d.embd {
                s += w[e] * x[e];
            }
            act[r] = if s > 0.0 { s } else { 0.0 };
        }
        for e in 0..d.embd {
            let w = &self.down[e * half..(e + 1) * half];
            let mut s = 0f32;
            for r in 0..half {
                s += w[r] * act[r];
            }
            partial[e] = s;
        }
    }
}

fn embed(h: &mut [f32], token: u64) {
    for (e, v) in h.iter_mut().enumerate() {
        *v = weight(0xE11B, token, e as u64) * 10.0f32;
    }
}

fn next_token(h: &[f32]) -> u64 {
    let mut acc = 0u64;
    for v in h {
        acc = mix(acc ^ u64::from(v.to_bits()));
    }
    acc % 32000
}

/// What a run found.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Tokens whose hidden state differed from the single-process reference.
    pub mismatches: u32,
    /// Whether the final hidden state equals the peer's, bit for bit.
    pub same_as_peer: bool,
}

/// Plays the demo's token loop on an unconnected pair (either rank).
pub fn run(tp: &mut Pair, d: &Dims) -> Result<Outcome> {
    let rank = tp.rank();
    let ngates = d.layers * 2;
    let mine: Vec<Block> = (0..ngates).map(|g| Block::new(d, g / 2, g % 2, rank)).collect();
    let full: Vec<(Block, Block)> =
        (0..ngates).map(|g| (Block::new(d, g / 2, g % 2, 0), Block::new(d, g / 2, g % 2, 1))).collect();
    let (mut h, mut reference) = (vec![0f32; d.embd], vec![0f32; d.embd]);
    let (mut x, mut act) = (vec![0f32; d.embd], vec![0f32; d.ffn]);
    let (mut p0, mut p1) = (vec![0f32; d.embd], vec![0f32; d.embd]);

    tp.connect()?;
    tp.attach_slab()?;
    let (mut token, mut ref_token, mut mismatches, mut seq) = (1u64, 1u64, 0u32, 0u64);
    for _ in 0..d.tokens {
        embed(&mut h, token);
        embed(&mut reference, ref_token);
        for g in 0..ngates {
            let (layer, gate) = (g / 2, g % 2);
            mine[g as usize].forward(d, &h, &mut x, &mut act, tp.out_vector(layer, gate)?);
            seq += 1;
            tp.gate_exchange(layer, gate, seq)?;
            // The C demo adds (own + peer) in that order, then into h.
            let out = tp.out_vector(layer, gate)?.to_vec();
            let inp = tp.in_vector(layer, gate)?;
            for e in 0..d.embd {
                h[e] += out[e] + inp[e];
            }
            let (b0, b1) = &full[g as usize];
            b0.forward(d, &reference, &mut x, &mut act, &mut p0);
            b1.forward(d, &reference, &mut x, &mut act, &mut p1);
            for e in 0..d.embd {
                reference[e] += p0[e] + p1[e];
            }
        }
        if h.iter().map(|v| v.to_bits()).ne(reference.iter().map(|v| v.to_bits())) {
            mismatches += 1;
        }
        token = next_token(&h);
        ref_token = next_token(&reference);
    }
    let mut peer = vec![0f32; d.embd];
    tp.big_gate_exchange(0, 1, &h, &mut peer)?;
    let same_as_peer = h.iter().map(|v| v.to_bits()).eq(peer.iter().map(|v| v.to_bits()));
    Ok(Outcome { mismatches, same_as_peer })
}
