// kv_store: writes a chunk's K (after RoPE) and V into one layer's cache at positions
// pos0..pos0+tokens, converted to the cache's element type: f32, or f16 on a device with
// `shader-f16`. An f16 cache halves the cache's memory and the attention kernel's reads of it
// (SmolLM2 at its 8,192-position context: 377 MB of cache in f32, 189 MB in f16; llama.cpp's
// default cache type is f16 too).
//
// Bindings (group 0)
//   0  k        array<f32>        read        tokens * kv_width (kv_width = kv_heads * head_dim)
//   1  v        array<f32>        read        tokens * kv_width
//   2  k_cache  array<KvElement>  read_write  capacity * kv_width (rounded up to an even count)
//   3  v_cache  array<KvElement>  read_write  capacity * kv_width
//   4  params   Params            uniform     attention.wgsl's: kv_heads, head_dim, pos0, tokens
//
// Dispatch: (ceil(tokens * kv_width / WG), 1, 1) workgroups of WG invocations, one element
// of K and one of V each.
//
// Variants (src/gpu/variant.rs): with `f16` the cache holds f16, which WGSL's f16(x) rounds
// to one of the two nearest halves (round-to-nearest-even on lavapipe).
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
    unused: u32,
}

@group(0) @binding(0) var<storage, read> k: array<f32>;
@group(0) @binding(1) var<storage, read> v: array<f32>;
@group(0) @binding(2) var<storage, read_write> k_cache: array<KvElement>;
@group(0) @binding(3) var<storage, read_write> v_cache: array<KvElement>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let kv_width = params.kv_heads * params.head_dim;
    let i = id.x;
    if (i >= params.tokens * kv_width) {
        return;
    }
    let at = params.pos0 * kv_width + i;
    k_cache[at] = KvElement(k[i]);
    v_cache[at] = KvElement(v[i]);
}
