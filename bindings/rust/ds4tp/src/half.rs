//! The 16-bit float types all-reduce takes, as their bits ([`F16`], IEEE
//! binary16; [`BF16`], the top half of an f32), with the conversions the
//! library itself uses (lib/group/reduce.cpp): to `f32` exactly, from
//! `f32` rounding to nearest, ties to even; a NaN stays a NaN, made quiet,
//! keeping the top bits of its payload and its sign. So
//! `F16::from_f32(a.to_f32() + b.to_f32())` is, bit for bit, what a
//! two-rank all-reduce of `a` and `b` returns.
//!
//! ```
//! use ds4tp::{BF16, F16};
//! let h = F16::from_f32(1.0 / 3.0);
//! assert_eq!(h.to_bits(), 0x3555);
//! assert_eq!(f32::from(h), 0.333_251_95);
//! assert_eq!(F16::from(65520.0f32), F16::INFINITY); // rounds up past the largest half
//! let b: BF16 = 3.14159f32.into();
//! assert_eq!(b, BF16::from_bits(0x4049));
//! assert_eq!(b.to_f32(), 3.140625);
//! assert!(F16::from_f32(f32::NAN).is_nan());
//! ```

/// An IEEE binary16 (half), as its bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F16(pub u16);

/// A bfloat16 (the top 16 bits of an f32), as its bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct BF16(pub u16);

impl F16 {
    /// +0.0.
    pub const ZERO: F16 = F16(0);
    /// 1.0.
    pub const ONE: F16 = F16(0x3c00);
    /// +infinity.
    pub const INFINITY: F16 = F16(0x7c00);
    /// The largest finite half, 65504.
    pub const MAX: F16 = F16(0x7bff);

    /// The half with these bits.
    pub const fn from_bits(bits: u16) -> F16 {
        F16(bits)
    }

    /// Its bits.
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// Whether it is a NaN (exponent all ones, significand not zero).
    pub const fn is_nan(self) -> bool {
        self.0 & 0x7fff > 0x7c00
    }

    /// The exact f32 value (every half is one); a NaN keeps its payload.
    pub fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let mut man = h & 0x3ff;
        if exp == 0x1f {
            return f32::from_bits(sign | 0x7f80_0000 | (man << 13)); // inf, nan
        }
        if exp != 0 {
            return f32::from_bits(sign | ((exp + 112) << 23) | (man << 13));
        }
        if man == 0 {
            return f32::from_bits(sign);
        }
        // A subnormal half (man * 2^-24): shift its leading one up to bit 10.
        let mut e = 113u32;
        while man & 0x400 == 0 {
            man <<= 1;
            e -= 1;
        }
        f32::from_bits(sign | (e << 23) | ((man & 0x3ff) << 13))
    }

    /// The nearest half, ties to even; 65520 and above round to infinity,
    /// below 2^-25 to (signed) zero; a NaN becomes a quiet NaN with the
    /// top bits of its payload.
    pub fn from_f32(f: f32) -> F16 {
        let u = f.to_bits();
        let sign = ((u >> 16) & 0x8000) as u16;
        let a = u & 0x7fff_ffff;
        if a > 0x7f80_0000 {
            return F16(sign | 0x7e00 | ((a >> 13) & 0x3ff) as u16);
        }
        if a >= 0x477f_f000 {
            return F16(sign | 0x7c00);
        }
        let e = a >> 23;
        if e < 101 {
            return F16(sign);
        }
        let mut man = (a & 0x7f_ffff) | 0x80_0000;
        let (shift, base) = if e >= 113 {
            man &= 0x7f_ffff; // a normal half: the implicit bit is dropped
            (13, (e - 112) << 10)
        } else {
            (126 - e, 0) // a subnormal half: units of 2^-24
        };
        let mut q = man >> shift;
        let rest = man & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rest > half || (rest == half && q & 1 == 1) {
            q += 1; // a carry out of the significand bumps the exponent
        }
        F16(sign | (base + q) as u16)
    }
}

impl BF16 {
    /// +0.0.
    pub const ZERO: BF16 = BF16(0);
    /// 1.0.
    pub const ONE: BF16 = BF16(0x3f80);
    /// +infinity.
    pub const INFINITY: BF16 = BF16(0x7f80);

    /// The bfloat16 with these bits.
    pub const fn from_bits(bits: u16) -> BF16 {
        BF16(bits)
    }

    /// Its bits.
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// Whether it is a NaN.
    pub const fn is_nan(self) -> bool {
        self.0 & 0x7fff > 0x7f80
    }

    /// The exact f32 value (the bits as an f32's top half).
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }

    /// The nearest bfloat16, ties to even (overflow rounds to infinity); a
    /// NaN keeps its top bits and becomes quiet.
    pub fn from_f32(f: f32) -> BF16 {
        let x = f.to_bits();
        if x & 0x7fff_ffff > 0x7f80_0000 {
            return BF16((x >> 16) as u16 | 0x40);
        }
        let x = x.wrapping_add(0x7fff + ((x >> 16) & 1));
        BF16((x >> 16) as u16)
    }
}

macro_rules! conversions {
    ($t:ident) => {
        impl From<f32> for $t {
            fn from(f: f32) -> $t {
                $t::from_f32(f)
            }
        }
        impl From<$t> for f32 {
            fn from(h: $t) -> f32 {
                h.to_f32()
            }
        }
        impl From<$t> for f64 {
            fn from(h: $t) -> f64 {
                h.to_f32() as f64
            }
        }
        impl From<u16> for $t {
            /// The bits (as [`Self::from_bits`]), not the integer's value.
            fn from(bits: u16) -> $t {
                $t(bits)
            }
        }
        impl From<$t> for u16 {
            fn from(h: $t) -> u16 {
                h.0
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.to_f32(), f)
            }
        }
    };
}
conversions!(F16);
conversions!(BF16);
