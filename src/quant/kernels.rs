//! The matrix kernels of the CPU forward pass: a weight matrix (rows of one [`QuantType`] back
//! to back) times one activation vector (generation) or a tile of them (prompt processing).
//!
//! Same numbers as [`super::dot`] up to the order of the f32 sums (and FMA where the CPU has
//! it): weights are dequantized exactly, activations stay f32. The speed comes from
//! * runtime dispatch ([`multiversion`]) to AVX-512 or AVX2, with FMA, on x86-64; other
//!   targets (wasm32 with SIMD128, baseline x86-64) get the portable build of the same loops;
//! * loops shaped for LLVM's SLP vectorizer: 16-lane block statements, ints converted to
//!   floats through the exponent bits of 2^23, f16 scales by integer operations. The shapes
//!   are brittle (see [`q4_row`], [`q4_tile`]): check the generated code, or
//!   `examples/bench_model.rs`, after changing one;
//! * `Σ x` per block computed once per product instead of once per row (Q4_0/Q4_1:
//!   `row·x = Σ_b d_b·Σ q·x + c_b·Σ x_b` with `c = m`, or `−8d` for Q4_0);
//! * for a tile of inputs, each block decoded once per 4 inputs.

use multiversion::multiversion;
use multiversion::target::target_cfg_f;

use super::{dequantize_unchecked, QuantType};

/// `a·b + c`: one fused multiply-add where the target has FMA, a multiply and an add
/// otherwise (`f32::mul_add` without hardware FMA is a slow library call).
#[inline(always)]
pub(crate) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Sums 8 lanes pairwise in the order a vectorized loop keeps them (see [`super::hsum`]).
#[inline(always)]
fn hsum8(v: &[f32; 8]) -> f32 {
    let h = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

#[inline(always)]
fn arr<const N: usize, T>(s: &[T]) -> &[T; N] {
    s.try_into().expect("a whole block")
}

/// `out[r] = row_r · x` for the `out.len()` rows stored back to back in `w` (whole rows of
/// `ty`, `x.len()` elements each; lengths checked by the caller).
pub(crate) fn matvec(ty: QuantType, w: &[u8], x: &[f32], out: &mut [f32]) {
    if out.is_empty() {
        return;
    }
    debug_assert_eq!(w.len() % out.len(), 0);
    match ty {
        QuantType::Q4_1 => {
            let sx = block_sums(x);
            matvec_q4_1(w, x, &sx, out)
        }
        QuantType::Q4_0 => {
            let sx = block_sums(x);
            matvec_q4_0(w, x, &sx, out)
        }
        QuantType::Q8_0 => matvec_q8_0(w, x, out),
        _ => {
            let mut buf = vec![0f32; x.len()];
            matvec_dequantized(ty, w, x, out, &mut buf)
        }
    }
}

/// `Σ x` over each 32-element block of `x`.
fn block_sums(x: &[f32]) -> Vec<f32> {
    x.chunks_exact(32)
        .map(|b| {
            let b = arr::<32, f32>(b);
            let mut s = [0f32; 8];
            for j in 0..4 {
                for k in 0..8 {
                    s[k] += b[8 * j + k];
                }
            }
            hsum8(&s)
        })
        .collect()
}

#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn matvec_q4_1(w: &[u8], x: &[f32], sx: &[f32], out: &mut [f32]) {
    if target_cfg_f!(target_feature = "fma") {
        q4_matvec::<20, true>(w, x, sx, out)
    } else {
        q4_matvec::<20, false>(w, x, sx, out)
    }
}

#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn matvec_q4_0(w: &[u8], x: &[f32], sx: &[f32], out: &mut [f32]) {
    if target_cfg_f!(target_feature = "fma") {
        q4_matvec::<18, true>(w, x, sx, out)
    } else {
        q4_matvec::<18, false>(w, x, sx, out)
    }
}

/// Q4_0 (`BB = 18`: f16 d, 16 bytes of nibbles) or Q4_1 (`BB = 20`: f16 d, f16 m, nibbles).
#[inline(always)]
fn q4_matvec<const BB: usize, const FMA: bool>(w: &[u8], x: &[f32], sx: &[f32], out: &mut [f32]) {
    let rb = x.len() / 32 * BB;
    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
        *o = q4_row::<BB, FMA>(row, x, sx);
    }
}

