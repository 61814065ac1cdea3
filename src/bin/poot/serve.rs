//! `poot serve`: the OpenAI-compatible HTTP server over `poot::api`.
//!
//! Routes: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`,
//! `GET /health` (`status`, plus `queued`, `busy`, and `finished` requests with their
//! `completion_tokens`, of which `cancelled` stopped early and `panicked` failed inside the
//! generation thread). Streams are Server-Sent Events in OpenAI's chunk format ending with
//! `data: [DONE]`.
//!
//! # Shape
//!
//! HTTP/1.1 is hyper on a current-thread tokio runtime: every connection is a task, so an
//! idle, slow or gone client costs a few KiB and a timer, never a thread. One generation thread
//! owns the model (its weights loaded, on the GPU uploaded, once before the server listens)
//! and runs one request at a time, each in a fresh session. A request goes through, in order:
//! the access checks below; the body, read whole within `--body-timeout`; admission (a queue
//! slot, else 503 at once); JSON parsing and constraint compiling on the blocking pool (so a 400
//! comes back at once, even while another request generates); the job queue. The body is read
//! before admission so a slow uploader holds a connection (capped) and never a queue slot;
//! admission comes before compiling so a full queue costs no compile work.
//!
//! The generation thread never waits on a client. Stream chunks go through a bounded channel
//! (16 chunks) with `try_send`; what does not fit waits in the job's own buffer, retried every
//! step, and a client that takes no chunk for `--write-timeout` while some wait (or falls 4,096
//! chunks behind) has its run cancelled at the next step. Chunks sitting in the socket buffers
//! count as taken, so a client that never reads is seen once they are full, plus the timeout:
//! ours is 32 KiB ([`SEND_BUFFER_BYTES`]), a Linux client's default receive buffer took
//! 134 KB (~540 plain ~250-byte chunks) in 60 s and was still growing (measured); with a
//! 4 KiB receive buffer and 20 top logprobs per chunk (the fault test) it is ~55 tokens. A client that goes away (hyper drops the response, its body, or the future
//! still waiting for a non-streamed response) sets the job's cancel flag, which the loop checks
//! every step, so its run stops within one token ([`poot::api::Run::drive_steps`]). A panic in a
//! job is caught there: that request gets a 500 and the next one runs; if the thread itself
//! ends, `/health` says so with a 503.
//!
//! # Access
//!
//! Every request: a `Host` header naming an allowed host (`localhost`, `127.0.0.1`, `[::1]`
//! with any port, the `--host` given, and each `--allowed-host`; `*` allows any), else 403, so
//! a page on another name that resolves to this address (DNS rebinding) cannot reach it; an
//! `Origin`, if sent, on the same host or among the `--allowed-origin`s (`*` allows any), else
//! 403, so no other page's script or form can post. A preflight (`OPTIONS`) is answered only
//! for an allowed origin. With `--api-key KEY` (or `POOT_API_KEY`) every route but `/health`
//! needs `Authorization: Bearer KEY` (401 otherwise). A POST needs `Content-Type:
//! application/json` (415), the one type a browser cannot send cross-site without a preflight.
//!
//! # Limits, defaults and why
//!
//! - `--max-connections 256`: each connection may hold at most 16 KiB of headers and a 1 MiB
//!   body, so at most ~260 MiB; past the cap a new connection is closed at once (after a
//!   best-effort 503).
//! - `--queue 64`: admitted requests waiting for the model (compiled constraints and all). At
//!   ~50 tokens/s on the CPU a 1,024-token request takes ~20 s, so the 64th waits ~20 min;
//!   past that a client is better told 503 (`Retry-After: 1`) at once.
//! - `--header-timeout 5` (s): the whole request head must arrive within it, and an idle
//!   keep-alive connection is closed after it (a slowloris holds a connection 5 s at most).
//! - `--body-timeout 10` (s): the whole body, else 408: at least ~100 KiB/s for the 1 MiB
//!   limit.
//! - `--write-timeout 5` (s): a write to the socket that makes no progress for this long ends
//!   the connection, and a stream whose chunks have not been taken for this long is cancelled.
//! - 16 KiB of request headers (431 past it); 1 MiB bodies (413, from `Content-Length` before
//!   reading, or while reading).
//! - `--limits JSON`: the constraint bounds of [`poot::limits::Limits`] this deployment
//!   tightens, e.g. `{"schema_bytes": 8192, "schema_judge_work": 10000}`; a value above the
//!   spec's default, or an unknown name, fails the command.
//!
//! # Test hook
//!
//! `POOT_TEST_PANIC_ON_PROMPT=MARKER` (test-only, read once at startup; unset in normal use)
//! makes a job whose prompt contains `MARKER` panic in the generation thread, so the tests can
//! check a panic costs only that request.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::net::Ipv6Addr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use poot::api::request::Prompt;
use poot::api::{error_body, error_status, Endpoint, Engine, Run};
use poot::gguf::Gguf;
use poot::model::Model;
use poot::Error;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use super::model::{run_options, Weights};
use super::{read, Failure, Options};

/// Largest request body accepted, in bytes (a 16 KiB schema and a long conversation fit; a
/// larger body is a 413 before it is read whole).
const MAX_BODY_BYTES: usize = 1 << 20;

/// Largest request head (request line and headers), in bytes; past it hyper answers 431. An
/// OpenAI client sends well under 1 KiB.
const MAX_HEADER_BYTES: usize = 16 << 10;

