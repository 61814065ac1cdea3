//! Every bound the spec sets on a request, in one place.
//!
//! Each limit exists so that one request cannot exhaust the server (or the browser tab): a
//! constraint that needs more is refused with a 400 whose message names the input and the
//! limit, rather than slowly built. Errors for these limits have code `limit_exceeded`
//! ([`crate::Error::is_limit_exceeded`]).

use crate::error::{Error, Result};

/// The per-request bounds a deployment may tighten, as one value (the shape of regex-automata's
/// `Config`): [`Limits::DEFAULT`] holds the spec's numbers (the constants below, each with why
/// it is that number), and [`Limits::tightened`] lowers some of them, as `poot serve --limits`
/// does. Each field is checked while the work is done, so a request past it stops with a
/// `limit_exceeded` 400 naming the field and the bound.
///
/// Every per-request bound is here: the text sizes checked when a request is read, the JSON
/// Schema compiler's budgets, the DFA's and the grammar compiler's bounds, a grammar step's
/// work and the `guided_choice` list. (Bounds on model files, GGUF, `tokenizer.json` and chat
/// templates, are per model, and stay constants.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `guided_regex` text, in bytes. Default [`MAX_REGEX_BYTES`] (4,096). Costs parse time
    /// and a syntax tree proportional to it.
    pub regex_bytes: usize,
    /// `guided_grammar` text, in bytes. Default [`MAX_GRAMMAR_BYTES`] (16 KiB).
    pub grammar_bytes: usize,
    /// `guided_json` / `response_format` schema text, in bytes. Default [`MAX_SCHEMA_BYTES`]
    /// (16 KiB).
    pub schema_bytes: usize,
    /// Subschemas the JSON Schema compiler may visit. Default [`MAX_SCHEMA_EXPANSION`]
    /// (10,000): each visit copies its subschema, ~40 ms and ~100 MB at the default.
    pub schema_expansion: usize,
    /// `enum`/`const` judge work, in subschema visits or pattern bytes. Default
    /// [`MAX_SCHEMA_JUDGE_WORK`] (100,000, ~40 ms in a debug build).
    pub schema_judge_work: u64,
    /// Nesting of subschemas and `$ref`s. Default [`MAX_SCHEMA_DEPTH`] (64); a few stack
    /// frames each.
    pub schema_depth: usize,
    /// Ordered `oneOf` branch pairs checked for overlap. Default [`MAX_ONE_OF_PAIRS`]
    /// (65,536, ~0.2 s).
    pub one_of_pairs: usize,
    /// A DFA's table (and its NFA) for `guided_regex`, `guided_choice` and `guided_json`, in
    /// bytes. Default [`AUTOMATON_BYTES`] (256 KiB): the memory a constraint keeps.
    pub automaton_bytes: usize,
    /// Work while determinizing a regex, in bytes of state sets made. Default
    /// [`DETERMINIZE_BYTES`] (1 MiB, ~10 ms).
    pub determinize_bytes: usize,
    /// The grammar engine's automaton (`guided_grammar`, a schema past the DFA bound, a forced
    /// tool call), in bytes. Default [`GRAMMAR_AUTOMATON_BYTES`] (1 MiB).
    pub grammar_automaton_bytes: usize,
    /// Determinization work over all of a grammar's attempts, in units (edges scanned, states
    /// visited). Default [`GRAMMAR_DETERMINIZE_WORK`] (48 M, ~0.3 s).
    pub grammar_determinize_work: u64,
    /// Minimization work, in table entries read; past it the automaton is kept unminimized.
    /// Default [`GRAMMAR_MINIMIZE_WORK`] (32 M).
    pub grammar_minimize_work: usize,
    /// Most repetitions of a grammar item that can match the empty string. Default
    /// [`MAX_GRAMMAR_REPETITION`] (1,000).
    pub grammar_repetition: u32,
    /// Parentheses nesting in a grammar. Default [`MAX_GRAMMAR_NESTING`] (128).
    pub grammar_nesting: u32,
    /// Levels of a grammar's syntax tree (groups, alternatives, repetitions). Default
    /// [`MAX_GRAMMAR_DEPTH`] (512; ~300 bytes of stack each).
    pub grammar_depth: u32,
    /// Work of one grammar step (a mask, an advance), in units. Default
    /// [`MAX_GRAMMAR_STEP_WORK`] (200,000, ~10 ms).
    pub grammar_step_work: u64,
    /// `guided_choice` strings. Default [`MAX_CHOICES`] (1,024).
    pub choices: usize,
    /// `guided_choice` strings' total bytes. Default [`MAX_CHOICE_BYTES`] (16 KiB).
    pub choice_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

