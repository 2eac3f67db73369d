//! F16 and BF16 conversions, bit for bit:
//! * to_f32 of all 65 536 bit patterns against the value the fields spell
//!   (computed in f64 from sign, exponent and significand);
//! * from_f32 of every f32 whose bits step by a prime through the whole
//!   range, plus edge cases (ties, the overflow and underflow bounds,
//!   subnormals, NaNs), against a nearest-value search over all halves;
//! * against the C library itself: its exported conversions
//!   (ds4tp_f32_to_f16 and friends) give the Rust ones' bits over every
//!   pattern and the same sweep; and a two-rank all-reduce
//!   (ds4tp_group_all_reduce, local group) returns
//!   from_f32(a.to_f32() + b.to_f32()) in the library's own code, so every
//!   bit pattern with b = +0 and 65 536 x 4 pairs of patterns (sums that
//!   need rounding) must match the Rust conversions.
use ds4tp::{Element, Group, BF16, F16};
use std::thread;

const PRIME_STEP: u32 = 4099; // ~1.05 million f32 bit patterns

fn f16_value(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((bits >> 10) & 0x1f) as i32;
    let man = (bits & 0x3ff) as f64;
    match exp {
        0 => sign * man * 2f64.powi(-24),
        0x1f if man == 0.0 => sign * f64::INFINITY,
        0x1f => f64::NAN,
        _ => sign * (1024.0 + man) * 2f64.powi(exp - 25),
    }
}

#[test]
fn to_f32_of_every_bit_pattern() {
    for bits in 0..=u16::MAX {
        let h = F16::from_bits(bits).to_f32();
        let want = f16_value(bits);
        if want.is_nan() {
            // NaN: the payload moves up 13 bits, sign kept.
            let want_bits = ((bits as u32 & 0x8000) << 16) | 0x7f80_0000 | ((bits as u32 & 0x3ff) << 13);
            assert_eq!(h.to_bits(), want_bits, "F16 {:#06x}: NaN bits", bits);
            assert!(F16(bits).is_nan(), "F16 {:#06x} is a NaN", bits);
        } else {
            assert_eq!(h as f64, want, "F16 {:#06x}: value", bits);
            assert_eq!(h.is_sign_negative(), bits & 0x8000 != 0, "F16 {:#06x}: sign", bits);
        }
        let b = BF16::from_bits(bits).to_f32();
        assert_eq!(b.to_bits(), (bits as u32) << 16, "BF16 {:#06x}", bits);
        assert_eq!(f32::from(F16(bits)).to_bits(), h.to_bits(), "From<F16> for f32, {:#06x}", bits);
        assert_eq!(u16::from(BF16::from(bits)), bits, "BF16 bits round trip, {:#06x}", bits);
    }
}

// The nearest of two neighbours `lo` < `hi` (both as bits of one sign),
// ties to the even one; `hi_value` is hi's value (2^16 or 2^128 past the
// largest finite value, where the neighbour is infinity).
fn nearest(f: f64, lo: u16, lo_value: f64, hi: u16, hi_value: f64) -> u16 {
    let mid = (lo_value + hi_value) / 2.0; // exact in f64
    if f < mid || (f == mid && lo & 1 == 0) {
        lo
    } else {
        hi
    }
}

fn f16_reference(f: f32) -> u16 {
    let sign = if f.is_sign_negative() { 0x8000u16 } else { 0 };
    if f.is_nan() {
        return sign | 0x7e00 | ((f.to_bits() >> 13) & 0x3ff) as u16;
    }
    let a = (f as f64).abs();
    // Binary search over the positive finite halves (monotonic in bits).
    let (mut lo, mut hi) = (0u16, 0x7bffu16);
    if a >= f16_value(hi) {
        return sign | nearest(a, 0x7bff, 65504.0, 0x7c00, 65536.0);
    }
    while hi - lo > 1 {
        let m = (lo + hi) / 2;
        if f16_value(m) <= a {
            lo = m;
        } else {
            hi = m;
        }
    }
    sign | nearest(a, lo, f16_value(lo), hi, f16_value(hi))
}

