//! `guided_json` and `response_format` `json_schema`: a JSON Schema compiled to a regular
//! language, then to the same byte DFA and token masks as `guided_regex` (or, past the DFA's
//! bound, to the same language as a grammar: see Bounds).
//!
//! # Supported keywords
//!
//! Every keyword that changes which values are valid is either enforced exactly as listed
//! here or refused with an error naming it: the compiler never under-constrains. What the
//! output may look like is a documented *subset* of the valid values (for example keys in
//! sorted order), so every output validates.
//!
//! - `type`: a name or a list (`["string", "null"]`). Without `type`, the types the schema's
//!   keywords speak of (`properties` → object, `items` → array, `pattern` → string,
//!   `minimum` → number, ...), or every type when it names none.
//! - `enum`, `const`: scalars and composite values, matched structurally (sorted keys, the
//!   whitespace below). Values that fail the schema's other keywords are dropped, each value
//!   checked directly (`judge.rs`: any keyword, `not`, `if`/`then`/`else`, `oneOf`,
//!   `uniqueItems`, `contains` included), so beside a finite list of values everything is
//!   supported except `unevaluated*`, dynamic references and non-integer `multipleOf`.
//! - Objects: `properties`, `required` (listed keys mandatory, the rest optional; a required
//!   key outside `properties` takes the `additionalProperties` schema), listed keys in sorted
//!   order. Other keys: `additionalProperties` `false` → none; `true` or a schema → any other
//!   name, anywhere among the listed keys (a group before the first listed key present and
//!   after each one, so a canonical instance's sorted keys are in the language); left out
//!   beside `properties` → as JSON Schema says, the same as `true` with free-form values (the
//!   default), or only the listed keys with `guided_json_extra_keys: false`
//!   ([`SchemaOptions::extra_keys`], an explicit opt-in: small models given the choice
//!   often invent keys). Extra keys never take a listed name
//!   or (at the top of a `oneOf` branch) a key any branch names. Implicit extra keys are
//!   left out where they would need
//!   `propertyNames` or `patternProperties` beside listed keys, and for a whole schema whose
//!   automaton they push past its bound (it then runs as if `guided_json_extra_keys` were
//!   `false`, rather than being refused). An object schema with no `properties` and no
//!   `additionalProperties` is free-form (see below). `minProperties` when the required keys
//!   already meet it or it is 1; `maxProperties` when the listed keys cannot pass it (extra
//!   keys are then capped, after the listed ones). `propertyNames` on listed keys, and on extra keys when there are no
//!   listed ones. `dependentRequired`/`dependencies`/`dependentSchemas` as branches: the
//!   trigger absent, or present with the keys or schema it needs (see `dependencies`; up to
//!   64 branches with the schema's others).
//!   `unevaluatedProperties`/`unevaluatedItems` as the `additionalProperties`/`items` they
//!   amount to in their own scope (a cousin's properties do not count).
//! - Arrays: `items` (schema), `prefixItems` (and draft-7 `items` arrays with
//!   `additionalItems`), `minItems`, `maxItems`, `uniqueItems` when `maxItems <= 1` (or
//!   `false`) or when the items are a few scalar values (`enum`, `const`, `boolean`,
//!   `null`: an automaton over the set of values used so far, up to 12 values while it
//!   stays within a quarter of [`Limits::automaton_bytes`]: 6 short strings, not 8),
//!   `unevaluatedItems` (as the items after the prefix when `items` is absent).
//! - Strings: `pattern` (ECMA-262, unanchored: the decoded value contains a match; `\d`, `\w`,
//!   `\s` and `.` keep their ECMA meaning; look-around, back-references and `\b` are
//!   refused), `minLength`/`maxLength` in code points, `format` (below). A pattern, a format
//!   and lengths in any combination are their intersection, exactly: where the pattern's or
//!   format's own lengths already lie within the bounds nothing changes, where it is one
//!   repeated class between fixed parts the bounds cut its count, and otherwise the automata
//!   are intersected over decoded characters (`regex/algebra.rs`; a length is a character
//!   counter) and the product is encoded as string text. Such a schema has no regex text
//!   ([`JsonSchema::regex`] is `None`), and a product past
//!   [`Limits::automaton_bytes`] is refused naming the keywords and the limit.
//! - Integers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (draft-4 booleans
//!   too), compiled to the exact range; `multipleOf` any positive integer `k`, with or without
//!   bounds, emitting multiples of at most 15 digits (under 2^53, where validators and
//!   clients that divide in floating point agree): at most 64 multiples in range are listed,
//!   a divisor of 100 without bounds is decided by the last two digits, and otherwise
//!   `k = j * 10^m` is a multiple of `j` followed by `m` zeros, the range's automaton
//!   intersected with a `j`-state automaton of decimal residues (refused past
//!   [`Limits::automaton_bytes`]: `j` up to ~170 without bounds). A decimal step
//!   `units × 10^-scale` (`1.5`: 15 and 1) takes the integers divisible by `units` over its
//!   common factor with `10^scale` (3 for `1.5`, every integer for `0.25`).
//! - `not`, rewritten into the keywords above by negation normal form (see `negate`): the
//!   other types, the complementary bound or length, objects without a required key or with
//!   a property's negation, `not` of `anyOf` as each branch's negation; a `pattern` or
//!   fixed strings are subtracted from a string's automaton (exact), multiples of an integer
//!   step or fixed values from integers of at most 15 digits (as `multipleOf`). Refused:
//!   `not` of `oneOf`, `items`, `format` and other keywords with no exact rewrite, numbers
//!   with a fraction less values or multiples, and arrays or objects less fixed values.
//! - Numbers: the same bounds when they are integers (`0 <= x <= 1` is exact: `1`, `1.0`,
//!   `0.25`, never `1.5`); bounded numbers are written without exponents. With an integer
//!   `multipleOf` every valid number is an integer, and it is emitted as an integer as above
//!   (never `8.0` or `8e0`; the bounds may then be non-integers). A decimal `multipleOf`
//!   (`0.01`, `1.5`) is read as the decimals read it (the `jsonschema` crate compares the
//!   shortest decimal texts): numbers without exponent whose fraction has at most the
//!   step's decimals before trailing zeros and at most 15 digits in all, intersected with a
//!   residue automaton when the step's digits are not 1 (`units × (scale + 2)` states,
//!   refused past [`Limits::automaton_bytes`]: `1.5` and `13.5` compile, `2.125` does not).
//! - `anyOf`; `oneOf` when the compiler can prove no emitted value matches two branches
//!   (different types, different `const`/`enum` values of a required property, a required key
//!   another branch never emits or forbids); otherwise refused, since treating it as `anyOf`
//!   could emit a value matching two branches. `allOf` and `$ref` siblings are merged into one
//!   schema where the merge is exact, refused otherwise.
//! - `$ref` to `#`, `#/$defs/...`, `#/definitions/...` or any local JSON pointer, inlined.
//!   Recursive references (they need a pushdown automaton: use `guided_grammar`) and external
//!   ones are refused.
//! - `format`: `date`, `time`, `date-time`, `uuid`, `email`, `ipv4`, `ipv6`, `hostname`,
//!   `uri` (regexes in `string.rs`: `date` checks month lengths and leap years; `time` is
//!   RFC 3339 with `Z` or an offset and no leap second; `hostname` and `email` domains are 1–4
//!   labels of 1–20 letters, digits and single inner hyphens; `email` local parts are 1–2
//!   dot-separated atoms of `[A-Za-z0-9_+-]{1,16}`; `ipv6` is the eight-group form or a
//!   `::`-compressed one; `uri` is `scheme://host[:port][/path][?query][#fragment]` over
//!   RFC 3986 unreserved and sub-delimiter characters), `iri` (the same ASCII URIs),
//!   `uri-reference` and `iri-reference` (a URI, or a relative path of unreserved characters
//!   whose first segment has no `:`, with a query and a fragment), `json-pointer` and
//!   `relative-json-pointer` (tokens of letters, digits, `._-` and `~0`/`~1`), `duration`
//!   (RFC 3339 appendix A, numbers of 1-4 digits) and `uri-template` (literals and `{op?name,...}`
//!   expressions without modifiers). Each accepts a subset of the format, never a value a strict
//!   validator rejects. `idn-email`, `idn-hostname` and `regex` (ECMA-262 nests groups without
//!   bound: not regular) are refused; unknown names are annotations.
//! - Free-form values (`true`, `{}`, `additionalProperties: true`, `items` absent): any JSON
//!   value, nested to any depth (canonical form below). Brackets that nest without bound are
//!   not regular, so such a schema runs on the grammar engine (one recursive rule).
//! - Ignored (no effect on validity): `title`, `description`, `$schema`, `$id`, `$comment`,
//!   `$anchor`, `$defs`, `definitions`, `examples`, `default`, `deprecated`, `readOnly`,
//!   `writeOnly`, `contentEncoding`/`contentMediaType`/`contentSchema` from draft 2019-09 on,
//!   `if` without `then` or `else`, `then`/`else` without `if`, and keywords JSON Schema
//!   does not define (`nullable`, `x-...`), which validators ignore too.
//! - `patternProperties` when no listed property matches a pattern, no key can match two
//!   patterns with different schemas (DFA intersection, up to 8 such patterns) and no other
//!   extra keys are allowed: keys matching a pattern (encoded as for `pattern`), each with
//!   its pattern's schema, among the listed properties where the values are small schemas
//!   (up to 16 subschemas), else after them.
//! - `if`/`then`/`else` as branches: `if` and `then`, or `not if` (as `not` above) and
//!   `else`; two conditionals under one `allOf` as the product of their branches.
//! - Refused (except beside `enum`/`const`): `contains`, other `patternProperties`,
//!   other `uniqueItems` with more than one item, `$dynamicRef`, `$recursiveRef`, `not` or `if`
//!   whose negation has no exact form, and the cases above. Two `not`s merged by `allOf`
//!   become one `not` of their `anyOf`.
//!
//! # Output form
//!
//! No whitespace except one optional space after `,` and `:`; inside a composite `enum` or
//! `const` value, any JSON whitespace between tokens, at most [`MAX_JSON_WHITESPACE`] bytes
//! in a row (the spec's "optional whitespace"). Keys in sorted order (byte
//! order of the decoded key). Strings: raw characters, short escapes, `\uXXXX` (no lone
//! surrogates) in unconstrained parts; the canonical escape only where a pattern, format or
//! length constrains the value. Integers without leading zeros or `-0`. Numbers with at most a
//! two-digit exponent. A test instance serialized canonically ([`canonical_json`]: sorted keys,
//! no whitespace, the shortest number form) is in the language whenever the schema's valid
//! set, restricted as documented, contains it.
//!
//! # Bounds
//!
//! The schema text, as sent, is at most [`Limits::schema_bytes`]; inlining may visit at most
//! [`Limits::schema_expansion`] subschemas, nest [`Limits::schema_depth`] deep and check
//! `enum`/`const` values with [`Limits::schema_judge_work`]. A regular language is built as a
//! DFA under [`Limits::automaton_bytes`], like `guided_regex`, and so is each intersection
//! inside it (with [`Limits::determinize_bytes`] for its state index; no regex text is built: its
//! size was never the memory that matters, and it grows with the square of an object's
//! optional keys where the automaton does not; [`JsonSchema::regex`] renders one for export).
//! A schema with free-form values, or whose DFA would pass that bound (many optional
//! properties, nested arrays of objects: the DFA holds every combination at once), runs
//! instead as the pushdown grammar of [`JsonSchema::gbnf`] (rules built from the IR, whose
//! text would be at most [`MAX_SCHEMA_REGEX_BYTES`]; the text is written only for export),
//! the same language, on the `guided_grammar` engine
//! under [`GRAMMAR_AUTOMATON_BYTES`](crate::limits::GRAMMAR_AUTOMATON_BYTES) and its per-step
//! work budget; [`JsonSchema::automaton`] says which. Only a schema past both is a 400.
//!
//! # Stages
//!
//! One `Compiler` and its budgets (visits, judge fuel, the automaton limits) run through:
//! resolving `$ref`s and flattening (here, `Compiler::flatten`); normalising `allOf` and the
//! merged `unevaluated*` (`normalise.rs`); the language, a `Node` per schema (`branches`
//! and `fixed_values` here, then by type: `number_schema.rs`, `string_schema.rs`,
//! `array_schema.rs`, `object_schema.rs`, over the constructions of `number.rs`,
//! `string.rs`, `dependencies.rs`, `unique.rs` and the automaton algebra of `negate.rs` and
//! `node.rs`); the automaton (`automaton.rs`: a DFA, or the grammar rules of `gbnf.rs`
//! compiled by the grammar engine).

