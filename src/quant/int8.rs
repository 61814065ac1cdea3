//! Matrix-vector products over activations rounded to 8 bits: the fast path of generation,
//! the way llama.cpp computes its quantized products (integer dot products of the weights'
//! codes with 8-bit activations, one float multiply-add per 4 codes).
//!
//! The activation vector `x` is rounded per 32-element block `b` to `x̃ = d_b · q` with
//! `d_b = max|x| / 127` and `q` in −127..=127 ([`Q8Activations`]). A weight row is read as
//! unsigned codes `w` with, per 16 elements `s`, a scale and an offset (`value = sc_s·w + mn_s`,
//! [`Decode`]), so that
//!
//! `row · x̃ = Σ_s sc_s·d_b·Σ_{i∈s} w_i·q_i + mn_s·(d_b·Σ_{i∈s} q_i)`
//!
//! where the inner sums are exact in i32 (`w ≤ 255`, `|q| ≤ 127`, at most 16 terms) and
//! `d_b·Σ q` is computed once per product. Every type fits this form (signed codes are
//! shifted: Q8_0 stores `q + 128` with `mn = −128·d`), so the result is the exact dot product
//! of the dequantized row with `x̃`, up to the order of the f32 sums: the only approximation is
//! the rounding of `x`, at most `d_b / 2 = max|x_b| / 254` per element.
//!
//! The exact-f32 products of `kernels.rs` stay the reference (tests bound the difference) and
//! are what [`crate::model::Model::set_exact`] selects. The i32 sums are written in the shape
//! of `vpdpbusd` (4 adjacent u8·i8 products per i32 lane), which LLVM turns into that
//! instruction on AVX-512 VNNI, into `vpmaddubsw`/`vpmaddwd` on AVX2, and into
//! `i32x4.dot_i16x8_s` on wasm SIMD128.

use super::{QuantType, KVALUES_IQ4NL};

/// `x` rounded to 8 bits per 32-element block (see the module docs).
pub(crate) struct Q8Activations {
    /// The codes, one per element.
    q: Vec<i8>,
    /// `d_b` once per 16 elements (the scales' spacing, so they multiply lane by lane).
    d16: Vec<f32>,
    /// `d_b · Σ q` per 16 elements: what an offset `mn_s` multiplies.
    sums: Vec<f32>,
}

impl Q8Activations {
    /// Rounds `x` (a multiple of 32 long), or `None` when a value is not finite (the caller
    /// takes the exact path, which propagates it as f32 would).
    pub(crate) fn new(x: &[f32]) -> Option<Self> {
        debug_assert_eq!(x.len() % 32, 0);
        let n = x.len() / 32;
        let mut a = Q8Activations {
            q: vec![0; x.len()],
            d16: vec![0.0; 2 * n],
            sums: vec![0.0; 2 * n],
        };
        for (b, (xb, qb)) in x.chunks_exact(32).zip(a.q.chunks_exact_mut(32)).enumerate() {
            // `max` skips NaN, so a NaN is caught by the sum.
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            if !(amax + xb.iter().sum::<f32>()).is_finite() {
                return None;
            }
            let d = amax / 127.0;
            let id = if d > 0.0 { 127.0 / amax } else { 0.0 };
            let mut s = [0i32; 2];
            for (i, (&v, q)) in xb.iter().zip(qb.iter_mut()).enumerate() {
                // Round to nearest by adding and subtracting 1.5·2^23 (exact for |v·id| ≤ 2^22;
                // here ≤ 127 up to rounding): `f32::round` is a libm call on baseline x86-64.
                // The clamp keeps the i8 exact at the edge.
                let r = ((v * id + 12_582_912.0) - 12_582_912.0).clamp(-127.0, 127.0) as i8;
                *q = r;
                s[i / 16] += i32::from(r);
            }
            a.d16[2 * b..2 * b + 2].fill(d);
            a.sums[2 * b] = d * s[0] as f32;
            a.sums[2 * b + 1] = d * s[1] as f32;
        }
        Some(a)
    }

