//! The group collectives from Rust over N threads (the local form, N = 2,
//! 3, 4, steps of 4 KiB so the larger counts take several): all-reduce,
//! reduce-scatter (both forms) and reduce for every element type and op;
//! gather, scatter, all-gather of uneven parts and of rows, all-to-all in
//! elements of several types; ranks that disagree named by EDESYNC; sizes
//! that do not fit refused before any rank waits.
//!
//! The inputs are exact in every type (as tests/group/test_group_ops.cpp's:
//! multiples of 1/32, products of 1/2, 1, 2 and -1, integers that wrap
//! alike in any order), so the references do not depend on the order a
//! plan combines in: floats combine in f64 and round once, integers in
//! their own type, wrapping.
use ds4tp::*;
use std::fmt::Debug;
use std::thread;

/// An element type with its reference arithmetic.
trait Exact: Element + PartialEq + Debug + Send + 'static {
    const FLOAT: bool;
    /// `v` (exact in Self) as Self; integers wrap as two's complement.
    fn from_f64(v: f64) -> Self;
    /// The op in Self (integers; floats combine in f64).
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! floats {
    ($($t:ty => $conv:expr),*) => {$(
        impl Exact for $t {
            const FLOAT: bool = true;
            fn from_f64(v: f64) -> Self {
                let conv: fn(f64) -> $t = $conv;
                conv(v)
            }
            fn combine(_: ReduceOp, _: Self, _: Self) -> Self {
                unreachable!("floats combine in f64")
            }
        }
    )*};
}
floats!(f32 => |v| v as f32, f64 => |v| v, F16 => |v| F16::from_f32(v as f32),
        BF16 => |v| BF16::from_f32(v as f32));

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl Exact for $t {
            const FLOAT: bool = false;
            fn from_f64(v: f64) -> Self {
                v as i64 as $t
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                }
            }
        }
    )*};
}
integers!(i32, i64, u8);

const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod];

fn exact<T: Exact>(op: ReduceOp, r: usize, j: usize) -> f64 {
    let h = (r as u64 * 2654435761 + j as u64 * 40503 + std::mem::size_of::<T>() as u64 * 97) % 1000003;
    if !T::FLOAT {
        (h % 200) as f64 - 100.0
    } else if op == ReduceOp::Prod {
        [0.5, 1.0, 2.0, -1.0][(h % 4) as usize]
    } else {
        ((h % 97) as f64 - 48.0) / 32.0
    }
}

fn expected<T: Exact>(op: ReduceOp, n: usize, j: usize) -> T {
    if T::FLOAT {
        let f = |a: f64, b: f64| match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Prod => a * b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        };
        T::from_f64((1..n).fold(exact::<T>(op, 0, j), |acc, r| f(acc, exact::<T>(op, r, j))))
    } else {
        (1..n).fold(T::from_f64(exact::<T>(op, 0, j)), |acc, r| T::combine(op, acc, T::from_f64(exact::<T>(op, r, j))))
    }
}