fn bf16_reference(f: f32) -> u16 {
    let x = f.to_bits();
    if f.is_nan() {
        return (x >> 16) as u16 | 0x40;
    }
    let sign = (x >> 16) as u16 & 0x8000;
    let lo = ((x & 0x7fff_ffff) >> 16) as u16;
    if lo == 0x7f80 {
        return sign | lo; // infinity
    }
    let value = |b: u16| if b == 0x7f80 { 2f64.powi(128) } else { f32::from_bits((b as u32) << 16) as f64 };
    sign | nearest((f as f64).abs(), lo, value(lo), lo + 1, value(lo + 1))
}

fn edge_cases() -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0, -0.0, 1.0, -1.0, 65504.0, 65519.996, 65520.0, -65520.0, 65536.0, 1e10, f32::MAX, f32::MIN,
        f32::MIN_POSITIVE, f32::EPSILON, f32::INFINITY, f32::NEG_INFINITY, 1.0 / 3.0, 3.14159,
    ];
    for bits in [
        0x0000_0001u32, 0x8000_0001, 0x7f80_0001, 0xff80_0001, 0x7fc0_0000, 0xffc0_0000, 0x7fbf_ffff,
        0x7fff_ffff, 0x7fa0_2000, 0x3380_0000, // 2^-24, the smallest half subnormal
        0x3300_0000, // 2^-25: the tie between 0 and 2^-24 (to 0)
        0x3300_0001, 0x3340_0000, // 1.5 * 2^-25
        0x32ff_ffff, 0x3f80_1000, // 1 + 2^-11: a tie, to 1
        0x3f80_3000, // 1 + 3 * 2^-11: a tie, up
        0x3f80_8000, 0x3f81_8000, 0x3f80_7fff, 0x3880_0000, // 2^-14, the smallest normal half
        0x387f_c000, 0x387f_e000, 0x7f7f_8000, 0x7f7f_7fff, // around bf16's overflow
    ] {
        v.push(f32::from_bits(bits));
    }
    v
}

#[test]
fn from_f32_matches_the_nearest_value_ties_to_even() {
    let mut values = edge_cases();
    let mut bits = 0u64;
    while bits <= u32::MAX as u64 {
        values.push(f32::from_bits(bits as u32));
        bits += PRIME_STEP as u64;
    }
    for f in values {
        assert_eq!(F16::from_f32(f).to_bits(), f16_reference(f), "F16::from_f32({:e}) ({:#010x})", f, f.to_bits());
        assert_eq!(BF16::from_f32(f).to_bits(), bf16_reference(f), "BF16::from_f32({:e}) ({:#010x})", f, f.to_bits());
        assert_eq!(F16::from(f), F16::from_f32(f), "From<f32> for F16");
    }
}

#[test]
fn conversions_match_the_library_exports() {
    use ds4tp::sys;
    for bits in 0..=u16::MAX {
        let (h, b) = unsafe { (sys::ds4tp_f16_to_f32(bits), sys::ds4tp_bf16_to_f32(bits)) };
        assert_eq!(h.to_bits(), F16(bits).to_f32().to_bits(), "ds4tp_f16_to_f32({:#06x})", bits);
        assert_eq!(b.to_bits(), BF16(bits).to_f32().to_bits(), "ds4tp_bf16_to_f32({:#06x})", bits);
    }
    let mut values = edge_cases();
    let mut bits = 0u64;
    while bits <= u32::MAX as u64 {
        values.push(f32::from_bits(bits as u32));
        bits += PRIME_STEP as u64;
    }
    for &f in &values {
        let (h, b) = unsafe { (sys::ds4tp_f32_to_f16(f), sys::ds4tp_f32_to_bf16(f)) };
        assert_eq!(h, F16::from_f32(f).to_bits(), "ds4tp_f32_to_f16({:e}) ({:#010x})", f, f.to_bits());
        assert_eq!(b, BF16::from_f32(f).to_bits(), "ds4tp_f32_to_bf16({:e}) ({:#010x})", f, f.to_bits());
    }
    let mut out = vec![0u16; values.len()];
    let rc = unsafe {
        sys::ds4tp_dtype_convert(out.as_mut_ptr().cast(), 1, values.as_ptr().cast(), 0, values.len() as u64)
    };
    assert_eq!(rc, 0, "ds4tp_dtype_convert F32 -> F16");
    for (f, h) in values.iter().zip(&out) {
        assert_eq!(*h, F16::from_f32(*f).to_bits(), "ds4tp_dtype_convert of {:#010x}", f.to_bits());
    }
    let rc = unsafe { sys::ds4tp_dtype_convert(out.as_mut_ptr().cast(), 7, values.as_ptr().cast(), 0, 1) };
    assert_eq!(rc, -1, "an unknown dtype is DS4TP_EINVAL");
}