impl Limits {
    /// The spec's numbers.
    pub const DEFAULT: Limits = Limits {
        regex_bytes: MAX_REGEX_BYTES,
        grammar_bytes: MAX_GRAMMAR_BYTES,
        schema_bytes: MAX_SCHEMA_BYTES,
        schema_expansion: MAX_SCHEMA_EXPANSION,
        schema_judge_work: MAX_SCHEMA_JUDGE_WORK,
        schema_depth: MAX_SCHEMA_DEPTH,
        one_of_pairs: MAX_ONE_OF_PAIRS,
        automaton_bytes: AUTOMATON_BYTES,
        determinize_bytes: DETERMINIZE_BYTES,
        grammar_automaton_bytes: GRAMMAR_AUTOMATON_BYTES,
        grammar_determinize_work: GRAMMAR_DETERMINIZE_WORK,
        grammar_minimize_work: GRAMMAR_MINIMIZE_WORK,
        grammar_repetition: MAX_GRAMMAR_REPETITION,
        grammar_nesting: MAX_GRAMMAR_NESTING,
        grammar_depth: MAX_GRAMMAR_DEPTH,
        grammar_step_work: MAX_GRAMMAR_STEP_WORK,
        choices: MAX_CHOICES,
        choice_bytes: MAX_CHOICE_BYTES,
    };

    /// The defaults tightened by `overrides` given as JSON text ([`Limits::tightened`]), as
    /// `poot serve --limits` and the wasm engine's `limits` option take them.
    pub fn from_json_text(overrides: &str) -> Result<Limits> {
        let value = serde_json::from_str(overrides).map_err(|e| {
            Error::invalid_input(format!("limits is not JSON: {e}"))
                .with_param("limits")
                .with_source(e)
        })?;
        Limits::DEFAULT.tightened(&value)
    }

    /// These limits with the fields named in `overrides` (a JSON object, field names as
    /// above: `{"schema_bytes": 8192}`) lowered. A limit can only be tightened: a value above
    /// the default, below 1 or not an integer, and an unknown name, are errors naming it.
    pub fn tightened(&self, overrides: &serde_json::Value) -> Result<Limits> {
        let bad = |m: String| Error::invalid_input(m).with_param("limits");
        let fields = overrides
            .as_object()
            .ok_or_else(|| bad("limits must be a JSON object of field names and numbers".into()))?;
        let mut out = *self;
        for (name, value) in fields {
            if !Self::NAMES.contains(&name.as_str()) {
                return Err(bad(format!(
                    "limits: unknown limit `{name}` (known: {})",
                    Self::NAMES.join(", ")
                )));
            }
            let default = Self::DEFAULT.get(name);
            let n = value
                .as_u64()
                .filter(|&n| (1..=default).contains(&n))
                .ok_or_else(|| {
                    bad(format!(
                        "limits: `{name}` must be an integer from 1 to its default, {default}"
                    ))
                })?;
            out.set(name, n);
        }
        Ok(out)
    }

    /// The field names [`Limits::tightened`] reads.
    pub const NAMES: [&'static str; 18] = [
        "regex_bytes",
        "grammar_bytes",
        "schema_bytes",
        "schema_expansion",
        "schema_judge_work",
        "schema_depth",
        "one_of_pairs",
        "automaton_bytes",
        "determinize_bytes",
        "grammar_automaton_bytes",
        "grammar_determinize_work",
        "grammar_minimize_work",
        "grammar_repetition",
        "grammar_nesting",
        "grammar_depth",
        "grammar_step_work",
        "choices",
        "choice_bytes",
    ];

