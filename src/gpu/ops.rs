//! The forward pass's element-wise and per-row kernels, each a file in `shaders/`, each with a
//! CPU twin in [`crate::model`] that the tests compare it with.
//!
//! Every function here records one dispatch into the caller's encoder; nothing is submitted,
//! so a whole decode step is one submission.

use super::{entry, kernel, Context, Kernel};
use crate::error::Result;
use crate::model::KvPrecision;

pub(crate) const RMS_NORM: Kernel = kernel!("rms_norm");
pub(crate) const ROPE: Kernel = kernel!("rope");
pub(crate) const SILU_MUL: Kernel = kernel!("silu_mul");
pub(crate) const ADD: Kernel = kernel!("add");
pub(crate) const ATTENTION: Kernel = kernel!("attention");
pub(crate) const KV_STORE: Kernel = kernel!("kv_store");

/// Invocations per workgroup in every kernel of this module.
const WORKGROUP: u32 = 64;

/// One dispatch made ready to record: its pipeline, its bind group (made once, so a step that
/// replays it creates nothing) and its workgroup counts.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    pub name: &'static str,
    pub pipeline: wgpu::ComputePipeline,
    pub bind_group: wgpu::BindGroup,
    pub groups: (u32, u32, u32),
}

/// Where the `record_*` functions put their dispatch.
pub(crate) trait Sink {
    fn take(&mut self, dispatch: Dispatch);
}

impl Sink for wgpu::CommandEncoder {
    fn take(&mut self, dispatch: Dispatch) {
        let mut pass = self.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(dispatch.name),
            timestamp_writes: None,
        });
        dispatch.encode(&mut pass);
    }
}

impl Sink for Vec<Dispatch> {
    fn take(&mut self, dispatch: Dispatch) {
        self.push(dispatch);
    }
}

impl Dispatch {
    /// Records it into an open compute pass.
    pub(crate) fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.dispatch_workgroups(self.groups.0, self.groups.1, self.groups.2);
    }
}

impl Context {
    /// A [`Dispatch`] of `kernel` over `bindings` (bindings 0.., in order, the uniform among
    /// them where the shader's table puts it).
    pub(crate) async fn prepare(
        &self,
        kernel: Kernel,
        bindings: &[&wgpu::Buffer],
        groups: (u32, u32, u32),
    ) -> Result<Dispatch> {
        let pipeline = self.pipeline(kernel).await?;
        let entries: Vec<_> = bindings
            .iter()
            .enumerate()
            .map(|(i, b)| entry(i as u32, b))
            .collect();
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(kernel.name),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        Ok(Dispatch {
            name: kernel.name,
            pipeline,
            bind_group,
            groups,
        })
    }

    /// Hands `sink` one dispatch of `kernel` over `buffers` (bindings 0.., in order) and a
    /// uniform of `params` words (the last binding): an encoder records it in a pass of its
    /// own (the CPU-twin tests, [`Context::matvec`]), a `Vec` keeps it for the forward pass's
    /// plan, replayed every step (`model.rs`).
    pub(crate) async fn record(
        &self,
        sink: &mut impl Sink,
        kernel: Kernel,
        buffers: &[&wgpu::Buffer],
        params: &[u32],
        groups: (u32, u32, u32),
    ) -> Result<()> {
        let uniform = self.params_buffer(kernel.name, params);
        self.record_with_uniform(sink, kernel, buffers, &uniform, &[], groups)
            .await
    }

    /// [`Context::record`] with the uniform given, between `before` and `after`.
    pub(crate) async fn record_with_uniform(
        &self,
        sink: &mut impl Sink,
        kernel: Kernel,
        before: &[&wgpu::Buffer],
        uniform: &wgpu::Buffer,
        after: &[&wgpu::Buffer],
        groups: (u32, u32, u32),
    ) -> Result<()> {
        let mut bindings = before.to_vec();
        bindings.push(uniform);
        bindings.extend_from_slice(after);
        sink.take(self.prepare(kernel, &bindings, groups).await?);
        Ok(())
    }

    /// `out[t] = rms_norm(x[t]) * weight` for `tokens` rows of `weight.len()` values.
    pub(crate) async fn record_rms_norm(
        &self,
        encoder: &mut impl Sink,
        (x, weight, out): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        d: usize,
        tokens: usize,
        eps: f32,
    ) -> Result<()> {
        let params = [d as u32, tokens as u32, eps.to_bits(), 0];
        self.record(
            encoder,
            RMS_NORM,
            &[x, weight, out],
            &params,
            (tokens as u32, 1, 1),
        )
        .await
    }

