// apply_token_mask: masks logits with a token bitmask and finds the argmax of what is left.
//
// The whole kernel works on the logits' bit patterns (u32), never on float arithmetic:
// WGSL lets implementations assume no infinities or NaNs, and we both write -inf and must
// compare against it. Each f32 is mapped to an order-preserving u32 key (see `order_key`).
//
// Bindings (group 0)
//   0  logits    array<u32>        read_write  n f32 logits as bits; disallowed -> -inf bits
//   1  mask      array<u32>        read        ceil(n/32) words; bit i%32 of word i/32 = token i
//   2  partials  array<vec2<u32>>  read_write  (key, index) per pass-1 workgroup
//   3  params    Params            uniform     n, partial_count
//   4  result    array<u32>        read_write  [0] = argmax index, or NONE when nothing is allowed
//
// Entry points, dispatched in this order in one pass:
//   mask_partials    ceil(n / CHUNK) workgroups: mask CHUNK logits, reduce them to one partial
//   reduce_partials  1 workgroup: reduce all partials to the result
//
// Ties go to the lowest index; NaN counts as -inf; -0 equals +0 (the CPU twin's float order).

const WG: u32 = 256u;
// Logits per pass-1 workgroup: 4 per invocation keeps the partial count (and pass 2) small.
const CHUNK: u32 = 1024u;
const NONE: u32 = 0xffffffffu;
const NEG_INF_BITS: u32 = 0xff800000u;

struct Params {
    n: u32,
    partial_count: u32,
}

@group(0) @binding(0) var<storage, read_write> logits: array<u32>;
@group(0) @binding(1) var<storage, read> mask: array<u32>;
@group(0) @binding(2) var<storage, read_write> partials: array<vec2<u32>>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> result: array<u32>;

var<workgroup> shared_keys: array<u32, WG>;
var<workgroup> shared_indices: array<u32, WG>;

// Maps f32 bits to a u32 whose unsigned order is the float order: negatives reversed below
// positives. NaN becomes the key of -inf and -0 the key of +0.
fn order_key(bits: u32) -> u32 {
    var b = bits;
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        b = NEG_INF_BITS;
    }
    if (b == 0x80000000u) {
        b = 0u;
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}

// The better of two (key, index) candidates; index NONE is an empty candidate.
fn better(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (a.y == NONE) {
        return b;
    }
    if (b.y == NONE) {
        return a;
    }
    if (b.x > a.x || (b.x == a.x && b.y < a.y)) {
        return b;
    }
    return a;
}

fn reduce_workgroup(local: u32, mine: vec2<u32>) -> vec2<u32> {
    shared_keys[local] = mine.x;
    shared_indices[local] = mine.y;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (local < stride) {
            let a = vec2<u32>(shared_keys[local], shared_indices[local]);
            let b = vec2<u32>(shared_keys[local + stride], shared_indices[local + stride]);
            let best = better(a, b);
            shared_keys[local] = best.x;
            shared_indices[local] = best.y;
        }
        workgroupBarrier();
    }
    return vec2<u32>(shared_keys[0], shared_indices[0]);
}

@compute @workgroup_size(256)
fn mask_partials(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    var mine = vec2<u32>(0u, NONE);
    let start = group.x * CHUNK;
    for (var k = 0u; k < CHUNK / WG; k = k + 1u) {
        let i = start + k * WG + local;
        if (i < params.n) {
            if (((mask[i / 32u] >> (i % 32u)) & 1u) == 0u) {
                logits[i] = NEG_INF_BITS;
            } else {
                mine = better(mine, vec2<u32>(order_key(logits[i]), i));
            }
        }
    }
    let best = reduce_workgroup(local, mine);
    if (local == 0u) {
        partials[group.x] = best;
    }
}

@compute @workgroup_size(256)
fn reduce_partials(@builtin(local_invocation_index) local: u32) {
    var mine = vec2<u32>(0u, NONE);
    for (var p = local; p < params.partial_count; p = p + WG) {
        mine = better(mine, partials[p]);
    }
    let best = reduce_workgroup(local, mine);
    if (local == 0u) {
        result[0] = best.y;
    }
}
