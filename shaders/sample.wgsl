// sample: chooses the next token on the GPU the way crate::sampling::Sampler::sample does on
// the CPU (mask, temperature, top-k, top-p, min-p, one draw), so a decode step reads back 4
// bytes instead of the logits. Logit bias and penalties are not here: a request with them
// samples on the CPU (src/gpu/sample.rs says when).
//
// One workgroup does it all. The CPU sorts the candidates (by scaled logit descending, ties to
// the lower id) and walks the cumulative probability; here the same "first position in that
// order where a running sum reaches a goal" is found by bisection instead of a sort: over
// the order key (32 halvings) and then over the id among equal keys (ceil(log2 n) halvings),
// each halving one pass over the logits and a workgroup sum. Sums of non-negative f32 terms
// in a fixed order are monotone in the set summed, so the bisection is well founded; they are
// f32 sums in a tree (the CPU's are sequential f64), which is where a near-tie of cumulative
// probability can pick the neighbouring token (tests/gpu_sample.rs measures how often).
//
// Bindings (group 0)
//   0  logits   array<u32>  read        f32 logits as bits (at least n of them)
//   1  mask     array<u32>  read        ceil(n/32) words, bit i%32 of word i/32 = token i;
//                                       ignored when params.has_mask is 0
//   2  keys     array<u32>  read_write  n scratch words: order key of a candidate, 0 = out
//   3  weights  array<f32>  read_write  n scratch floats: exp((l - max) / T) of a candidate
//   4  params   Params      uniform     n, has_mask, temperature, top_k, top_p, min_p, uniform
//   5  result   array<u32>  read_write  [0] = the token, or NONE when nothing is allowed
//
// Dispatch: one workgroup of WG invocations. Invocation `local` owns tokens local + j * WG in
// every pass, so no storage barrier is needed between passes.
//
// Variants (src/gpu/variant.rs): with `subgroups` the workgroup sum and the first-candidate
// reduction are subgroup operations and one pass over the subgroups' results by invocation 0
// (2 barriers each instead of 9, over ~40-80 reductions a sampled step); any subgroup size
// works, including one larger than the workgroup.

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;

struct Params {
    n: u32,
    has_mask: u32,
    // 0 = greedy.
    temperature: f32,
    // 0 = off.
    top_k: u32,
    // 1 = off.
    top_p: f32,
    // 0 = off.
    min_p: f32,
    // The draw in [0, 1), from the CPU's generator (the same one the CPU sampler draws).
    uniform: f32,
    unused: u32,
}

@group(0) @binding(0) var<storage, read> logits: array<u32>;
@group(0) @binding(1) var<storage, read> mask: array<u32>;
@group(0) @binding(2) var<storage, read_write> keys: array<u32>;
@group(0) @binding(3) var<storage, read_write> weights: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<storage, read_write> result: array<u32>;

var<workgroup> shared_sums: array<f32, WG>;
var<workgroup> shared_keys: array<u32, WG>;
var<workgroup> shared_ids: array<u32, WG>;
var<workgroup> sum_out: f32;
var<workgroup> key_out: u32;
var<workgroup> id_out: u32;

