// rope: rotates pairs of each head by the angle of its position, in place, for the first
// rope_dim dimensions of every head: adjacent pairs (x[2i], x[2i+1]) (ggml's normal mode, the
// llama GGUF layout), or with `halves` the pairs (x[i], x[i + rope_dim/2]) (ggml's NEOX mode,
// as llama.cpp runs Qwen2 and Qwen3).
// The cos/sin table is computed on the CPU in f64 (src/model) and uploaded: f32 sin/cos of
// angles up to the context length (thousands of radians) would lose several digits here.
//
// Bindings (group 0)
//   0  x          array<f32>  read_write  tokens * heads * head_dim
//   1  cos_table  array<f32>  read        tokens * rope_dim/2
//   2  sin_table  array<f32>  read        tokens * rope_dim/2
//   3  params     Params      uniform     heads, head_dim, rope_dim, tokens, halves
//
// Dispatch: ceil(tokens * heads * rope_dim/2 / WG) workgroups; one invocation per pair.

const WG: u32 = 64u;

struct Params {
    heads: u32,
    head_dim: u32,
    rope_dim: u32,
    tokens: u32,
    halves: u32,
    unused_a: u32,
    unused_b: u32,
    unused_c: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> cos_table: array<f32>;
@group(0) @binding(2) var<storage, read> sin_table: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let half = params.rope_dim / 2u;
    let pair = id.x % half;
    let head = (id.x / half) % params.heads;
    let token = id.x / (half * params.heads);
    if (token >= params.tokens) {
        return;
    }
    let base = (token * params.heads + head) * params.head_dim;
    var first = base + 2u * pair;
    var second = first + 1u;
    if (params.halves != 0u) {
        first = base + pair;
        second = first + half;
    }
    let c = cos_table[token * half + pair];
    let s = sin_table[token * half + pair];
    let a = x[first];
    let b = x[second];
    x[first] = a * c - b * s;
    x[second] = a * s + b * c;
}
