//! Weight formats: a reference dequantizer and dot product for each ggml type a model uses.
//!
//! Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (blocks of 32) and Q2_K,
//! Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256). The byte layouts are ggml's
//! (`ggml-common.h`); values are dequantized exactly as `dequantize_row_*` does, in f32, so a
//! forward pass over these weights is an exact-f32 reference. `int8.rs` is the other path,
//! llama.cpp's: the activations rounded to 8 bits, then integer dot products with the
//! weights' codes (generation's default, tested against the exact products).
//!
//! IQ4_NL (18 bytes): `d` (f16), then 16 bytes `qs` whose low nibbles are elements 0..16 and
//! high nibbles elements 16..32 (Q4_0's order); element = `d · KVALUES_IQ4NL[nibble]`, a fixed
//! non-linear table of 16 levels.
//!
//! [`dot`] is the reference dot product of a weight row with f32 activations. The CPU forward
//! pass runs the same arithmetic through the matrix kernels of `kernels.rs` (many rows, one or
//! several inputs, AVX2/AVX-512 dispatch at run time), which are tested against it. The Q8_0
//! and Q4_x paths factor the block scale out of the sum (`d * Σ q·x + m * Σ x`), so the inner
//! loop is an int-to-float conversion and a multiply-add.
//!
//! [`quantize`] writes each format with a straightforward (not error-optimal) quantizer, so
//! tests can build synthetic models in every type.

use crate::error::{Error, Result};

mod int8;
mod kernels;
mod kquant;

#[cfg(feature = "gpu")]
pub(crate) use int8::decode_codes;
pub(crate) use int8::{
    is_fast as rounded_products_are_fast, matvec as matvec_rounded, Q8Activations,
};
pub(crate) use kernels::{dot_f32_with, madd, matmul_t, matvec};

pub use kquant::{
    dequantize_q2_k, dequantize_q3_k, dequantize_q4_k, dequantize_q5_k, dequantize_q6_k,
};

#[cfg(test)]
mod oracle;

/// IQ4_NL's 16 levels (ggml's `kvalues_iq4nl`), indexed by a nibble.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// A ggml tensor type this crate can compute with (ggml's names, underscores included).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    IQ4_NL,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
}

/// Every supported type, in ggml id order.
pub const ALL_TYPES: [QuantType; 14] = [
    QuantType::F32,
    QuantType::F16,
    QuantType::Q4_0,
    QuantType::Q4_1,
    QuantType::Q5_0,
    QuantType::Q5_1,
    QuantType::Q8_0,
    QuantType::Q2_K,
    QuantType::Q3_K,
    QuantType::Q4_K,
    QuantType::Q5_K,
    QuantType::Q6_K,
    QuantType::IQ4_NL,
    QuantType::BF16,
];

impl QuantType {
    /// The type with ggml id `id` (the `ggml_type` of a GGUF tensor info), if supported.
    pub fn from_ggml(id: u32) -> Option<Self> {
        use QuantType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            20 => IQ4_NL,
            30 => BF16,
            _ => return None,
        })
    }

    /// The ggml id written in GGUF tensor infos.
    pub fn ggml_id(self) -> u32 {
        use QuantType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            IQ4_NL => 20,
            BF16 => 30,
        }
    }

    /// ggml's name for the type.
    pub fn name(self) -> &'static str {
        use QuantType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            BF16 => "BF16",
            Q8_0 => "Q8_0",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            IQ4_NL => "IQ4_NL",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
        }
    }

    /// Elements per block.
    pub fn block_len(self) -> usize {
        use QuantType::*;
        match self {
            F32 | F16 | BF16 => 1,
            Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | IQ4_NL => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        use QuantType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            Q8_0 => 34,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            IQ4_NL => 18,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
        }
    }

    /// Bytes of a row of `n` elements; an error unless `n` is a whole number of blocks.
    pub fn row_bytes(self, n: usize) -> Result<usize> {
        if !n.is_multiple_of(self.block_len()) {
            return Err(Error::invalid_input(format!(
                "a {} row of {n} elements is not a whole number of {}-element blocks",
                self.name(),
                self.block_len()
            )));
        }
        (n / self.block_len())
            .checked_mul(self.block_bytes())
            .ok_or_else(|| {
                Error::limit_exceeded(format!("a {} row of {n} elements overflows", self.name()))
            })
    }
}

