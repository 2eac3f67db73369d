//! Groups from Rust, shaped like a tensor-parallel executor: N threads,
//! one Group each (the local form), two all-reduces per layer per token
//! (attention and FFN partial sums), every rank's hidden state checked
//! bit for bit against a single-thread reference that sums in rank order.
use ds4tp::*;
use std::thread;

const N_EMBD: usize = 1536;
const N_LAYER: usize = 6;
const N_TOKEN: usize = 4;

// A rank's partial sum for one half-layer: a function of the hidden state
// it holds (identical on every rank) and of its own "weights".
fn partial(rank: usize, layer: usize, half: usize, hidden: &[f32], out: &mut [f32]) {
    let w = 0.25 + 0.125 * rank as f32 + 0.01 * (layer * 2 + half) as f32;
    for (i, (o, h)) in out.iter_mut().zip(hidden).enumerate() {
        *o = (h * w + (i % 7) as f32 * 0.001 * (rank + 1) as f32).sin();
    }
}

// One token through every layer; `reduce` sums the ranks' partials in place.
fn step_token<F: FnMut(&mut [f32]) -> Result<()>>(
    rank: usize,
    token: usize,
    hidden: &mut Vec<f32>,
    mut reduce: F,
) -> Result<()> {
    let mut part = vec![0f32; N_EMBD];
    for layer in 0..N_LAYER {
        for half in 0..2 {
            partial(rank, layer, half, hidden, &mut part);
            reduce(&mut part)?;
            for (h, p) in hidden.iter_mut().zip(&part) {
                *h = (*h + *p) * 0.5 + token as f32 * 1e-3;
            }
        }
    }
    Ok(())
}

fn reference(n: usize) -> Vec<f32> {
    let mut hidden: Vec<f32> = (0..N_EMBD).map(|i| (i as f32 * 0.01).cos()).collect();
    let mut parts = vec![vec![0f32; N_EMBD]; n];
    for token in 0..N_TOKEN {
        for layer in 0..N_LAYER {
            for half in 0..2 {
                for (r, p) in parts.iter_mut().enumerate() {
                    partial(r, layer, half, &hidden, p);
                }
                let mut sum = parts[0].clone();
                for p in &parts[1..] {
                    for (s, x) in sum.iter_mut().zip(p) {
                        *s += *x; // rank order, f32: what the library does
                    }
                }
                for (h, s) in hidden.iter_mut().zip(&sum) {
                    *h = (*h + *s) * 0.5 + token as f32 * 1e-3;
                }
            }
        }
    }
    hidden
}

