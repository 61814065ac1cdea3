// matvec_f16: y[t][r] = sum_k W[r][k] * x[t][k] for an F16 weight matrix, read two halves per
// word with unpack2x16float (no shader-f16 feature needed). Rows of odd length are padded with
// a zero half at upload (src/gpu/matvec.rs), so every row starts on a word.
//
// Bindings (group 0)
//   0  weights  array<u32>  read        rows * ceil(cols/2) words, two f16 weights each (low half first)
//   1  x        array<f32>  read        tokens * cols activations
//   2  y        array<f32>  read_write  tokens * rows outputs
//   3  params   Params      uniform     rows, cols, tokens, groups_x
//
// Dispatch: (groups_x, ceil(rows / groups_x), tokens) workgroups of WG invocations; one
// workgroup per output row and token, its invocations striding over the row.

const WG: u32 = 64u;

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
        let row_words = (params.cols + 1u) / 2u;
        for (var i = local; i < row_words; i = i + WG) {
            let pair = unpack2x16float(weights[row * row_words + i]);
            let k = 2u * i;
            sum = sum + pair.x * x[x_base + k];
            if (k + 1u < params.cols) {
                sum = sum + pair.y * x[x_base + k + 1u];
            }
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