/// One row: 16 lanes (element `j` is `qs[j] & 15`, element `j + 16` is `qs[j] >> 4`),
/// `d · Σ q·x` accumulated lane-wise, `c · Σ x` from the block sums.
///
/// The shape is tuned for LLVM's SLP vectorizer: whole-block, 16-lane statements compile to
/// one AVX-512 (two AVX2, four SIMD128) instruction each, where a `[f32; 8]` formulation or
/// `f32::from(u8)` conversions get split into 2-lane pieces.
#[inline(always)]
fn q4_row<const BB: usize, const FMA: bool>(row: &[u8], x: &[f32], sx: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let mut cacc = 0f32;
    for ((blk, xb), &s) in row.chunks_exact(BB).zip(x.chunks_exact(32)).zip(sx) {
        let blk = arr::<BB, u8>(blk);
        let xb = arr::<32, f32>(xb);
        let d = f16_scale(u16::from_le_bytes([blk[0], blk[1]]));
        let c = if BB == 20 {
            f16_scale(u16::from_le_bytes([blk[2], blk[3]]))
        } else {
            -8.0 * d
        };
        let qs = arr::<16, u8>(&blk[BB - 16..]);
        for k in 0..16 {
            let q = qs[k];
            let p = madd::<FMA>(u8_to_f32(q >> 4), xb[k + 16], u8_to_f32(q & 15) * xb[k]);
            acc[k] = madd::<FMA>(d, p, acc[k]);
        }
        cacc = madd::<FMA>(c, s, cacc);
    }
    sum16(&acc) + cacc
}

/// `q as f32` through the exponent bits of 2^23 (exact for every u8): an OR and a
/// subtraction, which vectorizes at full width where LLVM splits `u8 → f32` conversions.
#[inline(always)]
fn u8_to_f32(q: u8) -> f32 {
    f32::from_bits(0x4B00_0000 | u32::from(q)) - 8_388_608.0
}

/// `q as i8 as f32` likewise: `(q ^ 0x80) = q + 128` in 0..=255 on top of 2^23, minus
/// 2^23 + 128 (all exact).
#[inline(always)]
fn i8_to_f32(q: u8) -> f32 {
    f32::from_bits(0x4B00_0000 | u32::from(q ^ 0x80)) - 8_388_736.0
}

/// [`super::f16_to_f32`] for block scales: normal halves (all but a zero or subnormal scale,
/// in practice) by integer operations, the rest through [`f16_exact`]. Cheaper than either
/// alone, and the branch is all but never taken.
#[inline(always)]
pub(super) fn f16_scale(h: u16) -> f32 {
    let e = h & 0x7c00;
    if e == 0 || e == 0x7c00 {
        return f16_exact(h);
    }
    let bits = ((u32::from(h & 0x7fff) << 13) + 0x3800_0000) | (u32::from(h & 0x8000) << 16);
    f32::from_bits(bits)
}

/// [`super::f16_to_f32`] without branches: sign and magnitude shifted into f32 position and
/// scaled by 2^112 (exact for normal and subnormal halves), infinities and NaNs patched.
#[inline(always)]
fn f16_exact(h: u16) -> f32 {
    let bits = ((h as i16 as i32 as u32) << 13) & 0x8fff_e000;
    let v = f32::from_bits(bits) * f32::from_bits(0x7780_0000); // 2^112
    if h & 0x7c00 == 0x7c00 {
        f32::from_bits(bits | 0x7f80_0000)
    } else {
        v
    }
}

#[inline(always)]
fn sum16(v: &[f32; 16]) -> f32 {
    let mut h = [0f32; 8];
    for k in 0..8 {
        h[k] = v[k] + v[k + 8];
    }
    hsum8(&h)
}

#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn matvec_q8_0(w: &[u8], x: &[f32], out: &mut [f32]) {
    if target_cfg_f!(target_feature = "fma") {
        q8_matvec::<true>(w, x, out)
    } else {
        q8_matvec::<false>(w, x, out)
    }
}

#[inline(always)]
fn q8_matvec<const FMA: bool>(w: &[u8], x: &[f32], out: &mut [f32]) {
    let rb = x.len() / 32 * 34;
    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
        *o = q8_row::<FMA>(row, x);
    }
}

