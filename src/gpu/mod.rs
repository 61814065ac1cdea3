//! GPU kernels on wgpu: natively (Vulkan) and in the browser (WebGPU, via wasm32).
//!
//! Acquiring a device ([`Context::new`]) is separate from the work ([`Context::from_device`]),
//! so tests and embedders can inject their own adapter. Every fallible wgpu call runs inside an
//! error scope, so a validation error or an out-of-memory becomes an [`Error`], never a panic.
//! Each kernel is one file in `shaders/`; its pipeline is built once per [`Variant`] and cached
//! by name and variant.
//!
//! Every kernel has a core-WebGPU f32 path (SwiftShader has no `shader-f16`, browsers expose no
//! subgroups through wgpu 30). When the adapter has `shader-f16` or subgroups, the device is
//! opened with them ([`ContextOptions`] can decline either) and the kernels that have such a
//! variant use it. Subgroups: the same results within the same tolerances, fewer barriers.
//! `shader-f16`: the KV cache holds f16 ([`crate::model::KvPrecision::F16`], half the memory
//! and half of attention's reads); its CPU twin rounds the cache the same way, and the whole
//! model stays within a stated bound of the exact-f32 path (`tests/gpu_model.rs`).

#[cfg(test)]
mod kernel_tests;
mod mask;
mod matvec;
mod model;
mod ops;
mod sample;
mod variant;

pub use matvec::{repack, Matrix};
pub use model::{Counters, Model, Session, MAX_CHUNK};
pub use variant::Variant;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};

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

/// Which optional adapter features [`Context::with_options`] may open the device with. Each
/// is requested only when the adapter has it; turning one off runs the kernels without it on
/// the same adapter (the tests compare the variants so, the CLI reads `POOT_GPU_DISABLE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOptions {
    /// Request `shader-f16` (wgpu's `Features::SHADER_F16`) when the adapter has it.
    pub f16: bool,
    /// Request subgroup operations (wgpu's `Features::SUBGROUP`) when the adapter has them.
    pub subgroups: bool,
    /// Bind at most this many bytes per storage buffer, below the adapter's own limit (a
    /// larger value changes nothing): how the tests split SmolLM2's 31.9 MB embedding on an
    /// adapter whose limit would hold it whole. It holds wherever the limit is checked (the
    /// weights, split at it; the KV cache; the logits); the forward pass's activations are
    /// not split, and need the adapter to bind 64 x n_ff x 4 bytes (393 KB for SmolLM2).
    /// `None`: the adapter's limit.
    pub max_binding_bytes: Option<u64>,
}

impl Default for ContextOptions {
    /// Both features, where the adapter has them, and the adapter's binding limit.
    fn default() -> Self {
        ContextOptions {
            f16: true,
            subgroups: true,
            max_binding_bytes: None,
        }
    }
}

impl ContextOptions {
    /// Exactly the features of `variant`, where the adapter has them.
    pub fn only(variant: Variant) -> Self {
        ContextOptions {
            f16: variant.f16,
            subgroups: variant.subgroups,
            max_binding_bytes: None,
        }
    }

    /// Every option on, less the comma-separated names in `disabled` (`f16`, `subgroups`):
    /// the CLI's `POOT_GPU_DISABLE`. An unknown name is an error, so a typo is not silently
    /// a run of the variant it meant to avoid.
    pub fn without(disabled: &str) -> Result<Self> {
        let mut options = ContextOptions::default();
        for name in disabled.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "f16" => options.f16 = false,
                "subgroups" => options.subgroups = false,
                other => {
                    return Err(Error::invalid_input(format!(
                        "`{other}` is not a GPU feature that can be disabled (f16, subgroups)"
                    )))
                }
            }
        }
        Ok(options)
    }
}