mod array_schema;
mod automaton;
mod dependencies;
mod gbnf;
mod judge;
mod negate;
mod node;
mod normalise;
mod number;
mod number_schema;
mod object_schema;
mod string;
mod string_schema;
mod unique;

use crate::constraint::Compiled;
use crate::error::{Error, Result};
use crate::grammar::{Grammar, Prebuilt};
use crate::limits::{
    check_size, Limits, ERROR_QUOTE_CHARS, MAX_EXCLUDED_KEY_CHARS, MAX_JSON_WHITESPACE,
    MAX_SCHEMA_REGEX_BYTES,
};
use crate::regex::{quote, Dfa};
use negate::Excluded;
use node::Node;
use normalise::{false_schema, localize_unevaluated, merge};
use number::Bound;
use serde_json::{json, Map, Value};
use std::cell::Cell;
use std::collections::BTreeSet;

/// What one schema's compile took of [`Limits`]' budgets ([`JsonSchema::gbnf_within`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchemaWork {
    /// Subschemas visited ([`Limits::schema_expansion`]'s unit).
    pub visits: usize,
    /// `enum`/`const` judge work ([`Limits::schema_judge_work`]'s unit).
    pub judge_work: u64,
}

/// A compiled schema: the language of its outputs.
///
/// ```
/// use serde_json::json;
/// let schema = json!({
///     "type": "object",
///     "properties": {
///         "name": {"type": "string"},
///         "age": {"type": "integer", "minimum": 1, "maximum": 120},
///         "class": {"enum": ["warrior", "mage", "rogue"]}
///     },
///     "required": ["name", "class"],
///     "additionalProperties": false
/// });
/// let compiled = poot::json_schema::JsonSchema::compile(&schema, "guided_json").unwrap();
/// let dfa = compiled.dfa().expect("a small schema compiles to a DFA");
/// assert!(dfa.matches(br#"{"age":42,"class":"mage","name":"Bel"}"#));
/// assert!(dfa.matches(br#"{"class": "rogue", "name": "x"}"#));
/// assert!(!dfa.matches(br#"{"age":121,"class":"mage","name":"Bel"}"#));
/// assert!(!dfa.matches(br#"{"name":"Bel"}"#));
/// assert!(compiled.gbnf().starts_with("root ::= "));
/// // Without `additionalProperties`, other keys with any value are valid too (the grammar
/// // engine runs the free-form values).
/// let mut open = schema.clone();
/// open.as_object_mut().unwrap().remove("additionalProperties");
/// let open = poot::json_schema::JsonSchema::compile(&open, "guided_json").unwrap();
/// assert!(open.matches(br#"{"class":"mage","name":"Bel","pet":{"kind":["cat"]}}"#));
/// assert!(!open.matches(br#"{"class":"mage","name":"Bel","age":"old"}"#));
/// ```
#[derive(Debug, Clone)]
pub struct JsonSchema {
    node: Node,
    automaton: Compiled,
}

/// How the compiler reads what a schema leaves unsaid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaOptions {
    /// Whether an object schema that lists `properties` and leaves `additionalProperties`
    /// out accepts other keys, as JSON Schema says (`true`, the default), or only its listed
    /// keys (`false`: the request field `guided_json_extra_keys: false`, an explicit
    /// opt-in). Forbidding them often gives better generations: with them, the reference
    /// model (SmolLM2-135M) answered the spec's own character schema with invented keys
    /// until `max_tokens` (the reply still closes and validates), and their free-form
    /// values run on the grammar engine (over JSONSchemaBench and SchemaStore, compile p50
    /// ~0.8 ms against ~0.25 ms without them). The default follows the schema's meaning: a
    /// valid instance with a key the schema does not list is one the output may be.
    pub extra_keys: bool,
}

impl SchemaOptions {
    pub const DEFAULT: SchemaOptions = SchemaOptions { extra_keys: true };
}

impl Default for SchemaOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl JsonSchema {
    /// Compiles a schema given as a JSON value (a string value is read as the schema's JSON
    /// text). `field` names the request field in errors: `guided_json` or `response_format`.
    pub fn compile(schema: &Value, field: &str) -> Result<Self> {
        Self::compile_with(schema, field, &Limits::DEFAULT)
    }

