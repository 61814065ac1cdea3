//! GPU kernels on wgpu: natively (Vulkan) and in the browser (WebGPU, via wasm32).
//!
//! Acquiring a device ([`Context::new`]) is separate from the work ([`Context::from_device`]),
//! so tests and embedders can inject their own adapter. Every fallible wgpu call runs inside an
//! error scope, so a validation error or an out-of-memory becomes an [`Error`], never a panic.

use crate::error::{Error, Result};
use crate::mask;

/// `shaders/apply_token_mask.wgsl`, validated offline by naga in `tests/shaders.rs`.
const APPLY_TOKEN_MASK_WGSL: &str = include_str!("../../shaders/apply_token_mask.wgsl");
/// Logits per pass-1 workgroup; must equal `CHUNK` in the shader.
const MASK_CHUNK: usize = 1024;
/// The kernel's "no token allowed" index; must equal `NONE` in the shader.
const NO_TOKEN: u32 = u32::MAX;

/// What the page and the CLI show about the adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    /// The adapter's name (`GPUAdapterInfo.description` in a browser).
    pub name: String,
    /// The API behind it: `vulkan`, `webgpu`, ...
    pub backend: String,
    /// A software or fallback adapter (lavapipe, SwiftShader): correct but slow.
    pub is_software: bool,
}

/// A device, its queue and the compiled kernels.
#[derive(Debug)]
pub struct Context {
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter: AdapterSummary,
    max_binding_bytes: u64,
    apply_token_mask: MaskKernel,
}

#[derive(Debug)]
struct MaskKernel {
    layout: wgpu::BindGroupLayout,
    mask_partials: wgpu::ComputePipeline,
    reduce_partials: wgpu::ComputePipeline,
}