    /// The rounded activations `x̃` as f32 (the vector the products are exact for).
    #[cfg(test)]
    pub(crate) fn dequantized(&self) -> Vec<f32> {
        self.q
            .iter()
            .enumerate()
            .map(|(i, &q)| self.d16[i / 16] * f32::from(q))
            .collect()
    }
}

/// A weight type read as unsigned codes with a scale and an offset per 16 elements.
trait Decode {
    /// Elements per block.
    const LEN: usize;
    /// Bytes per block.
    const BYTES: usize;
    /// Writes block `b`'s codes into `w` (`LEN` long), and per 16 elements `s` its scale
    /// `sc[s]` and offset `mn[s]` (`value = sc·w + mn`; `LEN / 16` long).
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]);
}

/// An f16 → f32 conversion of block scales: integer operations portably, one `vcvtph2ps`
/// where F16C is enabled (the integer form was half of a Q4_1 row's decoding).
pub(crate) trait Half {
    fn to_f32(h: u16) -> f32;
}

/// [`Half`] by integer operations.
struct PortableHalf;
impl Half for PortableHalf {
    #[inline(always)]
    fn to_f32(h: u16) -> f32 {
        super::kernels::f16_scale(h)
    }
}

#[inline(always)]
fn f16<H: Half>(b: &[u8], at: usize) -> f32 {
    H::to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// One scale and offset for both halves of a 32-element block.
#[inline(always)]
fn uniform(sc: &mut [f32], mn: &mut [f32], d: f32, m: f32) {
    sc[..2].fill(d);
    mn[..2].fill(m);
}

/// Q4_0/Q4_1/IQ4_NL order: `qs[j] & 15` is element j, `qs[j] >> 4` element j + 16.
#[inline(always)]
fn nibbles(qs: &[u8], w: &mut [u8]) {
    for j in 0..16 {
        w[j] = qs[j] & 15;
        w[j + 16] = qs[j] >> 4;
    }
}

/// Q5_0/Q5_1: nibbles plus the fifth bit `j` (element j) or `j + 16` of `qh`.
#[inline(always)]
fn five_bits(qh: u32, qs: &[u8], w: &mut [u8]) {
    for j in 0..16 {
        w[j] = (qs[j] & 15) | ((((qh >> j) & 1) as u8) << 4);
        w[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
}

// ggml's type names.
#[allow(non_camel_case_types)]
struct Q8_0;
impl Decode for Q8_0 {
    const LEN: usize = 32;
    const BYTES: usize = 34;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        let d = f16::<H>(b, 0);
        for (w, &q) in w.iter_mut().zip(&b[2..34]) {
            *w = q ^ 0x80;
        }
        uniform(sc, mn, d, -128.0 * d);
    }
}

#[allow(non_camel_case_types)]
struct Q4_0;
impl Decode for Q4_0 {
    const LEN: usize = 32;
    const BYTES: usize = 18;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        let d = f16::<H>(b, 0);
        nibbles(&b[2..18], w);
        uniform(sc, mn, d, -8.0 * d);
    }
}

#[allow(non_camel_case_types)]
struct Q4_1;
impl Decode for Q4_1 {
    const LEN: usize = 32;
    const BYTES: usize = 20;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        nibbles(&b[4..20], w);
        uniform(sc, mn, f16::<H>(b, 0), f16::<H>(b, 2));
    }
}

#[allow(non_camel_case_types)]
struct Q5_0;
impl Decode for Q5_0 {
    const LEN: usize = 32;
    const BYTES: usize = 22;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        let d = f16::<H>(b, 0);
        five_bits(u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..22], w);
        uniform(sc, mn, d, -16.0 * d);
    }
}

#[allow(non_camel_case_types)]
struct Q5_1;
impl Decode for Q5_1 {
    const LEN: usize = 32;
    const BYTES: usize = 24;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        five_bits(u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..24], w);
        uniform(sc, mn, f16::<H>(b, 0), f16::<H>(b, 2));
    }
}