/// One Q8_0 row, 16 lanes as in [`q4_row`].
#[inline(always)]
fn q8_row<const FMA: bool>(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (blk, xb) in row.chunks_exact(34).zip(x.chunks_exact(32)) {
        let blk = arr::<34, u8>(blk);
        let xb = arr::<32, f32>(xb);
        let d = f16_scale(u16::from_le_bytes([blk[0], blk[1]]));
        for k in 0..16 {
            let p = madd::<FMA>(
                i8_to_f32(blk[18 + k]),
                xb[k + 16],
                i8_to_f32(blk[2 + k]) * xb[k],
            );
            acc[k] = madd::<FMA>(d, p, acc[k]);
        }
    }
    sum16(&acc)
}

/// Any other type: each row dequantized to `buf`, then an f32 dot product.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn matvec_dequantized(ty: QuantType, w: &[u8], x: &[f32], out: &mut [f32], buf: &mut [f32]) {
    let fma = target_cfg_f!(target_feature = "fma");
    let rb = w.len() / out.len();
    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
        dequantize_unchecked(ty, row, buf);
        *o = if fma {
            dot_f32_with::<true>(buf, x)
        } else {
            dot_f32_with::<false>(buf, x)
        };
    }
}

/// `out_t[r·t + i] = row_r · x_i` for the `out_t.len() / t` rows stored back to back in `w`
/// and the `t` inputs `xs` (`t × cols`): each row's blocks are decoded once per 4 inputs and
/// multiplied with all 4 (Q4_0, Q4_1), or the row is dequantized once into a buffer (other
/// types).
pub(crate) fn matmul_t(ty: QuantType, w: &[u8], xs: &[f32], t: usize, out_t: &mut [f32]) {
    if out_t.is_empty() {
        return;
    }
    let cols = xs.len() / t;
    let rb = w.len() / (out_t.len() / t);
    match ty {
        QuantType::Q4_1 => {
            let sx = block_sums(&xs[t / 4 * 4 * cols..]);
            matmul_t_q4_1(w, rb, xs, t, &sx, out_t)
        }
        QuantType::Q4_0 => {
            let sx = block_sums(&xs[t / 4 * 4 * cols..]);
            matmul_t_q4_0(w, rb, xs, t, &sx, out_t)
        }
        _ => {
            let mut buf = vec![0f32; cols];
            matmul_t_dequantized(ty, w, rb, xs, t, out_t, &mut buf)
        }
    }
}

#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn matmul_t_q4_1(w: &[u8], rb: usize, xs: &[f32], t: usize, sx: &[f32], out_t: &mut [f32]) {
    if target_cfg_f!(target_feature = "fma") {
        q4_matmul_t::<20, true>(w, rb, xs, t, sx, out_t)
    } else {
        q4_matmul_t::<20, false>(w, rb, xs, t, sx, out_t)
    }
}

#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn matmul_t_q4_0(w: &[u8], rb: usize, xs: &[f32], t: usize, sx: &[f32], out_t: &mut [f32]) {
    if target_cfg_f!(target_feature = "fma") {
        q4_matmul_t::<18, true>(w, rb, xs, t, sx, out_t)
    } else {
        q4_matmul_t::<18, false>(w, rb, xs, t, sx, out_t)
    }
}

/// Inputs 4 at a time through [`q4_tile`]; the last `t % 4` through [`q4_row`] (`sx`: their
/// block sums).
#[inline(always)]
fn q4_matmul_t<const BB: usize, const FMA: bool>(
    w: &[u8],
    rb: usize,
    xs: &[f32],
    t: usize,
    sx: &[f32],
    out_t: &mut [f32],
) {
    let cols = xs.len() / t;
    let nb = cols / 32;
    for (o, row) in out_t.chunks_exact_mut(t).zip(w.chunks_exact(rb)) {
        let mut x4 = xs.chunks_exact(4 * cols);
        let mut o4 = o.chunks_exact_mut(4);
        for (o, xq) in (&mut o4).zip(&mut x4) {
            let (a, xq) = xq.split_at(cols);
            let (b, xq) = xq.split_at(cols);
            let (c, d) = xq.split_at(cols);
            o.copy_from_slice(&q4_tile::<BB, FMA>(row, [a, b, c, d]));
        }
        let rest = x4.remainder().chunks_exact(cols).zip(sx.chunks_exact(nb));
        for (o, (x, sx)) in o4.into_remainder().iter_mut().zip(rest) {
            *o = q4_row::<BB, FMA>(row, x, sx);
        }
    }
}

