//! A model whose matrices exceed the adapter's storage binding limit is uploaded in row
//! chunks and runs; one whose single rows exceed it is refused whole, before any buffer is
//! made, with an error naming the tensor, its size and the adapter's limit (the in-page
//! engine shows it as the reason it stayed on the CPU): on lavapipe devices whose storage
//! binding limit is lowered, and for weights with no GPU kernel.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

use std::sync::Arc;

use poot::gpu::{AdapterSummary, Context, ContextOptions, Model as GpuModel};
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
fn a_model_whose_rows_exceed_a_binding_is_refused_before_upload() {
    let file = TinySpec::default().build(); // Q8_0, 265 tokens x 64: 72-byte rows
    let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    let expected = "the model is too large for this GPU adapter: tensor `token_embd.weight` \
                    (265x64 Q8_0): one row needs 72 bytes, over this adapter's limit of 64 \
                    bytes for one buffer (maxStorageBufferBindingSize / maxBufferSize)";
    let device_limited = context_with_binding_limit(64);
    let options = ContextOptions {
        max_binding_bytes: Some(64),
        ..ContextOptions::default()
    };
    let capped = Arc::new(pollster::block_on(Context::with_options(options)).unwrap());
    for ctx in [device_limited, capped] {
        let err = GpuModel::check_fits(&ctx, &cpu).unwrap_err();
        assert_eq!(err.to_string(), expected);
        assert_eq!(err.code(), "limit_exceeded");
        assert_eq!(err.param(), Some("model"));
        let err = GpuModel::upload(Arc::clone(&ctx), &cpu).unwrap_err();
        assert_eq!(err.to_string(), expected);
        let err = pollster::block_on(GpuModel::upload_scoped(Arc::clone(&ctx), &cpu)).unwrap_err();
        assert_eq!(err.to_string(), expected);
        // A matrix uploaded on its own says which one.
        let err = ctx
            .upload_matrix("wide", QuantType::F32, 2, 17, &[0; 2 * 17 * 4])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "weight matrix `wide`: one row needs 68 bytes, over this adapter's limit of 64 \
             bytes for one buffer (maxStorageBufferBindingSize / maxBufferSize)"
        );
        assert_eq!(err.param(), Some("weights"));
    }
}

#[test]
fn a_model_larger_than_a_binding_is_split_and_gives_the_unsplit_logits() {
    let spec = TinySpec {
        weight_type: QuantType::F32,
        ..TinySpec::default()
    };
    let file = spec.build(); // 265 tokens x 64 F32: 67,840 bytes
    let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    let mut logits = Vec::new();
    // The device's own limit, not a cap: any binding over it is a validation error, so this
    // also checks that no chunk exceeds it (156 rows of 256 bytes, then 109) and that no
    // activation does: at 8,000 bytes a 64-token chunk's FFN activations (64 x 128 x 4 =
    // 32,768 bytes) would not bind, and prefill takes 12 tokens a submission (a token's
    // attention scores over 40 positions are the widest, 4 heads x 40 x 4 = 640 bytes).
    let prompt: Vec<u32> = (0..20).map(|i| 3 + i * 13).collect();
    for limit in [1 << 20, 40_000, 8_000] {
        let ctx = context_with_binding_limit(limit);
        let gpu = pollster::block_on(GpuModel::upload_scoped(ctx, &cpu)).unwrap();
        let mut session = gpu.session(40).unwrap();
        assert_eq!(session.capacity(), 40);
        let l = pollster::block_on(gpu.forward(&mut session, &prompt)).unwrap();
        assert_eq!(l.len(), cpu.config().n_vocab);
        logits.push(l);
    }
    for (limit, l) in [40_000, 8_000].iter().zip(&logits[1..]) {
        let same = logits[0]
            .iter()
            .zip(l)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same,
            "logits split for a {limit}-byte limit differ from unsplit"
        );
    }
}

#[test]
fn a_session_whose_activations_exceed_a_binding_is_refused_by_name() {
    let file = TinySpec::default().build(); // Q8_0 rows of 72 bytes, n_ff 128
    let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    let options = ContextOptions {
        max_binding_bytes: Some(300),
        ..ContextOptions::default()
    };
    let ctx = Arc::new(pollster::block_on(Context::with_options(options)).unwrap());
    let gpu = GpuModel::upload(ctx, &cpu).unwrap();
    let err = gpu.session(2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "one token's feed-forward activations needs 512 bytes, over this adapter's 300-byte \
         storage binding limit"
    );
    assert_eq!(err.param(), Some("model"));
}

#[test]
fn weights_without_a_gpu_kernel_are_refused_by_name() {
    let spec = TinySpec {
        weight_type: QuantType::BF16,
        ..TinySpec::default()
    };
    let file = spec.build();
    let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    let ctx = context_with_binding_limit(1 << 20);
    let err = GpuModel::check_fits(&ctx, &cpu).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the model cannot run on the GPU: tensor `token_embd.weight`: BF16 weights have no GPU \
         kernel yet (supported: F32, F16 and every block type)"
    );
    assert_eq!(err.param(), Some("model"));
}

#[test]
fn a_lost_device_makes_every_later_step_a_clear_error() {
    let file = TinySpec::default().build();
    let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    let ctx = Arc::new(pollster::block_on(Context::new()).unwrap());
    let gpu = pollster::block_on(GpuModel::upload_scoped(ctx.clone(), &cpu)).unwrap();
    let mut session = gpu.session(8).unwrap();
    pollster::block_on(gpu.forward(&mut session, &[3, 4])).unwrap();
    ctx.ensure_alive().unwrap();
    ctx.destroy();
    let lost = |e: poot::Error| {
        assert!(
            e.message().starts_with("the GPU device was lost"),
            "{}",
            e.message()
        );
    };
    lost(ctx.ensure_alive().unwrap_err());
    lost(pollster::block_on(gpu.forward(&mut session, &[5])).unwrap_err());
    let Err(e) = gpu.session(8) else {
        panic!("no session on a lost device")
    };
    lost(e);
    let Err(e) = pollster::block_on(GpuModel::upload_scoped(ctx, &cpu)) else {
        panic!("no upload on a lost device")
    };
    lost(e);
}