/// Converts IEEE half-precision bits to f32 (exact: every f16 is an f32).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let mant = u32::from(h & 0x3ff);
    let bits = match exp {
        0 => {
            // Zero or subnormal: mant * 2^-24, exact in f32.
            let v = mant as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | (mant << 13),
        _ => sign | ((exp + 112) << 23) | (mant << 13),
    };
    f32::from_bits(bits)
}

/// Converts f32 to IEEE half-precision bits, rounding to nearest even (overflow is infinity).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rem = m & ((1u32 << shift) - 1);
        let mut r = m >> shift;
        if rem > half || (rem == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && r & 1 == 1) {
        r += 1; // a carry into the exponent rounds up correctly, to infinity at the top
    }
    sign | r as u16
}

/// Converts bfloat16 bits to f32 (the top half of an f32).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Converts f32 to bfloat16 bits, rounding to nearest even.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

#[inline]
fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
fn half(b: &[u8], at: usize) -> f32 {
    f16_to_f32(le16(b, at))
}

fn check_lengths(ty: QuantType, bytes: usize, n: usize) -> Result<()> {
    let need = ty.row_bytes(n)?;
    if bytes != need {
        return Err(Error::invalid_input(format!(
            "{n} {} elements take {need} bytes, got {bytes}",
            ty.name()
        )));
    }
    Ok(())
}

/// Dequantizes `bytes` (whole blocks of `ty`) into `out`, whose length is the element count.
pub fn dequantize(ty: QuantType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check_lengths(ty, bytes.len(), out.len())?;
    dequantize_unchecked(ty, bytes, out);
    Ok(())
}

/// [`dequantize`] for lengths already checked (panics on a mismatch instead of an error).
pub(crate) fn dequantize_unchecked(ty: QuantType, bytes: &[u8], out: &mut [f32]) {
    let bb = ty.block_bytes();
    let bl = ty.block_len();
    match ty {
        QuantType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        QuantType::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = half(b, 0);
            }
        }
        QuantType::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16_to_f32(le16(b, 0));
            }
        }
        _ => {
            for (b, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bl)) {
                dequantize_block(ty, b, o);
            }
        }
    }
}