/// The kernel send buffer of every connection (Linux doubles it for bookkeeping). Left to
/// itself Linux grew it to 3.9 MB, and 320 KB of SSE sat in it for a client that never read
/// before anything looked stalled (measured). 32 KiB is ~130 plain stream chunks, and still
/// ~640 KB/s at a 50 ms round trip, far above the rate generation produces SSE.
const SEND_BUFFER_BYTES: u32 = 32 << 10;

/// Stream chunks buffered between the generation thread and a connection (~4 KiB of plain
/// SSE): slack for a connection task that is briefly busy; what a slow client leaves unread
/// waits in the socket buffers and then in the job's own queue, which the stall timer watches.
const CHUNK_BUFFER: usize = 16;

/// Chunks a job keeps for a client that reads, but slower than the model writes (1 to 8 MB of
/// SSE, by the chunk's size): past this the run is cancelled as if the client had stalled.
const MAX_PENDING_CHUNKS: usize = 4096;

/// Threads for JSON parsing and constraint compiling (up to tens of ms each); the queue caps
/// how many wait for them.
const COMPILE_THREADS: usize = 4;

/// The variable of the test-only panic hook (see the module docs).
const PANIC_VAR: &str = "POOT_TEST_PANIC_ON_PROMPT";

/// The server's settings, from the command line.
#[derive(Debug)]
struct Config {
    max_connections: usize,
    queue: usize,
    header_timeout: Duration,
    body_timeout: Duration,
    write_timeout: Duration,
    /// Host names (lowercase, IPv6 literals in brackets, no port); `*` allows any.
    allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`, lowercase); `*` allows any.
    allowed_origins: Vec<String>,
    api_key: Option<String>,
}

/// What `/health` reports besides its status.
#[derive(Default)]
struct Stats {
    /// Whether the generation thread is running (false once it has ended, by a panic or not).
    alive: AtomicBool,
    /// Whether a request is generating now.
    busy: AtomicBool,
    /// Requests finished (completed, failed or cancelled) and their completion tokens; a
    /// request refused before it was queued (400, 503) is not counted.
    finished: AtomicU64,
    completion_tokens: AtomicU64,
    /// Of `finished`: runs stopped because their client left or stopped reading, and admitted
    /// requests whose client left while their constraint compiled.
    cancelled: AtomicU64,
    /// Of `finished`: jobs that panicked (answered 500).
    panicked: AtomicU64,
}

/// How a job failed.
enum Failed {
    Api(Error),
    Panic,
}

/// The end of a job, sent once to its connection.
struct Outcome {
    /// Stream chunks the channel had no room for when the run ended.
    rest: Vec<Value>,
    /// The whole response (non-streamed; `None` for a stream, whose chunks were the response).
    result: Result<Option<Value>, Failed>,
}

/// A validated request waiting for the model.
struct Job {
    run: Run,
    chunks: mpsc::Sender<Value>,
    done: oneshot::Sender<Outcome>,
    /// Set when the client goes away; checked every step.
    cancel: Arc<AtomicBool>,
    /// The queue slot, freed when the job starts.
    slot: OwnedSemaphorePermit,
}

/// What every connection shares.
struct Server {
    engine: Arc<Engine>,
    config: Config,
    jobs: std_mpsc::Sender<Job>,
    slots: Arc<Semaphore>,
    stats: Arc<Stats>,
}

pub(super) fn serve(rest: &[String]) -> Result<ExitCode, Failure> {
    let opts = Options::parse(
        rest,
        &[
            "model",
            "port",
            "host",
            "backend",
            "threads",
            "api-key",
            "allowed-host",
            "allowed-origin",
            "max-connections",
            "queue",
            "header-timeout",
            "body-timeout",
            "write-timeout",
            "limits",
        ],
    )?;
    let host = opts
        .values
        .get("host")
        .map_or("127.0.0.1", String::as_str)
        .to_owned();
    let port = opts.number("port", Some(8080))?;
    let threads = opts.number("threads", Some(1))? as usize;
    let backend_name = opts.values.get("backend").cloned();
    let config = config(&opts, &host)?;
    let panic_marker = std::env::var(PANIC_VAR).ok().filter(|m| !m.is_empty());

    // The weights live as long as the process; leaking the buffer lets the generation thread
    // own a model that borrows them.
    let file: &'static [u8] = Box::leak(read(opts.required("model")?)?.into_boxed_slice());
    let limits = match opts.values.get("limits") {
        Some(text) => poot::limits::Limits::from_json_text(text)?,
        None => poot::limits::Limits::DEFAULT,
    };
    let engine = Arc::new(Engine::from_gguf(&Gguf::parse(file)?)?.with_limits(limits));
    // Built before listening, so a model or backend that cannot load fails the command (a
    // missing GPU fails here, not on the first request). Leaked like the file: the weights
    // (on the GPU, uploaded once) live as long as the process and borrow the CPU model.
    let mut cpu = Model::from_gguf_bytes(file)?;
    cpu.set_threads(threads);
    let cpu: &'static Model<&'static [u8]> = Box::leak(Box::new(cpu));
    let weights = Weights::load(backend_name.as_ref(), cpu)?;

    let (jobs, queue) = std_mpsc::channel::<Job>();
    let stats = Arc::new(Stats::default());
    stats.alive.store(true, Ordering::SeqCst);
    {
        let stats = stats.clone();
        let stall = config.write_timeout;
        std::thread::Builder::new()
            .name("poot-generate".into())
            .spawn(move || generation_thread(&weights, queue, &stats, stall, panic_marker))
            .map_err(|e| Failure::Io(format!("cannot start the generation thread: {e}")))?;
    }
    let server = Arc::new(Server {
        engine,
        slots: Arc::new(Semaphore::new(config.queue)),
        config,
        jobs,
        stats,
    });
    // One thread is enough for the sockets: everything on it waits on I/O, channels or
    // timers; the CPU work (compiling) goes to the blocking pool and the model to its own
    // thread, so a multi-thread runtime would only compete with them for cores.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(COMPILE_THREADS)
        .build()
        .map_err(|e| Failure::Io(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(listen(server, &host, port))
}

/// The settings `opts` give, with the defaults the module docs explain.
fn config(opts: &Options, host: &str) -> Result<Config, Failure> {
    let seconds = |key: &str, default: u64| -> Result<Duration, Failure> {
        match opts.number(key, Some(default))? {
            0 => Err(Failure::Usage(format!(
                "`--{key}` must be at least 1 second"
            ))),
            s => Ok(Duration::from_secs(s)),
        }
    };
    let at_least_one = |key: &str, default: u64| -> Result<usize, Failure> {
        match opts.number(key, Some(default))? {
            0 => Err(Failure::Usage(format!("`--{key}` must be at least 1"))),
            n => Ok(n as usize),
        }
    };
    let mut allowed_hosts: Vec<String> =
        ["localhost", "127.0.0.1", "[::1]"].map(String::from).into();
    // An unspecified address (all interfaces) names no host a client would send.
    if !matches!(host, "0.0.0.0" | "::" | "[::]") {
        allowed_hosts.push(host_entry(host));
    }
    allowed_hosts.extend(opts.repeated("allowed-host").into_iter().map(host_entry));
    let allowed_origins = opts
        .repeated("allowed-origin")
        .into_iter()
        .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
        .collect();
    let api_key = opts
        .values
        .get("api-key")
        .cloned()
        .or_else(|| std::env::var("POOT_API_KEY").ok())
        .filter(|k| !k.is_empty());
    Ok(Config {
        max_connections: at_least_one("max-connections", 256)?,
        queue: at_least_one("queue", 64)?,
        header_timeout: seconds("header-timeout", 5)?,
        body_timeout: seconds("body-timeout", 10)?,
        write_timeout: seconds("write-timeout", 5)?,
        allowed_hosts,
        allowed_origins,
        api_key,
    })
}

/// An allowed-host entry for `name` as given on the command line (a bare IPv6 address gets its
/// brackets; a port is dropped: any port is allowed).
fn host_entry(name: &str) -> String {
    match name.parse::<Ipv6Addr>() {
        Ok(ip) => format!("[{ip}]"),
        Err(_) => host_name(name),
    }
}

/// The host of a `Host` header value or an origin's authority: lowercase, without the port,
/// an IPv6 literal in its brackets.
fn host_name(authority: &str) -> String {
    let a = authority.trim();
    let name = match (a.starts_with('['), a.find(']')) {
        (true, Some(end)) => &a[..=end],
        _ => a.split(':').next().unwrap_or(""),
    };
    name.to_ascii_lowercase()
}

async fn listen(server: Arc<Server>, host: &str, port: u64) -> Result<ExitCode, Failure> {
    let listener = bind(host, port)
        .await
        .map_err(|e| Failure::Io(format!("cannot listen on {host}:{port}: {e}")))?;
    eprintln!(
        "poot serve: {} on http://{host}:{port}/v1",
        server.engine.model_name()
    );
    if matches!(host, "0.0.0.0" | "::" | "[::]") && server.config.allowed_hosts.len() == 3 {
        eprintln!(
            "poot serve: only Host localhost, 127.0.0.1 and [::1] are answered; name this \
             machine's others with --allowed-host"
        );
    }
    let connections = Arc::new(Semaphore::new(server.config.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(server.config.header_timeout)
        .max_header_size(MAX_HEADER_BYTES);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, say: wait for connections to close rather than spin.
                eprintln!("poot serve: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            // Best effort, without waiting: the socket buffer of a fresh connection has room.
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            continue;
        };
        // Each SSE chunk is a small write that should leave at once, not wait for an ACK.
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(WriteDeadline::new(stream, server.config.write_timeout));
        let service = {
            let server = server.clone();
            hyper::service::service_fn(move |req| {
                let server = server.clone();
                async move { Ok::<_, Infallible>(handle(req, &server).await) }
            })
        };
        let connection = http.serve_connection(io, service);
        tokio::spawn(async move {
            // Errors here are the client's (timeouts, resets, bad requests hyper answered).
            let _ = connection.await;
            drop(permit);
        });
    }
}

/// A listening socket on `host:port` whose connections inherit a fixed send buffer of
/// [`SEND_BUFFER_BYTES`].
async fn bind(host: &str, port: u64) -> std::io::Result<tokio::net::TcpListener> {
    let addr = tokio::net::lookup_host(format!("{host}:{port}"))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other("the host resolves to no address"))?;
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_send_buffer_size(SEND_BUFFER_BYTES)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Runs queued jobs one at a time on the model, each in a fresh session over `weights`.
fn generation_thread(
    weights: &Weights<'_>,
    queue: std_mpsc::Receiver<Job>,
    stats: &Stats,
    stall: Duration,
    panic_marker: Option<String>,
) {
    /// Marks the thread gone however it ends, so `/health` tells the truth.
    struct Alive<'a>(&'a AtomicBool);
    impl Drop for Alive<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::SeqCst);
        }
    }
    let _alive = Alive(&stats.alive);
    for job in queue {
        run_job(weights, job, stats, stall, panic_marker.as_deref());
    }
}

fn run_job(
    weights: &Weights<'_>,
    job: Job,
    stats: &Stats,
    stall: Duration,
    panic_marker: Option<&str>,
) {
    let Job {
        mut run,
        chunks,
        done,
        cancel,
        slot,
    } = job;
    drop(slot);
    stats.busy.store(true, Ordering::SeqCst);
    let mut outbox = Outbox {
        chunks,
        pending: VecDeque::new(),
        full_since: None,
        stall,
        cancel: &cancel,
        stopped: false,
    };
    let result = if cancel.load(Ordering::SeqCst) {
        // The client left while the job waited.
        outbox.stopped = true;
        Ok(Ok(()))
    } else {
        catch_unwind(AssertUnwindSafe(|| {
            if panic_marker.is_some_and(|m| prompt_contains(&run, m)) {
                panic!("{PANIC_VAR}: this job's prompt has the marker");
            }
            let mut backend = weights.backend(run.context_needed()).map_err(|e| match e {
                Failure::Request(e) => e,
                other => Error::gpu(format!("{other:?}")),
            })?;
            run.drive_steps(backend.as_mut(), &mut |step| outbox.step(step))
        }))
    };
    let result = match result {
        Ok(Ok(())) => Ok((!run.request().stream).then(|| run.response())),
        Ok(Err(e)) => Err(Failed::Api(e)),
        Err(_) => Err(Failed::Panic),
    };
    if !matches!(result, Err(Failed::Panic)) {
        let tokens = run.usage()["completion_tokens"].as_u64().unwrap_or(0);
        stats.completion_tokens.fetch_add(tokens, Ordering::SeqCst);
    } else {
        stats.panicked.fetch_add(1, Ordering::SeqCst);
    }
    if outbox.stopped {
        stats.cancelled.fetch_add(1, Ordering::SeqCst);
    }
    stats.finished.fetch_add(1, Ordering::SeqCst);
    stats.busy.store(false, Ordering::SeqCst);
    let rest = outbox.pending.drain(..).collect();
    // The connection drains the channel until this sender is gone, then reads the outcome.
    drop(outbox);
    let _ = done.send(Outcome { rest, result });
}

/// Whether `run`'s prompt text contains `marker` (the test-only panic hook).
fn prompt_contains(run: &Run, marker: &str) -> bool {
    match &run.request().prompt {
        Prompt::Text(text) => text.contains(marker),
        Prompt::Messages(messages) => messages
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.contains(marker))),
        Prompt::Ids(_) => false,
    }
}

/// The generation side of a job's chunk channel: it never waits for the connection.
struct Outbox<'a> {
    chunks: mpsc::Sender<Value>,
    /// Chunks the channel had no room for, oldest first.
    pending: VecDeque<Value>,
    /// Since when the channel has been full without the client taking a chunk.
    full_since: Option<Instant>,
    stall: Duration,
    cancel: &'a AtomicBool,
    /// The run was cancelled for its client.
    stopped: bool,
}

impl Outbox<'_> {
    /// Takes one step's chunks; whether the run goes on (its client is there and reading).
    fn step(&mut self, chunks: Vec<Value>) -> bool {
        let live = self.live(chunks);
        self.stopped |= !live;
        live
    }

    fn live(&mut self, chunks: Vec<Value>) -> bool {
        if self.cancel.load(Ordering::SeqCst) {
            return false;
        }
        self.pending.extend(chunks);
        while let Some(chunk) = self.pending.pop_front() {
            match self.chunks.try_send(chunk) {
                // The client took something since the last step: it is slow, not stalled.
                Ok(()) => self.full_since = None,
                Err(mpsc::error::TrySendError::Full(chunk)) => {
                    self.pending.push_front(chunk);
                    break;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
            }
        }
        if self.pending.is_empty() {
            return true;
        }
        if self.pending.len() > MAX_PENDING_CHUNKS {
            return false;
        }
        self.full_since.get_or_insert_with(Instant::now).elapsed() < self.stall
    }
}

/// Sets a job's cancel flag when the connection drops what waits for the job.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Counts an admitted request as finished and cancelled if dropped while armed: its client
/// left before the request reached the queue (while its constraint compiled), where neither
/// the generation thread nor a response would count it.
struct CountIfClientLeaves<'a>(Option<&'a Stats>);

impl<'a> CountIfClientLeaves<'a> {
    fn armed(stats: &'a Stats) -> Self {
        CountIfClientLeaves(Some(stats))
    }

    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CountIfClientLeaves<'_> {
    fn drop(&mut self) {
        if let Some(stats) = self.0 {
            stats.cancelled.fetch_add(1, Ordering::SeqCst);
            stats.finished.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A response body: whole, or a stream.
type Reply = Either<Full<Bytes>, SseBody>;

/// A job's Server-Sent Events: its chunks, then what the outcome adds, then `[DONE]`.
struct SseBody {
    chunks: mpsc::Receiver<Value>,
    chunks_open: bool,
    done: Option<oneshot::Receiver<Outcome>>,
    tail: VecDeque<Bytes>,
    _cancel: CancelOnDrop,
}

fn sse_event(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        loop {
            if let Some(bytes) = this.tail.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(bytes))));
            }
            let Some(done) = this.done.as_mut() else {
                return Poll::Ready(None);
            };
            if this.chunks_open {
                match ready!(this.chunks.poll_recv(cx)) {
                    Some(chunk) => {
                        return Poll::Ready(Some(Ok(Frame::data(sse_event(&chunk.to_string())))))
                    }
                    None => this.chunks_open = false,
                }
            }
            let outcome = ready!(Pin::new(done).poll(cx));
            this.done = None;
            let result = match outcome {
                Ok(Outcome { rest, result }) => {
                    this.tail
                        .extend(rest.iter().map(|c| sse_event(&c.to_string())));
                    result
                }
                Err(_) => Err(Failed::Api(Error::gpu("the generation thread has stopped"))),
            };
            // Headers are gone: an error mid-stream is an error event, then the end.
            if let Err(failed) = result {
                let body = match failed {
                    Failed::Api(err) => error_body(&err),
                    Failed::Panic => internal_error_body(),
                };
                this.tail.push_back(sse_event(&body.to_string()));
            }
            this.tail.push_back(sse_event("[DONE]"));
        }
    }
}

/// The socket, with a deadline on writes: one that makes no progress for `timeout` fails
/// (`TimedOut`), which ends the connection, so a client that stops reading cannot hold it.
struct WriteDeadline {
    io: tokio::net::TcpStream,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WriteDeadline {
    fn new(io: tokio::net::TcpStream, timeout: Duration) -> Self {
        WriteDeadline {
            io,
            timeout,
            stalled: None,
        }
    }

    /// `poll`'s result, or `TimedOut` once it has been pending for the whole timeout.
    fn deadline<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        this.deadline(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.deadline(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_flush(cx);
        this.deadline(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_shutdown(cx);
        this.deadline(cx, poll)
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Reply> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(status: StatusCode, error: &Error) -> Response<Reply> {
    json_response(status, &error_body(error))
}

/// A library error with its own status (400 for the caller's fault, 500 for ours).
fn api_error(error: &Error) -> Response<Reply> {
    let status = StatusCode::from_u16(error_status(error));
    error_response(status.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), error)
}

/// An OpenAI-shaped error the library has no kind for (access, transport, overload).
fn http_error(status: StatusCode, code: &str, message: &str) -> Response<Reply> {
    let kind = if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    json_response(status, &body)
}

fn internal_error_body() -> Value {
    json!({"error": {
        "message": "the server failed while generating this response",
        "type": "server_error",
        "param": null,
        "code": "internal_error",
    }})
}

/// Longest `x-poot-warnings` header: Node's HTTP client refuses a response whose headers
/// pass 16 KiB, and a request may carry thousands of unknown fields.
const MAX_WARNINGS_HEADER_BYTES: usize = 8 * 1024;

/// The `x-poot-warnings` header: the warnings (a JSON array of strings) that fit in
/// [`MAX_WARNINGS_HEADER_BYTES`], then a count of the rest; `None` when there are none.
fn warnings_header(warnings: &Value) -> Option<HeaderValue> {
    let all = warnings.as_array().filter(|w| !w.is_empty())?;
    let mut shown = Vec::new();
    let mut len = 2;
    for w in all {
        let text = ascii_json(w);
        // Room for the count's message (under 100 bytes).
        if len + text.len() + 1 + 100 > MAX_WARNINGS_HEADER_BYTES {
            break;
        }
        len += text.len() + 1;
        shown.push(w.clone());
    }
    if shown.len() < all.len() {
        shown.push(Value::from(format!(
            "{} more warnings are not shown (the header is capped at {MAX_WARNINGS_HEADER_BYTES} bytes)",
            all.len() - shown.len()
        )));
    }
    HeaderValue::from_str(&ascii_json(&Value::Array(shown))).ok()
}

/// `value` as JSON with everything outside printable ASCII escaped (`\uXXXX`, in UTF-16 as
/// JSON has it), so it is a valid header value whatever the request's field names held.
fn ascii_json(value: &Value) -> String {
    let json = value.to_string();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if (' '..='~').contains(&c) {
            out.push(c);
        } else {
            for unit in c.encode_utf16(&mut [0; 2]) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        }
    }
    out
}

async fn handle(req: Request<Incoming>, server: &Server) -> Response<Reply> {
    let origin = match check_access(&req, &server.config) {
        Ok(origin) => origin,
        Err((code, message)) => return http_error(StatusCode::FORBIDDEN, code, message),
    };
    let mut response = route(req, server, origin.is_some()).await;
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("x-poot-warnings"),
        );
    }
    response
}

/// The `Host` and `Origin` checks (see the module docs): the allowed origin to echo in CORS
/// headers, if the request came with one, or the 403's code and message.
fn check_access(
    req: &Request<Incoming>,
    config: &Config,
) -> Result<Option<HeaderValue>, (&'static str, &'static str)> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let name = host_name(host);
    if name.is_empty() || !config.allowed_hosts.iter().any(|a| a == "*" || *a == name) {
        return Err((
            "forbidden_host",
            "this server does not answer for the Host this request names (see --allowed-host)",
        ));
    }
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return Ok(None);
    };
    let allowed = origin.to_str().is_ok_and(|o| {
        let o = o.trim().trim_end_matches('/').to_ascii_lowercase();
        let same_host = o
            .strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
            .is_some_and(|authority| authority == host.trim().to_ascii_lowercase());
        same_host || config.allowed_origins.iter().any(|a| a == "*" || *a == o)
    });
    if allowed {
        Ok(Some(origin.clone()))
    } else {
        Err((
            "forbidden_origin",
            "requests from this origin are not allowed (see --allowed-origin)",
        ))
    }
}

async fn route(req: Request<Incoming>, server: &Server, cross_origin: bool) -> Response<Reply> {
    let path = req.uri().path().to_owned();
    let known = matches!(
        path.as_str(),
        "/health" | "/v1/models" | "/v1/chat/completions" | "/v1/completions"
    );
    if req.method() == Method::OPTIONS && known {
        // A preflight; the origin, if any, was allowed above.
        let mut response = Response::new(Either::Left(Full::new(Bytes::new())));
        *response.status_mut() = StatusCode::NO_CONTENT;
        let headers = response.headers_mut();
        headers.insert(
            header::ALLOW,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        if cross_origin {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST, OPTIONS"),
            );
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("authorization, content-type"),
            );
            headers.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        }
        return response;
    }
    if (req.method(), path.as_str()) == (&Method::GET, "/health") {
        return health(server);
    }
    if let Some(key) = &server.config.api_key {
        if !bearer_matches(&req, key) {
            let mut response = http_error(
                StatusCode::UNAUTHORIZED,
                "invalid_api_key",
                "this server needs `Authorization: Bearer <its API key>`",
            );
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
    }
    let endpoint = match (req.method(), path.as_str()) {
        (&Method::GET, "/v1/models") => {
            return json_response(StatusCode::OK, &server.engine.models_json())
        }
        (&Method::POST, "/v1/chat/completions") => Endpoint::Chat,
        (&Method::POST, "/v1/completions") => Endpoint::Completion,
        _ if known => {
            let err = Error::invalid_input(format!("{} is not allowed on {path}", req.method()));
            return error_response(StatusCode::METHOD_NOT_ALLOWED, &err);
        }
        _ => {
            let err = Error::invalid_input(format!("no route {path}"));
            return error_response(StatusCode::NOT_FOUND, &err);
        }
    };
    completion(req, endpoint, server).await
}

fn health(server: &Server) -> Response<Reply> {
    let stats = &server.stats;
    let alive = stats.alive.load(Ordering::SeqCst);
    let body = json!({
        "status": if alive { "ok" } else { "error" },
        "queued": server.config.queue - server.slots.available_permits(),
        "busy": stats.busy.load(Ordering::SeqCst),
        "finished": stats.finished.load(Ordering::SeqCst),
        "cancelled": stats.cancelled.load(Ordering::SeqCst),
        "panicked": stats.panicked.load(Ordering::SeqCst),
        "completion_tokens": stats.completion_tokens.load(Ordering::SeqCst),
    });
    let status = if alive {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &body)
}

/// Whether `req` carries `Authorization: Bearer key` (compared in time independent of where
/// the bytes differ).
fn bearer_matches(req: &Request<Incoming>, key: &str) -> bool {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return false;
    };
    let value = value.as_bytes();
    if value.len() < 7 || !value[..7].eq_ignore_ascii_case(b"bearer ") {
        return false;
    }
    let given = value[7..].trim_ascii();
    given.len() == key.len()
        && given
            .iter()
            .zip(key.as_bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

fn overloaded(message: &str) -> Response<Reply> {
    let mut response = http_error(StatusCode::SERVICE_UNAVAILABLE, "overloaded", message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The answer once the generation thread is gone (`/health` says so too): nothing will run.
fn generation_stopped() -> Response<Reply> {
    http_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "generation_stopped",
        "the generation thread has stopped; the server must be restarted",
    )
}

async fn completion(
    req: Request<Incoming>,
    endpoint: Endpoint,
    server: &Server,
) -> Response<Reply> {
    let json_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return http_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the request body must be sent as `Content-Type: application/json`",
        );
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > MAX_BODY_BYTES as u64) {
        if n <= DRAIN_BYTES {
            drain(req.into_body(), server.config.body_timeout).await;
        }
        return error_response(StatusCode::PAYLOAD_TOO_LARGE, &too_large());
    }
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES).collect();
    let body = match tokio::time::timeout(server.config.body_timeout, body).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => {
            return error_response(StatusCode::PAYLOAD_TOO_LARGE, &too_large())
        }
        Ok(Err(e)) => {
            let err = Error::invalid_input(format!("cannot read the request body: {e}"));
            return error_response(StatusCode::BAD_REQUEST, &err);
        }
        Err(_) => {
            let message = format!(
                "the request body did not arrive within {} s",
                server.config.body_timeout.as_secs()
            );
            return http_error(StatusCode::REQUEST_TIMEOUT, "timeout", &message);
        }
    };
    // Admission before any parsing or compiling: a full queue costs nothing more.
    let Ok(slot) = server.slots.clone().try_acquire_owned() else {
        let message = format!(
            "{} requests are already waiting; try again later",
            server.config.queue
        );
        return overloaded(&message);
    };
    if !server.stats.alive.load(Ordering::SeqCst) {
        return generation_stopped();
    }
    let engine = server.engine.clone();
    // hyper drops this future when the client leaves; while it waits on the compile below,
    // nothing else would count the request, admitted but never queued.
    let left = CountIfClientLeaves::armed(&server.stats);
    let compiled = tokio::task::spawn_blocking(move || {
        serde_json::from_slice::<Value>(&body)
            .map_err(|e| Error::invalid_input(format!("the request body is not valid JSON: {e}")))
            .and_then(|v| Run::new(engine, &v, endpoint, run_options(endpoint)))
    })
    .await;
    left.disarm();
    let run = match compiled {
        Ok(Ok(run)) => run,
        Ok(Err(err)) => return api_error(&err),
        Err(_) => return json_response(StatusCode::INTERNAL_SERVER_ERROR, &internal_error_body()),
    };
    let stream = run.request().stream;
    let warnings = warnings_header(&run.warnings());
    let cancel = Arc::new(AtomicBool::new(false));
    let guard = CancelOnDrop(cancel.clone());
    let (chunks, chunk_receiver) = mpsc::channel(CHUNK_BUFFER);
    let (done, outcome) = oneshot::channel();
    let job = Job {
        run,
        chunks,
        done,
        cancel,
        slot,
    };
    if server.jobs.send(job).is_err() {
        return generation_stopped();
    }
    let mut response = if stream {
        let body = SseBody {
            chunks: chunk_receiver,
            chunks_open: true,
            done: Some(outcome),
            tail: VecDeque::new(),
            _cancel: guard,
        };
        let mut response = Response::new(Either::Right(body));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    } else {
        // Dropped with this future if the connection closes first: `guard` then cancels the
        // run. The receiver is kept so a chunk sent by mistake cannot read as a gone client.
        let outcome = outcome.await;
        drop((guard, chunk_receiver));
        match outcome {
            Ok(Outcome {
                result: Ok(body), ..
            }) => json_response(StatusCode::OK, &body.unwrap_or(Value::Null)),
            Ok(Outcome {
                result: Err(Failed::Api(err)),
                ..
            }) => api_error(&err),
            Ok(Outcome {
                result: Err(Failed::Panic),
                ..
            })
            | Err(_) => json_response(StatusCode::INTERNAL_SERVER_ERROR, &internal_error_body()),
        }
    };
    if let Some(warnings) = warnings {
        response.headers_mut().insert("x-poot-warnings", warnings);
    }
    response
}

/// Past the body limit, a body declared at most this long is read and dropped before the 413
/// goes out: answering at once and closing made a client that was still sending (a 2 MiB
/// `fetch` in the serve test, about 1 run in 3) see a reset connection instead of the 413.
/// Longer ones are answered at once; the connection may then reset under the client.
const DRAIN_BYTES: u64 = 8 << 20;

/// Reads and drops a body (an over-limit one, see [`DRAIN_BYTES`]) for at most `timeout`.
async fn drain(mut body: Incoming, timeout: Duration) {
    let _ = tokio::time::timeout(timeout, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
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

    /// A job for `body` on `engine`, with the receivers its connection would hold.
    fn job(
        engine: &Arc<Engine>,
        body: Value,
        slots: &Arc<Semaphore>,
    ) -> (
        Job,
        mpsc::Receiver<Value>,
        oneshot::Receiver<Outcome>,
        Arc<AtomicBool>,
    ) {
        let endpoint = Endpoint::Completion;
        let run = Run::new(engine.clone(), &body, endpoint, run_options(endpoint)).unwrap();
        let (chunks, chunk_receiver) = mpsc::channel(CHUNK_BUFFER);
        let (done, outcome) = oneshot::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let job = Job {
            run,
            chunks,
            done,
            cancel: cancel.clone(),
            slot: slots.clone().try_acquire_owned().unwrap(),
        };
        (job, chunk_receiver, outcome, cancel)
    }

    fn tiny() -> (&'static Model<&'static [u8]>, Arc<Engine>) {
        let file: &'static [u8] = Box::leak(TinySpec::default().build().into_boxed_slice());
        let cpu: &'static Model<&'static [u8]> =
            Box::leak(Box::new(Model::from_gguf_bytes(file).unwrap()));
        let engine = Arc::new(Engine::from_gguf(&Gguf::parse(file).unwrap()).unwrap());
        (cpu, engine)
    }

    #[test]
    fn gpu_weights_are_uploaded_once_for_every_request() {
        let (cpu, engine) = tiny();
        let before = poot::gpu::weight_bytes_uploaded();
        let weights = match Weights::load(Some(&"gpu".to_owned()), cpu) {
            Ok(weights) => weights,
            Err(_) => panic!("GPU tests need an adapter"),
        };
        assert!(matches!(weights, Weights::Gpu(_)));
        // Process-wide, so a backend that opened its own context and uploaded again counts.
        let uploaded = poot::gpu::weight_bytes_uploaded();
        assert!(uploaded > before);
        let stats = Stats::default();
        let slots = Arc::new(Semaphore::new(3));
        let (jobs, queue) = std_mpsc::channel();
        let mut outcomes = Vec::new();
        for _ in 0..3 {
            let body = json!({"prompt": "ab", "max_tokens": 4, "temperature": 0});
            let (job, chunks, outcome, _) = job(&engine, body, &slots);
            jobs.send(job).unwrap();
            outcomes.push((chunks, outcome));
        }
        drop(jobs);
        // Returns once the queue is empty and closed.
        generation_thread(&weights, queue, &stats, Duration::from_secs(5), None);
        let mut texts = Vec::new();
        for (_, mut outcome) in outcomes {
            let body = match outcome.try_recv() {
                Ok(Outcome {
                    result: Ok(Some(body)),
                    ..
                }) => body,
                _ => panic!("a response body"),
            };
            texts.push(body["choices"][0]["text"].as_str().unwrap().to_owned());
        }
        assert_eq!(stats.finished.load(Ordering::SeqCst), 3);
        assert_eq!(slots.available_permits(), 3, "every slot freed");
        // Greedy from the same prompt in a fresh session each time: the same text.
        assert!(texts.iter().all(|t| t == &texts[0]), "{texts:?}");
        assert_eq!(poot::gpu::weight_bytes_uploaded(), uploaded);
    }

    #[test]
    fn a_client_that_leaves_while_compiling_is_counted_once() {
        let stats = Stats::default();
        // The request's future dropped at the compile's await: counted as cancelled.
        drop(CountIfClientLeaves::armed(&stats));
        assert_eq!(stats.finished.load(Ordering::SeqCst), 1);
        assert_eq!(stats.cancelled.load(Ordering::SeqCst), 1);
        // Past the compile the job (or the 400) accounts for it: not counted here.
        CountIfClientLeaves::armed(&stats).disarm();
        assert_eq!(stats.finished.load(Ordering::SeqCst), 1);
        assert_eq!(stats.cancelled.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_stalled_reader_is_cancelled_and_a_panic_costs_one_job() {
        let (cpu, engine) = tiny();
        let weights = Weights::Cpu(cpu);
        let stats = Stats::default();
        let slots = Arc::new(Semaphore::new(4));
        let (jobs, queue) = std_mpsc::channel();
        // A stream nobody reads: the channel fills, and after the stall time the run stops.
        let long = json!({"prompt": "ab", "max_tokens": 200, "stream": true,
            "temperature": 0, "logit_bias": {"2": -100}});
        let (stalled, _unread, stalled_outcome, _) = job(&engine, long, &slots);
        // A job that panics (the test hook), then an ordinary one.
        let (panics, _c1, panic_outcome, _) = job(
            &engine,
            json!({"prompt": "PANIC-HERE", "max_tokens": 2}),
            &slots,
        );
        let (fine, _c2, fine_outcome, _) =
            job(&engine, json!({"prompt": "ab", "max_tokens": 2}), &slots);
        // A job whose client left while it waited.
        let (left, _c3, left_outcome, cancel) =
            job(&engine, json!({"prompt": "ab", "max_tokens": 50}), &slots);
        cancel.store(true, Ordering::SeqCst);
        for j in [stalled, panics, fine, left] {
            jobs.send(j).unwrap();
        }
        drop(jobs);
        // No stall time at all: the run stops at the first step the channel is full, which
        // keeps the test independent of how fast the tiny model is.
        generation_thread(
            &weights,
            queue,
            &stats,
            Duration::ZERO,
            Some("PANIC-HERE".into()),
        );
        assert!(matches!(
            stalled_outcome.blocking_recv().map(|o| o.result),
            Ok(Ok(None))
        ));
        assert!(matches!(
            panic_outcome.blocking_recv().map(|o| o.result),
            Ok(Err(Failed::Panic))
        ));
        assert!(matches!(
            fine_outcome.blocking_recv().map(|o| o.result),
            Ok(Ok(Some(_)))
        ));
        assert!(matches!(
            left_outcome.blocking_recv().map(|o| o.result),
            Ok(Ok(Some(_)))
        ));
        assert_eq!(stats.finished.load(Ordering::SeqCst), 4);
        assert_eq!(stats.panicked.load(Ordering::SeqCst), 1);
        assert_eq!(stats.cancelled.load(Ordering::SeqCst), 2);
        // The stalled stream stopped once its 32 chunks were buffered, far short of its 200
        // tokens (the other two jobs add at most 2 each).
        let tokens = stats.completion_tokens.load(Ordering::SeqCst);
        assert!(tokens < (CHUNK_BUFFER + 8) as u64, "{tokens} tokens");
        // The thread ended normally with its queue: /health would now say it is gone.
        assert!(!stats.alive.load(Ordering::SeqCst));
    }

    #[test]
    fn header_values_stay_ascii_and_hosts_normalize() {
        let warnings = json!(["unknown field `températüre😀` was ignored", "\u{7f}"]);
        let escaped = ascii_json(&warnings);
        assert!(HeaderValue::from_str(&escaped).is_ok(), "{escaped}");
        assert_eq!(serde_json::from_str::<Value>(&escaped).unwrap(), warnings);
        // Thousands of unknown fields: the header keeps what fits and counts the rest.
        let many: Vec<Value> = (0..5000)
            .map(|i| Value::from(format!("unknown field `field{i}` was ignored")))
            .collect();
        let header = warnings_header(&Value::Array(many)).unwrap();
        assert!(
            header.len() <= MAX_WARNINGS_HEADER_BYTES,
            "{}",
            header.len()
        );
        let shown: Vec<String> = serde_json::from_slice(header.as_bytes()).unwrap();
        assert_eq!(shown[0], "unknown field `field0` was ignored");
        let last = shown.last().unwrap();
        let rest = 5000 - (shown.len() - 1);
        assert!(last.starts_with(&format!("{rest} more warnings")), "{last}");
        assert!(warnings_header(&json!([])).is_none());
        assert_eq!(host_name("LocalHost:8080"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        assert_eq!(host_entry("::1"), "[::1]");
        assert_eq!(host_entry("Example.COM:443"), "example.com");
    }
}
