//! `poot bench`: prefill and decode speed of one backend on a model, with the GPU's
//! dispatches and bytes read back per token and what overlapping the CPU's mask with the
//! GPU's forward pass hides. One JSON object per line; `scripts/bench_gpu.sh` runs it for
//! the CPU and the GPU in the same run and prints the table.
//!
//! Decode is greedy and ignores end-of-sequence tokens, so every backend does the same work.

use std::process::ExitCode;
use std::sync::Arc;

use poot::api::{Endpoint, Engine, Run};
use poot::gguf::Gguf;
use poot::model::{Backend, CpuBackend, DeviceStep, Model, StepSource};
use poot::sampling::{argmax, Params, Sampler};
use poot::tokenizer::Tokenizer;
use poot::vocab::TokenId;
use serde_json::{json, Value};

use super::model::{monotonic_ms, run_options, upload, GpuBackend};
use super::{read, Failure, Options};

const TEXT: &str = "The history of the printing press begins in the fifteenth century, when \
Johannes Gutenberg combined movable metal type, oil-based ink and a wooden press adapted from \
those used to make wine. Books, which had been copied by hand, became cheaper and more common, \
and ideas travelled faster than ever before across Europe. ";

/// Prefill runs whose median is reported (each on an emptied session).
const PREFILL_RUNS: usize = 3;

