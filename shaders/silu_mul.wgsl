// silu_mul: gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], in place
// (the SwiGLU feed-forward's elementwise step); with `gelu`, gelu(gate[i]) * up[i] with GELU's
// tanh form (Gemma's GeGLU).
//
// Bindings (group 0)
//   0  gate    array<f32>  read_write  n
//   1  up      array<f32>  read        n
//   2  params  Params      uniform     n, gelu
//
// Dispatch: ceil(n / WG) workgroups; one invocation per element.

struct Params {
    n: u32,
    gelu: u32,
    unused_b: u32,
    unused_c: u32,
}

@group(0) @binding(0) var<storage, read_write> gate: array<f32>;
@group(0) @binding(1) var<storage, read> up: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < params.n) {
        let g = gate[i];
        if (params.gelu != 0u) {
            // tanh(z) through exp(-2|z|), as WGSL's tanh may lose precision or overflow in
            // exp for large |z| on some backends.
            let z = 0.7978846 * g * (1.0 + 0.044715 * g * g);
            let e = exp(-2.0 * abs(z));
            let t = sign(z) * (1.0 - e) / (1.0 + e);
            gate[i] = 0.5 * g * (1.0 + t) * up[i];
        } else {
            gate[i] = g / (1.0 + exp(-g)) * up[i];
        }
    }
}