    fn get(&self, name: &str) -> u64 {
        match name {
            "regex_bytes" => self.regex_bytes as u64,
            "grammar_bytes" => self.grammar_bytes as u64,
            "schema_bytes" => self.schema_bytes as u64,
            "schema_expansion" => self.schema_expansion as u64,
            "schema_judge_work" => self.schema_judge_work,
            "schema_depth" => self.schema_depth as u64,
            "automaton_bytes" => self.automaton_bytes as u64,
            "determinize_bytes" => self.determinize_bytes as u64,
            "grammar_automaton_bytes" => self.grammar_automaton_bytes as u64,
            "grammar_determinize_work" => self.grammar_determinize_work,
            "grammar_minimize_work" => self.grammar_minimize_work as u64,
            "grammar_repetition" => u64::from(self.grammar_repetition),
            "grammar_nesting" => u64::from(self.grammar_nesting),
            "grammar_depth" => u64::from(self.grammar_depth),
            "grammar_step_work" => self.grammar_step_work,
            "choices" => self.choices as u64,
            "choice_bytes" => self.choice_bytes as u64,
            _ => self.one_of_pairs as u64,
        }
    }

    fn set(&mut self, name: &str, n: u64) {
        // `n` is at most the default, which fits each field's type.
        let n_usize = n as usize;
        match name {
            "regex_bytes" => self.regex_bytes = n_usize,
            "grammar_bytes" => self.grammar_bytes = n_usize,
            "schema_bytes" => self.schema_bytes = n_usize,
            "schema_expansion" => self.schema_expansion = n_usize,
            "schema_judge_work" => self.schema_judge_work = n,
            "schema_depth" => self.schema_depth = n_usize,
            "automaton_bytes" => self.automaton_bytes = n_usize,
            "determinize_bytes" => self.determinize_bytes = n_usize,
            "grammar_automaton_bytes" => self.grammar_automaton_bytes = n_usize,
            "grammar_determinize_work" => self.grammar_determinize_work = n,
            "grammar_minimize_work" => self.grammar_minimize_work = n_usize,
            "grammar_repetition" => self.grammar_repetition = n as u32,
            "grammar_nesting" => self.grammar_nesting = n as u32,
            "grammar_depth" => self.grammar_depth = n as u32,
            "grammar_step_work" => self.grammar_step_work = n,
            "choices" => self.choices = n_usize,
            "choice_bytes" => self.choice_bytes = n_usize,
            _ => self.one_of_pairs = n_usize,
        }
    }
}

/// The one size check of a request's text: `len` bytes of `field` against `limit`.
pub(crate) fn check_size(field: &str, len: usize, limit: usize) -> Result<()> {
    if len > limit {
        return Err(Error::limit_exceeded(format!(
            "{field} is {len} bytes, over the {limit}-byte limit"
        ))
        .with_param(field));
    }
    Ok(())
}

/// Longest `guided_regex` pattern accepted, in bytes of its UTF-8 text (spec: 4096).
///
/// The pattern length bounds parse time and the size of the syntax tree before any automaton
/// is built; a longer pattern is refused before parsing.
pub const MAX_REGEX_BYTES: usize = 4096;

/// Longest `guided_grammar` text accepted, in bytes (spec: 16 KiB).
pub const MAX_GRAMMAR_BYTES: usize = 16 * 1024;

/// Largest count in a `guided_grammar` repetition `{m}`, `{m,}` or `{m,n}` of an item that
/// can match the empty string.
///
/// Such a repetition is expanded into copies of its item, so `(x?){0,100000}` would build a
/// hundred thousand copies; counts past this are refused (llama.cpp's own threshold is
/// 2000). Nested counts multiply and are caught by [`GRAMMAR_AUTOMATON_BYTES`]. A count past
/// 128 of an item that cannot be empty is a counter instead, whatever the count (up to
/// `u32::MAX`): a few states and a number in its stack frame.
pub const MAX_GRAMMAR_REPETITION: u32 = 1000;

