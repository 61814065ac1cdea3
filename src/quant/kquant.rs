//! The K-quant super-blocks (256 elements): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
//!
//! Q2_K (84 bytes): sixteen bytes `scales` (per 16-element sub-block a 4-bit scale, low
//! nibble, and a 4-bit min, high nibble), 64 bytes `qs` of 2-bit quants, `d`, `dmin` (f16)
//! last; element = `d·sc·q − dmin·m`, q in 0..=3.
//! Q3_K (110 bytes): 32 bytes `hmask` of high bits, 64 bytes `qs` of low 2-bit pairs, 12 bytes
//! packing sixteen 6-bit scales (stored + 32), `d` (f16) last; element = `d·(sc − 32)·q`,
//! q in −4..=3 (low bits minus 4 where the high bit is *clear*).
//! Q4_K / Q5_K: `d`, `dmin` (f16), 12 bytes packing eight 6-bit scales and eight 6-bit mins,
//! (Q5_K: 32 bytes of fifth bits), 128 bytes of nibbles; element = `d·sc·q − dmin·m`.
//! Q6_K: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, sixteen i8 scales, `d` (f16)
//! last; element = `d·sc·(q − 32)`.
//!
//! The 2-bit types (Q2_K's quants, Q3_K's low bits) share one order: each half of the block
//! (128 elements) reads 32 bytes of `qs`, and its four runs of 32 elements are the bit pairs
//! 0–1, 2–3, 4–5, 6–7 of those bytes (element `128·n + 32·j + l` is
//! `(qs[32·n + l] >> 2j) & 3`). Q3_K's high bit of that element is bit `4·n + j` of
//! `hmask[l]`. Sub-block `i` (16 elements) has scale `i`.

use super::{f16_to_f32, f32_to_f16, half, put_f16};

/// Scale and min `j` (0..8) of a Q4_K/Q5_K block's packed 12 bytes (ggml's
/// `get_scale_min_k4`).
#[inline]
pub(super) fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Dequantizes one 84-byte Q2_K block into 256 values (ggml's `dequantize_row_q2_K`).
pub fn dequantize_q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[..16];
    let qs = &b[16..80];
    let (d, min) = (half(b, 80), half(b, 82));
    for (i, y) in y.chunks_exact_mut(16).enumerate() {
        let (n, j, h) = (i / 8, i % 8 / 2, i % 2);
        let sc = scales[i];
        let (dl, ml) = (d * f32::from(sc & 0xf), min * f32::from(sc >> 4));
        let q = &qs[32 * n + 16 * h..][..16];
        for (y, &q) in y.iter_mut().zip(q) {
            *y = dl * f32::from((q >> (2 * j)) & 3) - ml;
        }
    }
}

/// Scale `i` (0..16) of a Q3_K block's packed 12 bytes, minus 32: the low four bits are the
/// low (`i < 8`) or high nibble of byte `i % 8`, the top two bits are bits `2·(i / 4)` and
/// up of byte `8 + i % 4`.
#[inline]
pub(super) fn q3_k_scale(i: usize, s: &[u8]) -> i8 {
    let lo = if i < 8 { s[i] & 0xf } else { s[i - 8] >> 4 };
    let hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    (lo | (hi << 4)) as i8 - 32
}

/// Dequantizes one 110-byte Q3_K block into 256 values (ggml's `dequantize_row_q3_K`).
pub fn dequantize_q3_k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[..32];
    let qs = &b[32..96];
    let scales = &b[96..108];
    let d = half(b, 108);
    for (i, y) in y.chunks_exact_mut(16).enumerate() {
        let (n, j, h) = (i / 8, i % 8 / 2, i % 2);
        let dl = d * f32::from(q3_k_scale(i, scales));
        let q = &qs[32 * n + 16 * h..][..16];
        let hm = &hmask[16 * h..][..16];
        let bit = 1u8 << (4 * n + j);
        for ((y, &q), &hm) in y.iter_mut().zip(q).zip(hm) {
            let low = ((q >> (2 * j)) & 3) as i8;
            *y = dl * f32::from(if hm & bit != 0 { low } else { low - 4 });
        }
    }
}

/// Dequantizes one 144-byte Q4_K block into 256 values.
pub fn dequantize_q4_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (half(b, 0), half(b, 2));
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (c, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (sc, m) = scale_min(2 * c, scales);
        let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
        let (sc, m) = scale_min(2 * c + 1, scales);
        let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
        for l in 0..32 {
            y[l] = d1 * f32::from(q[l] & 0xf) - m1;
            y[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
        }
    }
}