trait Half: Element + Copy + Send + 'static {
    fn bits(self) -> u16;
    fn make(bits: u16) -> Self;
    fn to(self) -> f32;
    fn from_f(f: f32) -> Self;
}
impl Half for F16 {
    fn bits(self) -> u16 { self.0 }
    fn make(bits: u16) -> Self { F16(bits) }
    fn to(self) -> f32 { self.to_f32() }
    fn from_f(f: f32) -> Self { F16::from_f32(f) }
}
impl Half for BF16 {
    fn bits(self) -> u16 { self.0 }
    fn make(bits: u16) -> Self { BF16(bits) }
    fn to(self) -> f32 { self.to_f32() }
    fn from_f(f: f32) -> Self { BF16::from_f32(f) }
}

// Rank 0 holds `a`, rank 1 `b`; the library's sum of each pair.
fn library_sum<T: Half>(a: Vec<T>, b: Vec<T>) -> Vec<T> {
    let groups = Group::local(2, None, None).expect("a local group of 2");
    let ts: Vec<_> = groups
        .into_iter()
        .zip([a, b])
        .map(|(mut g, mut v)| {
            thread::spawn(move || {
                g.all_reduce(&mut v).expect("all_reduce");
                v
            })
        })
        .collect();
    let mut out: Vec<Vec<T>> = ts.into_iter().map(|t| t.join().expect("rank thread")).collect();
    assert!(out[0].iter().zip(&out[1]).all(|(x, y)| x.bits() == y.bits()), "the two ranks' bits differ");
    out.swap_remove(0)
}

fn check_against_library<T: Half>(name: &str) {
    let all: Vec<T> = (0..=u16::MAX).map(T::make).collect();
    // With +0: the round trip through f32, NaNs made quiet.
    let got = library_sum(all.clone(), vec![T::make(0); all.len()]);
    for (x, g) in all.iter().zip(&got) {
        let want = T::from_f(x.to() + 0.0).bits();
        assert_eq!(g.bits(), want, "{}: library({:#06x} + 0) = {:#06x}, Rust {:#06x}", name, x.bits(), g.bits(), want);
    }
    // Pairs whose f32 sums need rounding (both NaN is left out: which
    // payload survives is the CPU's choice, not the conversion's).
    for k in [1u32, 7, 257, 40503] {
        let b: Vec<T> = (0..=u16::MAX as u32).map(|i| T::make((i.wrapping_mul(k).wrapping_add(k * 31) & 0xffff) as u16)).collect();
        let b: Vec<T> = all.iter().zip(b).map(|(x, y)| if x.to().is_nan() && y.to().is_nan() { T::make(0) } else { y }).collect();
        let got = library_sum(all.clone(), b.clone());
        for ((x, y), g) in all.iter().zip(&b).zip(&got) {
            let want = T::from_f(x.to() + y.to()).bits();
            assert_eq!(g.bits(), want, "{}: library({:#06x} + {:#06x}) = {:#06x}, Rust {:#06x}", name, x.bits(), y.bits(), g.bits(), want);
        }
    }
}

#[test]
fn conversions_match_the_library_all_reduce() {
    check_against_library::<F16>("F16");
    check_against_library::<BF16>("BF16");
}