    /// [`JsonSchema::compile`] under `limits`: the text size and the compiler's budgets.
    pub fn compile_with(schema: &Value, field: &str, limits: &Limits) -> Result<Self> {
        Self::compile_with_options(schema, field, limits, SchemaOptions::DEFAULT)
    }

    /// [`JsonSchema::compile_with`], reading what the schema leaves unsaid by `options`.
    pub fn compile_with_options(
        schema: &Value,
        field: &str,
        limits: &Limits,
        options: SchemaOptions,
    ) -> Result<Self> {
        let parsed;
        let (schema, shown) = match schema {
            // The schema's text as sent is what the size bound measures.
            Value::String(text) => {
                check_size(field, text.len(), limits.schema_bytes)?;
                parsed = serde_json::from_str::<Value>(text).map_err(|e| {
                    Error::invalid_input(format!("{field} is not valid JSON: {e}"))
                        .with_param(field)
                        .with_source(e)
                })?;
                (&parsed, quote(text))
            }
            other => {
                let (len, shown) = measured_text(other);
                check_size(field, len, limits.schema_bytes)?;
                (other, shown)
            }
        };
        let mut c = Compiler::new(schema, options, *limits);
        let node = c.schema(schema).map_err(|e| e.into_error(field, &shown))?;
        let implicit_extra_keys = c.implicit_extra_keys;
        // One grammar determinization budget for every attempt below, the fallback's too.
        let mut spent = 0u64;
        match Self::build(node, field, &shown, limits, &mut spent) {
            Err(e) if e.is_limit_exceeded() && implicit_extra_keys => {
                // The extra keys JSON Schema allows beside listed properties are what made
                // the automaton too big (each is a copy of the key and value automata at
                // every position): the schema runs with its listed keys only, the
                // documented restriction `guided_json_extra_keys: false` asks for, rather
                // than being refused.
                let strict = SchemaOptions { extra_keys: false };
                let mut c = Compiler::new(schema, strict, *limits);
                let node = c.schema(schema).map_err(|e| e.into_error(field, &shown))?;
                Self::build(node, field, &shown, limits, &mut spent)
            }
            built => built,
        }
    }

    /// The schema's GBNF rules (entry `root`, as [`JsonSchema::gbnf`]) without building an
    /// automaton, and the work they took, also when they failed: for a schema that is one
    /// part of a larger grammar (a tool's parameters under a forced call), which is compiled
    /// once, whole, under the grammar's limits. The caller adds up the work of several schemas
    /// read from one request (up to 128 tools) against that request's budget. The rules are
    /// bounded as [`JsonSchema::compile`]'s regex is, by [`MAX_SCHEMA_REGEX_BYTES`], rendered
    /// under that bound first.
    pub fn gbnf_within(
        schema: &Value,
        field: &str,
        limits: &Limits,
        options: SchemaOptions,
    ) -> (Result<String>, SchemaWork) {
        let (len, shown) = measured_text(schema);
        if let Err(e) = check_size(field, len, limits.schema_bytes) {
            return (Err(e), SchemaWork::default());
        }
        let mut c = Compiler::new(schema, options, *limits);
        let node = c.schema(schema);
        let work = SchemaWork {
            visits: c.visits,
            judge_work: limits.schema_judge_work - c.judge_fuel,
        };
        let gbnf = match node.map_err(|e| e.into_error(field, &shown)) {
            Err(e) => Err(e),
            Ok(Node::Nothing) => Err(Error::invalid_input(format!(
                "{field} {shown} allows no value the compiler can emit"
            ))
            .with_param(field)),
            Ok(node) => {
                let gbnf = node.to_gbnf();
                if gbnf.len() > MAX_SCHEMA_REGEX_BYTES {
                    Err(Error::limit_exceeded(format!(
                        "{field} {shown} compiles to a grammar over the {MAX_SCHEMA_REGEX_BYTES}-byte limit"
                    ))
                    .with_param(field))
                } else {
                    Ok(gbnf)
                }
            }
        };
        (gbnf, work)
    }

    /// The language as regex-syntax text, for export, when it is regular and its text is at
    /// most `limit` bytes (a regex repeats what the automaton shares: the text can grow
    /// with the square of an object's optional keys).
    pub fn regex(&self, limit: usize) -> Option<String> {
        self.node.to_regex(limit).ok()
    }

    /// A GBNF grammar (llama.cpp syntax, entry rule `root`) accepting exactly the schema's
    /// language, for engines that take grammars rather than regexes.
    pub fn gbnf(&self) -> String {
        self.node.to_gbnf()
    }

    /// The automaton: a DFA built under the same bounds as a `guided_regex`, or, for a
    /// schema whose DFA would pass them, the pushdown grammar of [`JsonSchema::gbnf`].
    pub fn automaton(&self) -> &Compiled {
        &self.automaton
    }

    /// The DFA, when the schema compiled to one (see [`JsonSchema::automaton`]).
    pub fn dfa(&self) -> Option<&Dfa> {
        match &self.automaton {
            Compiled::Dfa(dfa) => Some(dfa),
            _ => None,
        }
    }

    /// The automaton, by value.
    pub fn into_automaton(self) -> Compiled {
        self.automaton
    }

    /// Whether `output` is in the language (a direct simulation, no automaton: for tests and
    /// short texts).
    pub fn matches(&self, output: &[u8]) -> bool {
        self.node.matches(output)
    }
}

/// The canonical text of a JSON value: sorted keys, no whitespace, integers (also
/// integer-valued floats below 1e17) without a fraction, other numbers in their shortest
/// round-trip form. Fixed values (`enum`, `const`) are emitted in this form, and the corpus
/// tests serialize instances with it.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn canonical_number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f.fract() == 0.0 && f.abs() < 1e17 {
        return format!("{}", f as i64);
    }
    n.to_string()
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&canonical_number(n)),
        Value::String(s) => out.push_str(&serde_json::to_string(s).expect("strings serialize")),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).expect("strings serialize"));
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
    }
}

/// Why a schema did not compile (turned into an [`Error`] naming the field).
#[derive(Debug)]
enum Fail {
    Invalid(String),
    Limit(String),
}

impl Fail {
    /// The same kind of failure with its message rewritten.
    fn map(self, f: impl FnOnce(String) -> String) -> Fail {
        match self {
            Fail::Invalid(m) => Fail::Invalid(f(m)),
            Fail::Limit(m) => Fail::Limit(f(m)),
        }
    }

    fn into_error(self, field: &str, shown: &str) -> Error {
        match self {
            Fail::Invalid(m) => Error::invalid_input(format!("{field} {shown}: {m}")),
            Fail::Limit(m) => Error::limit_exceeded(format!("{field} {shown}: {m}")),
        }
        .with_param(field)
    }
}

type R<T> = std::result::Result<T, Fail>;

/// A numeric bound as written: the value and whether it is exclusive.
type FBound = (f64, bool);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Draft {
    D4,
    D6,
    D7,
    D2019,
    D2020,
}

/// Keywords that never change validity.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "id",
    "$comment",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

const STRING_KEYS: &[&str] = &[
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "contentEncoding",
    "contentMediaType",
];
const NUMBER_KEYS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "divisibleBy",
];
const ARRAY_KEYS: &[&str] = &[
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
];
const OBJECT_KEYS: &[&str] = &[
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
];
/// Keywords that apply to every type and are handled before types.
const GENERAL_KEYS: &[&str] = &[
    "type",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "not",
    "if",
    "then",
    "else",
    "$dynamicRef",
    "$recursiveRef",
    "disallow",
    "extends",
];

const TYPES: [&str; 7] = [
    "null", "boolean", "integer", "number", "string", "array", "object",
];

fn is_validation_key(k: &str) -> bool {
    GENERAL_KEYS.contains(&k)
        || STRING_KEYS.contains(&k)
        || NUMBER_KEYS.contains(&k)
        || ARRAY_KEYS.contains(&k)
        || OBJECT_KEYS.contains(&k)
}

fn unsupported(key: &str, path: &str, why: &str) -> Fail {
    Fail::Invalid(format!(
        "`{key}` at {path} is not supported ({why}); the compiler refuses rather than emit values it may not allow"
    ))
}

fn ws() -> Node {
    Node::opt(Node::lit(" "))
}

fn sep() -> Node {
    Node::concat(vec![Node::lit(","), ws()])
}

fn colon() -> Node {
    Node::concat(vec![Node::lit(":"), ws()])
}

