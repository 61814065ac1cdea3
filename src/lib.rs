//! poot: structured output from language models, in the browser.
//!
//! Key types:
//! - [`mask::TokenMask`]: the set of tokens the sampler may pick at one step, one bit per token.
//! - [`Error`]: every fallible call's error, with a stable [`Error::code`] and the field at fault.
//!
//! The decode loop every front-end shares: a constraint fills a mask, the mask is applied to
//! the model's logits ([`mask::apply_token_mask`] on the CPU, `shaders/apply_token_mask.wgsl` on
//! the GPU), a token is chosen from what is left, and the constraint advances by that token.
//!
//! ```
//! let mut logits = vec![0.5, 2.0, 1.0];
//! // Allow tokens 0 and 2 only: token 1 has the largest logit but is masked out.
//! let chosen = poot::mask::apply_token_mask(&mut logits, &[0b101]).unwrap();
//! assert_eq!(chosen, 2);
//! assert_eq!(logits[1], f32::NEG_INFINITY);
//! ```
//!
//! The core is plain Rust with no I/O, clocks or threads; the edges are behind features:
//! `gpu` ([`gpu`], wgpu compute kernels), `cli` (the `poot` binary), and `src/wasm/`
//! (compiled only for `wasm32`, the only place that touches JavaScript).

pub mod api;
pub mod chat_template;
pub mod choice;
pub(crate) mod closing;
pub mod constraint;
pub mod error;
pub mod gguf;
pub mod grammar;
pub mod json_schema;
pub mod json_value;
pub mod limits;
pub mod mask;
pub mod model;
pub mod quant;
pub mod regex;
pub mod sampling;
pub(crate) mod slice_ids;
#[cfg(test)]
mod test_rng;
pub mod tokenizer;
pub mod vocab;

#[cfg(feature = "gpu")]
pub mod gpu;

#[cfg(target_arch = "wasm32")]
mod wasm;

pub use error::{Error, Result};