// f32 bits to a u32 whose unsigned order is the float order, with 0 reserved for "not a
// candidate": NaN and -inf are not candidates (the CPU sampler filters them out), -0 is +0.
fn order_key(bits: u32) -> u32 {
    var b = bits;
    if ((b & 0x7fffffffu) > 0x7f800000u || b == 0xff800000u) {
        return 0u;
    }
    if (b == 0x80000000u) {
        b = 0u;
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

// The float a key came from.
fn key_value(key: u32) -> f32 {
    if ((key & 0x80000000u) != 0u) {
        return bitcast<f32>(key & 0x7fffffffu);
    }
    return bitcast<f32>(~key);
}

//#if subgroups
var<private> subgroup_lane: u32;
var<private> subgroup: u32;
var<private> subgroups: u32;

// The sum of every invocation's `value`, the same in all of them.
fn workgroup_sum(local: u32, value: f32) -> f32 {
    let subgroup_sum = subgroupAdd(value);
    if (subgroup_lane == 0u) {
        shared_sums[subgroup] = subgroup_sum;
    }
    workgroupBarrier();
    if (local == 0u) {
        var total = 0.0;
        for (var s = 0u; s < subgroups; s = s + 1u) {
            total = total + shared_sums[s];
        }
        sum_out = total;
    }
    return workgroupUniformLoad(&sum_out);
}
//#else
// The sum of every invocation's `value`, the same in all of them.
fn workgroup_sum(local: u32, value: f32) -> f32 {
    shared_sums[local] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (local < stride) {
            shared_sums[local] = shared_sums[local] + shared_sums[local + stride];
        }
        workgroupBarrier();
    }
    if (local == 0u) {
        sum_out = shared_sums[0];
    }
    return workgroupUniformLoad(&sum_out);
}
//#endif

// Whether candidate a = (key, id) comes before b in the reduction's order: the larger key
// first (`last` false) or the smaller key first, larger id first (`last` true, the CPU's last
// kept candidate); key 0 (no candidate) always loses.
fn comes_first(a: vec2<u32>, b: vec2<u32>, last: bool) -> bool {
    if (b.x == 0u) {
        return true;
    }
    if (a.x == 0u) {
        return false;
    }
    if (last) {
        return a.x < b.x || (a.x == b.x && a.y > b.y);
    }
    return a.x > b.x || (a.x == b.x && a.y < b.y);
}

// The first (or, with `last`, the last) candidate in the sampler's order, the same in every
// invocation; key 0 when there is none.
//#if subgroups
fn workgroup_first(local: u32, mine: vec2<u32>, last: bool) -> vec2<u32> {
    // The subgroup's best key (the largest; with `last` the smallest nonzero), then among
    // its holders the smallest id (with `last` the largest). No candidate: key 0.
    var key = 0u;
    var id = NONE;
    if (last) {
        var candidate_key = 0xffffffffu;
        if (mine.x != 0u) {
            candidate_key = mine.x;
        }
        let best = subgroupMin(candidate_key);
        var candidate_id = 0u;
        if (mine.x == best) {
            candidate_id = mine.y;
        }
        let best_id = subgroupMax(candidate_id);
        if (best != 0xffffffffu) {
            key = best;
            id = best_id;
        }
    } else {
        let best = subgroupMax(mine.x);
        var candidate_id = NONE;
        if (mine.x == best) {
            candidate_id = mine.y;
        }
        let best_id = subgroupMin(candidate_id);
        if (best != 0u) {
            key = best;
            id = best_id;
        }
    }
    if (subgroup_lane == 0u) {
        shared_keys[subgroup] = key;
        shared_ids[subgroup] = id;
    }
    workgroupBarrier();
    if (local == 0u) {
        var first = vec2<u32>(shared_keys[0], shared_ids[0]);
        for (var s = 1u; s < subgroups; s = s + 1u) {
            let other = vec2<u32>(shared_keys[s], shared_ids[s]);
            if (!comes_first(first, other, last)) {
                first = other;
            }
        }
        key_out = first.x;
        id_out = first.y;
    }
    let first_key = workgroupUniformLoad(&key_out);
    let first_id = workgroupUniformLoad(&id_out);
    return vec2<u32>(first_key, first_id);
}
//#else
fn workgroup_first(local: u32, mine: vec2<u32>, last: bool) -> vec2<u32> {
    shared_keys[local] = mine.x;
    shared_ids[local] = mine.y;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (local < stride) {
            let a = vec2<u32>(shared_keys[local], shared_ids[local]);
            let b = vec2<u32>(shared_keys[local + stride], shared_ids[local + stride]);
            if (!comes_first(a, b, last)) {
                shared_keys[local] = b.x;
                shared_ids[local] = b.y;
            }
        }
        workgroupBarrier();
    }
    if (local == 0u) {
        key_out = shared_keys[0];
        id_out = shared_ids[0];
    }
    let key = workgroupUniformLoad(&key_out);
    let id = workgroupUniformLoad(&id_out);
    return vec2<u32>(key, id);
}
//#endif

// Whether token i (of key `key`) is at or before the position (cut_key, cut_id) in the
// sampler's order. cut_id NONE means every token of cut_key.
fn through(key: u32, i: u32, cut_key: u32, cut_id: u32) -> bool {
    return key != 0u && (key > cut_key || (key == cut_key && i <= cut_id));
}

// The running sum at position (cut_key, cut_id): the candidates' weights, or their count.
fn mass_through(local: u32, cut_key: u32, cut_id: u32, counting: bool) -> f32 {
    var sum = 0.0;
    for (var i = local; i < params.n; i = i + WG) {
        let key = keys[i];
        if (through(key, i, cut_key, cut_id)) {
            if (counting) {
                sum = sum + 1.0;
            } else {
                sum = sum + weights[i];
            }
        }
    }
    return workgroup_sum(local, sum);
}

fn reaches(sum: f32, goal: f32, strict: bool) -> bool {
    if (strict) {
        return sum > goal;
    }
    return sum >= goal;
}

