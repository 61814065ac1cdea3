// matvec_q4_1: y[t][r] = sum_k W[r][k] * x[t][k] for a Q4_1 weight matrix, dequantized in the
// shader. Q4_1 blocks (32 weights, 20 bytes) are already word-aligned, so the file's bytes are
// bound as they are: word 0 holds the f16 scale d and minimum m, words 1-4 the 32 nibbles
// (byte j: weight j in the low nibble, weight j+16 in the high one). Weight = d * q + m.
//
// Bindings (group 0)
//   0  weights  array<u32>  read        rows * cols/32 blocks of 5 words, row-major
//   1  x        array<f32>  read        tokens * cols activations
//   2  y        array<f32>  read_write  tokens * rows outputs
//   3  params   Params      uniform     rows, cols, tokens, groups_x
//
// Dispatch: (groups_x, ceil(rows / groups_x), tokens) workgroups of WG invocations; one
// workgroup per output row and token, its invocations striding over the row's blocks.

const WG: u32 = 64u;
const BLOCK_WORDS: u32 = 5u;

struct Params {
    rows: u32,
    cols: u32,
    tokens: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> weights: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

var<workgroup> partial_sums: array<f32, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let row = group.x + group.y * params.groups_x;
    let token = group.z;
    let blocks = params.cols / 32u;
    var sum = 0.0;
    if (row < params.rows) {
        let x_base = token * params.cols;
        for (var b = local; b < blocks; b = b + WG) {
            let w = (row * blocks + b) * BLOCK_WORDS;
            let dm = unpack2x16float(weights[w]);
            let xb = x_base + b * 32u;
            var q_dot_x = 0.0;
            var x_sum = 0.0;
            for (var i = 0u; i < 4u; i = i + 1u) {
                let packed = weights[w + 1u + i];
                for (var k = 0u; k < 4u; k = k + 1u) {
                    let byte = (packed >> (8u * k)) & 0xffu;
                    let j = i * 4u + k;
                    let x_lo = x[xb + j];
                    let x_hi = x[xb + j + 16u];
                    q_dot_x = q_dot_x + f32(byte & 0xfu) * x_lo + f32(byte >> 4u) * x_hi;
                    x_sum = x_sum + x_lo + x_hi;
                }
            }
            sum = sum + dm.x * q_dot_x + dm.y * x_sum;
        }
    }
    partial_sums[local] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (local < stride) {
            partial_sums[local] = partial_sums[local] + partial_sums[local + stride];
        }
        workgroupBarrier();
    }
    if (local == 0u && row < params.rows) {
        y[token * params.rows + row] = partial_sums[0];
    }
}