/// Dequantizes one block of a block type (`out.len() == ty.block_len()`).
fn dequantize_block(ty: QuantType, b: &[u8], y: &mut [f32]) {
    match ty {
        QuantType::Q8_0 => {
            let d = half(b, 0);
            for (y, &q) in y.iter_mut().zip(&b[2..34]) {
                *y = q as i8 as f32 * d;
            }
        }
        QuantType::Q4_0 => {
            let d = half(b, 0);
            let qs = &b[2..18];
            for j in 0..16 {
                y[j] = ((qs[j] & 0xf) as i32 - 8) as f32 * d;
                y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
            }
        }
        QuantType::Q4_1 => {
            let (d, m) = (half(b, 0), half(b, 2));
            let qs = &b[4..20];
            for j in 0..16 {
                y[j] = (qs[j] & 0xf) as f32 * d + m;
                y[j + 16] = (qs[j] >> 4) as f32 * d + m;
            }
        }
        QuantType::Q5_0 => {
            let d = half(b, 0);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            let qs = &b[6..22];
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                y[j] = ((u32::from(qs[j] & 0xf) | h0) as i32 - 16) as f32 * d;
                y[j + 16] = ((u32::from(qs[j] >> 4) | h1) as i32 - 16) as f32 * d;
            }
        }
        QuantType::Q5_1 => {
            let (d, m) = (half(b, 0), half(b, 2));
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            let qs = &b[8..24];
            for j in 0..16 {
                let h0 = ((qh >> j) << 4) & 0x10;
                let h1 = (qh >> (j + 12)) & 0x10;
                y[j] = (u32::from(qs[j] & 0xf) | h0) as f32 * d + m;
                y[j + 16] = (u32::from(qs[j] >> 4) | h1) as f32 * d + m;
            }
        }
        QuantType::IQ4_NL => {
            let d = half(b, 0);
            let qs = &b[2..18];
            for j in 0..16 {
                y[j] = d * f32::from(KVALUES_IQ4NL[usize::from(qs[j] & 0xf)]);
                y[j + 16] = d * f32::from(KVALUES_IQ4NL[usize::from(qs[j] >> 4)]);
            }
        }
        QuantType::Q2_K => kquant::dequantize_q2_k(b, y),
        QuantType::Q3_K => kquant::dequantize_q3_k(b, y),
        QuantType::Q4_K => kquant::dequantize_q4_k(b, y),
        QuantType::Q5_K => kquant::dequantize_q5_k(b, y),
        QuantType::Q6_K => kquant::dequantize_q6_k(b, y),
        QuantType::F32 | QuantType::F16 | QuantType::BF16 => unreachable!("not a block type"),
    }
}

/// The dot product of a row of `ty` (whole blocks) with `x` (one f32 per element).
pub fn dot(ty: QuantType, row: &[u8], x: &[f32]) -> Result<f32> {
    check_lengths(ty, row.len(), x.len())?;
    Ok(dot_unchecked(ty, row, x))
}

/// 8-lane dot product of two f32 slices of equal length (a multiple of 8 is fastest).
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    let mut acc2 = [0f32; 4];
    for (a, b) in ca.zip(cb) {
        let a: &[f32; 8] = a.try_into().expect("8 lanes");
        let b: &[f32; 8] = b.try_into().expect("8 lanes");
        // Two 4-lane accumulators: exactly two SSE / SIMD128 registers.
        for k in 0..4 {
            acc[k] += a[k] * b[k];
            acc2[k] += a[k + 4] * b[k + 4];
        }
    }
    acc[4..].copy_from_slice(&acc2);
    let mut s = hsum(acc);
    for (a, b) in ra.iter().zip(rb) {
        s += a * b;
    }
    s
}

/// Sums 8 lanes as two 4-lane halves first, the order a vectorized loop keeps them in (an
/// order that pairs lanes within a half makes LLVM shuffle inside the loop).
#[inline]
fn hsum(acc: [f32; 8]) -> f32 {
    let mut h = [0f32; 4];
    for k in 0..4 {
        h[k] = acc[k] + acc[k + 4];
    }
    (h[0] + h[2]) + (h[1] + h[3])
}

/// Adds one Q4 block's `d · Σ q[j]·x[j]` to 16 lane accumulators (`qs[j] & 0xf` is element j,
/// `qs[j] >> 4` element j + 16) and returns `Σ x[j]`. Fixed-size arrays and lane-wise
/// accumulation (no per-block horizontal sum) let LLVM vectorize it without bounds checks.
#[inline(always)]
fn nibble_block(qs: &[u8; 16], x: &[f32; 32], d: f32, acc: &mut [f32; 16]) -> f32 {
    let mut sx = [0f32; 16];
    for k in 0..16 {
        let q = qs[k];
        let (a, b) = (x[k], x[k + 16]);
        acc[k] += d * (f32::from(q & 0xf) * a + f32::from(q >> 4) * b);
        sx[k] = a + b;
    }
    sum16(&sx)
}

