//! `poot serve`: the OpenAI-compatible HTTP server over `poot::api`.
//!
//! Routes: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`,
//! `GET /health` (`status`, plus `queued`, `busy`, and `finished` requests with their
//! `completion_tokens`, which show a cancelled stream stopped). One model, one generation at a time: HTTP threads parse and validate each
//! request (so a 400 comes back at once, even while another request generates) and queue it
//! for the one generation thread, which owns the model: its weights are loaded (on the GPU,
//! uploaded) once, before the server listens, and each request gets a fresh session. Streams are Server-Sent Events in
//! OpenAI's chunk format ending with `data: [DONE]`, written straight to the socket; a client
//! that goes away fails the next write, which cancels its generation within one step.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::Arc;

use poot::api::{error_body, error_status, Endpoint, Engine, Run};
use poot::gguf::Gguf;
use poot::model::Model;
use poot::Error;
use serde_json::{json, Value};
use tiny_http::{Header, Method, Request, Response, Server};

use super::model::{run_options, Weights};
use super::{read, Failure, Options};

/// Largest request body accepted, in bytes (a 16 KiB schema and a long conversation fit; a
/// larger body is a 413 before it is read whole).
const MAX_BODY_BYTES: usize = 1 << 20;

/// Requests waiting for the generation thread; past this a request is answered 503 at once
/// rather than held (each waiting request holds a thread and its body).
const MAX_QUEUED: usize = 256;

/// What the generation thread sends back to a request's HTTP thread.
enum Event {
    /// A stream chunk.
    Chunk(Value),
    /// The run ended: the whole response (non-streamed; `None` for a stream, whose chunks
    /// were the response).
    Done(Result<Option<Value>, Error>),
}

/// What `/health` reports besides `"status": "ok"`.
#[derive(Default)]
struct Stats {
    /// Requests waiting for the generation thread.
    queued: AtomicUsize,
    /// Whether a request is generating now.
    busy: AtomicBool,
    /// Requests finished (completed, failed or cancelled) and their completion tokens.
    finished: AtomicU64,
    completion_tokens: AtomicU64,
}

/// A validated request waiting for the model.
struct Job {
    run: Run,
    events: SyncSender<Event>,
}