/// Memory the compiled automaton of a `guided_grammar` may use, in bytes (NFA while building,
/// then the rule DFAs and their call expansions).
///
/// Four times the regex bound: a grammar has many rules, and a C-like language with keywords
/// needs ~100 KiB here. A grammar past it (`("a"|"b"){1000}` nested in another count, or a rule
/// whose determinization explodes) is refused while compiling.
pub const GRAMMAR_AUTOMATON_BYTES: usize = 1024 * 1024;

/// Work the grammar compiler's subset construction may do, in units of one NFA edge read,
/// one byte class it covers, or one NFA state visited (by an ε-closure or the nullable-rule
/// fixpoint), over all the attempts of one compile (a grammar past [`GRAMMAR_AUTOMATON_BYTES`]
/// is compiled again with fewer rules inlined, a JSON Schema's grammar is rendered again with
/// counts expanded, then nested, then with its listed keys only, and each attempt redoes the
/// work).
///
/// The automaton bound charges a DFA state's bytes, but making it reads its NFA states' edges
/// and closes over what they reach: the most a JSONSchemaBench or SchemaStore grammar needs is
/// 2.2 million units (all attempts); past 48 million the grammar is refused while compiling.
pub const GRAMMAR_DETERMINIZE_WORK: u64 = 48_000_000;

/// Work the grammar compiler's minimization may do, in units of one table entry read or one
/// transition or state marked by the partition refinement (O(m log n) for m transitions).
///
/// Past this bound the determinized automaton is used as it is (the same language, with
/// duplicate states, already within [`GRAMMAR_AUTOMATON_BYTES`]); the most a JSONSchemaBench
/// or SchemaStore grammar needs is 0.4 million (Moore's rounds, before, took up to 13.8
/// million: one round per state of the longest chain).
pub const GRAMMAR_MINIMIZE_WORK: usize = 32_000_000;

/// Parenthesis nesting depth in a `guided_grammar` (the parser recurses on groups).
pub const MAX_GRAMMAR_NESTING: u32 = 128;

/// Depth of a `guided_grammar` rule's syntax tree, in levels: a literal, class, `.` or rule
/// name is 1, and a sequence, an alternation or a repetition one more than its deepest part.
///
/// The compiler walks the tree recursively (counting, sizing, building, cloning and dropping
/// it), and a run of repetition operators nests it without parentheses: `"a"` and 8,000 `*`
/// (8 KiB of text, which llama.cpp accepts) overflowed a wasm32 instance's 1 MiB stack; a
/// test build needs ~300 bytes of it per level (3,000 stacked `*` fit, 4,000 did not).
/// [`MAX_GRAMMAR_NESTING`] parentheses make at most three levels each (alternatives, a
/// sequence, a repeated group), 387 in all; 512 admits all of those and a few stacked
/// operators, and is checked as each level is parsed.
pub const MAX_GRAMMAR_DEPTH: u32 = 512;

/// Work one grammar step may do, in units of one parser stack frame examined or made.
///
/// Applies to each token mask, each `advance` and each check of a token. The test grammars
/// (arithmetic, JSON, a C-like language) use under 1,000 units per mask even over a
/// 262,144-token vocabulary; an ambiguous grammar can keep exponentially many parses alive
/// (`t ::= u "b" | v "c" | "x"`, `u ::= "a" t`, `v ::= "a" t` doubles them with every `a`) and
/// ends the request with a `limit_exceeded` error here instead of running unbounded. A unit
/// makes at most one 64-byte frame, so a step also stays under ~13 MB and a few milliseconds.
/// Precomputing one grammar state's masks walks the whole vocabulary trie once, so it gets
/// this budget plus four units per trie node.
pub const MAX_GRAMMAR_STEP_WORK: u64 = 200_000;

