// matvec_q8_0: y[t][r] = sum_k W[r][k] * x[t][k] for a Q8_0 weight matrix, dequantized in the
// shader. A Q8_0 block (32 weights, 34 bytes) is not word-aligned and WGSL has no 8- or 16-bit
// loads, so blocks are repacked at upload (src/gpu/matvec.rs) to 9 words: word 0 the scale d
// as f32 bits, words 1-8 the 32 signed bytes. Weight = d * q.
//
// Bindings (group 0)
//   0  weights  array<u32>  read        rows * cols/32 repacked blocks of 9 words, row-major
//   1  x        array<f32>  read        tokens * cols activations
//   2  y        array<f32>  read_write  tokens * rows outputs
//   3  params   Params      uniform     rows, cols, tokens, groups_x
//
// Dispatch: (groups_x, ceil(rows / groups_x), tokens) workgroups of WG invocations; one
// workgroup per output row and token, its invocations striding over the row.

const WG: u32 = 64u;
const BLOCK_WORDS: u32 = 9u;

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
    var sum = 0.0;
    if (row < params.rows) {
        let x_base = token * params.cols;
        let blocks = params.cols / 32u;
        for (var b = local; b < blocks; b = b + WG) {
            let w = (row * blocks + b) * BLOCK_WORDS;
            let xb = x_base + b * 32u;
            var q_dot_x = 0.0;
            for (var i = 0u; i < 8u; i = i + 1u) {
                let packed = weights[w + 1u + i];
                for (var k = 0u; k < 4u; k = k + 1u) {
                    // Sign-extend byte k: move it to the top, then shift back arithmetically.
                    let q = bitcast<i32>(packed << (24u - 8u * k)) >> 24u;
                    q_dot_x = q_dot_x + f32(q) * x[xb + i * 4u + k];
                }
            }
            sum = sum + bitcast<f32>(weights[w]) * q_dot_x;
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
