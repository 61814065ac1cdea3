// matvec: y[t][r] = sum_k W[r][k] * x[t][k], with W dequantized in the shader. W is in the
// layout src/gpu/matvec.rs uploads; `format` picks the decoder and is uniform across the
// dispatch, so the branch costs nothing per element (as in embedding.wgsl).
//
// Formats and their "units" (what one invocation decodes per loop step):
//   0 F32   one weight per word
//   1 F16   two weights per word (low half first; odd rows padded with a zero half)
//   2 Q8_0  32-weight blocks of 9 words: word 0 the scale d as f32 bits, words 1-8 the 32
//           signed bytes (repacked from 34-byte blocks: WGSL has no 8- or 16-bit loads)
//   3 Q4_0  32-weight blocks of 5 words: word 0 d as f32 bits, words 1-4 the nibble bytes
//           (byte j: weight j low, weight j+16 high); weight = d * (q - 8)
//   4 Q4_1  32-weight blocks of 5 words as in the file: word 0 the f16 d and m, words 1-4 the
//           nibbles; weight = d * q + m
//   5 codes 32-weight units of 12 words (Q5_0, Q5_1, IQ4_NL and the K-quants, decoded at
//           upload): words 0-1 the scales of weights 0-15 and 16-31, words 2-3 their offsets
//           (f32 bits), words 4-11 the 32 unsigned codes as bytes; weight = sc * code + mn
//
// Bindings (group 0)
//   0  weights  array<u32>  read        rows * row_words
//   1  x        array<f32>  read        tokens * cols activations
//   2  y        array<f32>  read_write  tokens * out_rows outputs
//   3  params   Params      uniform     rows, cols, tokens, groups_x, format, row_words,
//                                       row_offset, out_rows
//
// A matrix over the adapter's storage binding limit is bound one row chunk at a time
// (src/gpu/matvec.rs): `rows` is the chunk's, its row r is the matrix's row_offset + r, and
// y holds all out_rows rows of each token (out_rows = rows, row_offset = 0 when unsplit).
//
// Dispatch: (groups_x, ceil(ceil(rows / ROWS) / groups_x), tokens) workgroups of WG
// invocations; each workgroup computes ROWS output rows of one token, a team of LANES
// invocations per row striding over the row's units. A whole workgroup per row left most
// lanes idle on small models: SmolLM2's 576-wide rows are 18 Q4_1 blocks, so 46 of 64
// invocations had nothing to do; with 8 lanes per row each does 2-3 blocks (n_ff's 48 blocks:
// 6 each).
//
// Variants (src/gpu/variant.rs): with `subgroups` each subgroup takes whole rows (rows
// subgroup, subgroup + num_subgroups, ... of the workgroup's ROWS), its invocations striding
// over the row's units, and a subgroupAdd sums the row: no workgroup memory, no barrier. The
// stride is the count of the subgroup's active invocations, not subgroup_size, so a subgroup
// larger than the workgroup (a partial one) still covers every unit; with subgroups of 8
// (lavapipe) that is the f32 path's geometry, 8 invocations per row.

const WG: u32 = 64u;
const LANES: u32 = 8u;
const ROWS: u32 = WG / LANES;

struct Params {
    rows: u32,
    cols: u32,
    tokens: u32,
    groups_x: u32,
    format: u32,
    row_words: u32,
    row_offset: u32,
    out_rows: u32,
}

@group(0) @binding(0) var<storage, read> weights: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

//#if !subgroups
var<workgroup> partial_sums: array<f32, WG>;
//#endif

fn units_per_row() -> u32 {
    switch params.format {
        case 0u: {
            return params.cols;
        }
        case 1u: {
            return (params.cols + 1u) / 2u;
        }
        default: {
            return params.cols / 32u;
        }
    }
}