struct IQ4NL;
impl Decode for IQ4NL {
    const LEN: usize = 32;
    const BYTES: usize = 18;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        let d = f16::<H>(b, 0);
        nibbles(&b[2..18], w);
        for w in &mut w[..32] {
            *w = (KVALUES_IQ4NL[usize::from(*w)] as u8) ^ 0x80;
        }
        uniform(sc, mn, d, -128.0 * d);
    }
}

/// Q4_K/Q5_K: 8 sub-blocks of 32 (two halves each) with 6-bit scale and min.
#[inline(always)]
fn k45_scales<H: Half>(b: &[u8], sc: &mut [f32], mn: &mut [f32]) {
    let (d, dmin) = (f16::<H>(b, 0), f16::<H>(b, 2));
    for j in 0..8 {
        let (s, m) = super::kquant::scale_min(j, &b[4..16]);
        sc[2 * j..2 * j + 2].fill(d * f32::from(s));
        mn[2 * j..2 * j + 2].fill(-(dmin * f32::from(m)));
    }
}

#[allow(non_camel_case_types)]
struct Q4_K;
impl Decode for Q4_K {
    const LEN: usize = 256;
    const BYTES: usize = 144;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        k45_scales::<H>(b, sc, mn);
        for (c, q) in b[16..144].chunks_exact(32).enumerate() {
            for l in 0..32 {
                w[64 * c + l] = q[l] & 15;
                w[64 * c + 32 + l] = q[l] >> 4;
            }
        }
    }
}

