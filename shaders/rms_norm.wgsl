// rms_norm: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, one row per token.
//
// Bindings (group 0)
//   0  x       array<f32>  read        tokens * d
//   1  weight  array<f32>  read        d
//   2  out     array<f32>  read_write  tokens * d
//   3  params  Params      uniform     d, tokens, eps (f32 bits)
//
// Dispatch: (tokens, 1, 1) workgroups of WG invocations, striding over the row.

const WG: u32 = 64u;

struct Params {
    d: u32,
    tokens: u32,
    eps_bits: u32,
    unused: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

var<workgroup> partial_sums: array<f32, WG>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let base = group.x * params.d;
    var sum = 0.0;
    for (var i = local; i < params.d; i = i + WG) {
        let v = x[base + i];
        sum = sum + v * v;
    }
    partial_sums[local] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (local < stride) {
            partial_sums[local] = partial_sums[local] + partial_sums[local + stride];
        }
        workgroupBarrier();
    }
    let scale = inverseSqrt(partial_sums[0] / f32(params.d) + bitcast<f32>(params.eps_bits));
    for (var i = local; i < params.d; i = i + WG) {
        out[base + i] = x[base + i] * scale * weight[i];
    }
}