/// A device, its queue and the compiled kernels.
#[derive(Debug)]
pub struct Context {
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter: AdapterSummary,
    /// What the device was opened with, so which source every kernel is built from.
    variant: Variant,
    max_binding_bytes: u64,
    apply_token_mask: mask::MaskKernel,
    /// Single-entry-point kernels by shader name and variant, built on first use.
    pipelines: Mutex<HashMap<(&'static str, Variant), wgpu::ComputePipeline>>,
    /// Why the device was lost, once wgpu reports it: every later submission is this error
    /// instead of work on a dead device (which wgpu reports as an uncaptured error, a panic).
    lost: Arc<OnceLock<String>>,
}

/// Bytes of weight matrices uploaded by this process so far, on every context: a server that
/// keeps its model across requests uploads them once (`poot serve`'s test checks it).
pub fn weight_bytes_uploaded() -> u64 {
    WEIGHT_BYTES_UPLOADED.load(Ordering::Relaxed)
}

static WEIGHT_BYTES_UPLOADED: AtomicU64 = AtomicU64::new(0);

/// A kernel: its shader file's name and source. The entry point is always `main`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kernel {
    pub name: &'static str,
    pub source: &'static str,
}

/// Every shader's source ([`Context::every_variant`] compares their variants).
const KERNEL_SOURCES: [&str; 10] = [
    mask::SOURCE,
    matvec::MATVEC.source,
    matvec::EMBEDDING.source,
    ops::RMS_NORM.source,
    ops::ROPE.source,
    ops::SILU_MUL.source,
    ops::ADD.source,
    ops::ATTENTION.source,
    ops::KV_STORE.source,
    sample::SAMPLE.source,
];

/// Declares a [`Kernel`] from `shaders/<name>.wgsl`.
macro_rules! kernel {
    ($name:literal) => {
        $crate::gpu::Kernel {
            name: $name,
            source: include_str!(concat!("../../shaders/", $name, ".wgsl")),
        }
    };
}
pub(crate) use kernel;

impl Context {
    /// [`Context::with_options`] with every optional feature the adapter has.
    pub async fn new() -> Result<Self> {
        Self::with_options(ContextOptions::default()).await
    }

    /// One context per variant this adapter can run whose kernels differ from the variants
    /// before it, the f32 one first: how the tests run each kernel every way on the same
    /// adapter (on lavapipe all four: f32, f16, subgroups, f16+subgroups).
    pub async fn every_variant() -> Result<Vec<Self>> {
        let mut contexts = Vec::new();
        let mut built: Vec<Vec<String>> = Vec::new();
        for v in Variant::ALL {
            let sources = KERNEL_SOURCES
                .iter()
                .map(|source| variant::specialize(source, v))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(Error::gpu)?;
            if built.contains(&sources) {
                continue;
            }
            let ctx = Self::with_options(ContextOptions::only(v)).await?;
            if ctx.variant() == v {
                built.push(sources);
                contexts.push(ctx);
            }
        }
        Ok(contexts)
    }

    /// Finds an adapter (Vulkan natively, the browser's WebGPU on wasm32) and opens a device
    /// with the adapter's own limits, so large vocabularies fit in one binding, and with the
    /// optional features `options` allows that the adapter has (never one it lacks: that
    /// would fail the device request).
    pub async fn with_options(options: ContextOptions) -> Result<Self> {
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
        let mut wanted = wgpu::Features::empty();
        wanted.set(wgpu::Features::SHADER_F16, options.f16);
        wanted.set(wgpu::Features::SUBGROUP, options.subgroups);
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("poot"),
                required_features: wanted & adapter.features(),
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
        let mut ctx = Self::from_device(device, queue, summary).await?;
        if let Some(cap) = options.max_binding_bytes {
            ctx.max_binding_bytes = ctx.max_binding_bytes.min(cap);
        }
        Ok(ctx)
    }

    /// Builds the kernels on a device the caller already has; they use the optional features
    /// the device was opened with.
    pub async fn from_device(
        device: wgpu::Device,
        queue: wgpu::Queue,
        adapter: AdapterSummary,
    ) -> Result<Self> {
        let features = device.features();
        let variant = Variant {
            f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
        };
        let mask_source = variant::specialize(mask::SOURCE, variant)
            .map_err(|e| Error::gpu(format!("apply_token_mask.wgsl: {e}")))?;
        let scope = ErrorScope::push(&device);
        let apply_token_mask = mask::MaskKernel::new(&device, mask_source);
        scope.pop("compiling apply_token_mask.wgsl").await?;
        let limits = device.limits();
        let max_binding_bytes = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        let lost = Arc::new(OnceLock::new());
        {
            let lost = lost.clone();
            device.set_device_lost_callback(move |reason, message| {
                let _ = lost.set(format!("{reason:?}: {message}"));
            });
        }
        Ok(Context {
            device,
            queue,
            adapter,
            variant,
            max_binding_bytes,
            apply_token_mask,
            pipelines: Mutex::new(HashMap::new()),
            lost,
        })
    }

