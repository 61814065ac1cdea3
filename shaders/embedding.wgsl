// embedding: out[t] = row ids[t] of the token embedding, dequantized. The matrix is in the
// layout src/gpu/matvec.rs uploads (see the matvec shaders); `format` picks the decoder and
// is uniform across the dispatch, so the branch costs nothing per element.
//
// Bindings (group 0)
//   0  weights  array<u32>  read        rows * row_words
//   1  ids      array<u32>  read        tokens
//   2  out      array<f32>  read_write  tokens * cols
//   3  params   Params      uniform     cols, tokens, format, row_words, first_row, rows,
//                                       scale (f32 bits: Gemma's √n_embd, else 1)
//
// A table over the adapter's storage binding limit is bound one row chunk at a time
// (src/gpu/matvec.rs), rows first_row..first_row + rows; each chunk's dispatch writes only
// the tokens whose id falls in its range (first_row = 0, rows = the vocabulary when unsplit).
//
// Formats: 0 F32, 1 F16, 2 Q8_0 (9-word blocks), 3 Q4_0 (5-word blocks), 4 Q4_1 (5 words),
// 5 codes (12-word units of scales, offsets and byte codes; see matvec.wgsl).
// Dispatch: ceil(tokens * cols / WG) workgroups; one invocation per output value.

struct Params {
    cols: u32,
    tokens: u32,
    format: u32,
    row_words: u32,
    first_row: u32,
    rows: u32,
    scale_bits: u32,
    unused: u32,
}

@group(0) @binding(0) var<storage, read> weights: array<u32>;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

fn nibble(word: u32, j: u32) -> f32 {
    // Byte j % 16 of the block's 16 nibble bytes: weight j in its low nibble, j+16 in its high.
    let byte = (word >> (8u * (j % 4u))) & 0xffu;
    return f32(select(byte & 0xfu, byte >> 4u, j >= 16u));
}

fn weight(base: u32, k: u32) -> f32 {
    switch params.format {
        case 0u: {
            return bitcast<f32>(weights[base + k]);
        }
        case 1u: {
            let pair = unpack2x16float(weights[base + k / 2u]);
            return select(pair.x, pair.y, k % 2u == 1u);
        }
        case 2u: {
            let w = base + (k / 32u) * 9u;
            let j = k % 32u;
            let q = bitcast<i32>(weights[w + 1u + j / 4u] << (24u - 8u * (j % 4u))) >> 24u;
            return bitcast<f32>(weights[w]) * f32(q);
        }
        case 3u: {
            let w = base + (k / 32u) * 5u;
            let j = k % 32u;
            return bitcast<f32>(weights[w]) * (nibble(weights[w + 1u + (j % 16u) / 4u], j) - 8.0);
        }
        case 4u: {
            let w = base + (k / 32u) * 5u;
            let j = k % 32u;
            let dm = unpack2x16float(weights[w]);
            return dm.x * nibble(weights[w + 1u + (j % 16u) / 4u], j) + dm.y;
        }
        default: {
            let w = base + (k / 32u) * 12u;
            let j = k % 32u;
            let h = j / 16u;
            let code = (weights[w + 4u + j / 4u] >> (8u * (j % 4u))) & 0xffu;
            return bitcast<f32>(weights[w + h]) * f32(code) + bitcast<f32>(weights[w + 2u + h]);
        }
    }
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= params.tokens * params.cols) {
        return;
    }
    let token = i / params.cols;
    let k = i % params.cols;
    // Unsigned: an id below first_row wraps to a large row and is skipped too.
    let row = ids[token] - params.first_row;
    if (row >= params.rows) {
        return;
    }
    out[i] = weight(row * params.row_words, k) * bitcast<f32>(params.scale_bits);
}