/// Every op and count of T: "" or what failed, with the library's message.
fn reductions<T: Exact>(g: &mut Group) -> std::result::Result<(), String> {
    let (n, me) = (g.size(), g.rank());
    let name = std::any::type_name::<T>();
    for op in OPS {
        for count in [1usize, 7, 1500] {
            let what = format!("{} {:?} count {}", name, op, count);
            let fail = |call: &str, e: Error| format!("{} {}: {}", call, what, e);
            let mine: Vec<T> = (0..count).map(|j| T::from_f64(exact::<T>(op, me, j))).collect();
            let want: Vec<T> = (0..count).map(|j| expected::<T>(op, n, j)).collect();
            let seg_want: Vec<T> = (0..count).map(|j| expected::<T>(op, n, me * count + j)).collect();
            let mut buf = mine.clone();
            g.all_reduce_op(&mut buf, op).map_err(|e| fail("all_reduce", e))?;
            if buf != want {
                return Err(format!("all_reduce {}: {:?}.. != {:?}..", what, &buf[..1], &want[..1]));
            }
            let input: Vec<T> = (0..count * n).map(|j| T::from_f64(exact::<T>(op, me, j))).collect();
            let mut seg = vec![mine[0]; count];
            g.reduce_scatter(&input, &mut seg, op).map_err(|e| fail("reduce_scatter", e))?;
            if seg != seg_want {
                return Err(format!("reduce_scatter {} differs from the reference", what));
            }
            let mut whole = input.clone();
            let got = g.reduce_scatter_in_place(&mut whole, op).map_err(|e| fail("reduce_scatter_in_place", e))?;
            if *got != seg_want[..] {
                return Err(format!("reduce_scatter_in_place {} differs from the reference", what));
            }
            let root = count % n;
            let mut buf = mine.clone();
            g.reduce(&mut buf, root, op).map_err(|e| fail("reduce", e))?;
            let expect = if me == root { &want } else { &mine };
            if &buf != expect {
                return Err(format!("reduce to rank {} {} differs from the reference", root, what));
            }
        }
    }
    Ok(())
}

/// `body(group)` on one thread per rank of a local group of `n` with 4 KiB
/// steps; panics naming the rank and what it returned.
fn on_ranks(n: usize, body: fn(&mut Group) -> std::result::Result<(), String>) {
    let opts = GroupOptions { chunk_bytes: Some(4096), op_timeout_ms: Some(20000), ..Default::default() };
    let groups = Group::local(n, Some(&opts), None).expect("Group::local");
    let ts: Vec<_> = groups
        .into_iter()
        .map(|mut g| {
            thread::spawn(move || {
                let r = body(&mut g);
                if r.is_err() {
                    g.mark_failed(); // releases the others
                }
                r
            })
        })
        .collect();
    for (r, t) in ts.into_iter().enumerate() {
        let got = t.join().expect("rank thread panicked");
        assert!(got.is_ok(), "n={} rank {}: {}", n, r, got.unwrap_err());
    }
}

#[test]
fn reductions_every_type_and_op() {
    for n in [2, 3, 4] {
        on_ranks(n, |g| {
            reductions::<f32>(g)?;
            reductions::<f64>(g)?;
            reductions::<F16>(g)?;
            reductions::<BF16>(g)?;
            reductions::<i32>(g)?;
            reductions::<i64>(g)?;
            reductions::<u8>(g)
        });
    }
}

// The message of a failed call, naming it.
fn err(call: &'static str) -> impl Fn(Error) -> String {
    move |e| format!("{}: {}", call, e)
}

fn value(r: usize, j: usize) -> i64 {
    (r as i64) << 40 | (j as i64 * 31 + 7)
}

