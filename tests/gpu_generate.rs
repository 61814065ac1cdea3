//! Generation through the OpenAI surface (`poot::api::Run`) on the GPU backend, sampling on
//! the GPU (`poot::gpu::Model::sample`, 4 bytes read back a step), against the same requests
//! on the CPU backend: the synthetic tiny model (byte-level vocabulary, ChatML template), so
//! each request is a few dozen steps on lavapipe. Constrained outputs must validate, and
//! every request must give the CPU's text: the GPU's logits differ from the CPU's by ~1e-6
//! of their scale (tests/gpu_model.rs) and the sampler is the CPU's twin (tests/gpu_sample.rs).
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

use std::sync::Arc;

use poot::api::{Endpoint, Engine, Run, RunOptions};
use poot::gguf::Gguf;
use poot::gpu::{Context, Model as GpuModel, Session};
use poot::model::synthetic::TinySpec;
use poot::model::{Backend, CpuBackend, Model, StepSource};
use poot::vocab::TokenId;
use serde_json::{json, Value};

/// The GPU model as a synchronous backend that samples on the GPU (as `poot generate
/// --backend gpu` does), counting the steps that did.
struct GpuBackend {
    model: GpuModel,
    session: Session,
    device_steps: usize,
    logit_steps: usize,
}

impl Backend for GpuBackend {
    fn n_vocab(&self) -> usize {
        self.model.config().n_vocab
    }

    fn forward(&mut self, tokens: &[TokenId]) -> poot::Result<Vec<f32>> {
        self.logit_steps += 1;
        pollster::block_on(self.model.forward(&mut self.session, tokens))
    }

    fn truncate(&mut self, len: usize) {
        self.session.truncate(len);
    }

    fn samples_on_device(&self) -> bool {
        true
    }

    fn forward_sample(
        &mut self,
        tokens: &[TokenId],
        source: &mut dyn StepSource,
    ) -> poot::Result<TokenId> {
        self.device_steps += 1;
        if !source.masks() {
            let step = source.device_step()?;
            return pollster::block_on(self.model.forward_sample(
                &mut self.session,
                tokens,
                step.mask,
                step.n_vocab,
                &step.sampling,
            ));
        }
        pollster::block_on(self.model.submit_forward(&mut self.session, tokens))?;
        let step = source.device_step()?;
        pollster::block_on(self.model.sample(
            &mut self.session,
            step.mask,
            step.n_vocab,
            &step.sampling,
        ))
    }
}

/// Whether a request's output is valid.
type Validator = Box<dyn Fn(&str) -> bool>;

fn run(file: &[u8], body: &Value, backend: &mut dyn Backend) -> Value {
    let engine = Arc::new(Engine::from_gguf(&Gguf::parse(file).unwrap()).unwrap());
    let opts = RunOptions {
        id: "chatcmpl-test".into(),
        created: 1,
        default_seed: 7,
        clock: None,
    };
    let mut run = Run::new(engine, body, Endpoint::Chat, opts).unwrap();
    backend.truncate(0);
    run.drive(backend, &mut |_| true).unwrap();
    run.response()
}