/// One Q4 row times 4 inputs: each block dequantized to 2 × 16 lanes (`d·q + c`, as
/// [`super::dequantize`] computes it) and multiplied with each input's block. (Tuned for
/// the SLP vectorizer like [`q4_row`]: 2 or 8 inputs, or decoding through a closure, come out
/// several times slower.)
#[inline(always)]
fn q4_tile<const BB: usize, const FMA: bool>(row: &[u8], xs: [&[f32]; 4]) -> [f32; 4] {
    let mut acc = [[0f32; 16]; 4];
    for (bi, blk) in row.chunks_exact(BB).enumerate() {
        let blk = arr::<BB, u8>(blk);
        let d = f16_scale(u16::from_le_bytes([blk[0], blk[1]]));
        let qs = arr::<16, u8>(&blk[BB - 16..]);
        let mut lo = [0f32; 16];
        let mut hi = [0f32; 16];
        if BB == 20 {
            let m = f16_scale(u16::from_le_bytes([blk[2], blk[3]]));
            for k in 0..16 {
                lo[k] = madd::<FMA>(u8_to_f32(qs[k] & 15), d, m);
                hi[k] = madd::<FMA>(u8_to_f32(qs[k] >> 4), d, m);
            }
        } else {
            for k in 0..16 {
                lo[k] = (u8_to_f32(qs[k] & 15) - 8.0) * d;
                hi[k] = (u8_to_f32(qs[k] >> 4) - 8.0) * d;
            }
        }
        for i in 0..4 {
            let xb = arr::<32, f32>(&xs[i][bi * 32..bi * 32 + 32]);
            for k in 0..16 {
                let a = madd::<FMA>(lo[k], xb[k], acc[i][k]);
                acc[i][k] = madd::<FMA>(hi[k], xb[k + 16], a);
            }
        }
    }
    core::array::from_fn(|i| sum16(&acc[i]))
}

/// Any other type: each row dequantized into `buf`, then multiplied with the inputs 4 at a
/// time ([`f32_tile`], when rows are whole 32-element blocks) or one at a time.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2+fma", "x86_64+avx2+fma"))]
fn matmul_t_dequantized(
    ty: QuantType,
    w: &[u8],
    rb: usize,
    xs: &[f32],
    t: usize,
    out_t: &mut [f32],
    buf: &mut [f32],
) {
    if target_cfg_f!(target_feature = "fma") {
        dequantized_matmul_t::<true>(ty, w, rb, xs, t, out_t, buf)
    } else {
        dequantized_matmul_t::<false>(ty, w, rb, xs, t, out_t, buf)
    }
}

#[inline(always)]
fn dequantized_matmul_t<const FMA: bool>(
    ty: QuantType,
    w: &[u8],
    rb: usize,
    xs: &[f32],
    t: usize,
    out_t: &mut [f32],
    buf: &mut [f32],
) {
    let cols = xs.len() / t;
    let tiled = if cols.is_multiple_of(32) {
        t / 4 * 4
    } else {
        0
    };
    for (o, row) in out_t.chunks_exact_mut(t).zip(w.chunks_exact(rb)) {
        dequantize_unchecked(ty, row, buf);
        for (o, xq) in o[..tiled]
            .chunks_exact_mut(4)
            .zip(xs.chunks_exact(4 * cols))
        {
            let (a, xq) = xq.split_at(cols);
            let (b, xq) = xq.split_at(cols);
            let (c, d) = xq.split_at(cols);
            o.copy_from_slice(&f32_tile::<FMA>(buf, [a, b, c, d]));
        }
        for (o, x) in o[tiled..]
            .iter_mut()
            .zip(xs[tiled * cols..].chunks_exact(cols))
        {
            *o = dot_f32_with::<FMA>(buf, x);
        }
    }
}