/// gather, scatter, all_gather_v, all_gather_rows and all_to_all_v of i64
/// elements (u16 for the rows), each against its reference.
fn moves(g: &mut Group) -> std::result::Result<(), String> {
    let (n, me) = (g.size(), g.rank());
    for k in [0usize, 3, 900] {
        let root = k % n;
        let mine: Vec<i64> = (0..k).map(|j| value(me, j)).collect();
        let all: Vec<i64> = (0..n).flat_map(|r| (0..k).map(move |j| value(r, j))).collect();
        let mut out = vec![0i64; if me == root { n * k } else { 0 }];
        g.gather(&mine, if me == root { Some(&mut out[..]) } else { None }, root).map_err(err("gather"))?;
        if me == root && out != all {
            return Err(format!("gather of {} to rank {} differs", k, root));
        }
        let mut piece = vec![0i64; k];
        g.scatter(if me == root { Some(&all[..]) } else { None }, &mut piece, root).map_err(err("scatter"))?;
        if piece != mine {
            return Err(format!("scatter of {} from rank {} differs", k, root));
        }
    }
    let counts: Vec<usize> = (0..n).map(|r| if r == 1 { 0 } else { 300 + 97 * r }).collect();
    let part: Vec<i64> = (0..counts[me]).map(|j| value(me, j)).collect();
    let want: Vec<i64> = (0..n).flat_map(|r| (0..counts[r]).map(move |j| value(r, j))).collect();
    let mut got = vec![0i64; want.len()];
    g.all_gather_v(&part, &mut got, &counts).map_err(err("all_gather_v"))?;
    if got != want {
        return Err(format!("all_gather_v of {:?} differs", counts));
    }
    let (rows, slice) = (9usize, 13usize);
    let rin: Vec<u16> = (0..rows * slice).map(|j| (me * 1000 + j) as u16).collect();
    let mut rout = vec![0u16; rows * slice * n];
    g.all_gather_rows(&rin, &mut rout, rows).map_err(err("all_gather_rows"))?;
    for i in 0..rows {
        for r in 0..n {
            let at = (i * n + r) * slice;
            if (0..slice).any(|c| rout[at + c] != (r * 1000 + i * slice + c) as u16) {
                return Err(format!("all_gather_rows: row {} rank {}'s slice differs", i, r));
            }
        }
    }
    // Rank a sends rank b (a + 2b) * 50 elements; received parts in reverse
    // rank order, one element apart.
    let sc: Vec<usize> = (0..n).map(|r| (me + 2 * r) * 50).collect();
    let rc: Vec<usize> = (0..n).map(|r| (r + 2 * me) * 50).collect();
    let mut ro = vec![0usize; n];
    let mut at = 0;
    for r in (0..n).rev() {
        ro[r] = at + 1;
        at += rc[r] + 1;
    }
    let ain: Vec<i64> = (0..n).flat_map(|r| (0..sc[r]).map(move |j| value(me, r * 1000 + j))).collect();
    let mut aout = vec![-1i64; at];
    let mut awant = aout.clone();
    for r in 0..n {
        for j in 0..rc[r] {
            awant[ro[r] + j] = value(r, me * 1000 + j);
        }
    }
    g.all_to_all_v(&ain, &sc, None, &mut aout, &rc, Some(&ro)).map_err(err("all_to_all_v"))?;
    if aout != awant {
        return Err("all_to_all_v differs from the reference".into());
    }
    Ok(())
}

#[test]
fn moving_calls_count_elements() {
    for n in [2, 3, 4] {
        on_ranks(n, moves);
    }
}

/// Rank 0 runs `first`, rank 1 `second`; each must fail with EDESYNC
/// naming every one of `names`.
fn disagree(first: fn(&mut Group) -> Result<()>, second: fn(&mut Group) -> Result<()>, names: &[&str]) {
    let groups = Group::local(2, None, None).expect("Group::local");
    let ts: Vec<_> = groups
        .into_iter()
        .map(|mut g| thread::spawn(move || if g.rank() == 0 { first(&mut g) } else { second(&mut g) }))
        .collect();
    for (r, t) in ts.into_iter().enumerate() {
        let e = t.join().expect("rank thread panicked").expect_err("ranks in different calls both succeeded");
        assert_eq!(e.status(), Some(Status::EDESYNC), "rank {}: {}", r, e);
        for name in names {
            assert!(e.message().contains(name), "rank {}: {:?} not in {}", r, name, e);
        }
    }
}

#[test]
fn ranks_that_disagree_fail_with_edesync_naming_both() {
    // The same bytes, another element type, op or root: both calls named.
    disagree(|g| g.all_reduce(&mut [1.0f32; 64]), |g| g.all_reduce(&mut [1i32; 64]), &["all_reduce f32 sum", "all_reduce i32 sum"]);
    disagree(|g| g.all_reduce(&mut [F16::ONE; 64]), |g| g.all_reduce(&mut [BF16(0x3f80); 64]), &["all_reduce f16 sum", "all_reduce bf16 sum"]);
    disagree(
        |g| g.all_reduce_op(&mut [1i64; 8], ReduceOp::Max),
        |g| g.all_reduce_op(&mut [1i64; 8], ReduceOp::Min),
        &["all_reduce i64 max", "all_reduce i64 min"],
    );
    disagree(
        |g| g.reduce(&mut [1u8; 8], 0, ReduceOp::Prod),
        |g| g.reduce(&mut [1u8; 8], 1, ReduceOp::Prod),
        &["reduce u8 prod at rank 0", "reduce u8 prod at rank 1"],
    );
    // Another width makes other bytes: the library names both sizes.
    disagree(|g| g.all_reduce(&mut [1.0f32; 64]), |g| g.all_reduce(&mut [F16::ONE; 64]), &["256 bytes", "128 bytes"]);
}

