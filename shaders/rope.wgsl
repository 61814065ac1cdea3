// rope: rotates adjacent pairs (x[2i], x[2i+1]) of each head by the angle of its position,
// in place, for the first rope_dim dimensions of every head (llama-architecture GGUF layout).
// The cos/sin table is computed on the CPU in f64 (src/model) and uploaded: f32 sin/cos of
// angles up to the context length (thousands of radians) would lose several digits here.
//
// Bindings (group 0)
//   0  x          array<f32>  read_write  tokens * heads * head_dim
//   1  cos_table  array<f32>  read        tokens * rope_dim/2
//   2  sin_table  array<f32>  read        tokens * rope_dim/2
//   3  params     Params      uniform     heads, head_dim, rope_dim, tokens
//
// Dispatch: ceil(tokens * heads * rope_dim/2 / WG) workgroups; one invocation per pair.

const WG: u32 = 64u;

struct Params {
    heads: u32,
    head_dim: u32,
    rope_dim: u32,
    tokens: u32,
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
    let at = (token * params.heads + head) * params.head_dim + 2u * pair;
    let c = cos_table[token * half + pair];
    let s = sin_table[token * half + pair];
    let a = x[at];
    let b = x[at + 1u];
    x[at] = a * c - b * s;
    x[at + 1u] = a * s + b * c;
}