#[inline(always)]
fn sum16(v: &[f32; 16]) -> f32 {
    let mut h = [0f32; 8];
    for k in 0..8 {
        h[k] = v[k] + v[k + 8];
    }
    hsum(h)
}

#[inline(always)]
fn block<const N: usize>(b: &[u8]) -> &[u8; N] {
    b.try_into().expect("a whole block")
}

#[inline(always)]
fn xblock(x: &[f32]) -> &[f32; 32] {
    x.try_into().expect("a whole block")
}

/// [`dot`] for lengths already checked.
pub(crate) fn dot_unchecked(ty: QuantType, row: &[u8], x: &[f32]) -> f32 {
    match ty {
        QuantType::F32 => {
            let mut acc = [0f32; 8];
            let mut tail = 0.0;
            let cw = row.chunks_exact(32);
            let cx = x.chunks_exact(8);
            let (rw, rx) = (cw.remainder(), cx.remainder());
            for (w, x) in cw.zip(cx) {
                for k in 0..8 {
                    let v =
                        f32::from_le_bytes([w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]]);
                    acc[k] += v * x[k];
                }
            }
            for (w, x) in rw.chunks_exact(4).zip(rx) {
                tail += f32::from_le_bytes([w[0], w[1], w[2], w[3]]) * x;
            }
            hsum(acc) + tail
        }
        QuantType::Q8_0 => {
            let mut acc = [0f32; 32];
            for (b, x) in row.chunks_exact(34).zip(x.chunks_exact(32)) {
                let b = block::<34>(b);
                let x = xblock(x);
                let d = half(b, 0);
                for k in 0..32 {
                    acc[k] += d * (f32::from(b[2 + k] as i8) * x[k]);
                }
            }
            let mut h = [0f32; 16];
            for k in 0..16 {
                h[k] = acc[k] + acc[k + 16];
            }
            sum16(&h)
        }
        QuantType::Q4_0 => {
            let mut acc = [0f32; 16];
            let mut sum = 0f32;
            for (b, x) in row.chunks_exact(18).zip(x.chunks_exact(32)) {
                let b = block::<18>(b);
                let d = half(b, 0);
                let sx = nibble_block(
                    b[2..18].try_into().expect("16 bytes"),
                    xblock(x),
                    d,
                    &mut acc,
                );
                sum -= 8.0 * d * sx;
            }
            sum16(&acc) + sum
        }
        QuantType::Q4_1 => {
            let mut acc = [0f32; 16];
            let mut sum = 0f32;
            for (b, x) in row.chunks_exact(20).zip(x.chunks_exact(32)) {
                let b = block::<20>(b);
                let (d, m) = (half(b, 0), half(b, 2));
                let sx = nibble_block(
                    b[4..20].try_into().expect("16 bytes"),
                    xblock(x),
                    d,
                    &mut acc,
                );
                sum += m * sx;
            }
            sum16(&acc) + sum
        }
        _ => {
            // Dequantize a block to the stack, then an 8-lane dot: these types are rare in
            // the models we run, so one generic path keeps them obviously right.
            let (bb, bl) = (ty.block_bytes(), ty.block_len());
            let mut buf = [0f32; 256];
            let mut sum = 0f32;
            match ty {
                QuantType::F16 | QuantType::BF16 => {
                    for (w, x) in row.chunks(2 * 256).zip(x.chunks(256)) {
                        let n = x.len();
                        dequantize_unchecked(ty, w, &mut buf[..n]);
                        sum += dot_f32(&buf[..n], x);
                    }
                }
                _ => {
                    for (b, x) in row.chunks_exact(bb).zip(x.chunks_exact(bl)) {
                        dequantize_block(ty, b, &mut buf[..bl]);
                        sum += dot_f32(&buf[..bl], x);
                    }
                }
            }
            sum
        }
    }
}

