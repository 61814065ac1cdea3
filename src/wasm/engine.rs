//! The in-page engine: a GGUF model on WebGPU or the wasm CPU path behind the OpenAI surface
//! ([`crate::api`]). The TypeScript layer (`pkg/src/engine.ts`) queues requests and drives
//! one [`EngineRun`] at a time:
//!
//! ```js
//! const bytes = new ModelBytes(file.size);               // one copy into wasm memory,
//! for (const chunk of chunks) bytes.append(chunk);       // chunk by chunk
//! const engine = LocalEngine.parse(bytes);               // consumes `bytes`; CPU backend
//! await engine.selectBackend("auto");                    // WebGPU if it can, else says why
//! const run = engine.start(JSON.stringify(body), "chat", id, created, seed); // 400s here
//! while (!run.done) for (const chunk of JSON.parse(await engine.step(run))) send(chunk);
//! const response = JSON.parse(run.response());
//! run.free();
//! ```
//!
//! The core has no clock or entropy: the response id, `created` and the default seed come
//! from JavaScript. State shared with a pending promise lives in `Rc<RefCell<..>>`
//! (wasm-bindgen futures must be `'static`), and no borrow is held across an `await`: a GPU
//! step takes the session out of the engine while the GPU works, so `cancel` and the getters
//! stay callable meanwhile.
//!
//! A Rust panic aborts the wasm instance (`unreachable`), and a panic inside a pending
//! promise's future leaves that promise unsettled: [`on_panic`] lets JavaScript hear of it
//! and reject whatever is pending. The instance is never used again: the package restarts the
//! engine on a fresh instance of the module (pkg/src/engine.ts).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use serde_json::{json, Value};
use wasm_bindgen::prelude::*;

use super::to_js_error;
use crate::api::{Endpoint, Engine as ApiEngine, Forward, Run, RunOptions};
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::model::{Model, Session};
// A trait whose methods only the GPU path calls.
#[cfg(feature = "gpu")]
use crate::model::StepSource;