// The first position in the sampler's order whose running sum reaches `goal` (> with
// `strict`, else >=), as (key, id); key 0 when even the whole sum does not.
fn find_cutoff(local: u32, counting: bool, goal: f32, strict: bool, top_key: u32) -> vec2<u32> {
    // Invariant: the sum through every token of key `lo` reaches, through `hi` does not.
    var lo = 1u;
    var hi = top_key + 1u;
    if (!reaches(mass_through(local, lo, NONE, counting), goal, strict)) {
        return vec2<u32>(0u, NONE);
    }
    loop {
        if (hi - lo <= 1u) {
            break;
        }
        let mid = lo + (hi - lo) / 2u;
        if (reaches(mass_through(local, mid, NONE, counting), goal, strict)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // `lo` is a key some candidate has (else lo + 1 would reach too); now the smallest id
    // among that key's candidates at which the sum reaches.
    var left = 0u;
    var right = params.n - 1u;
    loop {
        if (left >= right) {
            break;
        }
        let mid = left + (right - left) / 2u;
        if (reaches(mass_through(local, lo, mid, counting), goal, strict)) {
            right = mid;
        } else {
            left = mid + 1u;
        }
    }
    return vec2<u32>(lo, left);
}

// Takes every candidate after position `cut` out.
fn drop_after(local: u32, cut: vec2<u32>) {
    for (var i = local; i < params.n; i = i + WG) {
        let key = keys[i];
        if (key != 0u && !through(key, i, cut.x, cut.y)) {
            keys[i] = 0u;
            weights[i] = 0.0;
        }
    }
}

//#if subgroups
@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) local: u32,
    @builtin(subgroup_invocation_id) lane_in_subgroup: u32,
    @builtin(subgroup_id) subgroup_index: u32,
    @builtin(num_subgroups) subgroup_count: u32,
) {
    subgroup_lane = lane_in_subgroup;
    subgroup = subgroup_index;
    subgroups = subgroup_count;
//#else
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) local: u32) {
//#endif
    let n = params.n;
    // 1. The mask and the candidates; the top one (ties to the lowest id) and their count.
    var mine = vec2<u32>(0u, NONE);
    var count = 0.0;
    for (var i = local; i < n; i = i + WG) {
        var key = 0u;
        if (params.has_mask == 0u || ((mask[i / 32u] >> (i % 32u)) & 1u) == 1u) {
            key = order_key(logits[i]);
        }
        keys[i] = key;
        if (key != 0u) {
            count = count + 1.0;
            // Ascending i: a later equal key never replaces an earlier one.
            if (key > mine.x) {
                mine = vec2<u32>(key, i);
            }
        }
    }
    let top = workgroup_first(local, mine, false);
    let candidates = workgroup_sum(local, count);
    if (top.x == 0u) {
        if (local == 0u) {
            result[0] = NONE;
        }
        return;
    }
    if (params.temperature == 0.0) {
        if (local == 0u) {
            result[0] = top.y;
        }
        return;
    }
    // 2. Weights: exp of the scaled logit minus the scaled maximum, as the CPU computes it
    // (l / T - max / T in f32); exactly 1 for the maximum.
    let t = params.temperature;
    let scaled_max = key_value(top.x) / t;
    for (var i = local; i < n; i = i + WG) {
        var w = 0.0;
        if (keys[i] != 0u) {
            let arg = bitcast<f32>(logits[i]) / t - scaled_max;
            w = 1.0;
            if (arg < 0.0) {
                w = exp(arg);
            }
        }
        weights[i] = w;
    }
    // 3. top-k: the first top_k candidates (a count, exact in f32 below 2^24).
    if (params.top_k > 0u && f32(params.top_k) < candidates) {
        drop_after(local, find_cutoff(local, true, f32(params.top_k), false, top.x));
    }
    // 4. top-p: the shortest prefix whose probability reaches top_p.
    if (params.top_p < 1.0) {
        let total = mass_through(local, 1u, NONE, false);
        let cut = find_cutoff(local, false, params.top_p * total, false, top.x);
        if (cut.x != 0u) {
            drop_after(local, cut);
        }
    }
    // 5. min-p: probability at least min_p times the top one's, i.e. weight >= min_p (the
    // top weight is 1; the order is by weight, so this keeps a prefix as the CPU's does).
    if (params.min_p > 0.0) {
        for (var i = local; i < n; i = i + WG) {
            if (keys[i] != 0u && weights[i] < params.min_p) {
                keys[i] = 0u;
                weights[i] = 0.0;
            }
        }
    }
    // 6. The draw: the first position whose running sum exceeds uniform x kept mass; when
    // rounding leaves none, the last kept candidate (as the CPU falls back to).
    let kept = mass_through(local, 1u, NONE, false);
    var chosen = find_cutoff(local, false, params.uniform * kept, true, top.x);
    if (chosen.x == 0u) {
        var last = vec2<u32>(0u, NONE);
        for (var i = local; i < n; i = i + WG) {
            let candidate = vec2<u32>(keys[i], i);
            if (comes_first(candidate, last, true)) {
                last = candidate;
            }
        }
        chosen = workgroup_first(local, last, true);
    }
    if (local == 0u) {
        result[0] = chosen.y;
    }
}