/// Quantizes `x` (a whole number of blocks) to `ty` with a simple round-to-nearest quantizer
/// per block (ggml's reference formulas for the 32-blocks; plain min/max scales for the
/// K-types; for IQ4_NL the level nearest each value, with the value of largest magnitude at
/// −127). For building test models, not for producing production quantizations.
pub fn quantize(ty: QuantType, x: &[f32]) -> Result<Vec<u8>> {
    let n = ty.row_bytes(x.len())?;
    let mut out = Vec::with_capacity(n);
    match ty {
        QuantType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        QuantType::F16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&f32_to_f16(v).to_le_bytes())),
        QuantType::BF16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&f32_to_bf16(v).to_le_bytes())),
        _ => {
            for block in x.chunks_exact(ty.block_len()) {
                quantize_block(ty, block, &mut out);
            }
        }
    }
    debug_assert_eq!(out.len(), n);
    Ok(out)
}

fn put_f16(out: &mut Vec<u8>, v: f32) -> f32 {
    let h = f32_to_f16(v);
    out.extend_from_slice(&h.to_le_bytes());
    f16_to_f32(h)
}

fn quantize_block(ty: QuantType, x: &[f32], out: &mut Vec<u8>) {
    let signed_max = |x: &[f32]| {
        x.iter()
            .copied()
            .fold(0f32, |m, v| if v.abs() > m.abs() { v } else { m })
    };
    let min_max = |x: &[f32]| {
        x.iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            })
    };
    match ty {
        QuantType::Q8_0 => {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = put_f16(out, amax / 127.0);
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend(
                x.iter()
                    .map(|&v| (v * id).round().clamp(-127.0, 127.0) as i8 as u8),
            );
        }
        QuantType::Q4_0 | QuantType::Q5_0 => {
            let (levels, offset) = if ty == QuantType::Q4_0 {
                (-8.0, 8.0)
            } else {
                (-16.0, 16.0)
            };
            let d = put_f16(out, signed_max(x) / levels);
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let top = 2.0 * offset - 1.0;
            let q: Vec<u8> = x
                .iter()
                .map(|&v| (v * id + offset).round().clamp(0.0, top) as u8)
                .collect();
            pack_32(ty == QuantType::Q5_0, &q, out);
        }
        QuantType::Q4_1 | QuantType::Q5_1 => {
            let top = if ty == QuantType::Q4_1 { 15.0 } else { 31.0 };
            let (lo, hi) = min_max(x);
            let d = put_f16(out, (hi - lo) / top);
            let m = put_f16(out, lo);
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let q: Vec<u8> = x
                .iter()
                .map(|&v| ((v - m) * id).round().clamp(0.0, top) as u8)
                .collect();
            pack_32(ty == QuantType::Q5_1, &q, out);
        }
        QuantType::IQ4_NL => {
            let m = signed_max(x);
            let d = put_f16(out, if m != 0.0 { m / -127.0 } else { 0.0 });
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let nearest = |v: f32| {
                let v = v * id;
                (0..16u8)
                    .min_by(|&a, &b| {
                        let da = (v - f32::from(KVALUES_IQ4NL[usize::from(a)])).abs();
                        let db = (v - f32::from(KVALUES_IQ4NL[usize::from(b)])).abs();
                        da.total_cmp(&db)
                    })
                    .expect("16 levels")
            };
            for j in 0..16 {
                out.push(nearest(x[j]) | (nearest(x[j + 16]) << 4));
            }
        }
        QuantType::Q2_K => kquant::quantize_q2_k(x, out),
        QuantType::Q3_K => kquant::quantize_q3_k(x, out),
        QuantType::Q4_K => kquant::quantize_q45_k(x, false, out),
        QuantType::Q5_K => kquant::quantize_q45_k(x, true, out),
        QuantType::Q6_K => kquant::quantize_q6_k(x, out),
        QuantType::F32 | QuantType::F16 | QuantType::BF16 => unreachable!("not a block type"),
    }
}