// sum over the weights of unit u of the row starting at word `row`, times x from `xb`.
fn unit_dot(row: u32, u: u32, xb: u32) -> f32 {
    switch params.format {
        case 0u: {
            return bitcast<f32>(weights[row + u]) * x[xb + u];
        }
        case 1u: {
            let pair = unpack2x16float(weights[row + u]);
            let k = 2u * u;
            var sum = pair.x * x[xb + k];
            if (k + 1u < params.cols) {
                sum = sum + pair.y * x[xb + k + 1u];
            }
            return sum;
        }
        case 2u: {
            let w = row + u * 9u;
            let xs = xb + u * 32u;
            var q_dot_x = 0.0;
            for (var i = 0u; i < 8u; i = i + 1u) {
                let packed = weights[w + 1u + i];
                for (var k = 0u; k < 4u; k = k + 1u) {
                    // Sign-extend byte k: move it to the top, then shift back arithmetically.
                    let q = bitcast<i32>(packed << (24u - 8u * k)) >> 24u;
                    q_dot_x = q_dot_x + f32(q) * x[xs + i * 4u + k];
                }
            }
            return bitcast<f32>(weights[w]) * q_dot_x;
        }
        case 3u: {
            let w = row + u * 5u;
            let xs = xb + u * 32u;
            var q_dot_x = 0.0;
            for (var i = 0u; i < 4u; i = i + 1u) {
                let packed = weights[w + 1u + i];
                for (var k = 0u; k < 4u; k = k + 1u) {
                    let byte = (packed >> (8u * k)) & 0xffu;
                    let j = i * 4u + k;
                    q_dot_x = q_dot_x + (f32(byte & 0xfu) - 8.0) * x[xs + j]
                        + (f32(byte >> 4u) - 8.0) * x[xs + j + 16u];
                }
            }
            return bitcast<f32>(weights[w]) * q_dot_x;
        }
        case 4u: {
            let w = row + u * 5u;
            let xs = xb + u * 32u;
            let dm = unpack2x16float(weights[w]);
            var q_dot_x = 0.0;
            var x_sum = 0.0;
            for (var i = 0u; i < 4u; i = i + 1u) {
                let packed = weights[w + 1u + i];
                for (var k = 0u; k < 4u; k = k + 1u) {
                    let byte = (packed >> (8u * k)) & 0xffu;
                    let j = i * 4u + k;
                    let x_lo = x[xs + j];
                    let x_hi = x[xs + j + 16u];
                    q_dot_x = q_dot_x + f32(byte & 0xfu) * x_lo + f32(byte >> 4u) * x_hi;
                    x_sum = x_sum + x_lo + x_hi;
                }
            }
            return dm.x * q_dot_x + dm.y * x_sum;
        }
        default: {
            let w = row + u * 12u;
            let xs = xb + u * 32u;
            var sum = 0.0;
            for (var h = 0u; h < 2u; h = h + 1u) {
                var q_dot_x = 0.0;
                var x_sum = 0.0;
                for (var i = 0u; i < 4u; i = i + 1u) {
                    let packed = weights[w + 4u + h * 4u + i];
                    for (var k = 0u; k < 4u; k = k + 1u) {
                        let xv = x[xs + h * 16u + i * 4u + k];
                        q_dot_x = q_dot_x + f32((packed >> (8u * k)) & 0xffu) * xv;
                        x_sum = x_sum + xv;
                    }
                }
                sum = sum + bitcast<f32>(weights[w + h]) * q_dot_x
                    + bitcast<f32>(weights[w + 2u + h]) * x_sum;
            }
            return sum;
        }
    }
}

//#if subgroups
@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
) {
    let first_row = (group.x + group.y * params.groups_x) * ROWS;
    let token = group.z;
    let team = subgroupAdd(1u);
    let lane = subgroupExclusiveAdd(1u);
    let units = units_per_row();
    let x_base = token * params.cols;
    // Row bounds are the same for the whole subgroup, so every subgroupAdd below runs in all
    // of its invocations.
    for (var r = subgroup; r < ROWS; r = r + subgroups) {
        let row = first_row + r;
        if (row >= params.rows) {
            break;
        }
        let row_base = row * params.row_words;
        var sum = 0.0;
        for (var u = lane; u < units; u = u + team) {
            sum = sum + unit_dot(row_base, u, x_base);
        }
        let total = subgroupAdd(sum);
        if (lane == 0u) {
            y[token * params.out_rows + params.row_offset + row] = total;
        }
    }
}
//#else
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let lane = local % LANES;
    let row = (group.x + group.y * params.groups_x) * ROWS + local / LANES;
    let token = group.z;
    var sum = 0.0;
    if (row < params.rows) {
        let units = units_per_row();
        let row_base = row * params.row_words;
        let x_base = token * params.cols;
        for (var u = lane; u < units; u = u + LANES) {
            sum = sum + unit_dot(row_base, u, x_base);
        }
    }
    partial_sums[local] = sum;
    workgroupBarrier();
    // A tree within each row's team: lanes 0..stride add the upper half's sums.
    for (var stride = LANES / 2u; stride > 0u; stride = stride / 2u) {
        if (lane < stride) {
            partial_sums[local] = partial_sums[local] + partial_sums[local + stride];
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < params.rows) {
        y[token * params.out_rows + params.row_offset + row] = partial_sums[local];
    }
}
//#endif