#[allow(non_camel_case_types)]
struct Q5_K;
impl Decode for Q5_K {
    const LEN: usize = 256;
    const BYTES: usize = 176;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        k45_scales::<H>(b, sc, mn);
        let qh = &b[16..48];
        for (c, q) in b[48..176].chunks_exact(32).enumerate() {
            for l in 0..32 {
                w[64 * c + l] = (q[l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4);
                w[64 * c + 32 + l] = (q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
            }
        }
    }
}

#[allow(non_camel_case_types)]
struct Q6_K;
impl Decode for Q6_K {
    const LEN: usize = 256;
    const BYTES: usize = 210;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        let d = f16::<H>(b, 208);
        for n in 0..2 {
            let ql = &b[64 * n..64 * n + 64];
            let qh = &b[128 + 32 * n..128 + 32 * n + 32];
            let w = &mut w[128 * n..128 * n + 128];
            for l in 0..32 {
                w[l] = (ql[l] & 15) | ((qh[l] & 3) << 4);
                w[l + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
                w[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                w[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
            }
        }
        // Element i has scale i / 16 (see kquant.rs); codes are q + 32.
        for s in 0..16 {
            sc[s] = d * f32::from(b[192 + s] as i8);
            mn[s] = -32.0 * sc[s];
        }
    }
}

/// Q2_K/Q3_K's 2-bit order: element `128n + 32j + l` is `(qs[32n + l] >> 2j) & 3`.
#[inline(always)]
fn two_bits(qs: &[u8], w: &mut [u8]) {
    for n in 0..2 {
        for j in 0..4 {
            for l in 0..32 {
                w[128 * n + 32 * j + l] = (qs[32 * n + l] >> (2 * j)) & 3;
            }
        }
    }
}

#[allow(non_camel_case_types)]
struct Q2_K;
impl Decode for Q2_K {
    const LEN: usize = 256;
    const BYTES: usize = 84;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        let (d, dmin) = (f16::<H>(b, 80), f16::<H>(b, 82));
        two_bits(&b[16..80], w);
        for s in 0..16 {
            sc[s] = d * f32::from(b[s] & 15);
            mn[s] = -(dmin * f32::from(b[s] >> 4));
        }
    }
}

#[allow(non_camel_case_types)]
struct Q3_K;
impl Decode for Q3_K {
    const LEN: usize = 256;
    const BYTES: usize = 110;
    #[inline(always)]
    fn decode<H: Half>(b: &[u8], w: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        let d = f16::<H>(b, 108);
        two_bits(&b[32..96], w);
        // The high bit (set: q = low, clear: q = low − 4) read as codes q + 4 = low + 4·bit.
        let hmask = &b[..32];
        for n in 0..2 {
            for j in 0..4 {
                for l in 0..32 {
                    let bit = (hmask[l] >> (4 * n + j)) & 1;
                    w[128 * n + 32 * j + l] += bit << 2;
                }
            }
        }
        for s in 0..16 {
            sc[s] = d * f32::from(super::kquant::q3_k_scale(s, &b[96..108]));
            mn[s] = -4.0 * sc[s];
        }
    }
}

/// `$body` with `$T` the [`Decode`] of block type `$ty` (F32/F16/BF16 have none: a bug to
/// ask, their callers keep the exact path).
macro_rules! with_decoder {
    ($ty:expr, $T:ident => $body:expr) => {
        match $ty {
            QuantType::Q8_0 => {
                type $T = Q8_0;
                $body
            }
            QuantType::Q4_0 => {
                type $T = Q4_0;
                $body
            }
            QuantType::Q4_1 => {
                type $T = Q4_1;
                $body
            }
            QuantType::Q5_0 => {
                type $T = Q5_0;
                $body
            }
            QuantType::Q5_1 => {
                type $T = Q5_1;
                $body
            }
            QuantType::IQ4_NL => {
                type $T = IQ4NL;
                $body
            }
            QuantType::Q2_K => {
                type $T = Q2_K;
                $body
            }
            QuantType::Q3_K => {
                type $T = Q3_K;
                $body
            }
            QuantType::Q4_K => {
                type $T = Q4_K;
                $body
            }
            QuantType::Q5_K => {
                type $T = Q5_K;
                $body
            }
            QuantType::Q6_K => {
                type $T = Q6_K;
                $body
            }
            QuantType::F32 | QuantType::F16 | QuantType::BF16 => {
                unreachable!("float weights have no codes")
            }
        }
    };
}

/// `out[r] = row_r · x̃` for the `out.len()` rows of `ty` back to back in `w`, where `ty` is a
/// block type (not F32/F16/BF16; the caller keeps those exact).
pub(crate) fn matvec(ty: QuantType, w: &[u8], a: &Q8Activations, out: &mut [f32]) {
    with_decoder!(ty, T => rows::<T>(w, a, out))
}

/// Decodes whole blocks of `ty` (a block type, not F32/F16/BF16): per element its unsigned
/// code into `codes`, per 16 elements the scale `sc` and offset `mn` (`value = sc·code +
/// mn`, exactly the dequantized value up to one f32 rounding). The GPU's layout for the types
/// it has no dedicated decoder for (`src/gpu/matvec.rs`).
#[cfg(any(test, feature = "gpu"))]
pub(crate) fn decode_codes(
    ty: QuantType,
    bytes: &[u8],
    codes: &mut [u8],
    sc: &mut [f32],
    mn: &mut [f32],
) {
    fn each<T: Decode>(bytes: &[u8], codes: &mut [u8], sc: &mut [f32], mn: &mut [f32]) {
        let per = T::LEN / 16;
        for (((b, w), sc), mn) in bytes
            .chunks_exact(T::BYTES)
            .zip(codes.chunks_exact_mut(T::LEN))
            .zip(sc.chunks_exact_mut(per))
            .zip(mn.chunks_exact_mut(per))
        {
            T::decode::<PortableHalf>(b, w, sc, mn);
        }
    }
    with_decoder!(ty, T => each::<T>(bytes, codes, sc, mn))
}

/// Whether this CPU has a vector integer dot product for these products (x86-64 with AVX2,
/// or AVX-512 VNNI). Elsewhere the portable loop is slower than the exact f32 kernels (wasm32
/// SIMD128, measured on SmolLM2 in Node: 8.6 vs 22 tok/s), so the model keeps those.
pub(crate) fn is_fast() -> bool {
    #[cfg(target_arch = "x86_64")]
    return x86::has_avx2();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Rows of `T`: each row decoded into a [`RowCodes`], then its integer products, dispatched
/// at run time to AVX-512 VNNI (`vpdpbusd`: 64 products per instruction) or AVX2
/// (`vpmaddwd` over codes widened to i16) on x86-64, the portable loop elsewhere (wasm32,
/// where LLVM vectorizes it for SIMD128).
fn rows<T: Decode>(w: &[u8], a: &Q8Activations, out: &mut [f32]) {
    let mut row = RowCodes::new(a);
    #[cfg(target_arch = "x86_64")]
    {
        if x86::has_vnni() {
            // SAFETY: the features the function enables were detected just above.
            #[allow(unsafe_code)]
            return unsafe { x86::rows_vnni::<T>(w, a, &mut row, out) };
        }
        if x86::has_avx2() {
            // SAFETY: as above.
            #[allow(unsafe_code)]
            return unsafe { x86::rows_avx2::<T>(w, a, &mut row, out) };
        }
    }
    rows_portable::<T>(w, a, &mut row, out)
}

fn rows_portable<T: Decode>(w: &[u8], a: &Q8Activations, row: &mut RowCodes, out: &mut [f32]) {
    for (o, r) in out.iter_mut().zip(w.chunks_exact(row.row_bytes::<T>())) {
        row.decode::<T, PortableHalf>(r, a);
        *o = row.dot_portable(a);
    }
}

/// The implementations [`rows`] chooses from that this CPU runs, by name (for tests: each
/// must give the same products).
#[cfg(test)]
fn each_path<T: Decode>(
    w: &[u8],
    a: &Q8Activations,
    out: &mut [f32],
) -> Vec<(&'static str, Vec<f32>)> {
    let mut row = RowCodes::new(a);
    let mut got = Vec::new();
    let mut run = |name, f: &dyn Fn(&mut RowCodes, &mut [f32])| {
        f(&mut row, out);
        got.push((name, out.to_vec()));
    };
    run("portable", &|row, out| rows_portable::<T>(w, a, row, out));
    #[cfg(target_arch = "x86_64")]
    {
        if x86::has_avx2() {
            // SAFETY: detected just above.
            #[allow(unsafe_code)]
            run("avx2", &|row, out| unsafe {
                x86::rows_avx2::<T>(w, a, row, out)
            });
        }
        if x86::has_vnni() {
            // SAFETY: detected just above.
            #[allow(unsafe_code)]
            run("avx512vnni", &|row, out| unsafe {
                x86::rows_vnni::<T>(w, a, row, out)
            });
        }
    }
    got
}

/// One weight row decoded: its codes, and per 16 elements the factor `sc_s·d_b` of the i32
/// sum and the offset `mn_s` (buffers reused from row to row).
struct RowCodes {
    codes: Vec<u8>,
    sc: Vec<f32>,
    mn: Vec<f32>,
}

impl RowCodes {
    fn new(a: &Q8Activations) -> Self {
        RowCodes {
            codes: vec![0; a.q.len()],
            sc: vec![0.0; a.sums.len()],
            mn: vec![0.0; a.sums.len()],
        }
    }

    fn row_bytes<T: Decode>(&self) -> usize {
        self.codes.len() / T::LEN * T::BYTES
    }

    /// Decodes `row` and folds the activations' `d_b` into the scales.
    #[inline(always)]
    fn decode<T: Decode, H: Half>(&mut self, row: &[u8], a: &Q8Activations) {
        let per = T::LEN / 16;
        for (((blk, w), sc), mn) in row
            .chunks_exact(T::BYTES)
            .zip(self.codes.chunks_exact_mut(T::LEN))
            .zip(self.sc.chunks_exact_mut(per))
            .zip(self.mn.chunks_exact_mut(per))
        {
            T::decode::<H>(blk, w, sc, mn);
        }
        for (f, d) in self.sc.iter_mut().zip(&a.d16) {
            *f *= d;
        }
    }

    /// `Σ_s f_s·Σ w·q + mn_s·d_b·Σ q` of the decoded row, portably.
    fn dot_portable(&self, a: &Q8Activations) -> f32 {
        let mut sum = 0f32;
        for ((w, q), f) in self
            .codes
            .chunks_exact(16)
            .zip(a.q.chunks_exact(16))
            .zip(&self.sc)
        {
            let mut s = 0i32;
            for k in 0..16 {
                s += i32::from(w[k]) * i32::from(q[k]);
            }
            sum += s as f32 * f;
        }
        sum + super::dot_f32(&self.mn, &a.sums)
    }
}

/// The crate's only unsafe code: `std::arch` intrinsics, which need `unsafe` for their
/// target features (checked by the caller) and for loads through pointers (in bounds: every
/// load is checked against its slice's length first).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use super::{Decode, Half, Q8Activations, RowCodes};
    use std::arch::x86_64::*;

    /// Whether [`rows_vnni`] runs here.
    pub(super) fn has_vnni() -> bool {
        is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512bw")
            && has_avx2()
    }

    /// Whether [`rows_avx2`] runs here.
    pub(super) fn has_avx2() -> bool {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    }

    /// [`Half`] by F16C (only inlined into the functions below, which enable it).
    pub(super) struct F16c;
    impl Half for F16c {
        #[inline(always)]
        fn to_f32(h: u16) -> f32 {
            // SAFETY: only called from functions with F16C enabled (detected by the caller).
            unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h)))) }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn rows_vnni<T: Decode>(
        w: &[u8],
        a: &Q8Activations,
        row: &mut RowCodes,
        out: &mut [f32],
    ) {
        let rb = row.row_bytes::<T>();
        for (i, (o, r)) in out.iter_mut().zip(w.chunks_exact(rb)).enumerate() {
            prefetch(w, i * rb + AHEAD, rb);
            row.decode::<T, F16c>(r, a);
            *o = dot_vnni(row, a);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn rows_avx2<T: Decode>(
        w: &[u8],
        a: &Q8Activations,
        row: &mut RowCodes,
        out: &mut [f32],
    ) {
        for (o, r) in out.iter_mut().zip(w.chunks_exact(row.row_bytes::<T>())) {
            row.decode::<T, F16c>(r, a);
            *o = dot_avx2(row, a);
        }
    }

    /// Per 64 elements one `vpdpbusd` (16 lanes of 4 products: lanes 4s..4s+4 are sub-block
    /// s), converted and multiply-added with the 4 factors spread to their lanes; two
    /// accumulators alternate so consecutive multiply-adds do not wait on each other. A last
    /// 32 elements, and the offsets' dot product, take masked loads into the same
    /// accumulators: one horizontal sum per row.
    #[inline(always)]
    unsafe fn dot_vnni(row: &RowCodes, a: &Q8Activations) -> f32 {
        let n = row.codes.len();
        let k = n / 16;
        assert!(a.q.len() == n && row.sc.len() == k && row.mn.len() == k && a.sums.len() == k);
        let (w, q, f) = (row.codes.as_ptr(), a.q.as_ptr(), row.sc.as_ptr());
        let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        // `m` selects the bytes (and `m >> ..` the factors) of a step of 64 or 32 elements.
        let step = |at: usize, m: u64, acc: __m512| {
            let s = _mm512_dpbusd_epi32(
                _mm512_setzero_si512(),
                _mm512_maskz_loadu_epi8(m, w.add(at).cast()),
                _mm512_maskz_loadu_epi8(m, q.add(at).cast()),
            );
            let fm = if m == u64::MAX { 0xf } else { 0x3 };
            let fs = _mm512_permutexvar_ps(
                spread,
                _mm512_castps128_ps512(_mm_maskz_loadu_ps(fm, f.add(at / 16))),
            );
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), fs, acc)
        };
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 128 <= n {
            acc[0] = step(i, u64::MAX, acc[0]);
            acc[1] = step(i + 64, u64::MAX, acc[1]);
            i += 128;
        }
        if i + 64 <= n {
            acc[0] = step(i, u64::MAX, acc[0]);
            i += 64;
        }
        if i < n {
            acc[1] = step(i, u32::MAX.into(), acc[1]);
        }
        let (mn, sums) = (row.mn.as_ptr(), a.sums.as_ptr());
        let mut j = 0;
        while j < k {
            let m: __mmask16 = if j + 16 <= k {
                u16::MAX
            } else {
                (1 << (k - j)) - 1
            };
            let i = (j / 16) % 2;
            acc[i] = _mm512_fmadd_ps(
                _mm512_maskz_loadu_ps(m, mn.add(j)),
                _mm512_maskz_loadu_ps(m, sums.add(j)),
                acc[i],
            );
            j += 16;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }

    /// Per 16 elements: codes and activations widened to i16, `vpmaddwd` (8 lanes of 2
    /// products), converted and multiply-added with the sub-block's factor.
    #[inline(always)]
    unsafe fn dot_avx2(row: &RowCodes, a: &Q8Activations) -> f32 {
        let n = row.codes.len();
        assert!(a.q.len() == n && row.sc.len() == n / 16);
        let (w, q, f) = (row.codes.as_ptr(), a.q.as_ptr(), row.sc.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut i = 0;
        while i + 32 <= n {
            for (h, acc) in acc.iter_mut().enumerate() {
                let at = i + 16 * h;
                let wv = _mm256_cvtepu8_epi16(_mm_loadu_si128(w.add(at).cast()));
                let qv = _mm256_cvtepi8_epi16(_mm_loadu_si128(q.add(at).cast()));
                let s = _mm256_madd_epi16(wv, qv);
                *acc =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(*f.add(at / 16)), *acc);
            }
            i += 32;
        }
        hsum256(_mm256_add_ps(acc[0], acc[1])) + super::super::dot_f32(&row.mn, &a.sums)
    }

    /// How far ahead of the row computed its bytes are requested from memory.
    /// (4 KiB: 1–8 KiB measured within noise of each other, none 20 % slower on Gemma 3.)
    const AHEAD: usize = 4096;

    /// Requests `len` bytes of `w` from `at` into the cache (nothing past `w`'s end).
    #[inline(always)]
    unsafe fn prefetch(w: &[u8], at: usize, len: usize) {
        let end = (at + len).min(w.len());
        let mut p = at;
        while p < end {
            _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().add(p).cast());
            p += 64;
        }
    }

    #[inline(always)]
    unsafe fn hsum256(v: __m256) -> f32 {
        let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize, quantize, ALL_TYPES};

    /// Deterministic values in [−1, 1) with a few larger ones (xorshift).
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let v = (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
                if i % 37 == 0 {
                    4.0 * v
                } else {
                    v
                }
            })
            .collect()
    }

    #[test]
    fn decoded_codes_give_the_dequantized_values() {
        for ty in ALL_TYPES {
            if matches!(ty, QuantType::F32 | QuantType::F16 | QuantType::BF16) {
                continue;
            }
            let n = 512;
            let bytes = quantize(ty, &values(7, n)).unwrap();
            let mut want = vec![0f32; n];
            dequantize(ty, &bytes, &mut want).unwrap();
            let got = decoded(ty, &bytes);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let tol = 1e-6 * (1.0 + w.abs());
                assert!((g - w).abs() <= tol, "{ty:?} element {i}: {g} vs {w}");
            }
        }
    }

    fn decoded(ty: QuantType, bytes: &[u8]) -> Vec<f32> {
        let n = bytes.len() / ty.block_bytes() * ty.block_len();
        let (mut codes, mut sc, mut mn) = (vec![0u8; n], vec![0f32; n / 16], vec![0f32; n / 16]);
        decode_codes(ty, bytes, &mut codes, &mut sc, &mut mn);
        (0..n)
            .map(|i| sc[i / 16] * f32::from(codes[i]) + mn[i / 16])
            .collect()
    }

    #[test]
    fn rounded_activations_are_within_half_a_step() {
        let x = values(3, 640);
        let a = Q8Activations::new(&x).unwrap();
        for (b, (xb, yb)) in x.chunks(32).zip(a.dequantized().chunks(32)).enumerate() {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (v, y) in xb.iter().zip(yb) {
                assert!(
                    (v - y).abs() <= amax / 254.0 * 1.0001,
                    "block {b}: {v} vs {y}"
                );
            }
        }
        assert!(Q8Activations::new(&[f32::NAN; 32]).is_none());
        assert!(Q8Activations::new(&[f32::INFINITY; 32]).is_none());
        let zero = Q8Activations::new(&[0.0; 32]).unwrap();
        assert!(zero.dequantized().iter().all(|&v| v == 0.0));
    }

    /// Every type: the integer product equals the exact dot product of the dequantized row
    /// with the rounded activations, up to f32 summation order.
    #[test]
    fn products_equal_the_exact_dot_with_the_rounded_activations() {
        for ty in ALL_TYPES {
            if matches!(ty, QuantType::F32 | QuantType::F16 | QuantType::BF16) {
                continue;
            }
            // Every remainder of AVX-512's 128-element steps (0, 32, 64, 96 elements), and
            // offsets past and short of 16 sub-blocks.
            let widths: &[usize] = if ty.block_len() == 256 {
                &[256, 512, 768, 2048]
            } else {
                &[32, 64, 96, 128, 576, 800, 832, 864]
            };
            for &cols in widths {
                let rows = 5;
                let w = quantize(ty, &values(11 + cols as u64, rows * cols)).unwrap();
                let x = values(5, cols);
                let a = Q8Activations::new(&x).unwrap();
                let xt = a.dequantized();
                let mut got = vec![0f32; rows];
                matvec(ty, &w, &a, &mut got);
                let mut paths = paths(ty, &w, &a, rows);
                paths.push(("dispatched", got));
                let rb = w.len() / rows;
                for (path, got) in &paths {
                    for r in 0..rows {
                        let mut row = vec![0f32; cols];
                        dequantize(ty, &w[r * rb..(r + 1) * rb], &mut row).unwrap();
                        let want: f64 = row
                            .iter()
                            .zip(&xt)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum();
                        let mag: f64 = row
                            .iter()
                            .zip(&xt)
                            .map(|(&a, &b)| f64::from((a * b).abs()))
                            .sum();
                        let err = (f64::from(got[r]) - want).abs();
                        assert!(
                            err <= 1e-5 * mag + 1e-6,
                            "{ty:?} {path} width {cols} row {r}: {} vs {want}",
                            got[r]
                        );
                    }
                }
            }
        }
    }

    /// The largest codes against the largest activations, with signs that add up: no
    /// intermediate sum saturates (`vpmaddwd`, `vpdpbusd`: at most 2·255·127 per pair).
    #[test]
    fn extreme_codes_do_not_saturate() {
        let cols = 128;
        let mut w = Vec::new();
        for _ in 0..cols / 32 {
            w.extend_from_slice(&0x3c00u16.to_le_bytes()); // d = 1
            w.extend((0..32).map(|i| if i % 2 == 0 { 0x80u8 } else { 0x7f })); // -128, 127
        }
        let x: Vec<f32> = (0..cols)
            .map(|i| if i % 2 == 0 { -1.0 } else { 1.0 })
            .collect();
        let a = Q8Activations::new(&x).unwrap();
        let want = (cols / 2) as f32 * (128.0 + 127.0) * (1.0 / 127.0 * 127.0);
        for (path, got) in paths(QuantType::Q8_0, &w, &a, 1) {
            assert!(
                (got[0] - want).abs() <= 1e-3 * want,
                "{path}: {} vs {want}",
                got[0]
            );
        }
    }

    fn paths(
        ty: QuantType,
        w: &[u8],
        a: &Q8Activations,
        rows: usize,
    ) -> Vec<(&'static str, Vec<f32>)> {
        let mut out = vec![0f32; rows];
        with_decoder!(ty, T => each_path::<T>(w, a, &mut out))
    }
}