    /// An error once the device is lost (driver reset, GPU removed, [`Context::destroy`]):
    /// the engine must be made again on a new context. Checked before each step's buffers
    /// and submissions; a loss in the middle of one step still reaches wgpu.
    pub fn ensure_alive(&self) -> Result<()> {
        match self.lost.get() {
            Some(why) => Err(Error::gpu(format!(
                "the GPU device was lost ({why}); load the model on a new GPU context"
            ))),
            None => Ok(()),
        }
    }

    /// Submits one command buffer, unless the device is lost ([`Context::ensure_alive`]).
    fn submit(&self, commands: wgpu::CommandBuffer) -> Result<()> {
        self.ensure_alive()?;
        self.queue.submit([commands]);
        Ok(())
    }

    /// Destroys the device, as a driver reset would lose it: for the tests of that path.
    pub fn destroy(&self) {
        self.device.destroy();
        // wgpu reports the loss from its next poll (natively; a browser's event loop does).
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::Poll);
    }

    /// The adapter this context runs on.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.adapter
    }

    /// The optional features the kernels use on this device.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// The kernel's pipeline for this device's variant, built on first use (with an auto
    /// layout: its bind groups are made from this pipeline's own layout).
    async fn pipeline(&self, kernel: Kernel) -> Result<wgpu::ComputePipeline> {
        let key = (kernel.name, self.variant);
        if let Some(pipeline) = self.lock_pipelines().get(&key) {
            return Ok(pipeline.clone());
        }
        let source = variant::specialize(kernel.source, self.variant)
            .map_err(|e| Error::gpu(format!("{}.wgsl: {e}", kernel.name)))?;
        let scope = ErrorScope::push(&self.device);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(kernel.name),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(kernel.name),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        scope
            .pop(&format!(
                "compiling {}.wgsl ({})",
                kernel.name,
                self.variant.name()
            ))
            .await?;
        self.lock_pipelines().insert(key, pipeline.clone());
        Ok(pipeline)
    }

    fn lock_pipelines(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(&'static str, Variant), wgpu::ComputePipeline>> {
        // A panic while holding the lock cannot leave the map half-written (insert is atomic
        // from our side), so a poisoned lock is still usable.
        self.pipelines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Refuses a buffer larger than one storage binding may be on this adapter.
    fn check_binding_size(&self, what: &str, param: &str, bytes: u64) -> Result<()> {
        if bytes > self.max_binding_bytes {
            return Err(Error::limit_exceeded(format!(
                "{what} needs {bytes} bytes, over this adapter's {}-byte storage binding limit",
                self.max_binding_bytes
            ))
            .with_param(param));
        }
        Ok(())
    }

    fn storage_buffer(
        &self,
        label: &str,
        contents: &[u8],
        extra: wgpu::BufferUsages,
    ) -> wgpu::Buffer {
        use wgpu::util::DeviceExt;
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE | extra,
            })
    }

    /// A uniform buffer holding `words`, rewritable with `queue.write_buffer` (the decode
    /// loop's per-step parameters change in place instead of in a new buffer).
    fn params_buffer(&self, label: &str, words: &[u32]) -> wgpu::Buffer {
        use wgpu::util::DeviceExt;
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(words),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            })
    }

    fn readback_buffer(&self, label: &str, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
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
            .map_err(|_| {
                self.ensure_alive().err().unwrap_or_else(|| {
                    Error::gpu("the GPU device was lost while reading back a buffer")
                })
            })?
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

fn entry(binding: u32, buffer: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: buffer.as_entire_binding(),
    }
}

/// Validation and out-of-memory scopes around a piece of GPU work.
struct ErrorScope {
    // Fields drop in declaration order and scopes must come off in reverse order of their
    // pushes: `validation` (pushed second) is declared first, so an early return that drops
    // the scope unpopped does not panic in wgpu.
    validation: wgpu::ErrorScopeGuard,
    out_of_memory: wgpu::ErrorScopeGuard,
}

impl ErrorScope {
    fn push(device: &wgpu::Device) -> Self {
        let out_of_memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        ErrorScope {
            validation: device.push_error_scope(wgpu::ErrorFilter::Validation),
            out_of_memory,
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