#[test]
fn tensor_parallel_executor_matches_the_reference() {
    for n in [2usize, 3, 4] {
        let groups = Group::local(n, None, None).expect("Group::local");
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(r, mut g)| {
                thread::spawn(move || -> std::result::Result<Vec<f32>, String> {
                    assert_eq!(g.rank(), r);
                    assert_eq!(g.size(), n);
                    let mut hidden: Vec<f32> = (0..N_EMBD).map(|i| (i as f32 * 0.01).cos()).collect();
                    for token in 0..N_TOKEN {
                        if let Err(e) = step_token(r, token, &mut hidden, |v| g.all_reduce(v)) {
                            g.mark_failed();
                            return Err(format!("rank {} token {}: {}", r, token, e));
                        }
                    }
                    Ok(hidden)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().expect("rank thread panicked")).collect();
        let want = reference(n);
        for (r, got) in results.into_iter().enumerate() {
            let got = got.unwrap_or_else(|e| panic!("n={}: {}", n, e));
            let bad = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
            assert!(bad.is_none(), "n={} rank {}: element {:?} differs from the reference", n, r, bad);
        }
    }
}

#[test]
fn half_and_bfloat16_slices() {
    let groups = Group::local(3, None, None).expect("Group::local");
    let handles: Vec<_> = groups
        .into_iter()
        .map(|mut g| {
            thread::spawn(move || {
                let mut h = vec![F16(0x3c00); 5000]; // 1.0
                let mut b = vec![BF16(0x3f80); 5000]; // 1.0
                g.all_reduce(&mut h).map_err(|e| e.to_string())?;
                g.all_reduce(&mut b).map_err(|e| e.to_string())?;
                Ok::<_, String>((h, b))
            })
        })
        .collect();
    for (r, t) in handles.into_iter().enumerate() {
        let (h, b) = t.join().unwrap().unwrap_or_else(|e| panic!("rank {}: {}", r, e));
        assert!(h.iter().all(|x| *x == F16(0x4200)), "rank {}: f16 sum is not 3.0", r);
        assert!(b.iter().all(|x| *x == BF16(0x4040)), "rank {}: bf16 sum is not 3.0", r);
    }
}

#[test]
fn group_buffer_in_place() {
    // 2560 f16 (the seed's 5 KiB), from 4 KiB: the no-copy path for 2 ranks.
    let count = 2560;
    let groups = Group::local(2, None, None).expect("Group::local");
    let handles: Vec<_> = groups
        .into_iter()
        .enumerate()
        .map(|(r, mut g)| {
            thread::spawn(move || {
                let buf = g.buffer::<F16>().map_err(|e| e.to_string())?;
                assert!(buf.len() >= count);
                for x in &mut buf[..count] {
                    *x = if r == 0 { F16(0x3c00) } else { F16(0x4000) }; // 1.0, 2.0
                }
                g.all_reduce_buffer::<F16>(count).map_err(|e| e.to_string())?;
                let got = g.buffer::<F16>().map_err(|e| e.to_string())?[..count].to_vec();
                let too_many = g.all_reduce_buffer::<F16>(1 << 30).expect_err("oversized count accepted");
                assert_eq!(too_many.status(), Some(Status::EINVAL), "{}", too_many);
                Ok::<_, String>(got)
            })
        })
        .collect();
    for (r, t) in handles.into_iter().enumerate() {
        let got = t.join().unwrap().unwrap_or_else(|e| panic!("rank {}: {}", r, e));
        assert!(got.iter().all(|x| *x == F16(0x4200)), "rank {}: group buffer f16 sum is not 3.0", r);
    }
}

#[test]
fn failures_carry_the_message() {
    let mut gs = Group::local(2, None, None).expect("Group::local");
    gs[1].mark_failed();
    let err = gs[0].all_reduce(&mut [1.0f32; 4][..]).expect_err("all_reduce after mark_failed");
    assert_eq!(err.status(), Some(Status::EFAILED), "{}", err);
    assert!(err.message().contains("rank 1"), "{}", err);
    assert_eq!(gs[0].failed(), Some(Status::EFAILED));
    let bad = GroupOptions { spin_us: Some(-9), ..GroupOptions::default() };
    let err = Group::local(2, Some(&bad), None).err().expect("spin_us -9 accepted");
    assert!(err.message().contains("spin_us"), "{}", err);
}

#[test]
fn group_stats_count_the_all_reduces() {
    let groups = Group::local(2, None, None).expect("local group");
    let ts: Vec<_> = groups
        .into_iter()
        .map(|mut g| {
            thread::spawn(move || {
                for _ in 0..3 {
                    g.all_reduce(&mut [1.0f32; 64]).expect("all_reduce");
                }
                g
            })
        })
        .collect();
    let mut groups: Vec<Group> = ts.into_iter().map(|t| t.join().expect("rank thread")).collect();
    let st = groups[0].stats().expect("stats");
    assert_eq!(st.all_reduces, 3, "all_reduces after three calls");
    assert_eq!(st.all_reduce.count, 3, "all_reduce histogram count");
    assert_eq!(st.collectives[sys::DS4TP_COLL_ALL_REDUCE], 3, "all_reduce kind count");
    assert_eq!(st.collective[sys::DS4TP_COLL_ALL_REDUCE].count, 3, "all_reduce kind histogram");
    assert_eq!(st.collectives[sys::DS4TP_COLL_REDUCE_SCATTER], 0, "no reduce_scatter called");
    assert!(groups[0].prometheus().expect("prometheus").contains("ds4tp"), "prometheus text");
    let plan = groups[0].plan().expect("plan");
    assert!(plan.starts_with("plan: 1 host x 2 ranks; shm within the host"), "plan: {plan}");
    assert_eq!(groups[1].plan().expect("plan"), plan, "the ranks' plans differ");
    assert_eq!(groups[0].topology(1).expect("topology"), (0, 1, false), "rank 1's place");
    assert!(groups[0].topology(2).is_err(), "a rank outside the group has no place");
    assert_eq!(st.lateness[1].count, 3, "rank 1's lateness is recorded per call");
    let dir = std::env::temp_dir().join(format!("ds4tp-rust-flight-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("flight-%r");
    groups[0].dump(path.to_str().expect("utf-8 path")).expect("dump");
    let text = std::fs::read_to_string(dir.join("flight-0")).expect("the dump's text");
    assert!(text.starts_with("ds4tp group flight recorder: rank 0 of 2"), "dump: {text}");
    std::fs::remove_dir_all(&dir).ok();
    groups[0].stats_reset().expect("stats_reset");
    assert_eq!(groups[0].stats().expect("stats").all_reduces, 0, "stats_reset did not reset");
}
