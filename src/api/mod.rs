//! The OpenAI surface, written once for the native server and the browser engine.
//!
//! - [`request`]: reading and validating a chat or completions body; each failure is an
//!   OpenAI-shaped 400 ([`response::error_body`]) naming the field, before any model work.
//! - [`run`]: the generation loop of one request as a state machine ([`Run`]) that any
//!   backend drives: the constraint (by the spec's precedence: a forced tool call >
//!   `guided_choice` > `guided_regex` > `guided_grammar` > `guided_json` > `response_format`)
//!   masks every step of every one of the `n` choices.
//! - [`tools`]: tool-call codecs per model family ([`tools::FEATURE_MATRIX`]).
//! - [`response`]: the wire shapes (responses, stream chunks, logprobs, errors).
//!
//! Semantics worth knowing:
//! - Unknown request fields are accepted and ignored, and listed in the response's
//!   `warnings` (the server also sends them in an `x-poot-warnings` header).
//! - `logprobs` are those of the distribution after the constraint's mask, `logit_bias` and
//!   the penalties, before temperature and truncation: a masked token has probability 0, so
//!   `top_logprobs` lists only tokens the constraint allows. Asking for logprobs turns
//!   jump-forward off, so every token has its own entry.
//! - `usage.completion_tokens` counts every token sampled or forced, an ending
//!   end-of-sequence token included.
//! - Streamed text is the same as the whole reply's: UTF-8 characters are never split, a
//!   tail that may still grow into a stop sequence or a tool call is held back, and a
//!   SentencePiece model's leading space at the start of the output is dropped in both.

pub mod request;
pub mod response;
pub mod run;
pub mod tools;

pub use request::{Endpoint, Request};
pub use response::{error_body, error_status};
pub use run::{Engine, Forward, Run, RunOptions, StepStats};
