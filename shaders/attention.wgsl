// attention: causal grouped-query attention of `tokens` new positions over one layer's KV cache.
// Token i (absolute position pos0 + i) of query head h attends to positions 0..=pos0+i of
// KV head h / (heads / kv_heads): out = softmax(q . k_p * scale) . v_p.
//
// Bindings (group 0)
//   0  q       array<f32>  read        tokens * heads * head_dim
//   1  k       array<KvElement>  read  capacity * kv_heads * head_dim (this layer's cache)
//   2  v       array<KvElement>  read  capacity * kv_heads * head_dim
//   3  scores  array<f32>  read_write  tokens * heads * capacity (scratch)
//   4  out     array<f32>  read_write  tokens * heads * head_dim
//   5  params  Params      uniform     heads, kv_heads, head_dim, pos0, tokens, capacity, scale, window
//
// Dispatch: (heads, tokens, 1) workgroups of WG invocations: they stride over positions for
// the scores, then over dimensions for the weighted sum of values.
//
// Variants (src/gpu/variant.rs): with `subgroups` the softmax's max and sum are a subgroupMax /
// subgroupAdd per subgroup and one pass over the subgroups' results (2 barriers each instead of
// 8); any subgroup size works, including one larger than the workgroup. With `f16` the cache
// holds f16 (kv_store.wgsl writes it), widened exactly to f32 on reading: the arithmetic is
// the f32 path's.
//#if f16
enable f16;
//#endif

const WG: u32 = 64u;

//#if f16
alias KvElement = f16;
//#else
alias KvElement = f32;
//#endif

struct Params {
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
    tokens: u32,
    capacity: u32,
    scale_bits: u32,
    // A sliding window (Gemma 3's local layers): the last `window` positions, the token's own
    // included; 0: every position up to the token's.
    window: u32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<KvElement>;
@group(0) @binding(2) var<storage, read> v: array<KvElement>;
@group(0) @binding(3) var<storage, read_write> scores: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> params: Params;

// One per invocation (f32) or per subgroup (subgroups: at most WG of them, size >= 1).
var<workgroup> reduction: array<f32, WG>;

//#if subgroups
var<private> subgroup_lane: u32;
var<private> subgroup: u32;
var<private> subgroups: u32;

// Each subgroup's result in `reduction[subgroup]`, then every invocation combines them in the
// same order (so all get the same value); the last barrier lets the next reduction reuse the
// array.
fn combine_subgroups(value: f32, is_max: bool) -> f32 {
    if (subgroup_lane == 0u) {
        reduction[subgroup] = value;
    }
    workgroupBarrier();
    var result = reduction[0];
    for (var s = 1u; s < subgroups; s = s + 1u) {
        if (is_max) {
            result = max(result, reduction[s]);
        } else {
            result = result + reduction[s];
        }
    }
    workgroupBarrier();
    return result;
}

fn reduce_max(local: u32, value: f32) -> f32 {
    return combine_subgroups(subgroupMax(value), true);
}

fn reduce_sum(local: u32, value: f32) -> f32 {
    return combine_subgroups(subgroupAdd(value), false);
}
//#else
fn reduce_max(local: u32, value: f32) -> f32 {
    reduction[local] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (local < stride) {
            reduction[local] = max(reduction[local], reduction[local + stride]);
        }
        workgroupBarrier();
    }
    let result = reduction[0];
    workgroupBarrier();
    return result;
}

fn reduce_sum(local: u32, value: f32) -> f32 {
    reduction[local] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (local < stride) {
            reduction[local] = reduction[local] + reduction[local + stride];
        }
        workgroupBarrier();
    }
    let result = reduction[0];
    workgroupBarrier();
    return result;
}
//#endif

//#if subgroups
@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
    @builtin(subgroup_invocation_id) lane_in_subgroup: u32,
    @builtin(subgroup_id) subgroup_index: u32,
    @builtin(num_subgroups) subgroup_count: u32,
) {
    subgroup_lane = lane_in_subgroup;
    subgroup = subgroup_index;
    subgroups = subgroup_count;
//#else
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
//#endif
    let head = group.x;
    let token = group.y;
    let hd = params.head_dim;
    let kv_head = head / (params.heads / params.kv_heads);
    let kv_width = params.kv_heads * hd;
    let q_base = (token * params.heads + head) * hd;
    let s_base = (token * params.heads + head) * params.capacity;
    let visible = params.pos0 + token + 1u;
    var first = 0u;
    if (params.window != 0u && visible > params.window) {
        first = visible - params.window;
    }
    let scale = bitcast<f32>(params.scale_bits);

    var local_max = -3.0e38;
    for (var p = first + local; p < visible; p = p + WG) {
        let k_base = p * kv_width + kv_head * hd;
        var dot = 0.0;
        for (var i = 0u; i < hd; i = i + 1u) {
            dot = dot + q[q_base + i] * f32(k[k_base + i]);
        }
        let s = dot * scale;
        scores[s_base + p] = s;
        local_max = max(local_max, s);
    }
    let m = reduce_max(local, local_max);
    var local_sum = 0.0;
    for (var p = first + local; p < visible; p = p + WG) {
        let e = exp(scores[s_base + p] - m);
        scores[s_base + p] = e;
        local_sum = local_sum + e;
    }
    let inv_sum = 1.0 / reduce_sum(local, local_sum);
    // Every invocation reads every score below; workgroupBarrier orders only workgroup memory,
    // the scores are in storage.
    storageBarrier();
    for (var i = local; i < hd; i = i + WG) {
        var acc = 0.0;
        for (var p = first; p < visible; p = p + 1u) {
            acc = acc + scores[s_base + p] * f32(v[p * kv_width + kv_head * hd + i]);
        }
        out[q_base + i] = acc * inv_sum;
    }
}