fn content(response: &Value) -> String {
    response["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[test]
fn generate_on_the_gpu_gives_the_cpus_outputs_and_constrained_ones_validate() {
    let file = TinySpec {
        context_length: 512,
        ..TinySpec::default()
    }
    .build();
    let mut cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    // The GPU's twin: f32 activations in every product.
    cpu.set_exact(true);
    let ctx = Arc::new(
        pollster::block_on(Context::new())
            .unwrap_or_else(|e| panic!("GPU tests need an adapter: {e}")),
    );
    let gpu = GpuModel::upload(ctx, &cpu).unwrap();
    let mut gpu_backend = GpuBackend {
        session: gpu.session(512).unwrap(),
        model: gpu,
        device_steps: 0,
        logit_steps: 0,
    };
    // The CPU twin of the GPU session: its KV cache rounded to f16 where the device's is
    // (`shader-f16`), so even sampled outputs must be the same.
    let precision = gpu_backend.session.kv_precision();
    let mut cpu_backend = CpuBackend {
        model: &cpu,
        session: cpu.session_with(512, precision).unwrap(),
    };
    let schema = json!({
        "type": "object",
        "properties": {"c": {"enum": ["x", "yz"]}, "ok": {"type": "boolean"}},
        "required": ["c", "ok"],
        "additionalProperties": false
    });
    let base = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 24});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let date = regex::Regex::new(r"^\d{4}-\d{2}-\d{2}$").unwrap();
    let cases: Vec<(Value, Validator)> = vec![
        (base(json!({"temperature": 0})), Box::new(|_| true)),
        (
            base(json!({"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 3})),
            Box::new(|_| true),
        ),
        (
            base(json!({"temperature": 1.2, "min_p": 0.05, "seed": 4})),
            Box::new(|_| true),
        ),
        (
            base(json!({"guided_regex": r"\d{4}-\d{2}-\d{2}", "temperature": 0.7, "seed": 5})),
            Box::new(move |s| date.is_match(s)),
        ),
        (
            base(json!({"guided_choice": ["red", "green", "blue"], "seed": 6})),
            Box::new(|s| ["red", "green", "blue"].contains(&s)),
        ),
        (
            base(json!({"guided_json": schema, "max_tokens": 60, "temperature": 0.9, "seed": 8})),
            Box::new(|s| {
                let v: Value = serde_json::from_str(s).unwrap_or(Value::Null);
                (v["c"] == "x" || v["c"] == "yz")
                    && v["ok"].is_boolean()
                    && v.as_object().is_some_and(|o| o.len() == 2)
            }),
        ),
        // max_tokens far below what random weights write into a free string: the device
        // samples, and the run steers onto a shortest close in time (finish "length").
        (
            base(
                json!({"guided_json": {"type": "object", "properties": {"s": {"type": "string"}},
                "required": ["s"], "additionalProperties": false},
                "max_tokens": 9, "temperature": 0.9, "seed": 10}),
            ),
            Box::new(|s| {
                let v: Value = serde_json::from_str(s).unwrap_or(Value::Null);
                v["s"].is_string() && v.as_object().is_some_and(|o| o.len() == 1)
            }),
        ),
    ];
    for (body, valid) in &cases {
        let (before_device, before_logits) = (gpu_backend.device_steps, gpu_backend.logit_steps);
        let on_gpu = run(&file, body, &mut gpu_backend);
        let on_cpu = run(&file, body, &mut cpu_backend);
        let text = content(&on_gpu);
        eprintln!("{body}: {text:?}");
        assert_eq!(text, content(&on_cpu), "{body}: GPU and CPU outputs differ");
        assert_eq!(on_gpu["usage"], on_cpu["usage"], "{body}");
        let finish = &on_gpu["choices"][0]["finish_reason"];
        if body.get("guided_regex").is_some()
            || body.get("guided_choice").is_some()
            || body.get("guided_json").is_some()
        {
            // Complete either way: by itself ("stop"), or closed as max_tokens neared.
            let closed = on_gpu["usage"]["forced_closes"] == 1;
            assert!(
                finish == "stop" || (finish == "length" && closed),
                "{body}: the constrained output did not complete ({finish})"
            );
            assert_eq!(
                closed,
                body["max_tokens"] == 9,
                "{body}: {}",
                on_gpu["usage"]
            );
        }
        assert!(valid(&text), "{body}: {text:?} does not validate");
        assert!(
            gpu_backend.device_steps > before_device,
            "{body}: never sampled on the GPU"
        );
        assert_eq!(
            gpu_backend.logit_steps, before_logits,
            "{body}: read logits back"
        );
    }
    // Penalties need the logits on the CPU: the same run reads them back instead.
    let body = base(json!({"temperature": 0.8, "presence_penalty": 1.0, "seed": 9}));
    let before = gpu_backend.logit_steps;
    let on_gpu = run(&file, &body, &mut gpu_backend);
    assert_eq!(
        content(&on_gpu),
        content(&run(&file, &body, &mut cpu_backend))
    );
    assert!(
        gpu_backend.logit_steps > before,
        "penalties must read the logits back"
    );
}

#[test]
fn a_decode_step_that_samples_on_the_gpu_reads_back_4_bytes() {
    let file = TinySpec::default().build();
    let cpu = Model::from_gguf_bytes(&file[..]).unwrap();
    let ctx = Arc::new(pollster::block_on(Context::new()).unwrap());
    let gpu = GpuModel::upload(ctx, &cpu).unwrap();
    let mut session = gpu.session(64).unwrap();
    let n = gpu.config().n_vocab;
    let greedy = poot::sampling::Sampler::new(poot::sampling::Params::greedy())
        .unwrap()
        .device_step()
        .unwrap();
    pollster::block_on(gpu.submit_forward(&mut session, &[1, 2, 3])).unwrap();
    let mut token = pollster::block_on(gpu.sample(&mut session, None, n, &greedy)).unwrap();
    let start = session.counters();
    for _ in 0..5 {
        pollster::block_on(gpu.submit_forward(&mut session, &[token])).unwrap();
        token = pollster::block_on(gpu.sample(&mut session, None, n, &greedy)).unwrap();
    }
    let end = session.counters();
    assert_eq!(end.bytes_read_back - start.bytes_read_back, 5 * 4);
    assert_eq!(end.submissions - start.submissions, 5 * 2);
    // Unconstrained, the forward pass and the sampling go in one submission.
    let fused = session.counters();
    for _ in 0..3 {
        token = pollster::block_on(gpu.forward_sample(&mut session, &[token], None, n, &greedy))
            .unwrap();
    }
    let after = session.counters();
    assert_eq!(after.submissions - fused.submissions, 3);
    assert_eq!(after.bytes_read_back - fused.bytes_read_back, 3 * 4);
    assert_eq!(end.tokens - start.tokens, 5);
    let _ = token;
    // The decode plan was built once, for the first decode step; the prompt had its own.
    assert_eq!(end.plans_built, 2);
    // Per layer 16 dispatches, plus the embedding, the final norm, the logits and sampling.
    let per_step = (end.dispatches - start.dispatches) / 5;
    assert_eq!(per_step, 16 * cpu.config().n_layer as u64 + 4);
    // The greedy tokens are the CPU's.
    let mut gpu_session = gpu.session(64).unwrap();
    let mut cpu_session = cpu.session_with(64, gpu_session.kv_precision()).unwrap();
    let mut logits = cpu.forward(&mut cpu_session, &[1, 2, 3]).unwrap();
    pollster::block_on(gpu.submit_forward(&mut gpu_session, &[1, 2, 3])).unwrap();
    for step in 0..6 {
        let want = poot::sampling::argmax(&logits);
        let got = pollster::block_on(gpu.sample(&mut gpu_session, None, n, &greedy)).unwrap();
        assert_eq!(got, want, "step {step}");
        logits = cpu.forward(&mut cpu_session, &[want]).unwrap();
        pollster::block_on(gpu.submit_forward(&mut gpu_session, &[got])).unwrap();
    }
}
