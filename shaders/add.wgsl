// add: x[i] += y[i % period]: the residual connections (period = n) and a bias added to
// every row of a matrix of `period`-wide rows (Qwen2's Q/K/V biases).
//
// Bindings (group 0)
//   0  x       array<f32>  read_write  n
//   1  y       array<f32>  read        period
//   2  params  Params      uniform     n, period
//
// Dispatch: ceil(n / WG) workgroups; one invocation per element.

struct Params {
    n: u32,
    period: u32,
    unused_b: u32,
    unused_c: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < params.n) {
        x[i] = x[i] + y[i % params.period];
    }
}