/// The pieces of [`Node::AnyJson`]'s form, built once: its scalars, an object key, and the
/// separators (the output form's, see the module docs).
pub(crate) struct AnyJsonParts {
    pub scalar: Node,
    pub key: Node,
    pub colon: Node,
    pub sep: Node,
}

pub(crate) fn any_json_parts() -> &'static AnyJsonParts {
    static PARTS: std::sync::OnceLock<AnyJsonParts> = std::sync::OnceLock::new();
    PARTS.get_or_init(|| {
        let key = Node::concat(vec![
            Node::lit("\""),
            Node::repeat(string::any_unit(), 0, None),
            Node::lit("\""),
        ]);
        AnyJsonParts {
            scalar: Node::alt(vec![
                Node::lit("null"),
                Node::lit("true"),
                Node::lit("false"),
                number::any_number(),
                key.clone(),
            ]),
            key,
            colon: colon(),
            sep: sep(),
        }
    })
}

/// [`Node::AnyJson`] one level spelled out: a scalar, or an array or object whose items are
/// `AnyJson` again (the grammar's recursive rule).
pub(crate) fn any_json_body() -> &'static Node {
    static BODY: std::sync::OnceLock<Node> = std::sync::OnceLock::new();
    BODY.get_or_init(|| {
        let p = any_json_parts();
        Node::alt(vec![
            p.scalar.clone(),
            Node::concat(vec![
                Node::lit("["),
                Node::list(Node::AnyJson, p.sep.clone(), 0, None),
                Node::lit("]"),
            ]),
            Node::concat(vec![
                Node::lit("{"),
                Node::list(
                    Node::concat(vec![p.key.clone(), p.colon.clone(), Node::AnyJson]),
                    p.sep.clone(),
                    0,
                    None,
                ),
                Node::lit("}"),
            ]),
        ])
    })
}

fn key_lit(k: &str) -> Node {
    Node::lit(serde_json::to_string(k).expect("strings serialize"))
}

/// A fixed value (`enum`/`const`), structurally: sorted keys, and between any two of its
/// tokens any JSON whitespace up to [`MAX_JSON_WHITESPACE`] bytes, as the spec says and as
/// `json_object` bounds it (a model cannot loop on newlines).
fn value_node(v: &Value) -> Node {
    let gap = || {
        Node::repeat(
            Node::class(vec![(' ', ' '), ('\t', '\t'), ('\n', '\n'), ('\r', '\r')]),
            0,
            Some(MAX_JSON_WHITESPACE as u32),
        )
    };
    // `open` gap (item gap sep gap)* item gap `close`, or `open` gap `close` when empty.
    let container = |open: &str, items: Vec<Node>, close: &str| {
        let mut parts = vec![Node::lit(open), gap()];
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                parts.extend([Node::lit(","), gap()]);
            }
            parts.extend([item, gap()]);
        }
        parts.push(Node::lit(close));
        Node::concat(parts)
    };
    match v {
        Value::Array(a) => container("[", a.iter().map(value_node).collect(), "]"),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let members = keys
                .into_iter()
                .map(|k| {
                    Node::concat(vec![
                        key_lit(k),
                        gap(),
                        Node::lit(":"),
                        gap(),
                        value_node(&m[k]),
                    ])
                })
                .collect();
            container("{", members, "}")
        }
        scalar => Node::lit(canonical_json(scalar)),
    }
}

/// JSON Schema equality (1 == 1.0), via the canonical form.
fn same_value(a: &Value, b: &Value) -> bool {
    canonical_json(a) == canonical_json(b)
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0) {
                "integer"
            } else {
                "number"
            }
        }
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether a value of JSON type `t` is in the type set (integers are numbers).
fn type_in(t: &str, set: &BTreeSet<&'static str>) -> bool {
    set.contains(t) || (t == "integer" && set.contains("number"))
}

/// The explicit `type` set, if any.
fn explicit_types(m: &Map<String, Value>, path: &str) -> R<Option<BTreeSet<&'static str>>> {
    let Some(t) = m.get("type") else {
        return Ok(None);
    };
    let names: Vec<&Value> = match t {
        Value::Array(a) => a.iter().collect(),
        other => vec![other],
    };
    let mut out = BTreeSet::new();
    for n in names {
        let s = n.as_str().ok_or_else(|| {
            Fail::Invalid(format!(
                "`type` at {path} must be a type name or a list of them"
            ))
        })?;
        match TYPES.iter().find(|&&x| x == s) {
            Some(&x) => {
                out.insert(x);
            }
            None if s == "any" => out.extend(TYPES),
            None => {
                return Err(Fail::Invalid(format!(
                    "`type` at {path} names an unknown type `{s}`"
                )))
            }
        }
    }
    Ok(Some(out))
}

/// The types a schema emits: its `type`, or the types its keywords speak of.
fn emitted_types(m: &Map<String, Value>, path: &str) -> R<BTreeSet<&'static str>> {
    if let Some(t) = explicit_types(m, path)? {
        return Ok(t);
    }
    let mut out = BTreeSet::new();
    let has = |keys: &[&str]| keys.iter().any(|k| m.contains_key(*k));
    if has(STRING_KEYS) {
        out.insert("string");
    }
    if has(NUMBER_KEYS) {
        out.insert("number");
    }
    if has(ARRAY_KEYS) {
        out.insert("array");
    }
    if has(OBJECT_KEYS) {
        out.insert("object");
    }
    if out.is_empty() {
        out.extend(TYPES);
    }
    Ok(out)
}

fn as_count(v: &Value, key: &str, path: &str) -> R<u32> {
    let f = v
        .as_f64()
        .filter(|f| *f >= 0.0 && f.fract() == 0.0)
        .ok_or_else(|| {
            Fail::Invalid(format!("`{key}` at {path} must be a non-negative integer"))
        })?;
    Ok(if f > f64::from(u32::MAX) {
        u32::MAX
    } else {
        f as u32
    })
}

/// Keyword `key` of `m` as a count ([`as_count`]), `None` when absent.
fn count_keyword(m: &Map<String, Value>, key: &str, path: &str) -> R<Option<u32>> {
    m.get(key).map(|v| as_count(v, key, path)).transpose()
}

fn as_f64(v: &Value, key: &str, path: &str) -> R<f64> {
    v.as_f64()
        .ok_or_else(|| Fail::Invalid(format!("`{key}` at {path} must be a number")))
}

struct Compiler<'a> {
    root: &'a Value,
    draft: Draft,
    /// `$ref`s being inlined, outermost first: a repeat is recursion.
    refs: Vec<String>,
    /// JSON pointer of the subschema being compiled, for messages.
    path: Vec<String>,
    visits: usize,
    /// Subschemas being compiled now, nested ([`Compiler::nested`]).
    depth: usize,
    /// What is left of [`Limits::schema_judge_work`] for checking `enum`/`const` values.
    judge_fuel: u64,
    /// The budgets this compile runs under.
    limits: Limits,
    options: SchemaOptions,
    /// Names the extra keys of the object compiled at this path must avoid: set while a
    /// `oneOf` branch is compiled, so that "another branch requires a key this branch never
    /// emits" stays true when the branch takes extra keys.
    avoided_keys: Option<(String, BTreeSet<String>)>,
    /// Whether some object took extra keys because its schema left `additionalProperties`
    /// out ([`SchemaOptions::extra_keys`]).
    implicit_extra_keys: bool,
}

impl<'a> Compiler<'a> {
    fn new(root: &'a Value, options: SchemaOptions, limits: Limits) -> Self {
        let draft = match root.get("$schema").and_then(Value::as_str) {
            Some(s) if s.contains("draft-04") => Draft::D4,
            Some(s) if s.contains("draft-06") => Draft::D6,
            Some(s) if s.contains("draft-07") => Draft::D7,
            Some(s) if s.contains("2019-09") => Draft::D2019,
            _ => Draft::D2020,
        };
        Compiler {
            root,
            draft,
            refs: Vec::new(),
            path: Vec::new(),
            visits: 0,
            depth: 0,
            judge_fuel: limits.schema_judge_work,
            limits,
            options,
            avoided_keys: None,
            implicit_extra_keys: false,
        }
    }

    fn here(&self) -> String {
        if self.path.is_empty() {
            "#".into()
        } else {
            format!("#/{}", self.path.join("/"))
        }
    }

    fn at<T>(&mut self, seg: &str, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        self.path.push(seg.to_owned());
        let r = f(self);
        self.path.pop();
        r
    }