/// An f32 row (whole 32-element blocks) times 4 inputs, shaped like [`q4_tile`].
#[inline(always)]
fn f32_tile<const FMA: bool>(w: &[f32], xs: [&[f32]; 4]) -> [f32; 4] {
    let mut acc = [[0f32; 16]; 4];
    for (bi, wb) in w.chunks_exact(32).enumerate() {
        let wb = arr::<32, f32>(wb);
        for i in 0..4 {
            let xb = arr::<32, f32>(&xs[i][bi * 32..bi * 32 + 32]);
            for k in 0..16 {
                let a = madd::<FMA>(wb[k], xb[k], acc[i][k]);
                acc[i][k] = madd::<FMA>(wb[k + 16], xb[k + 16], a);
            }
        }
    }
    core::array::from_fn(|i| sum16(&acc[i]))
}

/// An f32 dot product (any equal lengths) to inline into a caller compiled for a target
/// (`FMA` or not): for callers with many short products, such as attention, multiversioned
/// around their loop.
#[inline(always)]
pub(crate) fn dot_f32_with<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (a, b) in ca.zip(cb) {
        let (a, b) = (arr::<16, f32>(a), arr::<16, f32>(b));
        for k in 0..16 {
            acc[k] = madd::<FMA>(a[k], b[k], acc[k]);
        }
    }
    let mut s = sum16(&acc);
    for (a, b) in ra.iter().zip(rb) {
        s = madd::<FMA>(*a, *b, s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row `r` of input `i`: matvec, its portable twin, matmul_t and its portable twin, each
    /// within 1e-5 (+ 1e-5 relative) of `dot`'s `want`.
    fn assert_kernels_agree(name: &str, r: usize, i: usize, want: f32, got: [f32; 4]) {
        let tol = 1e-5 * (1.0 + want.abs());
        let kernels = ["matvec", "portable matvec", "matmul_t", "portable matmul_t"];
        for (what, got) in kernels.into_iter().zip(got) {
            assert!(
                (got - want).abs() <= tol,
                "{name} {what} row {r} input {i}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn conversions_match_the_reference() {
        for h in 0..=u16::MAX {
            let want = super::super::f16_to_f32(h);
            for got in [f16_scale(h), f16_exact(h)] {
                let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
                assert!(same, "{h:#06x}: {got} vs {want}");
            }
        }
        for q in 0..=u8::MAX {
            assert_eq!(u8_to_f32(q), f32::from(q));
            assert_eq!(i8_to_f32(q), f32::from(q as i8));
        }
    }

    /// The types with oracle fixtures, on the fixture's random blocks (every bit pattern, where
    /// the quantizer writes only some): the reference `dot` against an f64 dot product of the
    /// *oracle's* values (f32 accumulation error: 1e-6 of the sum of magnitudes times √n, as in
    /// tests/model_quant.rs), and `matvec`, `matmul_t` and their portable bodies against `dot`
    /// at 1e-5 relative, as above.
    #[test]
    fn kernels_match_the_oracle_on_random_blocks() {
        let mut rng = crate::test_rng::XorShift::new(0x2545_f491_4f6c_dd1du64);
        let mut rnd = move || (rng.next() >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0;
        for ty in [QuantType::Q2_K, QuantType::Q3_K, QuantType::IQ4_NL] {
            let case = super::super::oracle::cases(ty)
                .into_iter()
                .find(|c| c.name.ends_with("random blocks"))
                .unwrap();
            let (w, values) = (&case.bytes, &case.values);
            let rows = if ty.block_len() == 256 { 6 } else { 8 };
            let cols = values.len() / rows;
            let rb = w.len() / rows;
            let t = 5;
            let xs: Vec<f32> = (0..t * cols).map(|_| rnd()).collect();
            let mut out_t = vec![0f32; rows * t];
            matmul_t(ty, w, &xs, t, &mut out_t);
            let mut out_t_portable = vec![0f32; rows * t];
            dequantized_matmul_t::<false>(
                ty,
                w,
                rb,
                &xs,
                t,
                &mut out_t_portable,
                &mut vec![0.0; cols],
            );
            let mut max_rel = 0f64;
            for i in 0..t {
                let x = &xs[i * cols..][..cols];
                let mut out = vec![0f32; rows];
                matvec(ty, w, x, &mut out);
                let mut portable = vec![0f32; rows];
                let mut buf = vec![0f32; cols];
                for (o, row) in portable.iter_mut().zip(w.chunks_exact(rb)) {
                    dequantize_unchecked(ty, row, &mut buf);
                    *o = dot_f32_with::<false>(&buf, x);
                }
                for r in 0..rows {
                    let row = &w[r * rb..][..rb];
                    let oracle = &values[r * cols..][..cols];
                    let exact: f64 = oracle
                        .iter()
                        .zip(x)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum();
                    let scale: f64 = oracle
                        .iter()
                        .zip(x)
                        .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
                        .sum();
                    let want = super::super::dot(ty, row, x).unwrap();
                    let name = ty.name();
                    let err = (f64::from(want) - exact).abs();
                    assert!(
                        err <= 1e-6 * scale * (cols as f64).sqrt(),
                        "{name} dot row {r} input {i}: {want} vs oracle {exact}"
                    );
                    max_rel = max_rel.max(err / scale);
                    let got = [
                        out[r],
                        portable[r],
                        out_t[r * t + i],
                        out_t_portable[r * t + i],
                    ];
                    assert_kernels_agree(name, r, i, want, got);
                }
            }
            eprintln!(
                "{}: {rows}x{cols}, dot vs the oracle's f64 dot: max |error| / Σ|w·x| = {max_rel:.2e}",
                ty.name()
            );
        }
    }

    /// `matvec` and `matmul_t` against the reference `dot`, for every type, several row counts
    /// and input counts (tiles of 4 and remainders), at 1e-5 relative (sums in another order).
    #[test]
    fn kernels_match_the_reference_dot() {
        let mut rng = crate::test_rng::XorShift::new(0x9e37_79b9_7f4a_7c15u64);
        let mut rnd = move || (rng.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
        for ty in super::super::ALL_TYPES {
            let cols = if ty.block_len() == 256 { 512 } else { 96 };
            for (rows, t) in [(1, 1), (5, 3), (8, 4), (3, 9)] {
                let w: Vec<u8> = (0..rows)
                    .flat_map(|_| {
                        let v: Vec<f32> = (0..cols).map(|_| rnd()).collect();
                        super::super::quantize(ty, &v).unwrap()
                    })
                    .collect();
                let xs: Vec<f32> = (0..t * cols).map(|_| rnd()).collect();
                let rb = w.len() / rows;
                let mut out_t = vec![0f32; rows * t];
                matmul_t(ty, &w, &xs, t, &mut out_t);
                // The portable bodies too (what wasm32 and baseline x86-64 run).
                let mut out_t_portable = vec![0f32; rows * t];
                let sx = block_sums(&xs[t / 4 * 4 * cols..]);
                match ty {
                    QuantType::Q4_1 => {
                        q4_matmul_t::<20, false>(&w, rb, &xs, t, &sx, &mut out_t_portable)
                    }
                    QuantType::Q4_0 => {
                        q4_matmul_t::<18, false>(&w, rb, &xs, t, &sx, &mut out_t_portable)
                    }
                    _ => dequantized_matmul_t::<false>(
                        ty,
                        &w,
                        rb,
                        &xs,
                        t,
                        &mut out_t_portable,
                        &mut vec![0.0; cols],
                    ),
                }
                for i in 0..t {
                    let x = &xs[i * cols..][..cols];
                    let mut out = vec![0f32; rows];
                    matvec(ty, &w, x, &mut out);
                    let mut portable = vec![0f32; rows];
                    let sx = block_sums(x);
                    match ty {
                        QuantType::Q4_1 => q4_matvec::<20, false>(&w, x, &sx, &mut portable),
                        QuantType::Q4_0 => q4_matvec::<18, false>(&w, x, &sx, &mut portable),
                        QuantType::Q8_0 => q8_matvec::<false>(&w, x, &mut portable),
                        _ => portable.copy_from_slice(&out),
                    }
                    for r in 0..rows {
                        let want = super::super::dot(ty, &w[r * rb..][..rb], x).unwrap();
                        let got = [
                            out[r],
                            portable[r],
                            out_t[r * t + i],
                            out_t_portable[r * t + i],
                        ];
                        assert_kernels_agree(ty.name(), r, i, want, got);
                    }
                }
            }
        }
    }
}
