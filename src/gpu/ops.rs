//! The forward pass's element-wise and per-row kernels, each a file in `shaders/`, each with a
//! CPU twin in [`crate::model`] that the tests compare it with.
//!
//! Every function here records one dispatch into the caller's encoder; nothing is submitted,
//! so a whole decode step is one submission.

use super::{entry, kernel, Context, Kernel};
use crate::error::Result;

pub(crate) const RMS_NORM: Kernel = kernel!("rms_norm");
pub(crate) const ROPE: Kernel = kernel!("rope");
pub(crate) const SILU_MUL: Kernel = kernel!("silu_mul");
pub(crate) const ADD: Kernel = kernel!("add");
pub(crate) const ATTENTION: Kernel = kernel!("attention");

/// Invocations per workgroup in every kernel of this module.
const WORKGROUP: u32 = 64;

impl Context {
    /// Records one dispatch of `kernel` over `buffers` (bindings 0.., in order) and a uniform
    /// of `params` words (the last binding).
    pub(crate) async fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        kernel: Kernel,
        buffers: &[&wgpu::Buffer],
        params: &[u32],
        groups: (u32, u32, u32),
    ) -> Result<()> {
        let pipeline = self.pipeline(kernel).await?;
        let uniform = self.uniform_buffer(kernel.name, params);
        let mut entries: Vec<_> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| entry(i as u32, b))
            .collect();
        entries.push(entry(buffers.len() as u32, &uniform));
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(kernel.name),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(kernel.name),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        Ok(())
    }

    /// `out[t] = rms_norm(x[t]) * weight` for `tokens` rows of `weight.len()` values.
    pub(crate) async fn record_rms_norm(
        &self,
        encoder: &mut wgpu::CommandEncoder,
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

    /// Rotates the first `rope_dim` dimensions of each of `heads` heads per token, in place.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn record_rope(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        (x, cos, sin): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        heads: usize,
        head_dim: usize,
        rope_dim: usize,
        tokens: usize,
    ) -> Result<()> {
        let pairs = (tokens * heads * rope_dim / 2) as u32;
        let params = [
            heads as u32,
            head_dim as u32,
            rope_dim as u32,
            tokens as u32,
        ];
        let groups = pairs.div_ceil(WORKGROUP);
        self.record(encoder, ROPE, &[x, cos, sin], &params, (groups, 1, 1))
            .await
    }

    /// `gate = silu(gate) * up` over `n` values.
    pub(crate) async fn record_silu_mul(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        gate: &wgpu::Buffer,
        up: &wgpu::Buffer,
        n: usize,
    ) -> Result<()> {
        let groups = (n as u32).div_ceil(WORKGROUP);
        self.record(
            encoder,
            SILU_MUL,
            &[gate, up],
            &[n as u32, 0, 0, 0],
            (groups, 1, 1),
        )
        .await
    }

    /// `x += y` over `n` values.
    pub(crate) async fn record_add(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: usize,
    ) -> Result<()> {
        let groups = (n as u32).div_ceil(WORKGROUP);
        self.record(encoder, ADD, &[x, y], &[n as u32, 0, 0, 0], (groups, 1, 1))
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
}

impl Context {
    /// Causal grouped-query attention of `shape.tokens` queries over a layer's K/V cache.
    pub(crate) async fn record_attention(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        (q, k, v, scores, out): (
            &wgpu::Buffer,
            &wgpu::Buffer,
            &wgpu::Buffer,
            &wgpu::Buffer,
            &wgpu::Buffer,
        ),
        shape: AttentionShape,
    ) -> Result<()> {
        let scale = 1.0 / (shape.head_dim as f32).sqrt();
        let params = [
            shape.heads as u32,
            shape.kv_heads as u32,
            shape.head_dim as u32,
            shape.pos0 as u32,
            shape.tokens as u32,
            shape.capacity as u32,
            scale.to_bits(),
            0,
        ];
        let groups = (shape.heads as u32, shape.tokens as u32, 1);
        self.record(encoder, ATTENTION, &[q, k, v, scores, out], &params, groups)
            .await
    }
}