impl Context {
    /// Finds an adapter (Vulkan natively, the browser's WebGPU on wasm32) and opens a device
    /// with the adapter's own limits, so large vocabularies fit in one binding.
    pub async fn new() -> Result<Self> {
        let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
        descriptor.backends = if cfg!(target_arch = "wasm32") {
            wgpu::Backends::BROWSER_WEBGPU
        } else {
            wgpu::Backends::VULKAN
        };
        let instance = wgpu::Instance::new(descriptor);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                Error::gpu(format!(
                    "no GPU adapter found ({e}); natively install a Vulkan driver \
                     (mesa-vulkan-drivers provides the lavapipe software adapter), \
                     in a browser enable WebGPU"
                ))
                .with_source(e)
            })?;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("poot"),
                required_limits: adapter.limits(),
                ..Default::default()
            })
            .await
            .map_err(|e| {
                Error::gpu(format!("could not open the GPU device: {e}")).with_source(e)
            })?;
        let info = adapter.get_info();
        let summary = AdapterSummary {
            name: info.name.clone(),
            backend: info.backend.to_string(),
            is_software: info.device_type == wgpu::DeviceType::Cpu,
        };
        Self::from_device(device, queue, summary).await
    }

    /// Builds the kernels on a device the caller already has.
    pub async fn from_device(
        device: wgpu::Device,
        queue: wgpu::Queue,
        adapter: AdapterSummary,
    ) -> Result<Self> {
        let scope = ErrorScope::push(&device);
        let apply_token_mask = MaskKernel::new(&device);
        scope.pop("compiling apply_token_mask.wgsl").await?;
        let limits = device.limits();
        let max_binding_bytes = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        Ok(Context {
            device,
            queue,
            adapter,
            max_binding_bytes,
            apply_token_mask,
        })
    }

    /// The adapter this context runs on.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.adapter
    }

    /// The GPU twin of [`mask::apply_token_mask`]: same arguments, same results, same errors.
    ///
    /// Uploads the logits and mask, runs the kernel, and reads back the masked logits and
    /// the index (the decode loop of a later stage keeps the logits on the GPU instead).
    pub async fn apply_token_mask(&self, logits: &mut [f32], mask: &[u32]) -> Result<u32> {
        let n = logits.len();
        // The shared checks, so the GPU path refuses exactly what the CPU twin refuses.
        mask::check_mask_len(mask.len(), n)?;
        mask::check_vocab_size(n)?;
        let logit_bytes = (n * 4) as u64;
        if logit_bytes > self.max_binding_bytes {
            return Err(Error::limit_exceeded(format!(
                "{n} logits need {logit_bytes} bytes, over this adapter's \
                 {}-byte storage binding limit",
                self.max_binding_bytes
            ))
            .with_param("logits"));
        }
        let partial_count = n.div_ceil(MASK_CHUNK);
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension as usize;
        if partial_count > max_groups {
            return Err(Error::limit_exceeded(format!(
                "{n} logits need {partial_count} workgroups, over this adapter's limit of \
                 {max_groups} per dispatch ({} logits)",
                max_groups * MASK_CHUNK
            ))
            .with_param("logits"));
        }

        let scope = ErrorScope::push(&self.device);
        let readback = self.run_mask_kernel(logits, mask, partial_count as u32);
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
    fn run_mask_kernel(&self, logits: &[f32], mask: &[u32], partial_count: u32) -> wgpu::Buffer {
        use wgpu::util::DeviceExt;
        let device = &self.device;
        let storage = wgpu::BufferUsages::STORAGE;
        let logits_buffer = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("apply_token_mask.logits"),
            contents: bytemuck::cast_slice(logits),
            usage: storage | wgpu::BufferUsages::COPY_SRC,
        });
        let mask_buffer = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("apply_token_mask.mask"),
            contents: bytemuck::cast_slice(mask),
            usage: storage,
        });
        let partials = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("apply_token_mask.partials"),
            size: u64::from(partial_count) * 8,
            usage: storage,
            mapped_at_creation: false,
        });
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("apply_token_mask.params"),
            contents: bytemuck::cast_slice(&[logits.len() as u32, partial_count]),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let result = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("apply_token_mask.result"),
            size: 4,
            usage: storage | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let logit_bytes = (logits.len() * 4) as u64;
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("apply_token_mask.readback"),
            size: logit_bytes + 4,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let kernel = &self.apply_token_mask;
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
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
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
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
        self.queue.submit([encoder.finish()]);
        readback
    }

    /// Maps a `MAP_READ` buffer and copies its bytes out.
    async fn read_buffer(&self, buffer: &wgpu::Buffer) -> Result<Vec<u8>> {
        let (sender, receiver) = futures_channel::oneshot::channel();
        buffer.map_async(wgpu::MapMode::Read, .., move |mapped| {
            // The receiver only goes away if this future was dropped; nothing to tell then.
            let _ = sender.send(mapped);
        });
        // Natively the callback runs inside poll; in a browser the event loop runs it.
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::gpu(format!("waiting for the GPU failed: {e}")).with_source(e))?;
        receiver
            .await
            .map_err(|_| Error::gpu("the GPU device was lost while reading back a buffer"))?
            .map_err(|e| {
                Error::gpu(format!("reading back a GPU buffer failed: {e}")).with_source(e)
            })?;
        let bytes = buffer
            .get_mapped_range(..)
            .map_err(|e| Error::gpu(format!("reading back a GPU buffer failed: {e}")))?
            .to_vec();
        buffer.unmap();
        Ok(bytes)
    }
}

impl MaskKernel {
    fn new(device: &wgpu::Device) -> Self {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("apply_token_mask.wgsl"),
            source: wgpu::ShaderSource::Wgsl(APPLY_TOKEN_MASK_WGSL.into()),
        });
        let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("apply_token_mask.layout"),
            entries: &[
                storage(0, false),
                storage(1, true),
                storage(2, false),
                wgpu::BindGroupLayoutEntry {
                    binding: 3,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
                storage(4, false),
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

fn entry(binding: u32, buffer: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: buffer.as_entire_binding(),
    }
}

/// Validation and out-of-memory scopes around a piece of GPU work.
struct ErrorScope {
    out_of_memory: wgpu::ErrorScopeGuard,
    validation: wgpu::ErrorScopeGuard,
}

impl ErrorScope {
    fn push(device: &wgpu::Device) -> Self {
        ErrorScope {
            out_of_memory: device.push_error_scope(wgpu::ErrorFilter::OutOfMemory),
            validation: device.push_error_scope(wgpu::ErrorFilter::Validation),
        }
    }

    async fn pop(self, doing: &str) -> Result<()> {
        // Scopes are a stack: the inner (validation) one comes off first.
        let validation = self.validation.pop().await;
        let out_of_memory = self.out_of_memory.pop().await;
        match (validation, out_of_memory) {
            (Some(e), _) => Err(Error::gpu(format!(
                "GPU validation error while {doing}: {e}"
            ))),
            (None, Some(e)) => Err(Error::gpu(format!("GPU out of memory while {doing}: {e}"))),
            (None, None) => Ok(()),
        }
    }
}