/// Dequantizes one 176-byte Q5_K block into 256 values.
pub fn dequantize_q5_k(b: &[u8], y: &mut [f32]) {
    let (d, min) = (half(b, 0), half(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (c, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
        let (sc, m) = scale_min(2 * c, scales);
        let (d1, m1) = (d * f32::from(sc), min * f32::from(m));
        let (sc, m) = scale_min(2 * c + 1, scales);
        let (d2, m2) = (d * f32::from(sc), min * f32::from(m));
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[l] = d1 * f32::from((q[l] & 0xf) + h1) - m1;
            y[l + 32] = d2 * f32::from((q[l] >> 4) + h2) - m2;
        }
    }
}

/// Dequantizes one 210-byte Q6_K block into 256 values.
pub fn dequantize_q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_to_f32(u16::from_le_bytes([b[208], b[209]]));
    for n in 0..2 {
        let ql = &b[n * 64..n * 64 + 64];
        let qh = &b[128 + n * 32..128 + n * 32 + 32];
        let sc = &b[192 + n * 8..192 + n * 8 + 8];
        let y = &mut y[n * 128..n * 128 + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * f32::from(sc[is] as i8) * q1 as f32;
            y[l + 32] = d * f32::from(sc[is + 2] as i8) * q2 as f32;
            y[l + 64] = d * f32::from(sc[is + 4] as i8) * q3 as f32;
            y[l + 96] = d * f32::from(sc[is + 6] as i8) * q4 as f32;
        }
    }
}

/// Quantizes 256 values to Q4_K (`five_bits` false) or Q5_K: per 32-value sub-block a scale
/// `(max − min) / levels` and a min ≤ 0, each stored as 6 bits of the block's `d` / `dmin`.
pub(super) fn quantize_q45_k(x: &[f32], five_bits: bool, out: &mut Vec<u8>) {
    let top = if five_bits { 31.0 } else { 15.0 };
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    for (j, sub) in x.chunks_exact(32).enumerate() {
        let lo = sub.iter().copied().fold(0f32, f32::min);
        let hi = sub.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        scales[j] = (hi - lo) / top;
        mins[j] = -lo;
    }
    let max_scale = scales.iter().copied().fold(0f32, f32::max);
    let max_min = mins.iter().copied().fold(0f32, f32::max);
    let d = put_f16(out, max_scale / 63.0);
    let dmin = put_f16(out, max_min / 63.0);
    let q6 = |v: f32, unit: f32| {
        if unit > 0.0 {
            (v / unit).round().clamp(0.0, 63.0) as u8
        } else {
            0
        }
    };
    let sc: Vec<u8> = scales.iter().map(|&s| q6(s, d)).collect();
    let mn: Vec<u8> = mins.iter().map(|&m| q6(m, dmin)).collect();
    let mut packed = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            packed[j] = sc[j];
            packed[j + 4] = mn[j];
        } else {
            packed[j + 4] = (sc[j] & 0xf) | ((mn[j] & 0xf) << 4);
            packed[j - 4] |= (sc[j] >> 4) << 6;
            packed[j] |= (mn[j] >> 4) << 6;
        }
    }
    out.extend_from_slice(&packed);
    let mut q = [0u8; 256];
    for (j, sub) in x.chunks_exact(32).enumerate() {
        let unit = d * f32::from(sc[j]);
        let offset = dmin * f32::from(mn[j]);
        for (l, &v) in sub.iter().enumerate() {
            q[j * 32 + l] = if unit > 0.0 {
                ((v + offset) / unit).round().clamp(0.0, top) as u8
            } else {
                0
            };
        }
    }
    if five_bits {
        let mut qh = [0u8; 32];
        for c in 0..4 {
            for l in 0..32 {
                qh[l] |= ((q[c * 64 + l] >> 4) & 1) << (2 * c);
                qh[l] |= ((q[c * 64 + 32 + l] >> 4) & 1) << (2 * c + 1);
            }
        }
        out.extend_from_slice(&qh);
    }
    for c in 0..4 {
        for l in 0..32 {
            out.push((q[c * 64 + l] & 0xf) | ((q[c * 64 + 32 + l] & 0xf) << 4));
        }
    }
}