    /// Counts `n` subschema visits against [`Limits::schema_expansion`]: a subschema
    /// compiled, or one whose output is copied again.
    fn charge_visits(&mut self, n: usize) -> R<()> {
        self.visits = self.visits.saturating_add(n);
        if self.visits > self.limits.schema_expansion {
            return Err(Fail::Limit(format!(
                "inlining visits more than {} subschemas (the schema expansion limit)",
                self.limits.schema_expansion
            )));
        }
        Ok(())
    }

    fn schema(&mut self, s: &Value) -> R<Node> {
        self.charge_visits(1)?;
        match s {
            Value::Bool(true) => return Ok(Node::AnyJson),
            Value::Bool(false) => return Ok(Node::Nothing),
            Value::Object(_) => {}
            _ => {
                return Err(Fail::Invalid(format!(
                    "the schema at {} must be an object or a boolean",
                    self.here()
                )))
            }
        }
        let depth = self.refs.len();
        let r = self.nested(|c| c.flatten(s).and_then(|m| c.flat_schema(&m)));
        self.refs.truncate(depth);
        r
    }

    /// Runs `f` one level deeper in the compiler's recursion, or refuses past
    /// [`Limits::schema_depth`]: each nested subschema and each `$ref` followed is a few stack
    /// frames, and a chain of `$ref`s nests without any nesting in the JSON text.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        if self.depth >= self.limits.schema_depth {
            return Err(Fail::Limit(format!(
                "subschemas and `$ref`s nest more than {} deep at {} (the schema depth limit)",
                self.limits.schema_depth,
                self.here()
            )));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// A schema with `$ref` and `allOf` merged in (refs stay on the stack until the caller
    /// truncates it).
    fn flatten(&mut self, s: &Value) -> R<Map<String, Value>> {
        let m = match s {
            Value::Bool(true) => return Ok(Map::new()),
            Value::Bool(false) => return Ok(false_schema()),
            Value::Object(m) => m,
            _ => {
                return Err(Fail::Invalid(format!(
                    "the schema at {} must be an object or a boolean",
                    self.here()
                )))
            }
        };
        self.charge_visits(1)?;
        let mut out: Map<String, Value> = m
            .iter()
            .filter(|(k, _)| *k != "$ref" && *k != "allOf")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let here = self.here();
        if m.get("pattern").is_some_and(|p| !p.is_string()) {
            // A list is what merging two patterns writes; a schema's own is a string.
            return Err(Fail::Invalid(format!(
                "`pattern` at {here} must be a string"
            )));
        }
        if let Some(r) = m.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| Fail::Invalid(format!("`$ref` at {here} must be a string")))?;
            if self.refs.iter().any(|x| x == r) {
                return Err(Fail::Invalid(format!(
                    "`$ref` `{r}` at {here} is recursive; a regex cannot nest without bound (a recursive schema needs guided_grammar)"
                )));
            }
            let target = self.resolve(r)?;
            self.refs.push(r.to_owned());
            let t = self.nested(|c| c.flatten(target))?;
            out = merge(out, t, &here)?;
        }
        if let Some(all) = m.get("allOf") {
            let all = all
                .as_array()
                .ok_or_else(|| Fail::Invalid(format!("`allOf` at {here} must be an array")))?;
            for sub in all {
                let mut f = self.nested(|c| c.flatten(sub))?;
                if out.contains_key("if") && f.contains_key("if") {
                    // Two conditionals have no merged form; one as its branches merges.
                    f = self.conditional_as_branches(&f)?.unwrap_or(f);
                }
                out = merge(out, f, &here)?;
            }
        }
        localize_unevaluated(&mut out);
        Ok(out)
    }

    fn resolve(&self, r: &str) -> R<&'a Value> {
        let here = self.here();
        let Some(pointer) = r.strip_prefix('#') else {
            return Err(Fail::Invalid(format!(
                "`$ref` `{r}` at {here} is not a local reference (`#/...`); external documents are not fetched"
            )));
        };
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err(Fail::Invalid(format!(
                "`$ref` `{r}` at {here} names an anchor; only JSON-pointer references are supported"
            )));
        }
        let decoded = percent_decode(pointer);
        self.root.pointer(&decoded).ok_or_else(|| {
            Fail::Invalid(format!(
                "`$ref` `{r}` at {here} points to nothing in the schema"
            ))
        })
    }

    fn flat_schema(&mut self, m: &Map<String, Value>) -> R<Node> {
        let here = self.here();
        // A finite list of values: filter it by everything else, whatever that is.
        if m.contains_key("enum") || m.contains_key("const") {
            return self.fixed_values(m);
        }
        for key in ["$dynamicRef", "$recursiveRef", "disallow", "extends"] {
            if m.contains_key(key) {
                return Err(unsupported(key, &here, "not expressible as a regex here"));
            }
        }
        // A `not` the type compilers subtract stays; any other is rewritten (see `negate`).
        let excluded = match m.get("not") {
            None => Excluded::default(),
            Some(n) => match Excluded::of(n) {
                Some(x) if x.applies_to(&emitted_types(m, &here)?) => x,
                _ => return self.negated(m),
            },
        };
        if !m.keys().any(|k| is_validation_key(k)) {
            // `{}`: any value (one grammar rule, rather than each type spelled out).
            return Ok(Node::AnyJson);
        }
        if let Some(branches) = self.conditional_as_branches(m)? {
            return self.nested(|c| c.flat_schema(&branches));
        }
        if let Some(branches) = self.dependencies_as_branches(m)? {
            return self.nested(|c| c.flat_schema(&branches));
        }
        // anyOf / oneOf: distribute the rest of the schema into each branch.
        if m.contains_key("anyOf") || m.contains_key("oneOf") {
            return self.branches(m);
        }
        if m.contains_key("enum") || m.contains_key("const") {
            return self.fixed_values(m);
        }
        let types = emitted_types(m, &here)?;
        let mut alts = Vec::new();
        for t in TYPES {
            if !types.contains(t) || (t == "integer" && types.contains("number")) {
                continue;
            }
            if matches!(t, "array" | "object") && excluded.values.iter().any(|v| type_of(v) == t) {
                return Err(unsupported(
                    "not",
                    &here,
                    &format!("excluding an {t} value from the {t}s the schema allows"),
                ));
            }
            let kept = |v: Value| !excluded.values.contains(&v);
            alts.push(match t {
                "null" => {
                    if !kept(Value::Null) {
                        continue;
                    }
                    Node::lit("null")
                }
                "boolean" => Node::alt(
                    [true, false]
                        .into_iter()
                        .filter(|&b| kept(Value::Bool(b)))
                        .map(|b| Node::lit(b.to_string()))
                        .collect(),
                ),
                "integer" => self.integer(m, false, &excluded)?,
                "number" => self.number(m, &excluded)?,
                "string" => self.string(m, &excluded)?,
                "array" => self.array(m)?,
                _ => self.object(m)?,
            });
        }
        Ok(Node::alt(alts))
    }

    fn branches(&mut self, m: &Map<String, Value>) -> R<Node> {
        let here = self.here();
        let mut base = m.clone();
        let any_of = base.remove("anyOf");
        let one_of = base.remove("oneOf");
        let list = |v: Option<Value>, k: &str| -> R<Option<Vec<Value>>> {
            match v {
                None => Ok(None),
                Some(Value::Array(a)) if !a.is_empty() => Ok(Some(a)),
                Some(_) => Err(Fail::Invalid(format!(
                    "`{k}` at {here} must be a non-empty array"
                ))),
            }
        };
        let any_of = list(any_of, "anyOf")?;
        let one_of = list(one_of, "oneOf")?;
        let mut alts = Vec::new();
        let any_list = any_of.unwrap_or_else(|| vec![Value::Bool(true)]);
        for (i, a) in any_list.iter().enumerate() {
            let depth = self.refs.len();
            let result = (|| {
                let fa = self.at(&format!("anyOf/{i}"), |c| c.flatten(a))?;
                let with_a = merge(base.clone(), fa, &here)?;
                match &one_of {
                    None => self.flat_schema(&with_a),
                    Some(ones) => {
                        let mut merged = Vec::new();
                        let mut own = Vec::new();
                        for (j, o) in ones.iter().enumerate() {
                            let fo = self.at(&format!("oneOf/{j}"), |c| c.flatten(o))?;
                            merged.push(merge(with_a.clone(), fo.clone(), &here)?);
                            own.push(fo);
                        }
                        // Branches that emit nothing do not count. A branch's extra keys avoid
                        // every key a branch names, so the proofs below can rely on "never
                        // emits" for keys outside a branch's own.
                        let mut named = BTreeSet::new();
                        for b in &merged {
                            named.extend(object_key_names(b));
                        }
                        let mut nodes = Vec::new();
                        let mut live = Vec::new();
                        for (j, b) in merged.iter().enumerate() {
                            let n = self.at(&format!("oneOf/{j}"), |c| {
                                let previous = c.avoided_keys.replace((c.here(), named.clone()));
                                let n = c.flat_schema(b);
                                c.avoided_keys = previous;
                                n
                            })?;
                            if n != Node::Nothing {
                                nodes.push(n);
                                live.push(j);
                            }
                        }
                        if fixed_values_disjoint(live.iter().map(|&j| &merged[j])) {
                            return Ok(Node::alt(nodes));
                        }
                        let pairs = live.len().saturating_mul(live.len());
                        if pairs > self.limits.one_of_pairs {
                            return Err(Fail::Limit(format!(
                                "`oneOf` at {here} has {} branches whose exclusivity must be checked \
                                 pair by pair, more than the {} pairs of the oneOf pair limit",
                                live.len(),
                                self.limits.one_of_pairs
                            )));
                        }
                        for &x in &live {
                            for &y in &live {
                                if x != y
                                    && !excludes(
                                        &merged[x],
                                        &merged[y],
                                        &here,
                                        false,
                                        self.options.extra_keys,
                                    )?
                                {
                                    // Not proved: each branch and not the others, where
                                    // the negations have an exact form.
                                    return self
                                        .exclusive_branches(&merged, &own, &live)
                                        .map_err(|why| {
                                            why.map(|m| format!(
                                                "`oneOf` at {here}: a value of branch {x} may also match branch {y}, and oneOf needs exactly one; the compiler accepts branches it can prove exclusive (different types, `const`/`enum` values of a required property, required keys), or each branch without the others where their negation is exact, which here fails: {m}"
                                            ))
                                        });
                                }
                            }
                        }
                        Ok(Node::alt(nodes))
                    }
                }
            })();
            self.refs.truncate(depth);
            alts.push(result?);
        }
        Ok(Node::alt(alts))
    }

    fn fixed_values(&mut self, m: &Map<String, Value>) -> R<Node> {
        let here = self.here();
        let mut values: Vec<Value> = match m.get("enum") {
            Some(Value::Array(a)) => a.clone(),
            Some(_) => return Err(Fail::Invalid(format!("`enum` at {here} must be an array"))),
            None => vec![m["const"].clone()],
        };
        if let Some(c) = m.get("const") {
            values.retain(|v| same_value(v, c));
        }
        let mut rest = m.clone();
        rest.remove("enum");
        rest.remove("const");
        // Each value is checked against the rest of the schema directly; where that cannot
        // tell, against the rest's compiled language (a subset of its valid values).
        let judge = judge::Judge {
            root: self.root,
            draft4: self.draft == Draft::D4,
            fuel: Cell::new(self.judge_fuel),
            exhausted: Cell::new(false),
        };
        let rest_value = Value::Object(rest.clone());
        let mut kept = Vec::new();
        let mut unsure = Vec::new();
        for v in values {
            match judge.valid(&rest_value, &v, 0) {
                Some(true) => kept.push(v),
                Some(false) => {}
                None => unsure.push(v),
            }
        }
        self.judge_fuel = judge.fuel.get();
        if judge.exhausted.get() {
            return Err(Fail::Limit(format!(
                "checking the `enum`/`const` values at {here} against the rest of the schema \
                 takes more than {} steps (the schema judge work limit)",
                self.limits.schema_judge_work
            )));
        }
        if !unsure.is_empty() {
            let n = self.flat_schema(&rest)?;
            kept.extend(
                unsure
                    .into_iter()
                    .filter(|v| n.matches(canonical_json(v).as_bytes())),
            );
        }
        Ok(Node::alt(kept.iter().map(value_node).collect()))
    }
}

