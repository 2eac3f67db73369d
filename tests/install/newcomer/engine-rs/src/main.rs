//! The newcomer's Rust program (tests/install/newcomer.sh): a local group
//! of three ranks (threads), one all-reduce of 8 f32 each, every rank's
//! bits compared; prints rank 0's bits.
use ds4tp::Group;
use std::thread;

fn main() -> ds4tp::Result<()> {
    let groups = Group::local(3, None, None)?;
    let ranks: Vec<_> = groups
        .into_iter()
        .enumerate()
        .map(|(r, mut g)| {
            thread::spawn(move || {
                let mut v: Vec<f32> = (0..8).map(|i| 1.0 / (3 + i + r) as f32).collect();
                g.all_reduce(&mut v).map(|_| v)
            })
        })
        .collect();
    let out: Vec<Vec<f32>> = ranks.into_iter().map(|t| t.join().expect("rank thread")).collect::<Result<_, _>>()?;
    for (r, v) in out.iter().enumerate() {
        let same = v.iter().zip(&out[0]).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "rank {}'s bits differ from rank 0's", r);
    }
    let bits: Vec<String> = out[0].iter().map(|x| format!("{:08x}", x.to_bits())).collect();
    println!("newcomer all-reduce rust: {}", bits.join(" "));
    Ok(())
}