/// Quantizes 256 values to Q2_K: per 16-value sub-block a scale `(max − min) / 3` and a
/// min ≤ 0, each stored as 4 bits of the block's `d` / `dmin`.
pub(super) fn quantize_q2_k(x: &[f32], out: &mut Vec<u8>) {
    let mut scales = [0f32; 16];
    let mut mins = [0f32; 16];
    for (j, sub) in x.chunks_exact(16).enumerate() {
        let lo = sub.iter().copied().fold(0f32, f32::min);
        let hi = sub.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        scales[j] = (hi - lo) / 3.0;
        mins[j] = -lo;
    }
    let max_scale = scales.iter().copied().fold(0f32, f32::max);
    let max_min = mins.iter().copied().fold(0f32, f32::max);
    let (d_bits, dmin_bits) = (f32_to_f16(max_scale / 15.0), f32_to_f16(max_min / 15.0));
    let (d, dmin) = (f16_to_f32(d_bits), f16_to_f32(dmin_bits));
    let q4 = |v: f32, unit: f32| {
        if unit > 0.0 {
            (v / unit).round().clamp(0.0, 15.0) as u8
        } else {
            0
        }
    };
    let sc: Vec<u8> = scales.iter().map(|&s| q4(s, d)).collect();
    let mn: Vec<u8> = mins.iter().map(|&m| q4(m, dmin)).collect();
    out.extend(sc.iter().zip(&mn).map(|(&s, &m)| s | (m << 4)));
    let mut qs = [0u8; 64];
    for (i, sub) in x.chunks_exact(16).enumerate() {
        let (n, j, h) = (i / 8, i % 8 / 2, i % 2);
        let unit = d * f32::from(sc[i]);
        let offset = dmin * f32::from(mn[i]);
        for (l, &v) in sub.iter().enumerate() {
            let q = if unit > 0.0 {
                ((v + offset) / unit).round().clamp(0.0, 3.0) as u8
            } else {
                0
            };
            qs[32 * n + 16 * h + l] |= q << (2 * j);
        }
    }
    out.extend_from_slice(&qs);
    out.extend_from_slice(&d_bits.to_le_bytes());
    out.extend_from_slice(&dmin_bits.to_le_bytes());
}

/// Quantizes 256 values to Q3_K: per 16-value sub-block a signed scale that maps the value of
/// largest magnitude to −4, stored as 6 bits (−32..=31) of the block's `d`.
pub(super) fn quantize_q3_k(x: &[f32], out: &mut Vec<u8>) {
    let signed_max = |v: &[f32]| {
        v.iter()
            .copied()
            .fold(0f32, |m, v| if v.abs() > m.abs() { v } else { m })
    };
    let mut scales = [0f32; 16];
    for (j, sub) in x.chunks_exact(16).enumerate() {
        scales[j] = signed_max(sub) / -4.0;
    }
    let max_scale = signed_max(&scales);
    let d_bits = if max_scale != 0.0 {
        f32_to_f16(max_scale / -32.0)
    } else {
        0
    };
    let d = f16_to_f32(d_bits);
    let sc: Vec<i8> = scales
        .iter()
        .map(|&s| {
            if d != 0.0 {
                (s / d).round().clamp(-32.0, 31.0) as i8
            } else {
                0
            }
        })
        .collect();
    let mut hmask = [0u8; 32];
    let mut qs = [0u8; 64];
    for (i, sub) in x.chunks_exact(16).enumerate() {
        let (n, j, h) = (i / 8, i % 8 / 2, i % 2);
        let unit = d * f32::from(sc[i]);
        for (l, &v) in sub.iter().enumerate() {
            // q + 4 in 0..=7: low two bits in `qs`, the third in `hmask`.
            let q = if unit != 0.0 {
                ((v / unit).round().clamp(-4.0, 3.0) + 4.0) as u8
            } else {
                4
            };
            qs[32 * n + 16 * h + l] |= (q & 3) << (2 * j);
            hmask[16 * h + l] |= (q >> 2) << (4 * n + j);
        }
    }
    let mut packed = [0u8; 12];
    for (i, &s) in sc.iter().enumerate() {
        let u = (s + 32) as u8;
        packed[i % 8] |= (u & 0xf) << (4 * (i / 8));
        packed[8 + i % 4] |= (u >> 4) << (2 * (i / 4));
    }
    out.extend_from_slice(&hmask);
    out.extend_from_slice(&qs);
    out.extend_from_slice(&packed);
    out.extend_from_slice(&d_bits.to_le_bytes());
}