/// Formats a validator checks; a name outside this list is an annotation.
const KNOWN_FORMATS: &[&str] = &[
    "date",
    "time",
    "date-time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Cuts a pattern's language down to lengths `[min, max]` where its shape allows it exactly:
/// an optional fixed prefix and suffix around one repeated class, a fixed-length text, or
/// alternatives of those (each cut on its own: `^([^,]|$)` is `[^,]` then any characters, or
/// the empty string).
fn clamp_lengths(n: &Node, min: u32, max: Option<u32>) -> Option<Node> {
    if let Node::Alt(items) = n {
        let cut: Option<Vec<Node>> = items.iter().map(|i| clamp_lengths(i, min, max)).collect();
        return cut.map(Node::alt);
    }
    let (lo, hi) = n.char_len();
    if hi == Some(lo) {
        let fits = lo >= u64::from(min) && max.is_none_or(|m| lo <= u64::from(m));
        return Some(if fits { n.clone() } else { Node::Nothing });
    }
    let parts: Vec<Node> = match n {
        Node::Concat(p) => p.clone(),
        other => vec![other.clone()],
    };
    let reps: Vec<usize> = parts
        .iter()
        .enumerate()
        .filter(
            |(_, p)| matches!(p, Node::Repeat(inner, _, _) if matches!(**inner, Node::Class(_))),
        )
        .map(|(i, _)| i)
        .collect();
    if reps.len() != 1 {
        return None;
    }
    let mut fixed = 0u64;
    for (i, p) in parts.iter().enumerate() {
        if i == reps[0] {
            continue;
        }
        let (lo, hi) = p.char_len();
        if Some(lo) != hi {
            return None;
        }
        fixed += lo;
    }
    let Node::Repeat(inner, a, b) = &parts[reps[0]] else {
        return None;
    };
    let lo = (u64::from(min).saturating_sub(fixed)).max(u64::from(*a));
    let hi = match (max.map(|m| u64::from(m).checked_sub(fixed)), b) {
        (Some(None), _) => return Some(Node::Nothing),
        (Some(Some(m)), Some(b)) => Some(m.min(u64::from(*b))),
        (Some(Some(m)), None) => Some(m),
        (None, b) => b.map(u64::from),
    };
    let lo = u32::try_from(lo).ok()?;
    let hi = hi.map(u32::try_from).transpose().ok()?;
    let mut out = parts.clone();
    out[reps[0]] = Node::repeat((**inner).clone(), lo, hi);
    Some(Node::concat(out))
}

/// Emitted multiples of an integer `multipleOf` have at most this many digits: every one is
/// then below 2^53, where a validator or client that divides in binary floating point (a
/// JavaScript one; `jsonschema` past 64-bit integers) judges it exactly. Unbounded, a random
/// 30-digit multiple of 3 was "invalid" to the `jsonschema` crate two times in three.
const MULTIPLE_DIGITS: u32 = 15;

/// Integers that are multiples of `k`, for `k` dividing 100 (decided by the last two digits),
/// of at most [`MULTIPLE_DIGITS`] digits.
fn multiples(k: u64) -> Option<Node> {
    if k == 0 || 100 % k != 0 {
        return None;
    }
    let endings: Vec<u64> = (0..100).filter(|x| x % k == 0).collect();
    let two = |x: u64| Node::lit(format!("{x:02}"));
    // Positive multiples: one digit, two digits, or longer with a two-digit ending.
    let mut pos = Vec::new();
    for &x in &endings {
        if x > 0 {
            pos.push(Node::lit(x.to_string()));
        }
    }
    pos.push(Node::concat(vec![
        Node::class(vec![('1', '9')]),
        Node::repeat(Node::class(vec![('0', '9')]), 0, Some(MULTIPLE_DIGITS - 3)),
        Node::alt(endings.iter().map(|&x| two(x)).collect()),
    ]));
    let pos = Node::alt(pos);
    Some(Node::alt(vec![
        Node::lit("0"),
        Node::concat(vec![Node::opt(Node::lit("-")), pos]),
    ]))
}

/// A key as one JSON-pointer segment.
fn pointer_escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

fn hex_digit(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Bytes, not `&s[..]`: a `%` before a multi-byte character must not slice inside it.
        if let (b'%', Some(&hi), Some(&lo)) = (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            if let (Some(hi), Some(lo)) = (hex_digit(hi), hex_digit(lo)) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}

/// Whether every branch is a finite list of values (`const` or `enum`) and no value is in
/// two lists: then each branch emits only its own values and rejects the others', so the
/// branches exclude each other. One pass over the values instead of a check per pair: a
/// `oneOf` of 1,000 titled constants (a common way to document an enum) was ~10^6 pair checks.
fn fixed_values_disjoint<'m>(branches: impl Iterator<Item = &'m Map<String, Value>>) -> bool {
    let mut seen = std::collections::HashSet::new();
    for b in branches {
        let values: Vec<&Value> = match (b.get("const"), b.get("enum")) {
            (Some(c), _) => vec![c],
            (None, Some(Value::Array(e))) => e.iter().collect(),
            _ => return false,
        };
        // Within one branch a value may repeat; across branches it may not.
        let mine: std::collections::HashSet<String> =
            values.into_iter().map(canonical_json).collect();
        for v in mine {
            if !seen.insert(v) {
                return false;
            }
        }
    }
    true
}

/// The keys a schema names at its top level: its `properties` and `required`.
fn object_key_names(m: &Map<String, Value>) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = m
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(Value::Array(r)) = m.get("required") {
        out.extend(r.iter().filter_map(|v| v.as_str().map(str::to_owned)));
    }
    out
}