/// (median, p99) of `samples`, in their unit.
fn median_p99(samples: &[f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Greedy and unconstrained over `n` logits, chosen on the device: the decode loop's step
/// with nothing to mask.
struct Greedy {
    sampler: Sampler,
    n: usize,
}

impl StepSource for Greedy {
    fn device_step(&mut self) -> poot::Result<DeviceStep<'_>> {
        let sampling = self
            .sampler
            .device_step()
            .ok_or_else(|| poot::Error::invalid_input("greedy settings run on the device"))?;
        Ok(DeviceStep {
            mask: None,
            n_vocab: self.n,
            sampling,
        })
    }

    /// No mask: the backend submits the forward pass and the sampling together.
    fn masks(&self) -> bool {
        false
    }
}

pub(super) fn bench(rest: &[String]) -> Result<ExitCode, Failure> {
    let opts = Options::parse(
        rest,
        &[
            "model",
            "backend",
            "prompt-tokens",
            "tokens",
            "request",
            "threads",
        ],
    )?;
    let file = read(opts.required("model")?)?;
    let backend_name = opts.values.get("backend").map_or("cpu", String::as_str);
    let pp = opts.number("prompt-tokens", Some(64))? as usize;
    let tg = opts.number("tokens", Some(16))? as usize;
    let tok = Tokenizer::from_gguf_bytes(&file)?;
    let mut cpu = Model::from_gguf_bytes(&file[..])?;
    let threads = opts.number("threads", Some(1))? as usize;
    cpu.set_threads(threads);
    let mut prompt = Vec::new();
    while prompt.len() < pp {
        prompt.extend(tok.encode(TEXT, false, false));
    }
    prompt.truncate(pp);
    let context = pp + tg + 1;
    let print = |v: Value| println!("{v}");
    match backend_name {
        "cpu" => {
            let mut b = CpuBackend {
                model: &cpu,
                session: cpu.session(context)?,
            };
            print(prefill(&mut b, &prompt, "cpu")?);
            b.truncate(0);
            let logits = b.forward(&prompt)?;
            let (steps, ids) = decode_logits(&mut b, logits, tg)?;
            let mut row = decode_row("cpu", "logits on the CPU", &steps, &ids, None);
            row["threads"] = threads.into();
            print(row);
        }
        "gpu" => {
            let gpu = upload(&cpu)?;
            // The kernels' variant (f32, f16, subgroups, f16+subgroups: POOT_GPU_DISABLE picks)
            // goes on every GPU row, so runs of each variant can share one table.
            let kernels = gpu.context().variant().name();
            let adapter = gpu.context().adapter().name.clone();
            // K and V of every layer, in the cache's element type (f16 with shader-f16).
            let c = cpu.config();
            let kv_per_position = 2 * c.n_layer * c.kv_dim() * gpu.context().kv_precision().bytes();
            let print = |mut v: Value| {
                v["kernels"] = kernels.into();
                v["adapter"] = adapter.clone().into();
                v["kv_cache_bytes_per_position"] = kv_per_position.into();
                println!("{v}");
            };
            let mut b = GpuBackend::new(&gpu, context)?;
            print(prefill(&mut b, &prompt, "gpu")?);
            // Counters from after each prompt's prefill: decode steps only.
            b.truncate(0);
            let logits = b.forward(&prompt)?;
            let before = b.session.counters();
            let (steps, ids) = decode_logits(&mut b, logits, tg)?;
            let counters = Some((before, b.session.counters()));
            let how = "logits read back, CPU sampler";
            print(decode_row("gpu", how, &steps, &ids, counters));
            b.truncate(0);
            let mut source = Greedy {
                sampler: Sampler::new(Params::greedy())?,
                n: b.model.config().n_vocab,
            };
            let first = b.forward_sample(&prompt, &mut source)?;
            let before = b.session.counters();
            let (steps, ids) = decode_on_device(&mut b, &mut source, first, tg)?;
            let counters = Some((before, b.session.counters()));
            print(decode_row(
                "gpu",
                "sampled on the GPU",
                &steps,
                &ids,
                counters,
            ));
            if let Some(path) = opts.values.get("request") {
                let body: Value = serde_json::from_slice(&read(path)?).map_err(|e| {
                    Failure::Usage(format!("{path}: the request is not valid JSON: {e}"))
                })?;
                let engine = Arc::new(Engine::from_gguf(&Gguf::parse(&file)?)?);
                for overlap in [true, false] {
                    print(constrained(&engine, &body, &gpu, overlap)?);
                }
            }
        }
        other => {
            return Err(Failure::Usage(format!(
                "`--backend` takes `cpu` or `gpu`, got `{other}`"
            )))
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn prefill(b: &mut dyn Backend, prompt: &[TokenId], name: &str) -> Result<Value, Failure> {
    let mut ms = Vec::new();
    for _ in 0..PREFILL_RUNS {
        b.truncate(0);
        let t0 = monotonic_ms();
        b.forward(prompt)?;
        ms.push(monotonic_ms() - t0);
    }
    let (median, _) = median_p99(&ms);
    Ok(json!({
        "backend": name, "what": "prefill", "tokens": prompt.len(), "runs": PREFILL_RUNS,
        "ms_median": round3(median), "tok_s": round3(prompt.len() as f64 * 1000.0 / median),
    }))
}

/// Greedy decode from the prompt's logits (read back, on the GPU backend); per-step
/// milliseconds and the tokens chosen (the rows' `greedy_ids`: where the GPU's differ from
/// the CPU's is where its rounding first changed a choice).
fn decode_logits(
    b: &mut dyn Backend,
    mut logits: Vec<f32>,
    tg: usize,
) -> Result<(Vec<f64>, Vec<TokenId>), Failure> {
    let mut steps = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..tg {
        let t0 = monotonic_ms();
        let next = argmax(&logits);
        logits = b.forward(&[next])?;
        steps.push(monotonic_ms() - t0);
        ids.push(next);
    }
    Ok((steps, ids))
}

/// Greedy decode sampled on the GPU (4 bytes read back a step) from the prompt's `first`
/// token; per-step milliseconds and the tokens chosen (from `first`, as [`decode_logits`]).
fn decode_on_device(
    b: &mut GpuBackend,
    source: &mut Greedy,
    mut next: TokenId,
    tg: usize,
) -> Result<(Vec<f64>, Vec<TokenId>), Failure> {
    let mut steps = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..tg {
        let t0 = monotonic_ms();
        ids.push(next);
        next = b.forward_sample(&[next], source)?;
        steps.push(monotonic_ms() - t0);
    }
    Ok((steps, ids))
}

fn decode_row(
    backend: &str,
    how: &str,
    steps: &[f64],
    greedy_ids: &[TokenId],
    counters: Option<(poot::gpu::Counters, poot::gpu::Counters)>,
) -> Value {
    let (median, p99) = median_p99(steps);
    let mut row = json!({
        "backend": backend, "what": "decode", "how": how, "tokens": steps.len(),
        "step_ms_median": round3(median), "step_ms_p99": round3(p99),
        "tok_s": round3(1000.0 / median), "greedy_ids": greedy_ids,
    });
    if let Some((a, b)) = counters {
        let per = |x: u64, y: u64| (y - x) as f64 / steps.len().max(1) as f64;
        row["dispatches_per_token"] = per(a.dispatches, b.dispatches).into();
        row["submissions_per_token"] = per(a.submissions, b.submissions).into();
        row["bytes_read_back_per_token"] = per(a.bytes_read_back, b.bytes_read_back).into();
    }
    row
}

/// A constrained request through `Run` on the GPU, sampling there: with `overlap` the mask
/// is filled while the GPU runs the forward pass, without it after the GPU is idle. The
/// difference of the step medians is the mask time the overlap hides.
fn constrained(
    engine: &Arc<Engine>,
    body: &Value,
    gpu: &poot::gpu::Model,
    overlap: bool,
) -> Result<Value, Failure> {
    let endpoint = if body.get("messages").is_some() {
        Endpoint::Chat
    } else {
        Endpoint::Completion
    };
    let mut run = Run::new(Arc::clone(engine), body, endpoint, run_options(endpoint))?;
    let mut b = GpuBackend::new(gpu, run.context_needed())?;
    b.overlap = overlap;
    b.timings = Some(Vec::new());
    run.drive(&mut b, &mut |_| true)?;
    // The first step is the prompt's prefill: decode steps only.
    let timings: Vec<[f64; 3]> = b.timings.unwrap_or_default().into_iter().skip(1).collect();
    let column = |i: usize| timings.iter().map(|t| t[i]).collect::<Vec<_>>();
    let steps: Vec<f64> = timings.iter().map(|t| t.iter().sum()).collect();
    let (step, step_p99) = median_p99(&steps);
    let (mask, _) = median_p99(&column(1));
    let (wait, _) = median_p99(&column(2));
    let text = run.response()["choices"][0]["message"]["content"]
        .as_str()
        .or(run.response()["choices"][0]["text"].as_str())
        .unwrap_or("")
        .to_owned();
    Ok(json!({
        "backend": "gpu", "what": "constrained decode", "overlap": overlap,
        "constraint": run.constraint_param(), "steps": steps.len(),
        "step_ms_median": round3(step), "step_ms_p99": round3(step_p99),
        "mask_ms_median": round3(mask), "wait_ms_median": round3(wait), "output": text,
    }))
}
