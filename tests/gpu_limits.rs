//! A model the GPU cannot hold is refused whole, before any buffer is made, with an error
//! naming the tensor, its size and the adapter's limit (the in-page engine shows it as the
//! reason it stayed on the CPU): on a lavapipe device whose storage binding limit is lowered
//! below the tiny synthetic model's token embedding, and for weights with no GPU kernel.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

use std::sync::Arc;

use poot::gpu::{AdapterSummary, Context, Model as GpuModel};
use poot::model::synthetic::TinySpec;
use poot::model::Model;
use poot::quant::QuantType;

/// A context on a device whose storage bindings hold at most `max_binding` bytes.
fn context_with_binding_limit(max_binding: u32) -> Arc<Context> {
    pollster::block_on(async {
        let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
        descriptor.backends = wgpu::Backends::VULKAN;
        let instance = wgpu::Instance::new(descriptor);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions::default())
            .await
            .unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}"));
        let mut limits = adapter.limits();
        limits.max_storage_buffer_binding_size = max_binding.into();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("poot limits test"),
                required_limits: limits,
                ..Default::default()
            })
            .await
            .expect("a device with a lower limit");
        let summary = AdapterSummary {
            name: adapter.get_info().name,
            backend: "vulkan".into(),
            is_software: true,
        };
        Arc::new(Context::from_device(device, queue, summary).await.unwrap())
    })
}

#[test]
fn a_model_larger_than_a_binding_is_refused_before_upload() {
    let file = TinySpec::default().build(); // Q8_0, 265 tokens x 64
    let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    let ctx = context_with_binding_limit(16 * 1024);
    let expected = "the model is too large for this GPU adapter: tensor `token_embd.weight` \
                    (265x64 Q8_0) needs 19080 bytes in one buffer, over the adapter's limit of \
                    16384 bytes (maxStorageBufferBindingSize / maxBufferSize)";
    let err = GpuModel::check_fits(&ctx, &cpu).unwrap_err();
    assert_eq!(err.to_string(), expected);
    assert_eq!(err.code(), "limit_exceeded");
    assert_eq!(err.param(), Some("model"));
    let err = GpuModel::upload(Arc::clone(&ctx), &cpu).unwrap_err();
    assert_eq!(err.to_string(), expected);
    let err = pollster::block_on(GpuModel::upload_scoped(Arc::clone(&ctx), &cpu)).unwrap_err();
    assert_eq!(err.to_string(), expected);

    // With room for it, the same model uploads and runs.
    let roomy = context_with_binding_limit(1 << 20);
    let gpu = pollster::block_on(GpuModel::upload_scoped(roomy, &cpu)).unwrap();
    let mut session = gpu.session(8).unwrap();
    assert_eq!(session.capacity(), 8);
    let logits = pollster::block_on(gpu.forward(&mut session, &[3, 4, 5])).unwrap();
    assert_eq!(logits.len(), cpu.config().n_vocab);
}

#[test]
fn weights_without_a_gpu_kernel_are_refused_by_name() {
    let spec = TinySpec {
        weight_type: QuantType::Q4_K,
        ..TinySpec::default()
    };
    let file = spec.build();
    let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    let ctx = context_with_binding_limit(1 << 20);
    let err = GpuModel::check_fits(&ctx, &cpu).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the model cannot run on the GPU: tensor `token_embd.weight`: Q4_K weights have no GPU \
         kernel yet (supported: F32, F16, Q8_0, Q4_0, Q4_1)"
    );
    assert_eq!(err.param(), Some("model"));
}
