//! Every bound the spec sets on a request, in one place.
//!
//! Each limit exists so that one request cannot exhaust the server (or the browser tab): a
//! constraint that needs more is refused with a 400 whose message names the input and the
//! limit, rather than slowly built. Errors for these limits have code `limit_exceeded`
//! ([`crate::Error::is_limit_exceeded`]).

/// Longest `guided_regex` pattern accepted, in bytes of its UTF-8 text (spec: 4096).
///
/// The pattern length bounds parse time and the size of the syntax tree before any automaton
/// is built; a longer pattern is refused before parsing.
pub const MAX_REGEX_BYTES: usize = 4096;

/// Longest `guided_grammar` text accepted, in bytes (spec: 16 KiB).
pub const MAX_GRAMMAR_BYTES: usize = 16 * 1024;

/// Longest `guided_json` / `response_format` schema accepted, in bytes of its JSON text
/// (spec: 16 KiB).
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;

/// Working memory an automaton may use while it is built, in bytes (spec: 256 KiB).
///
/// Applied three times, each a hard stop: to the Thompson NFA, to the determinizer's
/// auxiliary storage, and to the dense DFA itself. A pattern such as `(a|b)*a(a|b){17}`
/// needs 2^18 DFA states, so determinization stops after ~1 ms at this bound instead of
/// building megabytes. A `guided_json` schema compiles to a regex under the same bound.
pub const AUTOMATON_BYTES: usize = 256 * 1024;

/// Memory one compiled constraint may spend on cached per-state token masks, in bytes.
///
/// A mask over a 49,152-token vocabulary is 6 KiB, so this caches ~10,900 automaton states.
/// Past it, masks of further states are recomputed on every step (correct, just slower), so
/// a long generation through a large automaton cannot grow memory without bound.
pub const MASK_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Nesting depth of groups and repetitions in a regex (regex-syntax's default is 250).
///
/// Parsing recurses on nesting, so this bounds stack use; 128 levels is far deeper than any
/// hand-written or schema-generated pattern.
pub const MAX_REGEX_NESTING: u32 = 128;

/// How long a pattern or choice may be when quoted inside an error message, in characters.
pub const ERROR_QUOTE_CHARS: usize = 80;