/// Whether no value emitted for schema `a` is valid under schema `b` (both flattened).
/// Conservative: `false` when unsure. `a_extra_keys`: whether `a`'s objects take extra keys
/// beside listed properties where `additionalProperties` is left out, with any name (at the
/// top of a `oneOf` branch they avoid every key a branch names: `false`); `extra_keys`: the
/// same below the top ([`SchemaOptions::extra_keys`]).
fn excludes(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    path: &str,
    a_extra_keys: bool,
    extra_keys: bool,
) -> R<bool> {
    let ta = emitted_types(a, path)?;
    // The types b accepts: its `type`, else all of them.
    let tb = explicit_types(b, path)?.unwrap_or_else(|| TYPES.into_iter().collect());
    let b_values: Option<Vec<Value>> = match (b.get("enum"), b.get("const")) {
        (Some(Value::Array(e)), _) => Some(e.clone()),
        (_, Some(c)) => Some(vec![c.clone()]),
        _ => None,
    };
    let a_values: Option<Vec<Value>> = match (a.get("enum"), a.get("const")) {
        (Some(Value::Array(e)), _) => Some(e.clone()),
        (_, Some(c)) => Some(vec![c.clone()]),
        _ => None,
    };
    if let Some(av) = &a_values {
        // Every emitted value is one of these: each must fail b's type or b's values.
        let all_out = av.iter().all(|v| {
            !type_in(type_of(v), &tb)
                || b_values
                    .as_ref()
                    .is_some_and(|bv| !bv.iter().any(|x| same_value(x, v)))
        });
        if all_out {
            return Ok(true);
        }
    }
    for t in &ta {
        if *t == "integer" && tb.contains("number")
            || tb.contains(t)
            || (*t == "number" && tb.contains("integer"))
        {
            // a may emit a value of a type b accepts: need another reason.
            if let Some(bv) = &b_values {
                if !bv.iter().any(|v| {
                    type_in(type_of(v), &[*t].into_iter().collect())
                        || (*t == "number" && type_of(v) == "integer")
                }) {
                    continue;
                }
            }
            if *t == "object" && object_excludes(a, b, path, a_extra_keys, extra_keys)? {
                continue;
            }
            return Ok(false);
        }
    }
    Ok(true)
}