/// Quantizes 256 values to Q6_K: per 16-value sub-block an i8 scale of the block's `d`.
pub(super) fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut sub_scale = [0f32; 16];
    for (j, sub) in x.chunks_exact(16).enumerate() {
        sub_scale[j] = sub.iter().fold(0f32, |m, v| m.max(v.abs())) / 31.0;
    }
    let max_scale = sub_scale.iter().copied().fold(0f32, f32::max);
    let d_bits = f32_to_f16(max_scale / 127.0);
    let d = f16_to_f32(d_bits);
    let sc: Vec<i8> = sub_scale
        .iter()
        .map(|&s| {
            if d > 0.0 {
                (s / d).round().clamp(-127.0, 127.0) as i8
            } else {
                0
            }
        })
        .collect();
    let mut q = [0u8; 256];
    for (i, &v) in x.iter().enumerate() {
        let unit = d * f32::from(sc[i / 16]);
        q[i] = if unit != 0.0 {
            ((v / unit).round() + 32.0).clamp(0.0, 63.0) as u8
        } else {
            32
        };
    }
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for n in 0..2 {
        for l in 0..32 {
            let base = n * 128 + l;
            let (q1, q2, q3, q4) = (q[base], q[base + 32], q[base + 64], q[base + 96]);
            ql[n * 64 + l] = (q1 & 0xf) | ((q3 & 0xf) << 4);
            ql[n * 64 + l + 32] = (q2 & 0xf) | ((q4 & 0xf) << 4);
            qh[n * 32 + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend_from_slice(&d_bits.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::super::oracle;
    use super::super::QuantType;

    #[test]
    fn q2_k_equals_the_gguf_python_package_bit_for_bit() {
        assert_eq!(
            oracle::assert_dequantize_is_bit_exact(QuantType::Q2_K),
            30 * 256
        );
    }

    #[test]
    fn q3_k_equals_the_gguf_python_package_bit_for_bit() {
        assert_eq!(
            oracle::assert_dequantize_is_bit_exact(QuantType::Q3_K),
            24 * 256
        );
    }

    /// The bit order the module documentation gives, one bit at a time: element
    /// `128·n + 32·j + 16·h + l` reads bits `2j` of `qs[32·n + 16·h + l]` and (Q3_K) bit
    /// `4·n + j` of `hmask[16·h + l]`, with scale `8·n + 2·j + h`.
    #[test]
    fn the_2_bit_layout_is_as_documented() {
        for n in 0..2 {
            for j in 0..4 {
                for h in 0..2 {
                    for l in [0, 7, 15] {
                        let e = 128 * n + 32 * j + 16 * h + l;
                        let sub = 8 * n + 2 * j + h;
                        // Q2_K: d = 1, dmin = 0, scale 1 for this sub-block only, quant 3.
                        let mut b = [0u8; 84];
                        b[sub] = 1;
                        b[16 + 32 * n + 16 * h + l] = 3 << (2 * j);
                        b[80..82].copy_from_slice(&0x3c00u16.to_le_bytes());
                        let mut y = [0f32; 256];
                        super::dequantize_q2_k(&b, &mut y);
                        let want: Vec<f32> =
                            (0..256).map(|i| if i == e { 3.0 } else { 0.0 }).collect();
                        assert_eq!(y[..], want[..], "Q2_K element {e}");
                        // Q3_K: every scale 0 (stored 32) but this sub-block's 1 (stored 33),
                        // every high bit set (offset 0) but this element's: q = 0 - 4.
                        let mut b = [0u8; 110];
                        b[..32].fill(0xff);
                        b[16 * h + l] &= !(1 << (4 * n + j));
                        for i in 0..16 {
                            let u = 32 + u8::from(i == sub);
                            b[96 + i % 8] |= (u & 0xf) << (4 * (i / 8));
                            b[96 + 8 + i % 4] |= (u >> 4) << (2 * (i / 4));
                        }
                        b[108..110].copy_from_slice(&0x3c00u16.to_le_bytes());
                        super::dequantize_q3_k(&b, &mut y);
                        let want: Vec<f32> =
                            (0..256).map(|i| if i == e { -4.0 } else { 0.0 }).collect();
                        assert_eq!(y[..], want[..], "Q3_K element {e}");
                    }
                }
            }
        }
    }
}