    /// Rotates the first `rope_dim` dimensions of each of `heads` heads per token, in place:
    /// adjacent pairs, or with `halves` the pairs `(i, i + rope_dim/2)` (the CPU twins
    /// `model::rope` and `model::rope_halves`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn record_rope(
        &self,
        encoder: &mut impl Sink,
        (x, cos, sin): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        heads: usize,
        head_dim: usize,
        rope_dim: usize,
        tokens: usize,
        halves: bool,
    ) -> Result<()> {
        let pairs = (tokens * heads * rope_dim / 2) as u32;
        let params = [
            heads as u32,
            head_dim as u32,
            rope_dim as u32,
            tokens as u32,
            u32::from(halves),
            0,
            0,
            0,
        ];
        let groups = pairs.div_ceil(WORKGROUP);
        self.record(encoder, ROPE, &[x, cos, sin], &params, (groups, 1, 1))
            .await
    }

    /// `gate = silu(gate) * up` over `n` values, or with `gelu` `gelu(gate) * up` (the CPU
    /// twin `model::gelu_tanh`).
    pub(crate) async fn record_silu_mul(
        &self,
        encoder: &mut impl Sink,
        gate: &wgpu::Buffer,
        up: &wgpu::Buffer,
        n: usize,
        gelu: bool,
    ) -> Result<()> {
        let groups = (n as u32).div_ceil(WORKGROUP);
        let params = [n as u32, u32::from(gelu), 0, 0];
        self.record(encoder, SILU_MUL, &[gate, up], &params, (groups, 1, 1))
            .await
    }

    /// `x[i] += y[i % period]` over `n` values: `period` = `n` adds two vectors, a row width
    /// adds `y` to every row.
    pub(crate) async fn record_add(
        &self,
        encoder: &mut impl Sink,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: usize,
        period: usize,
    ) -> Result<()> {
        let groups = (n as u32).div_ceil(WORKGROUP);
        let params = [n as u32, period as u32, 0, 0];
        self.record(encoder, ADD, &[x, y], &params, (groups, 1, 1))
            .await
    }
}

/// The shape of one attention call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttentionShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Absolute position of the first new token.
    pub pos0: usize,
    pub tokens: usize,
    /// Positions the cache (and the scores scratch) holds.
    pub capacity: usize,
    /// A sliding window: each token attends to its last `window` positions; 0: all of them.
    pub window: usize,
}

/// The attention kernel's uniform for `shape` (only `pos0` changes between decode steps: the
/// plan rewrites this in place, one uniform shared by every layer).
pub(crate) fn attention_params(shape: AttentionShape) -> [u32; 8] {
    let scale = 1.0 / (shape.head_dim as f32).sqrt();
    [
        shape.heads as u32,
        shape.kv_heads as u32,
        shape.head_dim as u32,
        shape.pos0 as u32,
        shape.tokens as u32,
        shape.capacity as u32,
        scale.to_bits(),
        shape.window as u32,
    ]
}

/// kv_store's buffers: the chunk's K and V, and the layer's K and V caches.
pub(crate) type KvStoreBuffers<'a> = (
    &'a wgpu::Buffer,
    &'a wgpu::Buffer,
    &'a wgpu::Buffer,
    &'a wgpu::Buffer,
);

/// The attention kernel's buffers: q, the layer's K and V caches, the scores scratch, out.
pub(crate) type AttentionBuffers<'a> = (
    &'a wgpu::Buffer,
    &'a wgpu::Buffer,
    &'a wgpu::Buffer,
    &'a wgpu::Buffer,
    &'a wgpu::Buffer,
);

impl Context {
    /// Causal grouped-query attention of `shape.tokens` queries over a layer's K/V cache.
    #[cfg(test)]
    pub(crate) async fn record_attention(
        &self,
        encoder: &mut impl Sink,
        buffers: AttentionBuffers<'_>,
        shape: AttentionShape,
    ) -> Result<()> {
        let uniform = self.params_buffer("attention.params", &attention_params(shape));
        self.record_attention_with(encoder, buffers, &uniform, shape)
            .await
    }

    /// Writes `shape.tokens` positions of K and V (f32) into a layer's caches at
    /// `shape.pos0`, in the cache's element type ([`Context::kv_cache_buffer`]); `uniform`
    /// holds [`attention_params`] of `shape` (the attention kernel's, so one uniform written
    /// per step serves both).
    pub(crate) async fn record_kv_store(
        &self,
        encoder: &mut impl Sink,
        (k, v, k_cache, v_cache): KvStoreBuffers<'_>,
        uniform: &wgpu::Buffer,
        shape: AttentionShape,
    ) -> Result<()> {
        let n = (shape.tokens * shape.kv_heads * shape.head_dim) as u32;
        let groups = (n.div_ceil(WORKGROUP), 1, 1);
        let buffers = [k, v, k_cache, v_cache];
        self.record_with_uniform(encoder, KV_STORE, &buffers, uniform, &[], groups)
            .await
    }

    /// A layer's K or V cache of `positions` x `kv_width` elements: f16 on a device with
    /// `shader-f16` (half the memory and half the attention kernel's reads of it), f32
    /// otherwise. The size is rounded up to whole words.
    pub(crate) fn kv_cache_buffer(
        &self,
        label: &str,
        positions: usize,
        kv_width: usize,
    ) -> wgpu::Buffer {
        let bytes = (positions * kv_width * self.kv_precision().bytes()).next_multiple_of(4);
        self.storage_buffer(label, &vec![0; bytes], wgpu::BufferUsages::COPY_SRC)
    }

    /// How this device's KV caches hold keys and values: f16 with `shader-f16`, else f32.
    pub fn kv_precision(&self) -> KvPrecision {
        if self.variant().f16 {
            KvPrecision::F16
        } else {
            KvPrecision::F32
        }
    }

    /// [`Context::record_attention`] reading its parameters from `uniform`
    /// ([`attention_params`] of a shape with `shape`'s workgroup counts).
    pub(crate) async fn record_attention_with(
        &self,
        encoder: &mut impl Sink,
        (q, k, v, scores, out): AttentionBuffers<'_>,
        uniform: &wgpu::Buffer,
        shape: AttentionShape,
    ) -> Result<()> {
        let groups = (shape.heads as u32, shape.tokens as u32, 1);
        self.record_with_uniform(
            encoder,
            ATTENTION,
            &[q, k, v, scores, out],
            uniform,
            &[],
            groups,
        )
        .await
    }
}
