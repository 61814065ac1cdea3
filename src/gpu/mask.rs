//! `shaders/apply_token_mask.wgsl`: the GPU twin of [`crate::mask::apply_token_mask`].

use super::{entry, Context, ErrorScope};
use crate::error::{Error, Result};
use crate::mask;

/// `shaders/apply_token_mask.wgsl`, validated offline by naga in `tests/shaders.rs`.
pub(super) const SOURCE: &str = include_str!("../../shaders/apply_token_mask.wgsl");
/// Logits per pass-1 workgroup; must equal `CHUNK` in the shader.
const CHUNK: usize = 1024;
/// The kernel's "no token allowed" index; must equal `NONE` in the shader.
const NO_TOKEN: u32 = u32::MAX;

/// Two entry points sharing one bind group, so the layout is explicit (an auto layout is
/// private to one pipeline).
#[derive(Debug)]
pub(super) struct MaskKernel {
    layout: wgpu::BindGroupLayout,
    mask_partials: wgpu::ComputePipeline,
    reduce_partials: wgpu::ComputePipeline,
}

impl MaskKernel {
    /// Built from `source`, the shader specialized for the device's variant.
    pub(super) fn new(device: &wgpu::Device, source: String) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("apply_token_mask.wgsl"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let buffer = |binding, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let storage = |read_only| wgpu::BufferBindingType::Storage { read_only };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("apply_token_mask.layout"),
            entries: &[
                buffer(0, storage(false)),
                buffer(1, storage(true)),
                buffer(2, storage(false)),
                buffer(3, wgpu::BufferBindingType::Uniform),
                buffer(4, storage(false)),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("apply_token_mask.pipeline_layout"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = |entry_point: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry_point),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(entry_point),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        MaskKernel {
            mask_partials: pipeline("mask_partials"),
            reduce_partials: pipeline("reduce_partials"),
            layout,
        }
    }
}

impl Context {
    /// The GPU twin of [`mask::apply_token_mask`]: same arguments, same results, same errors.
    ///
    /// Uploads the logits and mask, runs the kernel, and reads back the masked logits and
    /// the index (the decode loop keeps the logits on the GPU instead).
    pub async fn apply_token_mask(&self, logits: &mut [f32], mask: &[u32]) -> Result<u32> {
        self.ensure_alive()?;
        let n = logits.len();
        // The shared checks, so the GPU path refuses exactly what the CPU twin refuses.
        mask::check_mask_len(mask.len(), n)?;
        mask::check_vocab_size(n)?;
        let logit_bytes = (n * 4) as u64;
        self.check_binding_size(&format!("{n} logits"), "logits", logit_bytes)?;
        let partial_count = n.div_ceil(CHUNK);
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension as usize;
        if partial_count > max_groups {
            return Err(Error::limit_exceeded(format!(
                "{n} logits need {partial_count} workgroups, over this adapter's limit of \
                 {max_groups} per dispatch ({} logits)",
                max_groups * CHUNK
            ))
            .with_param("logits"));
        }

        let scope = ErrorScope::push(&self.device);
        let readback = self.run_mask_kernel(logits, mask, partial_count as u32)?;
        scope.pop("running apply_token_mask").await?;
        let bytes = self.read_buffer(&readback).await?;
        let (masked, index) = bytes.split_at(logit_bytes as usize);
        logits.copy_from_slice(bytemuck::cast_slice(masked));
        let index = u32::from_le_bytes([index[0], index[1], index[2], index[3]]);
        if index == NO_TOKEN {
            return Err(mask::no_allowed_token(n));
        }
        Ok(index)
    }

    /// Records and submits both passes; returns a mappable buffer holding the masked logits
    /// followed by the 4-byte result.
    fn run_mask_kernel(
        &self,
        logits: &[f32],
        mask: &[u32],
        partial_count: u32,
    ) -> Result<wgpu::Buffer> {
        let copy_src = wgpu::BufferUsages::COPY_SRC;
        let none = wgpu::BufferUsages::empty();
        let logits_buffer = self.storage_buffer(
            "apply_token_mask.logits",
            bytemuck::cast_slice(logits),
            copy_src,
        );
        let mask_buffer =
            self.storage_buffer("apply_token_mask.mask", bytemuck::cast_slice(mask), none);
        let partials = self.storage_buffer(
            "apply_token_mask.partials",
            &vec![0; partial_count as usize * 8],
            none,
        );
        let params = self.params_buffer(
            "apply_token_mask.params",
            &[logits.len() as u32, partial_count],
        );
        let result = self.storage_buffer("apply_token_mask.result", &[0; 4], copy_src);
        let logit_bytes = (logits.len() * 4) as u64;
        let readback = self.readback_buffer("apply_token_mask.readback", logit_bytes + 4);
        let kernel = &self.apply_token_mask;
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("apply_token_mask.bindings"),
            layout: &kernel.layout,
            entries: &[
                entry(0, &logits_buffer),
                entry(1, &mask_buffer),
                entry(2, &partials),
                entry(3, &params),
                entry(4, &result),
            ],
        });
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("apply_token_mask"),
            });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("apply_token_mask"),
                timestamp_writes: None,
            });
            pass.set_bind_group(0, &bind_group, &[]);
            pass.set_pipeline(&kernel.mask_partials);
            pass.dispatch_workgroups(partial_count, 1, 1);
            pass.set_pipeline(&kernel.reduce_partials);
            pass.dispatch_workgroups(1, 1, 1);
        }
        encoder.copy_buffer_to_buffer(&logits_buffer, 0, &readback, 0, logit_bytes);
        encoder.copy_buffer_to_buffer(&result, 0, &readback, logit_bytes, 4);
        self.submit(encoder.finish())?;
        Ok(readback)
    }
}