#[wasm_bindgen]
extern "C" {
    /// `performance.now()`: the page's or the worker's monotonic clock, in milliseconds (the
    /// clock `step_stats` time each mask with).
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

/// A model file's bytes in wasm memory, filled chunk by chunk so that a download or a `Blob`
/// never needs a second whole copy (wasm memory only grows: a transient copy would stay).
#[wasm_bindgen]
#[derive(Debug)]
pub struct ModelBytes {
    bytes: Vec<u8>,
}

#[wasm_bindgen]
impl ModelBytes {
    /// Room for `size` bytes (the file's length, when known; more can still be appended).
    /// A file wasm memory cannot hold is an error here, before any byte is copied.
    #[wasm_bindgen(constructor)]
    pub fn new(size: f64) -> Result<ModelBytes, JsValue> {
        let mut bytes = Vec::new();
        reserve(&mut bytes, size).map_err(to_js_error)?;
        Ok(ModelBytes { bytes })
    }

    /// Appends a chunk of the file.
    pub fn append(&mut self, chunk: &[u8]) -> Result<(), JsValue> {
        let needed = self.bytes.len() as f64 + chunk.len() as f64;
        if needed > self.bytes.capacity() as f64 {
            reserve(&mut self.bytes, needed).map_err(to_js_error)?;
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// Bytes appended so far.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> f64 {
        self.bytes.len() as f64
    }
}

/// Grows `bytes` to hold `total` bytes in all, or says the file is too large for wasm.
fn reserve(bytes: &mut Vec<u8>, total: f64) -> Result<()> {
    if !(total.is_finite() && total >= 0.0 && total < u32::MAX as f64) {
        return Err(no_room("the model file", total));
    }
    let extra = (total as usize).saturating_sub(bytes.len());
    bytes
        .try_reserve_exact(extra)
        .map_err(|_| no_room("the model file", total))
}

/// The error for an allocation wasm memory cannot make.
fn no_room(what: &str, bytes: f64) -> Error {
    Error::limit_exceeded(format!(
        "{what} needs {bytes} bytes, more than this wasm instance can hold (wasm32 memory is \
         at most 4 GiB, shared by the weights, the KV cache and the engine)"
    ))
    .with_param("model")
}

/// Checks that `bytes` more can be allocated, so that a too-large KV cache is an error
/// rather than an abort: the probe grows the memory, and the allocations that follow reuse
/// what it frees.
fn probe_memory(what: &str, bytes: usize) -> Result<()> {
    let mut probe: Vec<u8> = Vec::new();
    probe
        .try_reserve_exact(bytes)
        .map_err(|_| no_room(what, bytes as f64))
}

/// The backend a loaded engine runs on.
enum Backend {
    Cpu {
        // Boxed: the model's config makes this variant several times the others.
        model: Box<Model<Vec<u8>>>,
        session: Option<Session>,
    },
    #[cfg(feature = "gpu")]
    Gpu {
        model: Rc<crate::gpu::Model>,
        /// `None` while a step has it on the GPU.
        session: Option<Box<crate::gpu::Session>>,
    },
    /// `selectBackend` is setting up the GPU.
    Switching,
}

struct Inner {
    api: Arc<ApiEngine>,
    backend: Backend,
    /// `backendInfo`'s JSON.
    backend_info: String,
    /// A GPU step is evaluating.
    busy: bool,
}

/// A loaded model and its backend, one run at a time.
#[wasm_bindgen]
pub struct LocalEngine {
    inner: Rc<RefCell<Inner>>,
    info: String,
}

impl std::fmt::Debug for LocalEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEngine")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// One request being generated (see [`crate::api::Run`]).
#[wasm_bindgen]
#[derive(Debug)]
pub struct EngineRun {
    run: Rc<RefCell<Run>>,
    stream: bool,
}

fn busy() -> Error {
    Error::invalid_input(
        "the engine is busy with another step; wait for it (requests are served one at a time)",
    )
}

/// The error for a file that is not GGUF, showing how it starts.
fn not_gguf(bytes: &[u8]) -> Option<Error> {
    if bytes.starts_with(b"GGUF") {
        return None;
    }
    let head: String = bytes
        .iter()
        .take(16)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    let hint = if bytes.first() == Some(&b'<') {
        " (an HTML page: is the URL the file itself, not a page about it?)"
    } else if bytes.is_empty() {
        " (the file is empty)"
    } else {
        ""
    };
    Some(
        Error::invalid_input(format!(
            "the model is not a GGUF file: it starts with `{head}`, not `GGUF`{hint}"
        ))
        .with_param("model"),
    )
}

/// Why WebGPU cannot be used in this JavaScript environment, if it cannot. wgpu panics
/// outside a window or a dedicated worker (Node, a service worker), so this is asked first.
#[cfg(feature = "gpu")]
fn webgpu_missing() -> Option<String> {
    let global = js_sys::global();
    let gpu = if let Some(window) = global.dyn_ref::<web_sys::Window>() {
        window.navigator().unchecked_into::<NavigatorGpu>().gpu()
    } else if let Some(worker) = global.dyn_ref::<web_sys::WorkerGlobalScope>() {
        worker.navigator().unchecked_into::<NavigatorGpu>().gpu()
    } else {
        return Some(
            "WebGPU needs a page or a dedicated worker, and this is neither (Node, say)".into(),
        );
    };
    (gpu.is_undefined() || gpu.is_null())
        .then(|| "WebGPU is not available here (navigator.gpu is missing)".into())
}

// web-sys has `navigator.gpu` only under `--cfg=web_sys_unstable_apis`, a build-wide flag for
// one getter; this binds just the getter, on either of web-sys's navigators.
#[cfg(feature = "gpu")]
#[wasm_bindgen]
extern "C" {
    type NavigatorGpu;
    #[wasm_bindgen(method, getter, js_name = gpu)]
    fn gpu(this: &NavigatorGpu) -> JsValue;
}

/// `hardware_only` (`backend: "auto"`): a software adapter (SwiftShader, lavapipe) is refused
/// before the weights are uploaded: the wasm CPU path is ~100x faster than SwiftShader here
/// (27 vs 0.15 tokens/s in Chromium on the reference model).
#[cfg(feature = "gpu")]
async fn load_gpu(cpu: &Model<Vec<u8>>, hardware_only: bool) -> Result<(crate::gpu::Model, Value)> {
    use crate::gpu::{Context, Model as GpuModel};
    if let Some(reason) = webgpu_missing() {
        return Err(Error::gpu(reason));
    }
    // wgpu's types are not Send on wasm32; the Arc is what `gpu::Model` asks for.
    #[allow(clippy::arc_with_non_send_sync)]
    let ctx = Arc::new(Context::new().await?);
    let adapter = ctx.adapter().clone();
    if hardware_only && adapter.is_software {
        // Chromium leaves the name wgpu reads empty for SwiftShader; the package then puts
        // the adapter's vendor and architecture after "adapter".
        let name = match adapter.name.as_str() {
            "" => String::new(),
            name => format!(" ({name})"),
        };
        return Err(Error::gpu(format!(
            "the only WebGPU adapter{name} is a software one, slower than the CPU path; \
             backend \"webgpu\" uses it anyway"
        )));
    }
    // f16 where the adapter has shader-f16: outputs may then differ slightly from the CPU
    // path's (relative logit error 2.4e-4 on SmolLM2), so the page can tell.
    let kv_cache = match ctx.kv_precision() {
        crate::model::KvPrecision::F16 => "f16",
        crate::model::KvPrecision::F32 => "f32",
    };
    let model = GpuModel::upload_scoped(ctx, cpu).await?;
    let info = json!({
        "kind": "webgpu",
        "adapter": adapter.name,
        "isSoftware": adapter.is_software,
        "kvCache": kv_cache,
    });
    Ok((model, info))
}

/// The GPU backend, or the CPU one with the reason it is not the GPU; the engine stays
/// usable on the CPU either way (the caller decides whether the reason is an error).
#[cfg(feature = "gpu")]
async fn gpu_or_cpu(cpu: Model<Vec<u8>>, hardware_only: bool) -> (Backend, Value, Option<Error>) {
    match load_gpu(&cpu, hardware_only).await {
        Ok((model, info)) => {
            // The GPU holds the weights: the file's bytes go.
            drop(cpu);
            let backend = Backend::Gpu {
                model: Rc::new(model),
                session: None,
            };
            (backend, info, None)
        }
        Err(e) => {
            let info = json!({"kind": "cpu", "reason": e.message()});
            let backend = Backend::Cpu {
                model: Box::new(cpu),
                session: None,
            };
            (backend, info, Some(e))
        }
    }
}

#[cfg(not(feature = "gpu"))]
async fn gpu_or_cpu(cpu: Model<Vec<u8>>, _hardware_only: bool) -> (Backend, Value, Option<Error>) {
    let reason = "this build has no WebGPU backend (built without the gpu feature)";
    let backend = Backend::Cpu {
        model: Box::new(cpu),
        session: None,
    };
    let info = json!({"kind": "cpu", "reason": reason});
    (backend, info, Some(Error::gpu(reason)))
}

async fn select_backend(inner: Rc<RefCell<Inner>>, want: &str) -> Result<()> {
    if !matches!(want, "webgpu" | "cpu" | "auto") {
        return Err(Error::invalid_input(format!(
            "backend must be \"webgpu\", \"cpu\" or \"auto\", got {want:?}"
        ))
        .with_param("backend"));
    }
    if want == "cpu" {
        return Ok(());
    }
    // The CPU model comes out of the engine while the GPU is set up (no borrow is held
    // across an await); a step meanwhile is refused as busy.
    let cpu = {
        let mut guard = inner.try_borrow_mut().map_err(|_| busy())?;
        match std::mem::replace(&mut guard.backend, Backend::Switching) {
            Backend::Cpu { model, .. } => *model,
            other => {
                guard.backend = other;
                return Err(Error::invalid_input(
                    "the backend is already chosen (selectBackend is called once)",
                ));
            }
        }
    };
    let (backend, info, error) = gpu_or_cpu(cpu, want == "auto").await;
    let mut guard = inner.borrow_mut();
    guard.backend = backend;
    guard.backend_info = info.to_string();
    match error {
        Some(e) if want == "webgpu" => Err(e),
        _ => Ok(()),
    }
}

#[wasm_bindgen]
impl LocalEngine {
    /// Parses a GGUF model onto the CPU backend (`bytes` is consumed; the weights stay where
    /// they are); [`LocalEngine::select_backend`] may move it to the GPU.
    /// `limits` (JSON text, `{"schema_bytes": 8192}`) tightens the defaults of
    /// [`Limits`](crate::limits::Limits) for every request this engine reads.
    pub fn parse(bytes: ModelBytes, limits: Option<String>) -> Result<LocalEngine, JsValue> {
        Self::parse_inner(bytes.bytes, limits.as_deref()).map_err(to_js_error)
    }

    fn parse_inner(bytes: Vec<u8>, limits: Option<&str>) -> Result<LocalEngine> {
        // Read first: a bad option fails before the model is.
        let limits = match limits {
            Some(text) => crate::limits::Limits::from_json_text(text)?,
            None => crate::limits::Limits::DEFAULT,
        };
        if let Some(e) = not_gguf(&bytes) {
            return Err(e);
        }
        let file_bytes = bytes.len();
        let (api, architecture) = {
            let gguf = Gguf::parse(&bytes)?;
            // The architectures the forward pass runs (Config::from_gguf names them), checked
            // before anything else reads the file: the API engine alone would take any
            // architecture's header.
            crate::model::Config::from_gguf(&gguf)?;
            let architecture = gguf
                .get("general.architecture")
                .and_then(crate::gguf::Value::as_str)
                .unwrap_or("")
                .to_owned();
            (
                ApiEngine::from_gguf(&gguf)?.with_limits(limits),
                architecture,
            )
        };
        let cpu = Model::from_gguf_bytes(bytes)?;
        let info = json!({
            "name": api.model_name(),
            "architecture": architecture,
            "contextLength": api.context_length(),
            "nVocab": cpu.config().n_vocab,
            "fileBytes": file_bytes,
        });
        Ok(LocalEngine {
            inner: Rc::new(RefCell::new(Inner {
                api: Arc::new(api),
                backend: Backend::Cpu {
                    model: Box::new(cpu),
                    session: None,
                },
                backend_info: json!({"kind": "cpu"}).to_string(),
                busy: false,
            })),
            info: info.to_string(),
        })
    }

    /// Moves the model to `backend`: `"webgpu"`, `"cpu"` or `"auto"` (WebGPU when there is
    /// a hardware adapter and the model fits it, else the CPU, with the reason in
    /// `backendInfo`).
    /// On the GPU the file's bytes are dropped. A refused `"webgpu"` rejects and leaves the
    /// engine on the CPU. Called once, after `parse`.
    #[wasm_bindgen(js_name = selectBackend)]
    pub fn select_backend(&self, backend: String) -> js_sys::Promise {
        let inner = Rc::clone(&self.inner);
        wasm_bindgen_futures::future_to_promise(async move {
            select_backend(inner, &backend)
                .await
                .map(|()| JsValue::UNDEFINED)
                .map_err(to_js_error)
        })
    }

    /// `{"name", "architecture", "contextLength", "nVocab", "fileBytes"}` as JSON.
    #[wasm_bindgen(js_name = modelInfo)]
    pub fn model_info(&self) -> String {
        self.info.clone()
    }

    /// `{"kind": "webgpu" | "cpu", "adapter"?, "isSoftware"?, "reason"?}` as JSON; `reason`
    /// says why the model is not on the GPU.
    #[wasm_bindgen(js_name = backendInfo)]
    pub fn backend_info(&self) -> Result<String, JsValue> {
        let inner = self.inner.try_borrow().map_err(|_| to_js_error(busy()))?;
        Ok(inner.backend_info.clone())
    }

    /// The `/v1/models` list as JSON.
    #[wasm_bindgen(js_name = modelsJson)]
    pub fn models_json(&self) -> Result<String, JsValue> {
        let inner = self.inner.try_borrow().map_err(|_| to_js_error(busy()))?;
        Ok(inner.api.models_json().to_string())
    }

    /// Validates a request body (JSON text) for `endpoint` (`"chat"` or `"completion"`) and
    /// prepares its run: every invalid request is an error here, before any model work.
    /// `id`, `created` (Unix seconds) and `seed` (for a request without one) come from the
    /// caller.
    pub fn start(
        &self,
        request: &str,
        endpoint: &str,
        id: String,
        created: f64,
        seed: u64,
    ) -> Result<EngineRun, JsValue> {
        let endpoint = match endpoint {
            "chat" => Endpoint::Chat,
            "completion" => Endpoint::Completion,
            other => {
                return Err(to_js_error(Error::invalid_input(format!(
                    "endpoint must be \"chat\" or \"completion\", got {other:?}"
                ))))
            }
        };
        let body: Value = serde_json::from_str(request).map_err(|e| {
            to_js_error(
                Error::invalid_input(format!("the request body is not valid JSON: {e}"))
                    .with_source(e),
            )
        })?;
        let api = Arc::clone(
            &self
                .inner
                .try_borrow()
                .map_err(|_| to_js_error(busy()))?
                .api,
        );
        let opts = RunOptions {
            id,
            created: created.max(0.0) as u64,
            default_seed: seed,
            clock: Some(performance_now),
        };
        let run = Run::new(api, &body, endpoint, opts).map_err(to_js_error)?;
        Ok(EngineRun {
            stream: run.request().stream,
            run: Rc::new(RefCell::new(run)),
        })
    }

    /// Whether the model runs on WebGPU (then steps are `step`, else `stepSync`).
    #[wasm_bindgen(getter, js_name = onGpu)]
    pub fn on_gpu(&self) -> bool {
        self.inner
            .try_borrow()
            .is_ok_and(|i| !matches!(i.backend, Backend::Cpu { .. }))
    }

    /// `step` on the CPU backend, synchronously: no promise, and a panic traps in the
    /// caller's stack (a `RuntimeError` it can catch) rather than in the microtask queue.
    #[wasm_bindgen(js_name = stepSync)]
    pub fn step_sync(&self, run: &EngineRun) -> Result<String, JsValue> {
        let (forward, plan) = begin_step(&self.inner, &run.run).map_err(to_js_error)?;
        let chunks = match plan {
            Plan::Done => Vec::new(),
            Plan::Logits(logits) => finish_step(&run.run, &forward, logits).map_err(to_js_error)?,
            #[cfg(feature = "gpu")]
            Plan::Gpu(_, s) => {
                // Put the session back untouched: the GPU steps asynchronously.
                let mut guard = self.inner.borrow_mut();
                guard.busy = false;
                if let Backend::Gpu { session, .. } = &mut guard.backend {
                    *session = Some(s);
                }
                return Err(to_js_error(Error::invalid_input(
                    "stepSync runs the CPU backend; on WebGPU use step",
                )));
            }
        };
        Ok(Value::from(chunks).to_string())
    }

    /// Evaluates the run's next forward pass and samples: resolves to the new stream chunks
    /// as a JSON array (empty for a request that does not stream, and once the run is done).
    /// One step at a time per engine.
    pub fn step(&self, run: &EngineRun) -> js_sys::Promise {
        let inner = Rc::clone(&self.inner);
        let run = Rc::clone(&run.run);
        wasm_bindgen_futures::future_to_promise(async move {
            step(inner, run)
                .await
                .map(|chunks| JsValue::from(Value::from(chunks).to_string()))
                .map_err(to_js_error)
        })
    }
}

/// The kept session when it holds `needed` positions, else a new one (the old one is freed
/// first).
fn session_for<S>(
    slot: &mut Option<S>,
    capacity: impl Fn(&S) -> usize,
    needed: usize,
    make: impl FnOnce() -> Result<S>,
) -> Result<S> {
    match slot.take() {
        Some(s) if capacity(&s) >= needed => Ok(s),
        _ => make(),
    }
}

/// What a step evaluates on, decided without holding the engine across an `await`.
enum Plan {
    /// The run has nothing left to evaluate.
    Done,
    /// The CPU evaluated at once.
    Logits(Vec<f32>),
    /// The GPU model and the session taken out of the engine for the await.
    #[cfg(feature = "gpu")]
    Gpu(Rc<crate::gpu::Model>, Box<crate::gpu::Session>),
}

/// The first half of a step: the CPU evaluates the next forward pass, the GPU gets ready to.
fn begin_step(inner: &RefCell<Inner>, run: &RefCell<Run>) -> Result<(Forward, Plan)> {
    let (forward, needed) = {
        let run = run.try_borrow().map_err(|_| busy())?;
        match run.next_forward() {
            Some(f) => (f.clone(), run.context_needed()),
            None => {
                return Ok((
                    Forward {
                        keep: 0,
                        tokens: Vec::new(),
                    },
                    Plan::Done,
                ))
            }
        }
    };
    let mut guard = inner.try_borrow_mut().map_err(|_| busy())?;
    let inner = &mut *guard;
    if inner.busy {
        return Err(busy());
    }
    let plan = match &mut inner.backend {
        Backend::Cpu { model, session } => {
            let mut s = session_for(session, Session::capacity, needed, || {
                let c = model.config();
                let floats = 2 * c.n_layer * needed * c.kv_dim();
                probe_memory("the KV cache", floats.saturating_mul(4))?;
                model.session(needed)
            })?;
            s.truncate(forward.keep);
            let logits = model.forward(&mut s, &forward.tokens);
            *session = Some(s);
            Plan::Logits(logits?)
        }
        #[cfg(feature = "gpu")]
        Backend::Gpu { model, session } => {
            let s = session_for(
                session,
                |s| s.capacity(),
                needed,
                || model.session(needed).map(Box::new),
            )?;
            inner.busy = true;
            Plan::Gpu(Rc::clone(model), s)
        }
        Backend::Switching => return Err(busy()),
    };
    Ok((forward, plan))
}

/// The second half of a step: the logits of `forward` to the run.
fn finish_step(run: &RefCell<Run>, forward: &Forward, logits: Vec<f32>) -> Result<Vec<Value>> {
    let mut run = run.try_borrow_mut().map_err(|_| busy())?;
    if run.next_forward() != Some(forward) {
        // Cancelled while the GPU worked: nothing more to say.
        return Ok(Vec::new());
    }
    run.on_logits(logits)
}

async fn step(inner: Rc<RefCell<Inner>>, run: Rc<RefCell<Run>>) -> Result<Vec<Value>> {
    let (forward, plan) = begin_step(&inner, &run)?;
    let logits = match plan {
        Plan::Done => return Ok(Vec::new()),
        Plan::Logits(logits) => logits,
        #[cfg(feature = "gpu")]
        Plan::Gpu(model, mut s) => {
            s.truncate(forward.keep);
            let on_device = run.try_borrow().is_ok_and(|r| r.samples_on_device());
            let result = if on_device {
                gpu_sample_step(&model, &mut s, &run, &forward).await
            } else {
                model
                    .forward(&mut s, &forward.tokens)
                    .await
                    .map(StepOutcome::Logits)
            };
            let mut guard = inner.borrow_mut();
            guard.busy = false;
            if let Backend::Gpu { session, .. } = &mut guard.backend {
                *session = Some(s);
            }
            match result? {
                StepOutcome::Logits(logits) => logits,
                StepOutcome::Chunks(chunks) => return Ok(chunks),
            }
        }
    };
    finish_step(&run, &forward, logits)
}

/// What a GPU step produced: logits for the run, or the chunks of a token sampled on the GPU.
#[cfg(feature = "gpu")]
enum StepOutcome {
    Logits(Vec<f32>),
    Chunks(Vec<Value>),
}

/// A step sampled on the GPU: submit the forward pass, fill the mask on the CPU meanwhile,
/// then sample there and read back the token's 4 bytes. The run is borrowed only between
/// awaits (cancel stays callable), and a run cancelled meanwhile takes nothing.
#[cfg(feature = "gpu")]
async fn gpu_sample_step(
    model: &crate::gpu::Model,
    s: &mut crate::gpu::Session,
    run: &RefCell<Run>,
    forward: &Forward,
) -> Result<StepOutcome> {
    let masks = run.try_borrow().map_err(|_| busy())?.masks();
    if !masks {
        // Nothing to fill while the GPU works: the forward pass and the sampling go in one
        // submission.
        let (sampling, n_vocab) = {
            let mut r = run.try_borrow_mut().map_err(|_| busy())?;
            let step = r.device_step()?;
            (step.sampling, step.n_vocab)
        };
        let token = model
            .forward_sample(s, &forward.tokens, None, n_vocab, &sampling)
            .await?;
        let mut r = run.try_borrow_mut().map_err(|_| busy())?;
        if r.next_forward() != Some(forward) {
            return Ok(StepOutcome::Chunks(Vec::new()));
        }
        return r.on_token(token).map(StepOutcome::Chunks);
    }
    model.submit_forward(s, &forward.tokens).await?;
    let (mask, n_vocab, sampling) = {
        let mut r = run.try_borrow_mut().map_err(|_| busy())?;
        if r.next_forward() != Some(forward) {
            return Ok(StepOutcome::Chunks(Vec::new()));
        }
        let step = r.device_step()?;
        // A copy of the mask (6 KiB for 49,152 tokens), so no borrow outlives this block.
        (step.mask.map(<[u32]>::to_vec), step.n_vocab, step.sampling)
    };
    let token = model.sample(s, mask.as_deref(), n_vocab, &sampling).await?;
    let mut r = run.try_borrow_mut().map_err(|_| busy())?;
    if r.next_forward() != Some(forward) {
        return Ok(StepOutcome::Chunks(Vec::new()));
    }
    r.on_token(token).map(StepOutcome::Chunks)
}

#[wasm_bindgen]
impl EngineRun {
    /// Whether the request streams (`stream: true`).
    #[wasm_bindgen(getter)]
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// Whether every choice has finished (or the run was cancelled).
    #[wasm_bindgen(getter)]
    pub fn done(&self) -> bool {
        self.run.try_borrow().is_ok_and(|r| r.is_done())
    }

    /// The unknown request fields that were ignored, as a JSON array of messages.
    #[wasm_bindgen(getter)]
    pub fn warnings(&self) -> Result<String, JsValue> {
        let run = self.run.try_borrow().map_err(|_| to_js_error(busy()))?;
        Ok(run.warnings().to_string())
    }

    /// The whole response object (once `done`), as a JS object: serde-wasm-bindgen beats
    /// JSON text from 256 B of content on (0.15x its time at 4 KiB,
    /// scripts/bench_wasm_boundary.sh).
    pub fn response(&self) -> Result<JsValue, JsValue> {
        use serde::Serialize;
        let run = self.run.try_borrow().map_err(|_| to_js_error(busy()))?;
        run.response()
            .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
            // A `serde_json::Value` always serializes; this only passes the error on.
            .map_err(JsValue::from)
    }

    /// Stops the run within the current step; returns the chunks that close the stream (a
    /// JSON array).
    pub fn cancel(&self) -> Result<String, JsValue> {
        let mut run = self.run.try_borrow_mut().map_err(|_| to_js_error(busy()))?;
        Ok(Value::from(run.cancel()).to_string())
    }
}

thread_local! {
    static PANIC_CALLBACK: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
    static HOOK_INSTALLED: Cell<bool> = const { Cell::new(false) };
}

/// Calls `callback(message)` when Rust panics, after the console message. The instance is
/// unusable afterwards (the panic aborts it), and a promise whose future panicked never
/// settles: the callback is how JavaScript learns of it. It must not call into wasm.
#[wasm_bindgen(js_name = onPanic)]
pub fn on_panic(callback: js_sys::Function) {
    PANIC_CALLBACK.with(|c| *c.borrow_mut() = Some(callback));
    if HOOK_INSTALLED.with(|h| h.replace(true)) {
        return;
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        let message = info.to_string();
        PANIC_CALLBACK.with(|c| {
            if let Ok(c) = c.try_borrow() {
                if let Some(f) = c.as_ref() {
                    let _ = f.call1(&JsValue::NULL, &JsValue::from_str(&message));
                }
            }
        });
    }));
}

/// Panics on purpose, for the tests of the crash path: at once, or (`in_future`) inside a
/// pending promise's future, as a panic during a step would.
#[wasm_bindgen(js_name = debugPanic)]
pub fn debug_panic(in_future: bool) -> js_sys::Promise {
    if !in_future {
        panic!("debugPanic: a deliberate panic");
    }
    wasm_bindgen_futures::future_to_promise(async {
        let tick = js_sys::Promise::resolve(&JsValue::NULL);
        let _ = wasm_bindgen_futures::JsFuture::from(tick).await;
        panic!("debugPanic: a deliberate panic inside a future");
    })
}