/// Work the searches for loop runs may do while a constraint's masks are prepared, in
/// successor pairs examined: for a grammar, in all when it is bound to a vocabulary; for a
/// DFA, per mask computed.
///
/// A state's run lets a mask walk take or skip whole subtrees of the vocabulary trie; a loop
/// run is found by a search over the states its characters reach (up to 1,024), restarted
/// for each character group one of them dies on (up to 64 times), from every state. That is
/// quadratic in the states: 128 copies of `[\x00-\U0010FFFF]` before a long literal (3,790
/// states) examined 94.6 million pairs, 1.4 s in a test build. The most any JSONSchemaBench
/// grammar needs is 152,712; past 2,000,000 (~30 ms there) the states left keep their chain
/// runs, which only skip less of the trie: the masks are the same.
pub const RUN_SEARCH_WORK: u64 = 2_000_000;

/// Longest run of whitespace between two JSON tokens (and before and after the value) that
/// `response_format: {"type": "json_object"}` allows, in bytes.
///
/// Unbounded whitespace lets a model loop on newlines forever (a known failure of peers that
/// allow it); 64 bytes fits a newline plus the indentation of pretty-printed JSON 31 levels
/// deep at two spaces per level, and then a structural character must follow.
pub const MAX_JSON_WHITESPACE: usize = 64;

/// Longest `guided_json` / `response_format` schema accepted, in bytes of its JSON text
/// (spec: 16 KiB).
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;

/// Largest regex a `guided_json` / `response_format` schema may compile to, in bytes of its
/// text (spec: 256 KiB).
///
/// A schema that repeats its parts (arrays of arrays, many optional properties, counted
/// lengths) grows its regex; past this bound it is refused before any automaton is built.
pub const MAX_SCHEMA_REGEX_BYTES: usize = 256 * 1024;

/// Subschemas the JSON Schema compiler may visit while inlining `$ref`s and merging `allOf`.
///
/// `$ref` is inlined, so a definition used twice is compiled twice; a chain of definitions
/// that each use the next twice doubles at every link. 10,000 visits is ~100 times what the
/// largest JSONSchemaBench schema under 16 KiB needs, and stops an exponential chain in a few
/// milliseconds.
pub const MAX_SCHEMA_EXPANSION: usize = 10_000;

/// How many schemas' worth of compile budget one request's tools share: their subschema
/// visits and `enum` judge work add up to at most 4 x [`Limits::schema_expansion`] and
/// [`Limits::schema_judge_work`] (each tool still within 1 x), and their GBNF rules to at
/// most 4 x [`MAX_SCHEMA_REGEX_BYTES`] (1 MiB). Without it 128 tools (`MAX_TOOLS`) of hard
/// schemas cost 128 compiles (~40 ms each at the expansion bound: 5 s); with it, what 4 do.
/// Typical tools take 5-50 visits and 300-2,000 bytes of rules each, so 128 of them fit.
pub const TOOLS_SCHEMA_BUDGET: usize = 4;

/// Work the `enum`/`const` judge may do in one schema compile, in units of one subschema
/// visited or one byte matched against a pattern (pattern bytes times value bytes).
///
/// A value is checked against the rest of its schema directly, following `$ref`s; a `$ref`
/// that names itself twice under `anyOf` doubles the visits at each of the judge's 64 levels
/// (2^64 without this). The most any JSONSchemaBench schema needs is 1,517 units; 10^5 is
/// ~40 ms of work in a debug build, then the schema is a `limit_exceeded` 400.
pub const MAX_SCHEMA_JUDGE_WORK: u64 = 100_000;

