//! Runs one input's work on a thread of its own with the wasm32 stack, measuring its time and
//! its peak memory, for the hostile-input and fuzz tests: each must end in a result or a 4xx
//! error within [`TIME_BOUND`] and under [`MEMORY_BOUND`], never a panic, a stack overflow or
//! a hang. A test binary that uses it gets its counting allocator.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Counts the bytes live on the current thread and their peak, so each case's memory is its
/// own even while other tests run.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    // `try_with`: a thread's last frees run after its locals are gone.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

#[allow(unsafe_code)]
// SAFETY: every call is forwarded to the system allocator unchanged; only counters change.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The wasm32 target's default stack (rustc's `-z stack-size` default for it is 1 MiB).
pub const STACK_BYTES: usize = 1 << 20;
/// What the hostile-input issue asks of every input.
pub const TIME_BOUND: Duration = Duration::from_secs(1);
/// "Well under 1 GiB": the largest compile of the corpus stays under ~40 MB.
pub const MEMORY_BOUND: isize = 256 << 20;
/// A case still running this long is reported as a hang (its thread is left behind).
pub const HANG: Duration = Duration::from_secs(20);

/// How one case ended.
#[derive(Debug)]
pub struct Outcome {
    /// `Err((status, code, message))` for an error.
    pub result: Result<(), (u16, String, String)>,
    pub elapsed: Duration,
    pub peak: isize,
}

/// Runs `f` on a fresh thread with the wasm stack, measuring its time and peak memory; a
/// panic or a hang fails the calling test, naming the case.
pub fn run_case(
    name: &str,
    f: impl FnOnce() -> Result<(), poot::Error> + Send + 'static,
) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(name.chars().take(60).collect())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            PEAK.with(|p| p.set(LIVE.with(Cell::get)));
            let base = LIVE.with(Cell::get);
            let start = Instant::now();
            let r = f();
            let elapsed = start.elapsed();
            let peak = PEAK.with(Cell::get) - base;
            let result = r.map_err(|e| {
                (
                    poot::api::error_status(&e),
                    e.code().to_owned(),
                    e.to_string(),
                )
            });
            let _ = tx.send(Outcome {
                result,
                elapsed,
                peak,
            });
        })
        .expect("spawn");
    match rx.recv_timeout(HANG) {
        Ok(o) => {
            handle.join().expect("the case's thread ends");
            o
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{name}: still running after {HANG:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{name}: panicked (see above) instead of returning a result or an error")
        }
    }
}

/// [`run_case`], then asserts the bounds (time, memory, a 4xx for an error).
pub fn bounded(
    name: &str,
    f: impl FnOnce() -> Result<(), poot::Error> + Send + 'static,
) -> Outcome {
    let o = run_case(name, f);
    check(name, &o);
    o
}

/// The bounds every case must meet.
pub fn check(name: &str, o: &Outcome) {
    assert!(o.elapsed < TIME_BOUND, "{name}: took {:?}", o.elapsed);
    assert!(o.peak < MEMORY_BOUND, "{name}: peak {} MiB", o.peak >> 20);
    if let Err((status, _, message)) = &o.result {
        assert!(
            (400..500).contains(status),
            "{name}: a hostile input is the client's error, got {status}: {message}"
        );
    }
}

/// Compiles a request body's constraint, as `poot serve` and the wasm engine do.
pub fn compile_body(body: serde_json::Value) -> Result<(), poot::Error> {
    if let Some(spec) = poot::constraint::Spec::from_request(&body)? {
        spec.compile()?;
    }
    Ok(())
}
