//! `shaders/sample.wgsl`: the GPU twin of [`crate::sampling::Sampler::sample`] for the
//! settings a device can run ([`crate::sampling::Sampler::runs_on_device`]: the mask,
//! temperature, top-k, top-p, min-p), so a decode step reads back the chosen token's 4 bytes
//! instead of the logits (196,608 bytes for SmolLM2's 49,152). The draw is made on the CPU by
//! the sampler's own generator ([`crate::sampling::Sampler::device_step`]) and passed in.

use super::{kernel, Context, ErrorScope, Kernel};
use crate::error::{Error, Result};
use crate::mask;
use crate::sampling::DeviceSampling;
use crate::vocab::TokenId;

pub(crate) const SAMPLE: Kernel = kernel!("sample");

/// The kernel's "no token allowed" result; must equal `NONE` in the shader.
const NO_TOKEN: u32 = u32::MAX;

/// The f32 the shader compares with: the f64 draw rounded down to 24 bits, so that it stays
/// below 1 (rounding to nearest could make it 1.0 and draw past the last candidate).
fn uniform_f32(uniform: f64) -> f32 {
    const SCALE: f64 = (1u32 << 24) as f64;
    ((uniform * SCALE).floor() / SCALE) as f32
}

/// The shader's `Params` for `n` tokens.
pub(crate) fn sample_params(n: usize, has_mask: bool, s: &DeviceSampling) -> [u32; 8] {
    [
        n as u32,
        u32::from(has_mask),
        s.temperature.to_bits(),
        s.top_k.min(u32::MAX as usize) as u32,
        s.top_p.to_bits(),
        s.min_p.to_bits(),
        uniform_f32(s.uniform).to_bits(),
        0,
    ]
}

/// The sampler's error for a step with nothing to draw, from the kernel's result word.
pub(crate) fn token_of(word: u32, n: usize) -> Result<TokenId> {
    if word == NO_TOKEN || word as usize >= n {
        return Err(Error::no_allowed_token(
            "no token is allowed at this step: the mask and logits leave nothing to sample",
        ));
    }
    Ok(word)
}

/// The CPU sampler's error for a mask that allows none of the `n` tokens (the kernel alone
/// could not tell it from allowed tokens that all have a -inf or NaN logit). A pass over
/// `n / 32` words: 1,536 for SmolLM2.
pub(crate) fn check_some_allowed(words: &[u32], n: usize) -> Result<()> {
    let full = n / 32;
    let tail = match n % 32 {
        0 => 0,
        bits => words[full] & ((1u32 << bits) - 1),
    };
    if tail == 0 && words[..full].iter().all(|&w| w == 0) {
        return Err(mask::no_allowed_token(n));
    }
    Ok(())
}

/// The buffers one sampling dispatch binds besides the logits.
#[derive(Debug)]
pub(crate) struct SampleBuffers {
    pub mask: wgpu::Buffer,
    pub keys: wgpu::Buffer,
    pub weights: wgpu::Buffer,
    pub params: wgpu::Buffer,
    pub result: wgpu::Buffer,
    pub readback: wgpu::Buffer,
}

impl Context {
    /// Scratch for sampling over `n` tokens, made once per session.
    pub(crate) fn sample_buffers(&self, n: usize) -> Result<SampleBuffers> {
        self.check_binding_size(&format!("sampling over {n} tokens"), "logits", n as u64 * 4)?;
        let copy_dst = wgpu::BufferUsages::COPY_DST;
        let zeros =
            |label: &str, bytes: usize, extra| self.storage_buffer(label, &vec![0; bytes], extra);
        Ok(SampleBuffers {
            mask: zeros("sample.mask", mask::words_for(n).max(1) * 4, copy_dst),
            keys: zeros("sample.keys", n * 4, wgpu::BufferUsages::empty()),
            weights: zeros("sample.weights", n * 4, wgpu::BufferUsages::empty()),
            params: self.params_buffer("sample.params", &[0; 8]),
            result: zeros("sample.result", 4, wgpu::BufferUsages::COPY_SRC),
            readback: self.readback_buffer("sample.readback", 4),
        })
    }

    /// The GPU twin of [`crate::sampling::Sampler::sample`] with the settings and draw of
    /// `sampling`: same token for the same logits, mask and draw (up to near-ties of the
    /// cumulative probability, see `shaders/sample.wgsl`). Uploads the logits and reads back
    /// 4 bytes (the decode loop keeps the logits on the GPU: [`super::Model::sample`]).
    pub async fn sample(
        &self,
        logits: &[f32],
        token_mask: Option<&[u32]>,
        sampling: &DeviceSampling,
    ) -> Result<TokenId> {
        self.ensure_alive()?;
        let n = logits.len();
        mask::check_vocab_size(n)?;
        if let Some(m) = token_mask {
            mask::check_mask_len(m.len(), n)?;
            check_some_allowed(m, n)?;
        }
        let scope = ErrorScope::push(&self.device);
        let buffers = self.sample_buffers(n)?;
        let logits_buffer = self.storage_buffer(
            "sample.logits",
            bytemuck::cast_slice(logits),
            wgpu::BufferUsages::empty(),
        );
        if let Some(m) = token_mask {
            self.queue
                .write_buffer(&buffers.mask, 0, bytemuck::cast_slice(m));
        }
        let params = sample_params(n, token_mask.is_some(), sampling);
        self.queue
            .write_buffer(&buffers.params, 0, bytemuck::cast_slice(&params));
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("sample"),
            });
        self.record_sample(&mut encoder, &logits_buffer, &buffers)
            .await?;
        self.submit(encoder.finish())?;
        scope.pop("sampling on the GPU").await?;
        let bytes = self.read_buffer(&buffers.readback).await?;
        token_of(
            u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            n,
        )
    }

    /// Records the sampling dispatch over `logits` (its params already written) and the
    /// copy of the 4-byte result into `buffers.readback`.
    pub(crate) async fn record_sample(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        logits: &wgpu::Buffer,
        b: &SampleBuffers,
    ) -> Result<()> {
        self.record_with_uniform(
            encoder,
            SAMPLE,
            &[logits, &b.mask, &b.keys, &b.weights],
            &b.params,
            &[&b.result],
            (1, 1, 1),
        )
        .await?;
        encoder.copy_buffer_to_buffer(&b.result, 0, &b.readback, 0, 4);
        Ok(())
    }
}