/// How deeply the JSON Schema compiler may nest: subschemas inside subschemas, counting each
/// `$ref` followed and each `allOf` merged as a level.
///
/// The compiler recurses once per level (a few frames each), and so do the walks over what it
/// builds; a chain of `$ref`s nests without any nesting in the JSON text, so the JSON parser's
/// own 128-level bound does not cover it. No JSONSchemaBench schema nests past 20; 64 fits the
/// 1 MiB stack of a wasm32 instance (`tests/hostile_inputs.rs` runs its cases on one).
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// Ordered pairs of `oneOf` branches whose exclusivity the JSON Schema compiler may check
/// (one check compares two merged subschemas).
///
/// A `oneOf` is taken only when no value can match two branches; branches that are all
/// constants are checked in one pass, any other kind pair by pair, which is quadratic: a
/// 16 KiB schema holds ~1,000 small branches, ~10^6 pairs (over a second). 65,536 pairs is
/// 256 branches, ~10 times the largest general `oneOf` in JSONSchemaBench.
pub const MAX_ONE_OF_PAIRS: usize = 65_536;

/// Longest listed property name, in characters, of an object that also allows extra keys.
///
/// Extra keys must differ from every listed name, and "not this name" is a tree one level deep
/// per character of it (every prefix may end or branch off), which every later stage walks
/// recursively. Real names are under 100 characters; 256 keeps a 15,000-character name from
/// taking the stack.
pub const MAX_EXCLUDED_KEY_CHARS: usize = 256;

/// Memory an automaton may use, in bytes (spec: 256 KiB).
///
/// Applied to the Thompson NFA and to the DFA's transition table (4 bytes per state and byte
/// class, every reachable state counted while determinizing), each a hard stop. Until the
/// table is made, its transitions are held as stretches of classes (12 bytes each, at most
/// one a class: a few a state in practice, three times the table's bytes at worst).
/// `(a|b)*a(a|b){12}` (8,192 states over 4 byte classes: 128 KiB) is the largest of its family
/// that fits; `(a|b)*a(a|b){17}` needs 2^18 states, so determinization stops at ~16,000 states,
/// after ~2 ms, instead of building megabytes. A `guided_json` schema compiles to a regex under
/// the same bound. Patterns with `^`, `$` or `(?-u:\b)` are determinized by regex-automata,
/// which applies this bound to its own bookkeeping and to its padded dense table instead.
pub const AUTOMATON_BYTES: usize = 256 * 1024;

/// Bookkeeping the determinizer may use beside the transition table, in bytes: the NFA state
/// set of every DFA state and the hash index over them, freed once the table is built.
///
/// `(a|b)*a(a|b){12}` needs 368 KiB here (~9 NFA states per DFA state); a schema's automaton
/// can have a few dozen per state, so this is looser than [`AUTOMATON_BYTES`]. Without the
/// table bound, `(a|b)*a(a|b){13}` would need 768 KiB and `{14}` 1.6 MiB.
pub const DETERMINIZE_BYTES: usize = 1024 * 1024;

/// Memory one compiled constraint may spend on cached per-state token masks, in bytes.
///
/// A mask over a 49,152-token vocabulary is 6 KiB, so this caches ~10,900 automaton states.
/// Past it, masks of further states are recomputed on every step (correct, just slower), so
/// a long generation through a large automaton cannot grow memory without bound.
pub const MASK_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Memory a vocabulary may spend on run token sets, in bytes: per set of character groups
/// and length, the tokens made only of those characters, at most that many.
///
/// A string-interior state allows ~48.8k of SmolLM2's 49,152 tokens; marking them one by one
/// was ~50 of the ~70 µs of its cold mask. The set is the same for every state with that run,
/// in every request over the vocabulary, so it is kept: 6 KiB a set at 49k tokens (~680
/// sets), 32 KiB at Gemma's 262k (128 sets). Past it a set is computed and not kept.
pub const RUN_TOKENS_CACHE_BYTES: usize = 4 * 1024 * 1024;

/// Nesting depth of groups and repetitions in a regex (regex-syntax's default is 250).
///
/// Parsing recurses on nesting, so this bounds stack use; 128 levels is far deeper than any
/// hand-written or schema-generated pattern.
pub const MAX_REGEX_NESTING: u32 = 128;

/// How long a pattern or choice may be when quoted inside an error message, in characters.
pub const ERROR_QUOTE_CHARS: usize = 80;