pub(super) fn serve(rest: &[String]) -> Result<ExitCode, Failure> {
    let opts = Options::parse(rest, &["model", "port", "host", "backend", "threads"])?;
    // The weights live as long as the process; leaking the buffer lets the generation thread
    // own a model that borrows them.
    let file: &'static [u8] = Box::leak(read(opts.required("model")?)?.into_boxed_slice());
    let engine = Arc::new(Engine::from_gguf(&Gguf::parse(file)?)?);
    let host = opts.values.get("host").map_or("127.0.0.1", String::as_str);
    let port = opts.number("port", Some(8080))?;
    let threads = opts.number("threads", Some(1))? as usize;
    let backend_name = opts.values.get("backend").cloned();

    let (jobs, queue) = channel::<Job>();
    let stats = Arc::new(Stats::default());
    // Built before listening, so a model or backend that cannot load fails the command (a
    // missing GPU fails here, not on the first request). Leaked like the file: the weights
    // (on the GPU, uploaded once) live as long as the process and borrow the CPU model.
    let mut cpu = Model::from_gguf_bytes(file)?;
    cpu.set_threads(threads);
    let cpu: &'static Model<&'static [u8]> = Box::leak(Box::new(cpu));
    let weights = Weights::load(backend_name.as_ref(), cpu)?;
    {
        let stats = stats.clone();
        std::thread::spawn(move || generation_thread(&weights, queue, &stats));
    }

    let server = Server::http(format!("{host}:{port}"))
        .map_err(|e| Failure::Io(format!("cannot listen on {host}:{port}: {e}")))?;
    eprintln!(
        "poot serve: {} on http://{host}:{port}/v1",
        engine.model_name()
    );
    for request in server.incoming_requests() {
        let engine = engine.clone();
        let jobs = jobs.clone();
        let stats = stats.clone();
        std::thread::spawn(move || handle(request, &engine, &jobs, &stats));
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs queued jobs one at a time on the model, each in a fresh session over `weights`.
fn generation_thread(weights: &Weights<'_>, queue: Receiver<Job>, stats: &Stats) {
    for mut job in queue {
        stats.busy.store(true, Ordering::SeqCst);
        stats.queued.fetch_sub(1, Ordering::SeqCst);
        let result = weights
            .backend(job.run.context_needed())
            .map_err(|e| match e {
                Failure::Request(e) => e,
                other => Error::gpu(format!("{other:?}")),
            })
            .and_then(|mut b| {
                let events = &job.events;
                job.run.drive(b.as_mut(), &mut |chunk| {
                    events.send(Event::Chunk(chunk)).is_ok()
                })
            });
        let tokens = job.run.usage()["completion_tokens"].as_u64().unwrap_or(0);
        stats.completion_tokens.fetch_add(tokens, Ordering::SeqCst);
        stats.finished.fetch_add(1, Ordering::SeqCst);
        stats.busy.store(false, Ordering::SeqCst);
        let _ = job.events.send(Event::Done(
            result.map(|()| (!job.run.request().stream).then(|| job.run.response())),
        ));
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
}

fn json_response(status: u16, body: &Value) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_data(body.to_string().into_bytes())
        .with_status_code(status)
        .with_header(header("Content-Type", "application/json"))
}

fn error_response(status: u16, error: &Error) -> Response<std::io::Cursor<Vec<u8>>> {
    json_response(status, &error_body(error))
}

fn handle(mut request: Request, engine: &Arc<Engine>, jobs: &Sender<Job>, stats: &Stats) {
    let path = request.url().split('?').next().unwrap_or("").to_owned();
    let method = request.method().clone();
    let endpoint = match (method, path.as_str()) {
        (Method::Get, "/health") => {
            let health = json!({
                "status": "ok",
                "queued": stats.queued.load(Ordering::SeqCst),
                "busy": stats.busy.load(Ordering::SeqCst),
                "finished": stats.finished.load(Ordering::SeqCst),
                "completion_tokens": stats.completion_tokens.load(Ordering::SeqCst),
            });
            let _ = request.respond(json_response(200, &health));
            return;
        }
        (Method::Get, "/v1/models") => {
            let _ = request.respond(json_response(200, &engine.models_json()));
            return;
        }
        (Method::Post, "/v1/chat/completions") => Endpoint::Chat,
        (Method::Post, "/v1/completions") => Endpoint::Completion,
        (_, "/health" | "/v1/models" | "/v1/chat/completions" | "/v1/completions") => {
            let err =
                Error::invalid_input(format!("{} is not allowed on {path}", request.method()));
            let _ = request.respond(error_response(405, &err));
            return;
        }
        _ => {
            let err = Error::invalid_input(format!("no route {path}"));
            let _ = request.respond(error_response(404, &err));
            return;
        }
    };
    let body = match read_body(&mut request) {
        Ok(body) => body,
        Err((status, err)) => {
            let _ = request.respond(error_response(status, &err));
            return;
        }
    };
    let run = serde_json::from_slice::<Value>(&body)
        .map_err(|e| Error::invalid_input(format!("the request body is not valid JSON: {e}")))
        .and_then(|v| Run::new(engine.clone(), &v, endpoint, run_options(endpoint)));
    let run = match run {
        Ok(run) => run,
        Err(err) => {
            let _ = request.respond(error_response(error_status(&err), &err));
            return;
        }
    };
    let stream = run.request().stream;
    let warnings = run.warnings();
    if stats.queued.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED {
        stats.queued.fetch_sub(1, Ordering::SeqCst);
        let err = Error::limit_exceeded(format!(
            "{MAX_QUEUED} requests are already waiting; try again later"
        ));
        let _ = request.respond(error_response(503, &err));
        return;
    }
    // A small buffer: the generation thread waits for a slow reader rather than piling up
    // chunks (and a gone reader fails the send, which cancels the run).
    let (events, replies) = sync_channel(16);
    if jobs.send(Job { run, events }).is_err() {
        let err = Error::gpu("the generation thread has stopped");
        let _ = request.respond(error_response(500, &err));
        return;
    }
    let warning_header = (!warnings.as_array().is_none_or(Vec::is_empty))
        .then(|| header("x-poot-warnings", &warnings.to_string()));
    if stream {
        let mut out = request.into_writer();
        let mut head = String::from(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n",
        );
        if let Some(h) = &warning_header {
            head.push_str(&format!("{}: {}\r\n", h.field, h.value));
        }
        head.push_str("\r\n");
        if out
            .write_all(head.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
        for event in replies {
            let line = match event {
                Event::Chunk(chunk) => format!("data: {chunk}\n\n"),
                Event::Done(Ok(_)) => "data: [DONE]\n\n".to_owned(),
                // Headers are gone: an error mid-stream is an error event, then the end.
                Event::Done(Err(err)) => format!("data: {}\n\ndata: [DONE]\n\n", error_body(&err)),
            };
            // One HTTP chunk per event; the zero-length chunk after `[DONE]` ends the response
            // (tiny_http keeps the socket, so the end cannot be signalled by closing it).
            let mut frame = format!("{:x}\r\n{line}\r\n", line.len());
            if line.ends_with("[DONE]\n\n") {
                frame.push_str("0\r\n\r\n");
            }
            if out
                .write_all(frame.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                // Dropping `replies` makes the generation thread's next send fail.
                return;
            }
        }
    } else {
        for event in replies {
            if let Event::Done(result) = event {
                let mut response = match result {
                    Ok(body) => json_response(200, &body.unwrap_or(Value::Null)),
                    Err(err) => error_response(error_status(&err), &err),
                };
                if let Some(h) = warning_header {
                    response.add_header(h);
                }
                let _ = request.respond(response);
                return;
            }
        }
    }
}

fn read_body(request: &mut Request) -> Result<Vec<u8>, (u16, Error)> {
    if request.body_length().is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err((413, too_large()));
    }
    let mut body = Vec::new();
    let reader = request.as_reader();
    reader
        .take(MAX_BODY_BYTES as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| {
            (
                400,
                Error::invalid_input(format!("cannot read the request body: {e}")),
            )
        })?;
    if body.len() > MAX_BODY_BYTES {
        return Err((413, too_large()));
    }
    Ok(body)
}

fn too_large() -> Error {
    Error::limit_exceeded(format!(
        "the request body is over the limit of {MAX_BODY_BYTES} bytes"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use poot::model::synthetic::TinySpec;

    #[test]
    fn gpu_weights_are_uploaded_once_for_every_request() {
        let file: &'static [u8] = Box::leak(TinySpec::default().build().into_boxed_slice());
        let cpu: &'static Model<&'static [u8]> =
            Box::leak(Box::new(Model::from_gguf_bytes(file).unwrap()));
        let before = poot::gpu::weight_bytes_uploaded();
        let weights = match Weights::load(Some(&"gpu".to_owned()), cpu) {
            Ok(weights) => weights,
            Err(_) => panic!("GPU tests need an adapter"),
        };
        assert!(matches!(weights, Weights::Gpu(_)));
        // Process-wide, so a backend that opened its own context and uploaded again counts.
        let uploaded = poot::gpu::weight_bytes_uploaded();
        assert!(uploaded > before);
        let engine = Arc::new(Engine::from_gguf(&Gguf::parse(file).unwrap()).unwrap());
        let stats = Stats::default();
        let (jobs, queue) = channel();
        let mut replies = Vec::new();
        for _ in 0..3 {
            let body = json!({"prompt": "ab", "max_tokens": 4, "temperature": 0});
            let endpoint = Endpoint::Completion;
            let run = Run::new(engine.clone(), &body, endpoint, run_options(endpoint)).unwrap();
            let (events, reply) = sync_channel(64);
            stats.queued.fetch_add(1, Ordering::SeqCst);
            jobs.send(Job { run, events }).unwrap();
            replies.push(reply);
        }
        drop(jobs);
        // Returns once the queue is empty and closed.
        generation_thread(&weights, queue, &stats);
        let mut texts = Vec::new();
        for reply in replies {
            let done = reply.iter().find_map(|event| match event {
                Event::Done(result) => Some(result),
                Event::Chunk(_) => None,
            });
            let body = done
                .expect("a Done event")
                .unwrap()
                .expect("a response body");
            texts.push(body["choices"][0]["text"].as_str().unwrap().to_owned());
        }
        assert_eq!(stats.finished.load(Ordering::SeqCst), 3);
        // Greedy from the same prompt in a fresh session each time: the same text.
        assert!(texts.iter().all(|t| t == &texts[0]), "{texts:?}");
        assert_eq!(poot::gpu::weight_bytes_uploaded(), uploaded);
    }
}
