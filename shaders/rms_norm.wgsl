// rms_norm: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, one row per token.
//
// Bindings (group 0)
//   0  x       array<f32>  read        tokens * d
//   1  weight  array<f32>  read        d
//   2  out     array<f32>  read_write  tokens * d
//   3  params  Params      uniform     d, tokens, eps (f32 bits)
//
// Dispatch: (tokens, 1, 1) workgroups of WG invocations, striding over the row.
//
// Variants (src/gpu/variant.rs): with `subgroups` the sum of squares is a subgroupAdd per
// subgroup and one pass over the subgroups' sums (1 barrier instead of 7); any subgroup size
// works, including one larger than the workgroup (a partial subgroup).

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

// One per invocation (f32) or per subgroup (subgroups: at most WG of them, size >= 1).
var<workgroup> partial_sums: array<f32, WG>;

//#if subgroups
@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
    @builtin(subgroup_invocation_id) subgroup_lane: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
) {
//#else
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
//#endif
    let base = group.x * params.d;
    var sum = 0.0;
    for (var i = local; i < params.d; i = i + WG) {
        let v = x[base + i];
        sum = sum + v * v;
    }
//#if subgroups
    let subgroup_sum = subgroupAdd(sum);
    if (subgroup_lane == 0u) {
        partial_sums[subgroup] = subgroup_sum;
    }
    workgroupBarrier();
    // Every invocation adds the subgroups' sums in the same order: the same total in all.
    var total = 0.0;
    for (var s = 0u; s < subgroups; s = s + 1u) {
        total = total + partial_sums[s];
    }
//#else
    partial_sums[local] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (local < stride) {
            partial_sums[local] = partial_sums[local] + partial_sums[local + stride];
        }
        workgroupBarrier();
    }
    let total = partial_sums[0];
//#endif
    let scale = inverseSqrt(total / f32(params.d) + bitcast<f32>(params.eps_bits));
    for (var i = local; i < params.d; i = i + WG) {
        out[base + i] = x[base + i] * scale * weight[i];
    }
}