// ---------------------------------------------------------------------------------------------
// Hostile files and inputs: bounds on what a model file, a tokenizer.json, a guided_choice
// list or a chat template can make us allocate or compute, each checked before the allocation.
// ---------------------------------------------------------------------------------------------

/// Most metadata entries a GGUF header may declare, in entries.
///
/// llama.cpp writes ~25-60 keys (a whole vocabulary is one array entry), so 65,536 is ~1,000
/// times that. Each entry costs ~64 bytes of parsed header (key, value, index), so this caps
/// the metadata table at ~4 MiB whatever the file claims; a count past it is refused before
/// any entry is read.
pub const GGUF_MAX_METADATA_ENTRIES: u64 = 1 << 16;

/// Most tensors a GGUF header may declare, in tensors.
///
/// Real files have 9 per layer plus a few (SmolLM2-135M: 272; a 405B Llama: 1,138; MoE files
/// keep each layer's experts in one tensor), so 65,536 is ~50 times the largest. A tensor info
/// costs ~100 bytes parsed (name, dimensions, index), so this caps them at ~7 MiB.
pub const GGUF_MAX_TENSORS: u64 = 1 << 16;

/// How deeply GGUF metadata arrays may nest, in levels (an array of arrays is 2).
///
/// llama.cpp writes no nested arrays at all; the reader recurses once per level while checking
/// an array, so this bounds its stack.
pub const GGUF_MAX_ARRAY_DEPTH: usize = 8;

/// Most tokens a vocabulary read from a file (GGUF `tokenizer.ggml.tokens`, or the ids of a
/// `tokenizer.json`) may have, in tokens.
///
/// The largest vocabularies in use are Gemma 3's 262,144 and Llama 4's 202,048 tokens; 2^20
/// is four times Gemma's. It bounds what a hostile file can make the readers allocate per
/// token (texts, pieces, the id map: ~200 bytes each, ~200 MiB at the bound) and the token
/// masks built over the vocabulary (128 KiB each at the bound).
pub const MAX_VOCAB_TOKENS: usize = 1 << 20;

/// Most strings a `guided_choice` list may have, in strings.
///
/// Classification labels are a handful; a list of countries ~200. Each choice is a branch of
/// the alternation the list compiles to, and the count is bounded separately from the bytes
/// because empty strings cost no bytes. Checked before any string is copied.
pub const MAX_CHOICES: usize = 1024;

/// Most bytes a `guided_choice` list may total, in bytes of UTF-8 text (the strings' lengths
/// summed).
///
/// The same order as the spec's 16 KiB for schema and grammar text: a list is constraint
/// text written by the client. Escaped, 16 KiB of choices is a pattern of at most ~33 KiB
/// (100,000 choices, 2.2 MB, took 0.75 s and 250 MB to be refused by the automaton bound); the
/// automaton is still bounded by [`AUTOMATON_BYTES`]. Checked before any automaton is built.
pub const MAX_CHOICE_BYTES: usize = 16 * 1024;

/// Instructions a chat template may execute per render, in minijinja fuel units.
///
/// A few hundred per message for the templates in use, so 1M covers thousands of messages and
/// stops a runaway loop in ~0.1 s. minijinja (3.1) also charges a unit per 64 bytes of data a
/// template makes (strings built by `~`, `+`, `*`, filter results, captured output) and checks
/// allocations of known size against what is left, so the same budget caps everything a
/// render creates at ~64 MB in all.
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// Longest text a chat template may render, in bytes of UTF-8 output; also the longest text
/// one `tojson` call may produce.
///
/// A prompt must fit the model's context: 128k tokens is ~512 KiB of text. `poot serve` reads
/// request bodies of at most 1 MiB, and a template adds a few dozen bytes per message, so 4 MiB
/// leaves room for any conversation a model can read while a template that loops over
/// `"x" * 100000` stops at 4 MiB of output instead of filling the fuel's 64 MB.
pub const MAX_TEMPLATE_OUTPUT_BYTES: usize = 4 * 1024 * 1024;