/// Objects emitted for `a` are all invalid under `b`: a key `b` requires that `a` never
/// emits, a key `a` always emits that `b` forbids, or an always-emitted key whose values
/// exclude each other.
fn object_excludes(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    path: &str,
    a_extra_keys: bool,
    extra_keys: bool,
) -> R<bool> {
    let empty = Map::new();
    let pa = a
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let pb = b
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let req = |m: &Map<String, Value>| -> BTreeSet<String> {
        m.get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let ra = req(a);
    let rb = req(b);
    // Does a emit keys beside its properties? (the compiler's rule, see `object`)
    let a_extra = match a.get("additionalProperties") {
        Some(Value::Bool(false)) => false,
        Some(_) => true,
        None => pa.is_empty() || a_extra_keys,
    };
    for k in &rb {
        if !pa.contains_key(k) && !ra.contains(k) && !a_extra {
            return Ok(true);
        }
    }
    let b_closed = b.get("additionalProperties") == Some(&Value::Bool(false))
        && !b.contains_key("patternProperties");
    for k in &ra {
        if b_closed && !pb.contains_key(k) {
            return Ok(true);
        }
        if pb.get(k) == Some(&Value::Bool(false)) {
            return Ok(true);
        }
        if let (Some(Value::Object(sa)), Some(Value::Object(sb))) = (pa.get(k), pb.get(k)) {
            if sa.contains_key("$ref")
                || sb.contains_key("$ref")
                || sa.contains_key("allOf")
                || sb.contains_key("allOf")
            {
                continue;
            }
            if excludes(sa, sb, path, extra_keys, extra_keys)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// A schema value's compact JSON text as the size bound measures it (its length in bytes)
/// and as errors quote it ([`quote`]), written once and kept only as far as the quote
/// reaches: the whole text was made for these two alone (~1.5 % of a median DFA-backed
/// schema's compile).
pub(crate) fn measured_text(value: &Value) -> (usize, String) {
    /// More bytes than [`ERROR_QUOTE_CHARS`] characters take, so that a text cut here still
    /// has more characters than the quote shows (and is quoted as cut).
    const HEAD_BYTES: usize = 4 * ERROR_QUOTE_CHARS + 4;
    struct Head {
        len: usize,
        head: Vec<u8>,
    }
    impl std::io::Write for Head {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.len += buf.len();
            let room = HEAD_BYTES.saturating_sub(self.head.len());
            self.head.extend_from_slice(&buf[..buf.len().min(room)]);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut text = Head {
        len: 0,
        head: Vec::with_capacity(HEAD_BYTES),
    };
    // A `Value` always serializes (its keys are strings) and this writer never fails.
    let _ = serde_json::to_writer(&mut text, value);
    let valid = match std::str::from_utf8(&text.head) {
        Ok(head) => head,
        Err(e) => std::str::from_utf8(&text.head[..e.valid_up_to()]).unwrap_or_default(),
    };
    (text.len, quote(valid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compile(s: Value) -> JsonSchema {
        JsonSchema::compile(&s, "guided_json").unwrap()
    }

    /// The length and quote equal those of the whole text, for short and long texts and for
    /// multi-byte characters (2, 3 and 4 bytes) at every position around the cut.
    #[test]
    fn measured_text_is_the_whole_texts_length_and_quote() {
        let mut values = vec![json!({}), json!({"type": "string"}), json!("\n\"\u{1}")];
        for ch in ['é', '€', '𝄞'] {
            for pad in 0..8 {
                let body: String = "a".repeat(ERROR_QUOTE_CHARS - 4 + pad);
                values.push(
                    json!({ "description": format!("{body}{}", ch.to_string().repeat(200)) }),
                );
                values.push(json!([ch.to_string().repeat(pad * 40)]));
            }
        }
        for v in values {
            let text = v.to_string();
            assert_eq!(measured_text(&v), (text.len(), quote(&text)), "{text}");
        }
    }

    fn err(s: Value) -> String {
        JsonSchema::compile(&s, "guided_json")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn canonical_form_sorts_keys_and_shortens_numbers() {
        let v: Value = serde_json::from_str(r#"{"b":1.0,"a":[1.5,-0.0,1e20,"é\n"]}"#).unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"a":[1.5,0,100000000000000000000,"é\n"],"b":1}"#
                .replace("100000000000000000000", "1e+20")
        );
    }

    #[test]
    fn objects_sort_keys_and_honour_required() {
        let c = compile(
            json!({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},"required":["b"],"additionalProperties":false}),
        );
        let d = c.dfa().expect("a DFA");
        for ok in [r#"{"b":1}"#, r#"{"a":"x","b":-2}"#, r#"{"a": "x", "b": 3}"#] {
            assert!(d.matches(ok.as_bytes()) && c.matches(ok.as_bytes()), "{ok}");
        }
        for bad in [
            r#"{"a":"x"}"#,
            r#"{"b":1,"a":"x"}"#,
            r#"{"b":1,"c":2}"#,
            r#"{"b":1.5}"#,
        ] {
            assert!(!d.matches(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn refs_inline_and_recursion_is_refused() {
        let c = compile(
            json!({"$defs":{"p":{"type":"integer","minimum":0}},"type":"array","items":{"$ref":"#/$defs/p"},"maxItems":2}),
        );
        assert!(c.matches(b"[1, 2]") && !c.matches(b"[1,2,3]") && !c.matches(b"[-1]"));
        let e = err(
            json!({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}),
        );
        assert!(e.contains("recursive"), "{e}");
        let e = err(json!({"$ref":"other.json#/x"}));
        assert!(e.contains("not a local reference"), "{e}");
    }

    #[test]
    fn unsupported_keywords_are_named() {
        let e = err(json!({"type":"array","uniqueItems":true}));
        assert!(e.contains("`uniqueItems` at #"), "{e}");
        let e = err(json!({"type":"object","properties":{"x":{"not":{"items":{}}}}}));
        assert!(e.contains("`not` at #/properties/x/not"), "{e}");
        assert!(e.contains("negation of `items`"), "{e}");
        let e = err(json!({"type":"number","maximum":1e300}));
        assert!(e.contains("past 10^38"), "{e}");
    }

    #[test]
    fn one_of_needs_exclusive_branches() {
        let c = compile(json!({"oneOf":[{"type":"string"},{"type":"integer"}]}));
        assert!(c.matches(b"\"a\"") && c.matches(b"3"));
        // Overlapping: each branch and not the other (numbers with a fraction).
        let c = compile(json!({"oneOf":[{"type":"number"},{"type":"integer"}]}));
        assert!(c.matches(b"1.5") && !c.matches(b"3") && !c.matches(b"3.0"));
        let e = err(json!({"oneOf":[{"items":{"type":"string"}},{"maxItems":1}],"type":"array"}));
        assert!(
            e.contains("oneOf") && e.contains("negation of `items`"),
            "{e}"
        );
        let c = compile(json!({"oneOf":[
            {"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"]},
            {"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}]}));
        assert!(c.matches(br#"{"k":"a","x":1}"#) && c.matches(br#"{"k":"b"}"#));
    }

    #[test]
    fn enum_values_are_structural_and_filtered() {
        let c =
            compile(json!({"enum":[{"b":1,"a":[true,null]}, "x", 3], "type":["object","string"]}));
        assert!(c.matches(br#"{"a":[true,null],"b":1}"#));
        assert!(c.matches(br#"{"a": [true, null], "b": 1}"#));
        assert!(c.matches(br#""x""#) && !c.matches(b"3"));
        let c = compile(json!({"enum":["ab","abc"],"maxLength":2}));
        assert!(c.matches(br#""ab""#) && !c.matches(br#""abc""#));
    }

    /// `v` as JSON text (sorted keys) with `gap(i)` written between its `i`-th and next token.
    fn spaced(v: &Value, gap: &mut dyn FnMut() -> String) -> String {
        let mut out = String::new();
        match v {
            Value::Array(a) => {
                out += "[";
                for (i, x) in a.iter().enumerate() {
                    out += &gap();
                    if i > 0 {
                        out += ",";
                        out += &gap();
                    }
                    out += &spaced(x, gap);
                }
                out += &gap();
                out += "]";
            }
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out += "{";
                for (i, k) in keys.into_iter().enumerate() {
                    out += &gap();
                    if i > 0 {
                        out += ",";
                        out += &gap();
                    }
                    out += &serde_json::to_string(k).unwrap();
                    out += &gap();
                    out += ":";
                    out += &gap();
                    out += &spaced(&m[k], gap);
                }
                out += &gap();
                out += "}";
            }
            scalar => out += &canonical_json(scalar),
        }
        out
    }

    #[test]
    fn composite_enum_values_take_bounded_json_whitespace() {
        let values = [
            json!({"b": [1, {"c": null}], "a": "x y"}),
            json!([]),
            json!({}),
            json!([[true], {"k": []}]),
        ];
        let schemas = [
            json!({"enum": values.clone()}),
            json!({"const": values[0].clone()}),
            json!({"type": "object", "properties": {"v": {"enum": values.clone()}}, "required": ["v"], "additionalProperties": false}),
        ];
        let mut rng = 0x5eed_u64;
        let mut next = move |n: u64| crate::sampling::splitmix64(&mut rng) % n;
        for schema in &schemas {
            let c = compile(schema.clone());
            let g = Grammar::new(&c.gbnf()).unwrap();
            let nested = schema.get("properties").is_some();
            let wrap = |t: String| if nested { format!("{{\"v\":{t}}}") } else { t };
            for v in values
                .iter()
                .filter(|v| schema.get("const").is_none_or(|c| c == *v))
            {
                for round in 0..40 {
                    // Runs of up to MAX_JSON_WHITESPACE bytes of the four JSON blanks.
                    let max = if round == 0 {
                        MAX_JSON_WHITESPACE as u64
                    } else {
                        9
                    };
                    let text = wrap(spaced(v, &mut || {
                        let len = if round == 0 { max } else { next(max + 1) };
                        (0..len)
                            .map(|_| [' ', '\t', '\n', '\r'][next(4) as usize])
                            .collect()
                    }));
                    assert!(c.matches(text.as_bytes()), "{schema}: {text:?}");
                    assert!(g.matches(text.as_bytes()), "{schema} (GBNF): {text:?}");
                }
                // One blank past the bound, anywhere: no longer in the language.
                let mut first = true;
                let text = wrap(spaced(v, &mut || {
                    let run = if first {
                        " ".repeat(MAX_JSON_WHITESPACE + 1)
                    } else {
                        String::new()
                    };
                    first = false;
                    run
                }));
                assert!(!c.matches(text.as_bytes()), "{schema}: {text:?}");
                assert!(!g.matches(text.as_bytes()), "{schema} (GBNF): {text:?}");
                // Between the value's tokens only, not before it.
                let before = format!(" {}", canonical_json(v));
                assert!(
                    nested || !c.matches(before.as_bytes()),
                    "{schema}: {before:?}"
                );
            }
        }
    }

    #[test]
    fn free_form_values_nest_to_any_depth() {
        for schema in [
            json!({}),
            json!(true),
            json!({"type": "array"}),
            json!({"type": "object", "properties": {"a": {}}, "required": ["a"]}),
        ] {
            let c = compile(schema.clone());
            assert!(c.dfa().is_none(), "{schema}: brackets nest without bound");
            let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
            let wrapped = |v: &str| {
                if schema.get("properties").is_some() {
                    format!(r#"{{"a":{v}}}"#)
                } else if schema.get("type").is_some() {
                    format!("[{v}]")
                } else {
                    v.to_owned()
                }
            };
            for v in [
                deep(1),
                deep(40),
                r#"{"a":[1,"x",{"b":[null,{"c":{}}]}]}"#.into(),
            ] {
                let text = wrapped(&v);
                assert!(c.matches(text.as_bytes()), "{schema}: {text}");
                assert!(
                    c.automaton().matches(text.as_bytes()),
                    "{schema}: the grammar rejects {text}"
                );
            }
            for bad in ["[1,]", r#"{"a"}"#, "[[]"] {
                let text = wrapped(bad);
                assert!(!c.matches(text.as_bytes()), "{schema}: {text}");
                assert!(!c.automaton().matches(text.as_bytes()), "{schema}: {text}");
            }
        }
    }

    #[test]
    fn listed_properties_take_extra_keys_unless_the_request_says_not() {
        let schema = json!({"type": "object", "properties": {"b": {"type": "integer"},
            "d": {"type": "boolean"}}, "required": ["d"]});
        let c = compile(schema.clone());
        // Extra keys anywhere among the listed ones (a sorted instance's order), any value.
        for ok in [
            r#"{"d":true}"#,
            r#"{"a":1,"b":2,"c":[{"x":[]}],"d":false,"e":null}"#,
            r#"{"d":true,"z":"q","y":1}"#,
            r#"{"zz":{},"d":true}"#,
        ] {
            assert!(c.matches(ok.as_bytes()), "{ok}");
            assert!(c.automaton().matches(ok.as_bytes()), "{ok}");
        }
        // A listed key is never an extra one: its schema holds, and it appears once.
        for bad in [
            r#"{"b":"x","d":true}"#,
            r#"{"d":true,"b":1}"#,
            r#"{"d":true,"d":false}"#,
            r#"{"b":1}"#,
        ] {
            assert!(!c.matches(bad.as_bytes()), "{bad}");
            assert!(!c.automaton().matches(bad.as_bytes()), "{bad}");
        }
        let strict = JsonSchema::compile_with_options(
            &schema,
            "guided_json",
            &Limits::DEFAULT,
            SchemaOptions { extra_keys: false },
        )
        .unwrap();
        assert!(strict.dfa().is_some());
        assert!(strict.matches(br#"{"b":2,"d":true}"#));
        assert!(!strict.matches(br#"{"a":1,"d":true}"#));
    }
}