/// Packs 32 quants as ggml's Q4/Q5 blocks: low nibbles in `qs`, fifth bits in a u32 `qh`.
fn pack_32(five_bits: bool, q: &[u8], out: &mut Vec<u8>) {
    if five_bits {
        let mut qh = 0u32;
        for (j, &v) in q.iter().enumerate() {
            qh |= u32::from(v >> 4) << j;
        }
        out.extend_from_slice(&qh.to_le_bytes());
    }
    for j in 0..16 {
        out.push((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_f16_round_trips_through_f32() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "f16 bits {h:#06x} -> {f}");
            }
        }
    }

    #[test]
    fn f32_to_f16_rounds_to_nearest_even() {
        assert_eq!(f16_to_f32(f32_to_f16(1.0 + 1.0 / 2048.0)), 1.0); // tie -> even
        assert_eq!(
            f16_to_f32(f32_to_f16(1.0 + 3.0 / 2048.0)),
            1.0 + 2.0 / 1024.0
        );
        assert_eq!(f32_to_f16(65520.0), 0x7c00); // rounds past the largest finite
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f16_to_f32(f32_to_f16(2f32.powi(-25))), 0.0); // tie with zero -> even
        assert_eq!(f16_to_f32(f32_to_f16(1.5 * 2f32.powi(-25))), 2f32.powi(-24));
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_to_f32(f32_to_bf16(1.0)), 1.0);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    }

    #[test]
    fn ids_and_sizes_match_the_gguf_reader() {
        for ty in ALL_TYPES {
            assert_eq!(QuantType::from_ggml(ty.ggml_id()), Some(ty));
            let (bl, bb) = crate::gguf::ggml_type_block(ty.ggml_id()).unwrap();
            assert_eq!(
                (ty.block_len() as u64, ty.block_bytes() as u64),
                (bl, bb),
                "{}",
                ty.name()
            );
        }
        assert_eq!(QuantType::from_ggml(9), None); // Q8_1 is not a weight format
    }

    #[test]
    fn iq4_nl_equals_the_gguf_python_package_bit_for_bit() {
        assert_eq!(
            oracle::assert_dequantize_is_bit_exact(QuantType::IQ4_NL),
            76 * 32
        );
    }

    /// Each nibble on its own: low nibble of `qs[j]` is element j, high nibble element j + 16,
    /// and the value is `d` times the table entry.
    #[test]
    fn iq4_nl_reads_nibbles_in_q4_0_order() {
        for j in 0..16 {
            for (k, &level) in KVALUES_IQ4NL.iter().enumerate() {
                let mut b = [0x88u8; 18]; // nibble 8 is the level 1
                b[..2].copy_from_slice(&0x4000u16.to_le_bytes()); // d = 2
                b[2 + j] = 0x80 | k as u8;
                let mut y = [0f32; 32];
                dequantize(QuantType::IQ4_NL, &b, &mut y).unwrap();
                assert_eq!(y[j], 2.0 * f32::from(level));
                assert!(y.iter().enumerate().all(|(i, &v)| i == j || v == 2.0));
                b[2 + j] = 0x08 | (k as u8) << 4;
                dequantize(QuantType::IQ4_NL, &b, &mut y).unwrap();
                assert_eq!(y[j + 16], 2.0 * f32::from(level));
                assert!(y.iter().enumerate().all(|(i, &v)| i == j + 16 || v == 2.0));
            }
        }
    }

    #[test]
    fn lengths_are_checked() {
        let err = QuantType::Q4_K.row_bytes(100).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a Q4_K row of 100 elements is not a whole number of 256-element blocks"
        );
        let err = dot(QuantType::Q8_0, &[0; 33], &[0.0; 32]).unwrap_err();
        assert_eq!(err.to_string(), "32 Q8_0 elements take 34 bytes, got 33");
        assert!(dequantize(QuantType::F32, &[0; 8], &mut [0.0; 2]).is_ok());
    }
}