#[test]
fn sizes_that_do_not_fit_are_refused_naming_them() {
    let mut gs = Group::local(2, None, None).expect("Group::local");
    let g = &mut gs[0];
    let (f4, mut o4, mut o6, mut o8) = ([0f32; 4], [0f32; 4], [0f32; 6], [0f32; 8]);
    let cases: Vec<(Result<()>, &str)> = vec![
        (g.reduce_scatter(&o6.clone(), &mut o4, ReduceOp::Max), "reduce_scatter: input has 6 elements; size() x out.len() = 8 needed"),
        (g.reduce_scatter_in_place(&mut o8[..7], ReduceOp::Sum).map(|_| ()), "buf has 7 elements, not size() = 2 equal segments"),
        (g.reduce(&mut o4, 2, ReduceOp::Sum), "reduce: root 2 is outside the group's ranks 0..1"),
        (g.gather(&f4, None, 0), "gather: out is None at the root (rank 0)"),
        (g.gather(&f4, Some(&mut o6[..]), 0), "gather: out has 6 elements; size() x input.len() = 8 needed"),
        (g.scatter(None, &mut o4, 0), "scatter: input is None at the root"),
        (g.scatter(Some(&o6[..]), &mut o4, 0), "scatter: input has 6 elements"),
        (g.all_gather_v(&f4, &mut o8, &[4, 4, 0]), "all_gather_v: counts has 3 entries; one per rank: 2 needed"),
        (g.all_gather_v(&f4, &mut o8, &[5, 3]), "all_gather_v: input has 4 elements; counts[rank()] = 5"),
        (g.all_gather_v(&f4, &mut o6, &[4, 4]), "all_gather_v: out has 6 elements; the sum of counts = 8"),
        (g.all_gather_rows(&o6.clone(), &mut o8, 4), "all_gather_rows: input has 6 elements, not 4 rows"),
        (g.all_to_all_v(&f4, &[2, 2], Some(&[0, 3][..]), &mut o8, &[2, 2], None), "send_offsets[1] + send_counts[1] = 5 is past the slice's 4 elements"),
        (g.all_to_all_v(&f4, &[2, 2], None, &mut o4, &[2, 3], None), "recv_offsets[1] + recv_counts[1] = 5 is past"),
        (g.all_to_all_v(&f4, &[2, 2], Some(&[0][..]), &mut o4, &[2, 2], None), "send_offsets has 1 entries; one per rank: 2"),
    ];
    for (i, (got, words)) in cases.into_iter().enumerate() {
        let e = got.expect_err(words);
        assert_eq!(e.status(), Some(Status::EINVAL), "case {}: {}", i, e);
        assert!(e.message().contains(words), "case {}: {:?} not in {}", i, words, e);
    }
    assert_eq!(g.failed(), None, "a refusal failed the group");
    // Refused before any rank waited: the group still works.
    let ts: Vec<_> = gs
        .into_iter()
        .map(|mut g| {
            thread::spawn(move || {
                let mut v = if g.rank() == 0 { [1i64, 5, -3] } else { [4, 2, -9] };
                g.all_reduce_op(&mut v, ReduceOp::Min).map(|_| v)
            })
        })
        .collect();
    for t in ts {
        assert_eq!(t.join().expect("rank thread").expect("all_reduce_op"), [1, 2, -9]);
    }
}
