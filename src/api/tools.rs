//! Tool calling: the OpenAI `tools` and `tool_choice` fields, and the tool-call format of each
//! model family (its *codec*), chosen from the model's chat template.
//!
//! A codec does two things. It **parses** a reply into `tool_calls` (every codec, whatever
//! `tool_choice` says), and for `tool_choice: "required"` or a named function it can **force**
//! one: [`Codec::forced_grammar`] is a GBNF grammar accepting exactly a well-formed call whose
//! arguments conform to the tool's parameters schema, run by the same pushdown engine as
//! `guided_grammar`, so a forced reply always parses. Only the ChatML `<tool_call>` codec
//! forces; the `[TOOL_CALLS]` and `<|python_tag|>` formats are parsed but, when forced, left to
//! the template (their markers are control tokens, which the constraint engine never emits as
//! text). A model with no codec returns its reply as plain content. To parse those two formats
//! the reply must be decoded with its control tokens' text (`[TOOL_CALLS]`, `<|python_tag|>`).
//!
//! | family | template marker | codec | parsed | forced |
//! | --- | --- | --- | --- | --- |
//! | Qwen 2 / 2.5 / 3, Hermes 2 Pro / 3 | `<tool_call>` | `chatml-hermes` | yes | yes |
//! | SmolLM2 and other plain ChatML (tools added to the system message) | `<\|im_start\|>` | `chatml-hermes` | yes | yes |
//! | Mistral v0.3, Nemo, Small (`[{..}]` list and `name[ARGS]{..}` forms) | `[TOOL_CALLS]` | `mistral` | yes | no (left to the template) |
//! | Llama 3.1 / 3.2 / 3.3 (`{"name", "parameters"}`) | `<\|python_tag\|>` or `ipython` | `llama3-json` | yes | no (left to the template) |
//! | any other template (Gemma, Phi, ...) | none | none | no: plain content | no |
//!
//! A template that does not render tools itself (SmolLM2's ignores `tools`, `tool_calls` and
//! the `tool` role) gets them through [`adapt_messages`]: a Hermes-style instruction in the
//! system message, and earlier calls and results rewritten as `<tool_call>` / `<tool_response>`
//! text.

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::json_schema::{JsonSchema, SchemaOptions};
use crate::limits::{Limits, MAX_SCHEMA_REGEX_BYTES, TOOLS_SCHEMA_BUDGET};
use crate::sampling::splitmix64;

/// Most tools one request may declare: OpenAI's own limit. Each tool's schema is rendered to
/// GBNF rules when the request is read (up to 16 KiB of schema each), all of them under one
/// request's budget ([`TOOLS_SCHEMA_BUDGET`]).
pub const MAX_TOOLS: usize = 128;

/// Most tools listed one by one in a request's warnings when their schemas cannot be
/// compiled (the rest are counted): each names its error, and 8 keep the `x-poot-warnings`
/// header under ~4 KiB (Node's clients refuse headers past 16 KiB).
const MAX_TOOL_WARNINGS: usize = 8;

/// Longest tool name, OpenAI's limit (names are `[a-zA-Z0-9_-]{1,64}`).
const MAX_NAME_CHARS: usize = 64;

/// The ChatML / Hermes call markers.
const CHATML_OPEN: &str = "<tool_call>";
const CHATML_CLOSE: &str = "</tool_call>";
/// Mistral's call marker and the separator of its `name[ARGS]{..}` form (`[CALL_ID]id` may sit
/// between the name and `[ARGS]`).
const MISTRAL_MARKER: &str = "[TOOL_CALLS]";
const MISTRAL_ARGS: &str = "[ARGS]";
const MISTRAL_CALL_ID: &str = "[CALL_ID]";
/// Llama 3.1+'s marker before a call (also before built-in tool code, which is not JSON and
/// so stays content).
const LLAMA3_MARKER: &str = "<|python_tag|>";

/// The feature matrix: for each family, the template marker that selects its codec, and what
/// the codec does (the same table is in the module docs).
pub const FEATURE_MATRIX: &str = "\
| family | template marker | codec | parsed | forced |
| --- | --- | --- | --- | --- |
| Qwen 2 / 2.5 / 3, Hermes 2 Pro / 3 | `<tool_call>` | `chatml-hermes` | yes | yes |
| SmolLM2 and other plain ChatML (tools added to the system message) | `<\\|im_start\\|>` | `chatml-hermes` | yes | yes |
| Mistral v0.3, Nemo, Small (`[{..}]` list and `name[ARGS]{..}` forms) | `[TOOL_CALLS]` | `mistral` | yes | no (left to the template) |
| Llama 3.1 / 3.2 / 3.3 (`{\"name\", \"parameters\"}`) | `<\\|python_tag\\|>` or `ipython` | `llama3-json` | yes | no (left to the template) |
| any other template (Gemma, Phi, ...) | none | none | no: plain content | no |
";

/// One declared function tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// Its JSON Schema; when absent, a function without parameters: the empty object only
    /// (`{"type": "object", "properties": {}, "additionalProperties": false}`), so a forced
    /// call to it is `"arguments": {}` rather than a free-form object.
    pub parameters: Value,
    /// The parameters' GBNF rules (entry `root`, [`JsonSchema::gbnf_within`]), made by
    /// [`render_tool_schemas`] when a call to this tool can be forced (`None` otherwise); a
    /// forced call's grammar is assembled from them.
    pub gbnf: Option<String>,
}

/// What `tool_choice` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No call: the reply is content.
    None,
    /// The model decides; calls are parsed from its reply.
    Auto,
    /// A call to one of the tools.
    Required,
    /// A call to this tool.
    Function(String),
}

/// A model family's tool-call format; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// `<tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>` (Qwen, Hermes, ChatML).
    ChatMl,
    /// `[TOOL_CALLS][{"name": .., "arguments": {..}}]` or `[TOOL_CALLS]name[ARGS]{..}`.
    Mistral,
    /// `<|python_tag|>{"name": .., "parameters": {..}}`, or that JSON as the whole reply.
    Llama3,
}

/// A call found in a reply, in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// `call_` and 24 lowercase hex digits.
    pub id: String,
    pub name: String,
    /// The arguments object as compact JSON text.
    pub arguments: String,
}

/// A reply split into content and calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The text outside the calls, trimmed; `None` when that is empty.
    pub content: Option<String>,
    pub calls: Vec<ToolCall>,
}

fn tools_error(message: impl Into<String>) -> Error {
    Error::invalid_input(message).with_param("tools")
}

fn choice_error(message: impl Into<String>) -> Error {
    Error::invalid_input(message).with_param("tool_choice")
}

/// Whether `name` is a valid tool name: 1 to 64 of `a-z A-Z 0-9 _ -`.
fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Reads a request's `tools`: an array (absent or null: none) of at most [`MAX_TOOLS`]
/// `{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}`.
///
/// Names are unique and match `^[a-zA-Z0-9_-]{1,64}$`; `parameters` is a JSON object. Every
/// error names the param `tools`. The schemas are not compiled here: whether one must be
/// depends on `tool_choice` ([`render_tool_schemas`]).
pub fn parse_tools(v: Option<&Value>) -> Result<Vec<Tool>> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(tools_error(
                "tools must be an array of {\"type\": \"function\", \"function\": {...}}",
            ))
        }
    };
    if items.len() > MAX_TOOLS {
        return Err(Error::limit_exceeded(format!(
            "tools has {} entries, over the limit of {MAX_TOOLS}",
            items.len()
        ))
        .with_param("tools"));
    }
    let mut tools: Vec<Tool> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("tools[{i}]");
        let obj = item
            .as_object()
            .ok_or_else(|| tools_error(format!("{at} must be an object")))?;
        match obj.get("type").and_then(Value::as_str) {
            Some("function") => {}
            other => {
                return Err(tools_error(format!(
                    "{at}.type must be \"function\" (got {})",
                    other.map_or_else(|| "none".to_string(), |t| format!("{t:?}"))
                )))
            }
        }
        let f = obj
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| tools_error(format!("{at}.function must be an object")))?;
        let name = match f.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            _ => {
                return Err(tools_error(format!(
                    "{at}.function.name is required (a non-empty string)"
                )))
            }
        };
        if !valid_name(&name) {
            return Err(tools_error(format!(
                "{at}.function.name {} must be 1 to {MAX_NAME_CHARS} characters of a-z, A-Z, 0-9, _ and -",
                crate::regex::quote(&name)
            )));
        }
        if tools.iter().any(|t| t.name == name) {
            return Err(tools_error(format!(
                "{at}.function.name `{name}` is declared twice"
            )));
        }
        let description = match f.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(d)) => Some(d.clone()),
            Some(_) => {
                return Err(tools_error(format!(
                    "{at}.function.description must be a string"
                )))
            }
        };
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => {
                json!({"type": "object", "properties": {}, "additionalProperties": false})
            }
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(tools_error(format!(
                    "{at}.function.parameters must be a JSON Schema object"
                )))
            }
        };
        tools.push(Tool {
            name,
            description,
            parameters,
            gbnf: None,
        });
    }
    Ok(tools)
}

/// Compiles the parameters schemas of the tools that `choice` can force (all of them for
/// `"required"`, the named one for a named function) into their GBNF rules
/// ([`Tool::gbnf`]), whose errors are 400s naming `tools`: a forced call must be
/// constrained to its schema. Under `"auto"` or `"none"` nothing is forced, so a schema the
/// compiler cannot take is no error: it is checked the same way, and each that fails is a
/// warning in the returned list (a call to it could not be forced). The tools of one request
/// share [`TOOLS_SCHEMA_BUDGET`] schemas' limits (subschema visits, `enum` judge work, bytes
/// of rules), failed checks included, so a list of 128 hard schemas costs what 4 do; the
/// schemas read by `options` (the request's `guided_json_extra_keys`).
pub fn render_tool_schemas(
    tools: &mut [Tool],
    choice: &ToolChoice,
    limits: &Limits,
    options: SchemaOptions,
) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let mut unlisted = 0usize;
    let mut left = ToolsBudget {
        visits: limits.schema_expansion.saturating_mul(TOOLS_SCHEMA_BUDGET),
        judge_work: limits
            .schema_judge_work
            .saturating_mul(TOOLS_SCHEMA_BUDGET as u64),
        gbnf_bytes: MAX_SCHEMA_REGEX_BYTES * TOOLS_SCHEMA_BUDGET,
    };
    for (i, tool) in tools.iter_mut().enumerate() {
        let forced = match choice {
            ToolChoice::Required => true,
            ToolChoice::Function(name) => name == &tool.name,
            ToolChoice::None | ToolChoice::Auto => false,
        };
        // A named function is the only tool that can be called.
        if matches!(choice, ToolChoice::Function(_)) && !forced {
            continue;
        }
        let at = format!("tools[{i}]");
        // This tool's limits: the request's, less what the tools before it took.
        let this = Limits {
            schema_expansion: limits.schema_expansion.min(left.visits),
            schema_judge_work: limits.schema_judge_work.min(left.judge_work),
            ..*limits
        };
        let shared = |e: Error| {
            if e.is_limit_exceeded() && i > 0 {
                Error::limit_exceeded(format!(
                    "{at}: {} (the request's tools share {TOOLS_SCHEMA_BUDGET} schemas' budget; tools[0..{i}] took the rest)",
                    e.message()
                ))
                .with_source(e)
            } else {
                e
            }
            .with_param("tools")
        };
        let (gbnf, work) = JsonSchema::gbnf_within(&tool.parameters, "tools", &this, options);
        left.visits = left.visits.saturating_sub(work.visits);
        left.judge_work = left.judge_work.saturating_sub(work.judge_work);
        let gbnf = gbnf.and_then(|g| match left.gbnf_bytes.checked_sub(g.len()) {
            Some(rest) => {
                left.gbnf_bytes = rest;
                Ok(g)
            }
            None => Err(Error::limit_exceeded(format!(
                "{at}: the tools' parameter schemas render to more than {} bytes of grammar",
                TOOLS_SCHEMA_BUDGET * MAX_SCHEMA_REGEX_BYTES
            ))),
        });
        match gbnf {
            Ok(g) if forced => tool.gbnf = Some(g),
            Ok(_) => {}
            Err(e) if forced => return Err(shared(e)),
            Err(_) if warnings.len() >= MAX_TOOL_WARNINGS => unlisted += 1,
            Err(e) => warnings.push(format!(
                "{at} `{}`: a call to it could not be forced ({}); under tool_choice \"{}\" no call is forced, so this is no error",
                tool.name,
                shared(e).message(),
                if *choice == ToolChoice::None { "none" } else { "auto" }
            )),
        }
    }
    if unlisted > 0 {
        warnings.push(format!(
            "{unlisted} more tools could not be forced either (the first {MAX_TOOL_WARNINGS} are listed)"
        ));
    }
    Ok(warnings)
}

/// What is left of one request's budget for its tools' schemas ([`TOOLS_SCHEMA_BUDGET`]).
struct ToolsBudget {
    visits: usize,
    judge_work: u64,
    gbnf_bytes: usize,
}

/// Reads `tool_choice`: absent or null → [`ToolChoice::Auto`] with tools, [`ToolChoice::None`]
/// without; `"none"`, `"auto"`, `"required"`, or `{"type": "function", "function": {"name":
/// N}}` with `N` among `tools`. `"required"` and a named function need at least one tool.
/// Every error names the param `tool_choice`.
pub fn parse_tool_choice(v: Option<&Value>, tools: &[Tool]) -> Result<ToolChoice> {
    let choice = match v {
        None | Some(Value::Null) if tools.is_empty() => return Ok(ToolChoice::None),
        None | Some(Value::Null) => return Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => return Ok(ToolChoice::None),
            "auto" => return Ok(ToolChoice::Auto),
            "required" => ToolChoice::Required,
            other => {
                return Err(choice_error(format!(
                    "tool_choice {} must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                    crate::regex::quote(other)
                )))
            }
        },
        Some(Value::Object(obj)) => {
            if obj.get("type").and_then(Value::as_str) != Some("function") {
                return Err(choice_error(
                    "tool_choice object must have \"type\": \"function\"",
                ));
            }
            let name = obj
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    choice_error("tool_choice.function.name is required (a string)")
                })?;
            ToolChoice::Function(name.to_string())
        }
        Some(_) => {
            return Err(choice_error(
                "tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}",
            ))
        }
    };
    if tools.is_empty() {
        return Err(choice_error(
            "tool_choice asks for a tool call but the request declares no tools",
        ));
    }
    if let ToolChoice::Function(name) = &choice {
        if !tools.iter().any(|t| &t.name == name) {
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            return Err(choice_error(format!(
                "tool_choice names the function {}, which is not in tools (available: {})",
                crate::regex::quote(name),
                names.join(", ")
            )));
        }
    }
    Ok(choice)
}

impl Codec {
    /// The codec a chat template implies, from the markers its text contains, first match
    /// wins: `<tool_call>` → [`Codec::ChatMl`]; `[TOOL_CALLS]` → [`Codec::Mistral`];
    /// `<|python_tag|>` or `ipython` (Llama 3.1's tool-result role) → [`Codec::Llama3`]; then
    /// `<|im_start|>` (plain ChatML such as SmolLM2, which renders no tools itself) →
    /// [`Codec::ChatMl`]; otherwise none.
    pub fn detect(template: Option<&str>) -> Option<Codec> {
        let t = template?;
        if t.contains(CHATML_OPEN) {
            Some(Codec::ChatMl)
        } else if t.contains(MISTRAL_MARKER) {
            Some(Codec::Mistral)
        } else if t.contains(LLAMA3_MARKER) || t.contains("ipython") {
            Some(Codec::Llama3)
        } else if t.contains("<|im_start|>") {
            Some(Codec::ChatMl)
        } else {
            None
        }
    }

    /// A stable name for logs and the feature matrix.
    pub fn name(self) -> &'static str {
        match self {
            Codec::ChatMl => "chatml-hermes",
            Codec::Mistral => "mistral",
            Codec::Llama3 => "llama3-json",
        }
    }

    /// Whether a call can be forced by grammar: only ChatML, whose markers are plain text.
    pub fn can_force(self) -> bool {
        self == Codec::ChatMl
    }

    /// The GBNF grammar (llama.cpp syntax, entry `root`) of a forced call, or `None` when
    /// nothing is forced (`None`/`Auto`) or this codec cannot force.
    ///
    /// A call is exactly `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>`,
    /// where ARGS is the language of the tool's parameters schema as `guided_json` compiles it
    /// (keys in sorted order, an optional space after `,` and `:`). `Required` allows any tool,
    /// `Function(n)` exactly one call to `n`; with `Required`, `parallel` allows one or more
    /// calls separated by `\n`, otherwise exactly one. The tools' rules are
    /// [`render_tool_schemas`]'s, each renamed with a `tK-` prefix so that they coexist. The grammar is compiled here once to check it: a grammar over `limits`'
    /// `grammar_bytes` ([`MAX_GRAMMAR_BYTES`](crate::limits::MAX_GRAMMAR_BYTES) by default) or over the grammar engine's limits
    /// is a `limit_exceeded` error naming `tools`. A tool with a few typed parameters costs
    /// ~300-500 bytes, so 16 KiB holds
    /// some 30-50 of them; a free-form arguments object (`{"type": "object"}`) costs ~2 KiB,
    /// so `Required` over more than ~7 such tools is refused.
    pub fn forced_grammar(
        self,
        tools: &[Tool],
        choice: &ToolChoice,
        parallel: bool,
        limits: &Limits,
    ) -> Result<Option<String>> {
        if !self.can_force() {
            return Ok(None);
        }
        let chosen: Vec<&Tool> = match choice {
            ToolChoice::None | ToolChoice::Auto => return Ok(None),
            ToolChoice::Required => tools.iter().collect(),
            ToolChoice::Function(name) => tools.iter().filter(|t| &t.name == name).collect(),
        };
        if chosen.is_empty() {
            return Err(choice_error(
                "tool_choice asks for a tool call but no declared tool matches it",
            ));
        }
        let mut alts = Vec::new();
        let mut rules = String::new();
        for (i, tool) in chosen.iter().enumerate() {
            let prefix = format!("t{i}-");
            let gbnf = tool.gbnf.as_deref().ok_or_else(|| {
                Error::invalid_input(format!(
                    "tools: the parameters schema of `{}` was not compiled for tool_choice {choice:?}",
                    tool.name
                ))
                .with_param("tools")
            })?;
            rules.push_str(&prefix_rules(gbnf, &prefix));
            let open = format!(
                "{CHATML_OPEN}\n{{\"name\": \"{}\", \"arguments\": ",
                tool.name
            );
            let close = format!("}}\n{CHATML_CLOSE}");
            rules.push_str(&format!(
                "{prefix}call ::= {} {prefix}root {}\n",
                gbnf_literal(&open),
                gbnf_literal(&close)
            ));
            alts.push(format!("{prefix}call"));
        }
        // A named function is one call, whatever `parallel_tool_calls` says.
        let root = if parallel && *choice == ToolChoice::Required {
            "root ::= call (\"\\n\" call)*\n"
        } else {
            "root ::= call\n"
        };
        let text = format!("{root}call ::= {}\n{rules}", alts.join(" | "));
        if text.len() > limits.grammar_bytes {
            return Err(Error::limit_exceeded(format!(
                "tools: the grammar forcing a call to {} is {} bytes, over the {}-byte grammar limit",
                tool_list(&chosen),
                text.len(),
                limits.grammar_bytes
            ))
            .with_param("tools"));
        }
        if let Err(e) = crate::grammar::Grammar::new_with(&text, limits) {
            let message = format!(
                "tools: the grammar forcing a call to {} does not compile: {}",
                tool_list(&chosen),
                e.message()
            );
            let e2 = if e.is_limit_exceeded() {
                Error::limit_exceeded(message)
            } else {
                Error::invalid_input(message)
            };
            return Err(e2.with_param("tools").with_source(e));
        }
        Ok(Some(text))
    }

    /// Splits a reply into content and calls.
    ///
    /// A call whose text is not JSON, lacks a string `name`, names a tool not in `tools`, or
    /// has arguments that are not an object (a string holding a JSON object counts) stays in
    /// the content verbatim, so nothing the model wrote is lost. Arguments may be under
    /// `arguments` or `parameters` (Llama 3's key); missing or null means `{}`; they are
    /// re-serialized compactly. Ids are `call_` + 24 hex digits derived from `id_seed` and the
    /// call's index (SplitMix64), so a seeded request repeats them.
    ///
    /// - ChatML: each `<tool_call>..</tool_call>` block (an unclosed last block runs to the
    ///   end).
    /// - Mistral: after each `[TOOL_CALLS]`, a JSON list of calls (all valid or the whole list
    ///   stays content) or one or more `name[ARGS]{..}` (an optional `[CALL_ID]id` before
    ///   `[ARGS]` is skipped).
    /// - Llama 3: everything after `<|python_tag|>`, or the whole reply when it starts with
    ///   `{`, as JSON objects separated by whitespace or `;` (all valid or all content).
    pub fn parse(self, text: &str, tools: &[Tool], id_seed: u64) -> Parsed {
        let mut content = String::new();
        let mut found: Vec<(String, String)> = Vec::new();
        match self {
            Codec::ChatMl => parse_chatml(text, tools, &mut content, &mut found),
            Codec::Mistral => parse_mistral(text, tools, &mut content, &mut found),
            Codec::Llama3 => parse_llama3(text, tools, &mut content, &mut found),
        }
        let trimmed = content.trim();
        Parsed {
            content: (!trimmed.is_empty()).then(|| trimmed.to_string()),
            calls: found
                .into_iter()
                .enumerate()
                .map(|(i, (name, arguments))| ToolCall {
                    id: call_id(id_seed, i),
                    name,
                    arguments,
                })
                .collect(),
        }
    }

    /// For streaming: how many leading bytes of `text` can be sent as content now. That is
    /// everything before the first call marker, or before a suffix that could still grow into
    /// one (`"<tool"` for `<tool_call>`). Llama 3 also holds a reply whose first non-space
    /// character is `{` (or that is only spaces so far), since the whole reply may be a call.
    /// Always a char boundary.
    pub fn safe_prefix_len(self, text: &str) -> usize {
        let marker = match self {
            Codec::ChatMl => CHATML_OPEN,
            Codec::Mistral => MISTRAL_MARKER,
            Codec::Llama3 => {
                let rest = text.trim_start();
                if rest.is_empty() || rest.starts_with('{') {
                    return 0;
                }
                LLAMA3_MARKER
            }
        };
        if let Some(p) = text.find(marker) {
            return p;
        }
        // The longest suffix that is a proper prefix of the marker.
        let start = text.len().saturating_sub(marker.len() - 1);
        (start..text.len())
            .find(|&i| {
                text.is_char_boundary(i) && marker.as_bytes().starts_with(&text.as_bytes()[i..])
            })
            .unwrap_or(text.len())
    }
}

/// `names` for error messages: `a, b, c`.
/// The tools' names for a message: the first 8, then how many more (a forced call may name
/// all 128 of a request's tools, ~1 KiB of names).
fn tool_list(tools: &[&Tool]) -> String {
    const SHOWN: usize = 8;
    let mut names = tools
        .iter()
        .take(SHOWN)
        .map(|t| format!("`{}`", t.name))
        .collect::<Vec<_>>()
        .join(", ");
    if tools.len() > SHOWN {
        names.push_str(&format!(" and {} more", tools.len() - SHOWN));
    }
    names
}

/// A GBNF string literal of ASCII text.
fn gbnf_literal(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// GBNF text with every rule name (definitions and references) prefixed by `prefix`: names
/// are the runs of `[A-Za-z0-9_-]` outside string literals, character classes and `{m,n}`
/// counts (the exported schema grammars have no comments).
fn prefix_rules(gbnf: &str, prefix: &str) -> String {
    let b = gbnf.as_bytes();
    let name_byte = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
    let mut out = String::with_capacity(gbnf.len() * 5 / 4);
    let mut i = 0;
    while i < b.len() {
        let start = i;
        match b[i] {
            open @ (b'"' | b'[' | b'{') => {
                let close = match open {
                    b'"' => b'"',
                    b'[' => b']',
                    _ => b'}',
                };
                i += 1;
                while i < b.len() && b[i] != close {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(b.len());
                out.push_str(&gbnf[start..i]);
            }
            c if name_byte(c) => {
                while i < b.len() && name_byte(b[i]) {
                    i += 1;
                }
                out.push_str(prefix);
                out.push_str(&gbnf[start..i]);
            }
            _ => {
                let c = gbnf[i..].chars().next().expect("in bounds");
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

/// `call_` + 24 hex digits (96 bits): outputs `2i` and `2i + 1` of the SplitMix64 stream
/// seeded with `seed`, so distinct indices never share an id for one seed.
fn call_id(seed: u64, index: usize) -> String {
    let mut state = seed.wrapping_add((2 * index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let a = splitmix64(&mut state);
    let b = splitmix64(&mut state);
    format!("call_{a:016x}{:08x}", b >> 32)
}

/// A call object's (name, compact arguments) when it is a valid call of a declared tool.
fn call_of(v: &Value, tools: &[Tool]) -> Option<(String, String)> {
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?;
    if !tools.iter().any(|t| t.name == name) {
        return None;
    }
    let args = obj.get("arguments").or_else(|| obj.get("parameters"));
    let args = arguments_of(args)?;
    Some((name.to_string(), args))
}

/// Compact JSON text of an arguments value: an object, a string holding one, or absent.
fn arguments_of(args: Option<&Value>) -> Option<String> {
    match args {
        None | Some(Value::Null) => Some("{}".to_string()),
        Some(v @ Value::Object(_)) => serde_json::to_string(v).ok(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => serde_json::to_string(&v).ok(),
            _ => None,
        },
        Some(_) => None,
    }
}

/// The first JSON value at the start of `s` (after whitespace) and the bytes it spans.
fn leading_json(s: &str) -> Option<(Value, usize)> {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    let v = it.next()?.ok()?;
    Some((v, it.byte_offset()))
}

fn parse_chatml(
    text: &str,
    tools: &[Tool],
    content: &mut String,
    found: &mut Vec<(String, String)>,
) {
    let mut rest = text;
    while let Some(p) = rest.find(CHATML_OPEN) {
        content.push_str(&rest[..p]);
        let after = &rest[p + CHATML_OPEN.len()..];
        // The block is the JSON value that opens it, when the close (or the end) follows:
        // a string inside it may hold `</tool_call>` itself (a sampled city name did).
        let whole = leading_json(after).and_then(|(v, n)| {
            let tail = &after[n..];
            let gap = tail.len() - tail.trim_start().len();
            let tail = &tail[gap..];
            if tail.starts_with(CHATML_CLOSE) {
                Some((v, n + gap + CHATML_CLOSE.len()))
            } else {
                tail.is_empty().then_some((v, after.len()))
            }
        });
        let (value, used) = match whole {
            Some((v, used)) => (Some(v), used),
            None => match after.find(CHATML_CLOSE) {
                Some(q) => (
                    serde_json::from_str::<Value>(after[..q].trim()).ok(),
                    q + CHATML_CLOSE.len(),
                ),
                None => (
                    serde_json::from_str::<Value>(after.trim()).ok(),
                    after.len(),
                ),
            },
        };
        match value.and_then(|v| call_of(&v, tools)) {
            Some(call) => found.push(call),
            None => content.push_str(&rest[p..p + CHATML_OPEN.len() + used]),
        }
        rest = &after[used..];
    }
    content.push_str(rest);
}

fn parse_mistral(
    text: &str,
    tools: &[Tool],
    content: &mut String,
    found: &mut Vec<(String, String)>,
) {
    let mut segments = text.split(MISTRAL_MARKER);
    content.push_str(segments.next().unwrap_or(""));
    for seg in segments {
        let body = seg.trim_start();
        if body.starts_with('[') {
            // The v0.3 form: a JSON list of call objects, all of them valid.
            let calls = leading_json(body).and_then(|(v, end)| {
                let calls: Option<Vec<_>> =
                    v.as_array()?.iter().map(|c| call_of(c, tools)).collect();
                Some((calls?, end))
            });
            match calls {
                Some((calls, end)) if !calls.is_empty() => {
                    found.extend(calls);
                    content.push_str(&body[end..]);
                }
                _ => {
                    content.push_str(MISTRAL_MARKER);
                    content.push_str(seg);
                }
            }
            continue;
        }
        // The newer form: `name[ARGS]{..}`, possibly several.
        let mut rest = body;
        let mut any = false;
        while let Some((call, used)) = mistral_named_call(rest, tools) {
            found.push(call);
            any = true;
            rest = rest[used..].trim_start();
        }
        if !any {
            content.push_str(MISTRAL_MARKER);
            content.push_str(seg);
        } else {
            content.push_str(rest);
        }
    }
}

/// One `name[CALL_ID]id[ARGS]{..}` (the `[CALL_ID]` part optional) at the start of `s`, and
/// the bytes it spans.
fn mistral_named_call(s: &str, tools: &[Tool]) -> Option<((String, String), usize)> {
    let args_at = s.find(MISTRAL_ARGS)?;
    let head = &s[..args_at];
    let name = head
        .find(MISTRAL_CALL_ID)
        .map_or(head, |i| &head[..i])
        .trim();
    if !tools.iter().any(|t| t.name == name) {
        return None;
    }
    let json_at = args_at + MISTRAL_ARGS.len();
    let (args, len) = leading_json(&s[json_at..])?;
    if !args.is_object() {
        return None;
    }
    Some((
        (name.to_string(), arguments_of(Some(&args))?),
        json_at + len,
    ))
}

fn parse_llama3(
    text: &str,
    tools: &[Tool],
    content: &mut String,
    found: &mut Vec<(String, String)>,
) {
    let (before, calls_text) = match text.find(LLAMA3_MARKER) {
        Some(p) => (&text[..p], &text[p + LLAMA3_MARKER.len()..]),
        None if text.trim_start().starts_with('{') => ("", text),
        None => {
            content.push_str(text);
            return;
        }
    };
    let mut calls = Vec::new();
    let mut rest = calls_text;
    let ok = loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if rest.is_empty() {
            break !calls.is_empty();
        }
        match leading_json(rest).and_then(|(v, used)| Some((call_of(&v, tools)?, used))) {
            Some((call, used)) => {
                calls.push(call);
                rest = &rest[used..];
            }
            None => break false,
        }
    };
    content.push_str(before);
    if ok {
        found.extend(calls);
    } else {
        content.push_str(&text[before.len()..]);
    }
}

/// The text of a message's `content`: a string, or the `text` of its parts joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The Hermes / Qwen 2.5 tool instruction listing `tools`.
fn tool_instruction(tools: &[Tool]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        let mut f = format!("{{\"name\": {}", Value::from(t.name.as_str()));
        if let Some(d) = &t.description {
            f.push_str(&format!(", \"description\": {}", Value::from(d.as_str())));
        }
        f.push_str(&format!(
            ", \"parameters\": {}}}",
            crate::chat_template::python_json(&t.parameters)
        ));
        s.push_str(&format!("\n{{\"type\": \"function\", \"function\": {f}}}"));
    }
    s.push_str("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    s
}

/// One `<tool_call>` block for an OpenAI `tool_calls` entry.
fn call_block(call: &Value) -> String {
    let f = call.get("function").unwrap_or(call);
    let name = f.get("name").and_then(Value::as_str).unwrap_or("");
    let args = match f.get("arguments") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .map(|v| crate::chat_template::python_json(&v))
            .unwrap_or_else(|_| s.clone()),
        Some(v) => crate::chat_template::python_json(v),
        None => "{}".to_string(),
    };
    format!(
        "{CHATML_OPEN}\n{{\"name\": {}, \"arguments\": {args}}}\n{CHATML_CLOSE}",
        Value::from(name)
    )
}

/// Messages for a template that does not render tools itself.
///
/// With `template_handles_tools`, `messages` is returned unchanged. Otherwise assistant
/// `tool_calls` become `<tool_call>` blocks after the content, and each run of `tool` messages
/// becomes one `user` message of `<tool_response>\n..\n</tool_response>` blocks (Qwen 2.5's
/// layout), so the history renders through any template; and when the codec is ChatML and
/// `tools` is non-empty, the Hermes instruction listing the tools is merged into the first
/// system message (after a blank line) or added as one. Other codecs get no instruction:
/// their parsers expect their own format, which only their templates teach.
pub fn adapt_messages(
    codec: Option<Codec>,
    messages: &[Value],
    tools: &[Tool],
    template_handles_tools: bool,
) -> Vec<Value> {
    if template_handles_tools {
        return messages.to_vec();
    }
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    let mut responses: Vec<String> = Vec::new();
    let flush = |out: &mut Vec<Value>, responses: &mut Vec<String>| {
        if !responses.is_empty() {
            out.push(json!({"role": "user", "content": responses.join("\n")}));
            responses.clear();
        }
    };
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "tool" {
            responses.push(format!(
                "<tool_response>\n{}\n</tool_response>",
                content_text(m.get("content"))
            ));
            continue;
        }
        flush(&mut out, &mut responses);
        let calls = m.get("tool_calls").and_then(Value::as_array);
        match (role, calls) {
            ("assistant", Some(calls)) if !calls.is_empty() => {
                let mut text = content_text(m.get("content"));
                for call in calls {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&call_block(call));
                }
                let mut msg: Map<String, Value> = m.as_object().cloned().unwrap_or_default();
                msg.remove("tool_calls");
                msg.insert("content".into(), Value::from(text));
                out.push(Value::Object(msg));
            }
            _ => out.push(m.clone()),
        }
    }
    flush(&mut out, &mut responses);
    if codec == Some(Codec::ChatMl) && !tools.is_empty() {
        let instruction = tool_instruction(tools);
        let first_is_system = out
            .first()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
            == Some("system");
        if first_is_system {
            let system = &mut out[0];
            let text = content_text(system.get("content"));
            let merged = if text.is_empty() {
                instruction
            } else {
                format!("{text}\n\n{instruction}")
            };
            system["content"] = Value::from(merged);
        } else {
            out.insert(0, json!({"role": "system", "content": instruction}));
        }
    }
    out
}

/// Whether a template renders tools itself: its text mentions both `tools` and `tool_calls`
/// (Qwen 2.5, Hermes, Mistral and Llama 3.1 do; SmolLM2's plain ChatML does not).
pub fn template_handles_tools(template: &str) -> bool {
    template.contains("tools") && template.contains("tool_calls")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;
    use crate::limits::MAX_GRAMMAR_BYTES;

    /// SmolLM2-135M-Instruct's template: plain ChatML, no tools.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    /// Excerpts of the published templates, with the markers detection reads.
    const QWEN25: &str = "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}{{- '<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if message.tool_calls %}{%- endif %}{%- endfor %}";
    const MISTRAL_V03: &str = "{%- if messages[0][\"role\"] == \"system\" %}{%- endif %}{%- for message in loop_messages %}{%- if message[\"role\"] == \"user\" %}{%- if tools is not none and (message == user_messages[-1]) %}{{- \"[AVAILABLE_TOOLS] [\" }}{%- endif %}{{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}{%- elif message.tool_calls is defined and message.tool_calls is not none %}{{- \"[TOOL_CALLS] [\" }}{%- endif %}{%- endfor %}";
    const LLAMA31: &str = "{{- bos_token }}{%- if not tools is defined %}{%- set tools = none %}{%- endif %}{%- if builtin_tools is defined or tools is not none %}{{- \"Environment: ipython\\n\" }}{%- endif %}{%- for message in messages %}{%- if 'tool_calls' in message %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- if builtin_tools is defined %}{{- \"<|python_tag|>\" }}{%- endif %}{%- endif %}{%- endfor %}";
    const GEMMA: &str = "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}";

    fn weather_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "loc": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "maxLength": 12},
                        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                    },
                    "required": ["city"]
                },
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}
            },
            "required": ["loc", "days"]
        })
    }

    /// `tools` read, with every schema compiled as `"required"` does.
    fn forceable(v: &Value) -> Vec<Tool> {
        let mut t = parse_tools(Some(v)).unwrap();
        let warnings = render_tool_schemas(
            &mut t,
            &ToolChoice::Required,
            &Limits::DEFAULT,
            SchemaOptions::DEFAULT,
        )
        .unwrap();
        assert!(warnings.is_empty());
        t
    }

    fn tools() -> Vec<Tool> {
        forceable(&json!([
            {"type": "function", "function": {
                "name": "get_weather", "description": "Forecast", "parameters": weather_schema()}},
            {"type": "function", "function": {
                "name": "add",
                "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
        ]))
    }

    fn call(name: &str, args: &str) -> (String, String) {
        (name.to_string(), args.to_string())
    }

    fn names_args(p: &Parsed) -> Vec<(String, String)> {
        p.calls
            .iter()
            .map(|c| (c.name.clone(), c.arguments.clone()))
            .collect()
    }

    #[test]
    fn detect_reads_the_template_markers() {
        assert_eq!(Codec::detect(Some(QWEN25)), Some(Codec::ChatMl));
        assert_eq!(Codec::detect(Some(SMOLLM2)), Some(Codec::ChatMl));
        assert_eq!(Codec::detect(Some(MISTRAL_V03)), Some(Codec::Mistral));
        assert_eq!(Codec::detect(Some(LLAMA31)), Some(Codec::Llama3));
        assert_eq!(
            Codec::detect(Some("{{ 'ipython' }}<|eot_id|>")),
            Some(Codec::Llama3)
        );
        assert_eq!(Codec::detect(Some(GEMMA)), None);
        assert_eq!(Codec::detect(None), None);
        assert_eq!(Codec::ChatMl.name(), "chatml-hermes");
        assert_eq!(Codec::Mistral.name(), "mistral");
        assert_eq!(Codec::Llama3.name(), "llama3-json");
        assert!(Codec::ChatMl.can_force());
        assert!(!Codec::Mistral.can_force() && !Codec::Llama3.can_force());
        assert!(template_handles_tools(QWEN25));
        assert!(template_handles_tools(MISTRAL_V03));
        assert!(template_handles_tools(LLAMA31));
        assert!(!template_handles_tools(SMOLLM2));
    }

    #[test]
    fn chatml_parse_splits_content_and_calls() {
        let t = tools();
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"loc\": {\"city\": \"Paris\"}, \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}\n</tool_call>";
        let p = Codec::ChatMl.parse(text, &t, 7);
        assert_eq!(p.content.as_deref(), Some("Let me check."));
        assert_eq!(
            names_args(&p),
            [
                call("get_weather", r#"{"days":2,"loc":{"city":"Paris"}}"#),
                call("add", r#"{"a":1,"b":2}"#)
            ]
        );
        // Ids: call_ + 24 lowercase hex, distinct, a function of the seed and index.
        for c in &p.calls {
            assert_eq!(c.id.len(), 29, "{}", c.id);
            assert!(c.id.starts_with("call_"));
            assert!(c.id[5..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }
        assert_ne!(p.calls[0].id, p.calls[1].id);
        assert_eq!(Codec::ChatMl.parse(text, &t, 7), p);
        assert_ne!(Codec::ChatMl.parse(text, &t, 8).calls[0].id, p.calls[0].id);

        // Only calls: no content. "parameters" is read too; no arguments means {}; an
        // unclosed last block still counts.
        let p = Codec::ChatMl.parse(
            "<tool_call>{\"name\": \"add\", \"parameters\": {\"b\": 2, \"a\": 1}}</tool_call>\n<tool_call>\n{\"name\": \"add\"}",
            &t,
            0,
        );
        assert_eq!(p.content, None);
        assert_eq!(
            names_args(&p),
            [call("add", r#"{"a":1,"b":2}"#), call("add", "{}")]
        );

        // The close tag inside an argument string does not end the block (seed 56 of a
        // forced SmolLM2 call sampled the city "M Venus imam}}</tool_call>11.5").
        let inside = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"}}</tool_call>1\"}}\n</tool_call>";
        let p = Codec::ChatMl.parse(inside, &t, 0);
        assert_eq!(p.content, None);
        assert_eq!(names_args(&p), [call("add", r#"{"a":"}}</tool_call>1"}"#)]);
    }

    #[test]
    fn chatml_parse_keeps_bad_calls_as_content() {
        let t = tools();
        let malformed = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1,}\n</tool_call>";
        let unknown = "<tool_call>\n{\"name\": \"delete_all\", \"arguments\": {}}\n</tool_call>";
        let bad_args = "<tool_call>\n{\"name\": \"add\", \"arguments\": [1, 2]}\n</tool_call>";
        let good =
            "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>";
        let text = format!("Hi {malformed} and {unknown} {bad_args}\n{good}");
        let p = Codec::ChatMl.parse(&text, &t, 1);
        assert_eq!(
            p.content.as_deref(),
            Some(format!("Hi {malformed} and {unknown} {bad_args}").as_str())
        );
        assert_eq!(names_args(&p), [call("add", r#"{"a":1,"b":2}"#)]);
        // No tools declared: every call stays content.
        let p = Codec::ChatMl.parse(good, &[], 1);
        assert_eq!(p.content.as_deref(), Some(good));
        assert!(p.calls.is_empty());
        // Plain text.
        let p = Codec::ChatMl.parse("  just text \n", &t, 1);
        assert_eq!(p.content.as_deref(), Some("just text"));
        assert!(p.calls.is_empty());
    }

    #[test]
    fn mistral_parse_reads_both_forms() {
        let t = tools();
        let p = Codec::Mistral.parse(
            "Sure.[TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"get_weather\", \"arguments\": {\"days\": 1, \"loc\": {\"city\": \"Oslo\"}}}]",
            &t,
            3,
        );
        assert_eq!(p.content.as_deref(), Some("Sure."));
        assert_eq!(
            names_args(&p),
            [
                call("add", r#"{"a":1,"b":2}"#),
                call("get_weather", r#"{"days":1,"loc":{"city":"Oslo"}}"#)
            ]
        );
        // The newer form, one marker per call, and with a call id.
        let p = Codec::Mistral.parse(
            "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}[TOOL_CALLS]add[CALL_ID]a1b2c3d4e[ARGS]{\"a\": 3, \"b\": 4}",
            &t,
            3,
        );
        assert_eq!(p.content, None);
        assert_eq!(
            names_args(&p),
            [
                call("add", r#"{"a":1,"b":2}"#),
                call("add", r#"{"a":3,"b":4}"#)
            ]
        );
        // Malformed list, unknown name, non-object arguments: content, marker included.
        for bad in [
            "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}",
            "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}, {\"name\": \"nope\", \"arguments\": {}}]",
            "[TOOL_CALLS]nope[ARGS]{\"a\": 1}",
            "[TOOL_CALLS]add[ARGS][1, 2]",
            "[TOOL_CALLS]add{\"a\": 1}",
        ] {
            let p = Codec::Mistral.parse(&format!("Text {bad}"), &t, 3);
            assert_eq!(p.content, Some(format!("Text {bad}")), "{bad}");
            assert!(p.calls.is_empty(), "{bad}");
        }
        assert_eq!(
            Codec::Mistral.parse("no calls", &t, 0).content.as_deref(),
            Some("no calls")
        );
    }

    #[test]
    fn llama3_parse_reads_python_tag_and_bare_json() {
        let t = tools();
        let p = Codec::Llama3.parse(
            "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
            &t,
            5,
        );
        assert_eq!(p.content, None);
        assert_eq!(names_args(&p), [call("add", r#"{"a":1,"b":2}"#)]);
        // Bare JSON as the whole reply, "arguments" accepted, several calls separated by ';'.
        let p = Codec::Llama3.parse(
            " {\"type\": \"function\", \"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}; {\"name\": \"add\", \"parameters\": {\"a\": 5, \"b\": 6}}\n",
            &t,
            5,
        );
        assert_eq!(p.content, None);
        assert_eq!(
            names_args(&p),
            [
                call("add", r#"{"a":1,"b":2}"#),
                call("add", r#"{"a":5,"b":6}"#)
            ]
        );
        // Text before the tag is content.
        let p = Codec::Llama3.parse(
            "Adding.<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
            &t,
            5,
        );
        assert_eq!(p.content.as_deref(), Some("Adding."));
        assert_eq!(p.calls.len(), 1);
        // A JSON answer that is not a call, built-in tool code, malformed JSON, trailing
        // text: all content.
        for bad in [
            "{\"name\": \"Ada\", \"age\": 36}",
            "<|python_tag|>brave_search.call(query=\"x\")",
            "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1",
            "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}} and more",
            "Text first {\"name\": \"add\", \"parameters\": {}}",
        ] {
            let p = Codec::Llama3.parse(bad, &t, 5);
            assert_eq!(p.content.as_deref(), Some(bad), "{bad}");
            assert!(p.calls.is_empty(), "{bad}");
        }
    }

    #[test]
    fn parse_tools_reads_and_defaults() {
        assert!(parse_tools(None).unwrap().is_empty());
        assert!(parse_tools(Some(&Value::Null)).unwrap().is_empty());
        let t = tools();
        assert_eq!(t[0].name, "get_weather");
        assert_eq!(t[0].description.as_deref(), Some("Forecast"));
        assert_eq!(t[1].description, None);
        let t = parse_tools(Some(&json!([
            {"type": "function", "function": {"name": "ping", "strict": true}}
        ])))
        .unwrap();
        assert_eq!(
            t[0].parameters,
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        );
    }

    #[test]
    fn parse_tools_errors_name_tools() {
        let f = |function: Value| json!([{"type": "function", "function": function}]);
        let long = "x".repeat(65);
        let cases = [
            (json!({"type": "function"}), "must be an array"),
            (json!([1]), "tools[0] must be an object"),
            (
                json!([{"type": "retrieval", "function": {"name": "a"}}]),
                "type must be \"function\"",
            ),
            (json!([{"function": {"name": "a"}}]), "type must be"),
            (json!([{"type": "function"}]), "function must be an object"),
            (f(json!({"description": "x"})), "name is required"),
            (f(json!({"name": ""})), "name is required"),
            (f(json!({"name": 3})), "name is required"),
            (f(json!({"name": "get weather"})), "must be 1 to 64"),
            (f(json!({"name": long})), "must be 1 to 64"),
            (f(json!({"name": "a", "description": 1})), "description"),
            (
                f(json!({"name": "a", "parameters": "{}"})),
                "parameters must be",
            ),
            (
                f(json!({"name": "a", "parameters": [1]})),
                "parameters must be",
            ),
            (
                json!([
                    {"type": "function", "function": {"name": "a"}},
                    {"type": "function", "function": {"name": "a"}}
                ]),
                "declared twice",
            ),
        ];
        for (v, want) in cases {
            let e = parse_tools(Some(&v)).unwrap_err();
            assert_eq!(e.param(), Some("tools"), "{v}");
            assert_eq!(e.code(), "invalid_input", "{v}");
            assert!(e.message().contains(want), "{v}: {}", e.message());
        }
        // A schema the guided_json compiler refuses: read, and refused with the compiler's
        // message only where a call to it can be forced; otherwise a warning.
        let schema = json!({"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}});
        let direct = JsonSchema::compile(&schema, "tools").unwrap_err();
        let two = json!([
            {"type": "function", "function": {"name": "a", "parameters": schema}},
            {"type": "function", "function": {"name": "b"}}
        ]);
        let render = |choice: ToolChoice| {
            let mut t = parse_tools(Some(&two)).unwrap();
            let r = render_tool_schemas(&mut t, &choice, &Limits::DEFAULT, SchemaOptions::DEFAULT);
            (r, t)
        };
        for choice in [ToolChoice::Required, ToolChoice::Function("a".into())] {
            let e = render(choice).0.unwrap_err();
            assert_eq!(e.param(), Some("tools"));
            assert_eq!(e.message(), direct.message());
        }
        let (warnings, t) = render(ToolChoice::Function("b".into()));
        assert_eq!(warnings.unwrap(), Vec::<String>::new());
        assert!(t[0].gbnf.is_none() && t[1].gbnf.is_some());
        for (choice, name) in [(ToolChoice::Auto, "auto"), (ToolChoice::None, "none")] {
            let (warnings, t) = render(choice);
            let warnings = warnings.unwrap();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].starts_with("tools[0] `a`: a call to it could not be forced"));
            assert!(warnings[0].contains(direct.message()), "{}", warnings[0]);
            assert!(warnings[0].contains(&format!("tool_choice \"{name}\"")));
            assert!(t.iter().all(|t| t.gbnf.is_none()));
        }
        // Over MAX_TOOLS.
        let many: Vec<Value> = (0..=MAX_TOOLS)
            .map(|i| json!({"type": "function", "function": {"name": format!("f{i}")}}))
            .collect();
        let e = parse_tools(Some(&Value::from(many.clone()))).unwrap_err();
        assert_eq!(e.param(), Some("tools"));
        assert!(e.is_limit_exceeded());
        assert_eq!(
            parse_tools(Some(&Value::from(many[..MAX_TOOLS].to_vec())))
                .unwrap()
                .len(),
            MAX_TOOLS
        );
    }

    #[test]
    fn parse_tool_choice_reads_and_refuses() {
        let t = tools();
        assert_eq!(parse_tool_choice(None, &t).unwrap(), ToolChoice::Auto);
        assert_eq!(parse_tool_choice(None, &[]).unwrap(), ToolChoice::None);
        assert_eq!(
            parse_tool_choice(Some(&Value::Null), &t).unwrap(),
            ToolChoice::Auto
        );
        assert_eq!(
            parse_tool_choice(Some(&json!("none")), &t).unwrap(),
            ToolChoice::None
        );
        assert_eq!(
            parse_tool_choice(Some(&json!("auto")), &t).unwrap(),
            ToolChoice::Auto
        );
        assert_eq!(
            parse_tool_choice(Some(&json!("required")), &t).unwrap(),
            ToolChoice::Required
        );
        assert_eq!(
            parse_tool_choice(
                Some(&json!({"type": "function", "function": {"name": "add"}})),
                &t
            )
            .unwrap(),
            ToolChoice::Function("add".into())
        );
        let cases = [
            (json!("always"), &t[..], "must be \"none\""),
            (json!(1), &t[..], "must be a string or"),
            (
                json!({"type": "tool", "function": {"name": "add"}}),
                &t[..],
                "\"type\": \"function\"",
            ),
            (json!({"type": "function"}), &t[..], "name is required"),
            (
                json!({"type": "function", "function": {"name": "mul"}}),
                &t[..],
                "`mul`, which is not in tools (available: get_weather, add)",
            ),
            (json!("required"), &[][..], "declares no tools"),
            (
                json!({"type": "function", "function": {"name": "add"}}),
                &[][..],
                "declares no tools",
            ),
        ];
        for (v, tools, want) in cases {
            let e = parse_tool_choice(Some(&v), tools).unwrap_err();
            assert_eq!(e.param(), Some("tool_choice"), "{v}");
            assert!(e.message().contains(want), "{v}: {}", e.message());
        }
    }

    fn weather_call(args: &str) -> String {
        format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {args}}}\n</tool_call>")
    }

    fn add_call(args: &str) -> String {
        format!("<tool_call>\n{{\"name\": \"add\", \"arguments\": {args}}}\n</tool_call>")
    }

    #[test]
    fn forced_grammar_accepts_exactly_valid_calls() {
        let t = tools();
        let text = Codec::ChatMl
            .forced_grammar(&t, &ToolChoice::Required, false, &Limits::DEFAULT)
            .unwrap()
            .unwrap();
        assert!(text.starts_with("root ::= "), "{text}");
        assert!(text.len() <= MAX_GRAMMAR_BYTES);
        let g = Grammar::new(&text).unwrap();
        let ok = [
            weather_call(r#"{"days":3,"loc":{"city":"Paris"}}"#),
            weather_call(
                r#"{"days": 14, "loc": {"city": "Zürich", "zip": "80331"}, "tags": ["a", "b\"c"], "unit": "celsius"}"#,
            ),
            add_call(r#"{"a":-5,"b":123456789}"#),
            add_call(r#"{"a": 0, "b": 1}"#),
        ];
        for s in &ok {
            assert!(g.matches(s.as_bytes()), "{s}");
        }
        let bad = [
            // Wrong name, argument out of range, missing required key, bad enum, bad pattern,
            // a listed key twice, too many items, no markup, text around, two calls.
            r#"<tool_call>
{"name": "get_forecast", "arguments": {"days":3,"loc":{"city":"Paris"}}}
</tool_call>"#
                .to_string(),
            weather_call(r#"{"days":15,"loc":{"city":"Paris"}}"#),
            weather_call(r#"{"days":0,"loc":{"city":"Paris"}}"#),
            weather_call(r#"{"loc":{"city":"Paris"}}"#),
            weather_call(r#"{"days":3,"loc":{"zip":"80331"}}"#),
            weather_call(r#"{"days":3,"loc":{"city":"Paris"},"unit":"kelvin"}"#),
            weather_call(r#"{"days":3,"loc":{"city":"Paris","zip":"8033"}}"#),
            weather_call(r#"{"days":3,"loc":{"city":"Paris"},"x":1,"days":4}"#),
            weather_call(r#"{"days":3,"loc":{"city":"Paris"},"tags":["a","b","c","d"]}"#),
            add_call(r#"{"a":1}"#),
            add_call(r#"{"a":1.5,"b":2}"#),
            r#"{"name": "add", "arguments": {"a":1,"b":2}}"#.to_string(),
            format!("Sure. {}", add_call(r#"{"a":1,"b":2}"#)),
            format!(
                "{}\n{}",
                add_call(r#"{"a":1,"b":2}"#),
                add_call(r#"{"a":1,"b":2}"#)
            ),
            String::new(),
        ];
        for s in &bad {
            assert!(!g.matches(s.as_bytes()), "{s}");
        }
        // An unlisted key is an extra one, as JSON Schema reads `additionalProperties` left
        // out; the request's `guided_json_extra_keys: false` keeps to the listed keys.
        // `strict` is accepted and ignored.
        let unlisted = weather_call(r#"{"days":3,"loc":{"city":"Paris","x":[]},"x":1}"#);
        assert!(g.matches(unlisted.as_bytes()), "{unlisted}");
        let forced = |strict: bool, extra_keys: bool| {
            let mut t = parse_tools(Some(&json!([{"type": "function", "function": {
                "name": "get_weather", "parameters": weather_schema(), "strict": strict}}])))
            .unwrap();
            let options = SchemaOptions { extra_keys };
            render_tool_schemas(&mut t, &ToolChoice::Required, &Limits::DEFAULT, options).unwrap();
            let text = Codec::ChatMl
                .forced_grammar(&t, &ToolChoice::Required, false, &Limits::DEFAULT)
                .unwrap()
                .unwrap();
            Grammar::new(&text).unwrap()
        };
        for strict in [false, true] {
            for extra_keys in [false, true] {
                let g = forced(strict, extra_keys);
                assert_eq!(
                    g.matches(unlisted.as_bytes()),
                    extra_keys,
                    "strict {strict}"
                );
                assert!(g.matches(ok[1].as_bytes()));
            }
        }

        // A named function allows exactly one call to that tool, whatever
        // parallel_tool_calls says; "required" with parallel allows several calls.
        let two = format!(
            "{}\n{}",
            add_call(r#"{"a":1,"b":2}"#),
            add_call(r#"{"a":3,"b":4}"#)
        );
        for parallel in [true, false] {
            let only_add = Codec::ChatMl
                .forced_grammar(
                    &t,
                    &ToolChoice::Function("add".into()),
                    parallel,
                    &Limits::DEFAULT,
                )
                .unwrap()
                .unwrap();
            let g = Grammar::new(&only_add).unwrap();
            assert!(g.matches(add_call(r#"{"a":1,"b":2}"#).as_bytes()));
            assert!(!g.matches(two.as_bytes()), "parallel {parallel}");
            assert!(!g.matches(ok[0].as_bytes()));
        }
        let any = Codec::ChatMl
            .forced_grammar(&t, &ToolChoice::Required, true, &Limits::DEFAULT)
            .unwrap()
            .unwrap();
        let g = Grammar::new(&any).unwrap();
        assert!(g.matches(two.as_bytes()));
        assert!(g.matches(format!("{}\n{two}", ok[0]).as_bytes()));
        assert!(!g.matches(format!("{two}\n").as_bytes()));

        // Nothing forced: auto, none, and the codecs that cannot force.
        for choice in [ToolChoice::None, ToolChoice::Auto] {
            assert_eq!(
                Codec::ChatMl
                    .forced_grammar(&t, &choice, true, &Limits::DEFAULT)
                    .unwrap(),
                None
            );
        }
        for codec in [Codec::Mistral, Codec::Llama3] {
            assert_eq!(
                codec
                    .forced_grammar(&t, &ToolChoice::Required, true, &Limits::DEFAULT)
                    .unwrap(),
                None
            );
        }
        let e = Codec::ChatMl
            .forced_grammar(
                &t,
                &ToolChoice::Function("mul".into()),
                false,
                &Limits::DEFAULT,
            )
            .unwrap_err();
        assert_eq!(e.param(), Some("tool_choice"));
    }

    #[test]
    fn forced_grammar_past_the_size_limit_is_a_limit_error() {
        // 128 tools with free-form arguments: ~2 KiB of grammar each.
        let many: Vec<Value> = (0..MAX_TOOLS)
            .map(|i| json!({"type": "function", "function": {"name": format!("f{i}"), "parameters": {"type": "object"}}}))
            .collect();
        let t = forceable(&Value::from(many));
        let e = Codec::ChatMl
            .forced_grammar(&t, &ToolChoice::Required, false, &Limits::DEFAULT)
            .unwrap_err();
        assert!(e.is_limit_exceeded(), "{e}");
        assert_eq!(e.param(), Some("tools"));
        assert!(e.message().contains("16384-byte"), "{e}");
        // One of them alone fits.
        assert!(Codec::ChatMl
            .forced_grammar(
                &t,
                &ToolChoice::Function("f7".into()),
                false,
                &Limits::DEFAULT
            )
            .unwrap()
            .is_some());
    }

    /// A seeded generator of valid weather arguments, written as the schema's language allows
    /// (sorted keys, optional spaces), with the value they denote.
    fn random_weather_args(rng: &mut u64) -> (String, Value) {
        let mut next = |n: u64| splitmix64(rng) % n;
        let pool = ['a', 'Z', ' ', '"', '\\', 'é', '\n', '\u{1}', '😀', '/'];
        let string = |max: u64, next: &mut dyn FnMut(u64) -> u64| -> String {
            (0..next(max + 1))
                .map(|_| pool[next(pool.len() as u64) as usize])
                .collect()
        };
        let mut obj = Map::new();
        let mut loc = Map::new();
        loc.insert("city".into(), Value::from(string(12, &mut next)));
        if next(2) == 0 {
            loc.insert("zip".into(), Value::from(format!("{:05}", next(100_000))));
        }
        obj.insert("days".into(), Value::from(1 + next(14)));
        obj.insert("loc".into(), Value::Object(loc));
        if next(2) == 0 {
            let tags: Vec<Value> = (0..next(4))
                .map(|_| Value::from(string(4, &mut next)))
                .collect();
            obj.insert("tags".into(), Value::from(tags));
        }
        if next(2) == 0 {
            obj.insert(
                "unit".into(),
                Value::from(["celsius", "fahrenheit"][next(2) as usize]),
            );
        }
        let value = Value::Object(obj);
        // serde_json's Map keeps keys sorted, as the grammar requires; then random spaces.
        let compact = serde_json::to_string(&value).unwrap();
        let mut text = String::new();
        let mut in_string = false;
        let mut escaped = false;
        for c in compact.chars() {
            text.push(c);
            if in_string {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    in_string = false;
                }
            } else if c == '"' {
                in_string = true;
            } else if (c == ',' || c == ':') && next(2) == 0 {
                text.push(' ');
            }
        }
        (text, value)
    }

    #[test]
    fn forced_output_round_trips_through_parse() {
        let t = tools();
        let text = Codec::ChatMl
            .forced_grammar(&t, &ToolChoice::Required, true, &Limits::DEFAULT)
            .unwrap()
            .unwrap();
        let g = Grammar::new(&text).unwrap();
        let mut rng = 0x5eed_u64;
        for round in 0..200 {
            let n = 1 + (splitmix64(&mut rng) % 3) as usize;
            let mut calls = Vec::new();
            let mut want = Vec::new();
            for _ in 0..n {
                if splitmix64(&mut rng).is_multiple_of(3) {
                    let (a, b) = (splitmix64(&mut rng) as i32, splitmix64(&mut rng) as i32);
                    calls.push(add_call(&format!("{{\"a\": {a}, \"b\":{b}}}")));
                    want.push(("add".to_string(), json!({"a": a, "b": b})));
                } else {
                    let (args, value) = random_weather_args(&mut rng);
                    calls.push(weather_call(&args));
                    want.push(("get_weather".to_string(), value));
                }
            }
            let output = calls.join("\n");
            assert!(g.matches(output.as_bytes()), "round {round}: {output}");
            let p = Codec::ChatMl.parse(&output, &t, round);
            assert_eq!(p.content, None, "{output}");
            let got: Vec<(String, Value)> = p
                .calls
                .iter()
                .map(|c| (c.name.clone(), serde_json::from_str(&c.arguments).unwrap()))
                .collect();
            assert_eq!(got, want, "{output}");
            // The same call one day out of range is refused.
            if let Some(days) = want[0].1.get("days").and_then(Value::as_u64) {
                let wrong = output.replacen(&format!("\"days\":{days}"), "\"days\":15", 1);
                let wrong = wrong.replacen(&format!("\"days\": {days}"), "\"days\": 15", 1);
                assert!(!g.matches(wrong.as_bytes()), "{wrong}");
            }
        }
    }

    #[test]
    fn prefixed_rules_keep_the_language() {
        let schema = JsonSchema::compile(&weather_schema(), "tools").unwrap();
        let plain = schema.gbnf();
        let renamed = prefix_rules(&plain, "t3-");
        assert!(renamed.starts_with("t3-root ::= "), "{renamed}");
        let g1 = Grammar::new(&plain).unwrap();
        let g2 = Grammar::new(&format!("root ::= t3-root\n{renamed}")).unwrap();
        let mut rng = 9;
        for _ in 0..50 {
            let (args, _) = random_weather_args(&mut rng);
            assert!(
                g1.matches(args.as_bytes()) && g2.matches(args.as_bytes()),
                "{args}"
            );
            let cut = &args.as_bytes()[..args.len() - 1];
            assert!(!g1.matches(cut) && !g2.matches(cut));
        }
        assert_eq!(
            prefix_rules("a ::= \"x y\" [a-z] b{2,3} (c | d-e)?\n", "p-"),
            "p-a ::= \"x y\" [a-z] p-b{2,3} (p-c | p-d-e)?\n"
        );
    }

    #[test]
    fn safe_prefix_len_holds_possible_markers() {
        let c = Codec::ChatMl;
        assert_eq!(c.safe_prefix_len("Hello"), 5);
        assert_eq!(c.safe_prefix_len(""), 0);
        assert_eq!(c.safe_prefix_len("Hello <"), 6);
        assert_eq!(c.safe_prefix_len("Hello <tool"), 6);
        assert_eq!(c.safe_prefix_len("Hello <tool_call"), 6);
        assert_eq!(c.safe_prefix_len("Hello <tool_call>{\"na"), 6);
        assert_eq!(c.safe_prefix_len("a <b> c"), 7);
        assert_eq!(c.safe_prefix_len("a <tool_x"), 9);
        assert_eq!(c.safe_prefix_len("héllo 😀"), "héllo 😀".len());
        let m = Codec::Mistral;
        assert_eq!(m.safe_prefix_len("Ok [TOOL"), 3);
        assert_eq!(m.safe_prefix_len("Ok [TOOL_CALLS][{"), 3);
        assert_eq!(m.safe_prefix_len("a [1]"), 5);
        assert_eq!(m.safe_prefix_len("a ["), 2);
        let l = Codec::Llama3;
        assert_eq!(l.safe_prefix_len("  {\"name\": \"add\""), 0);
        assert_eq!(l.safe_prefix_len("   "), 0);
        assert_eq!(l.safe_prefix_len("Sure {x}"), 8);
        assert_eq!(l.safe_prefix_len("Sure <|python"), 5);
        assert_eq!(l.safe_prefix_len("Sure <|python_tag|>{"), 5);
    }

    #[test]
    fn adapt_messages_teaches_a_plain_chatml_template() {
        let t = tools();
        let messages = [
            json!({"role": "user", "content": "Add 1 and 2."}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}}
            ]}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "3"}),
            json!({"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "4"}]}),
            json!({"role": "assistant", "content": "It is 3."}),
        ];
        let out = adapt_messages(Some(Codec::ChatMl), &messages, &t, false);
        assert_eq!(out.len(), 5);
        let system = out[0]["content"].as_str().unwrap();
        assert_eq!(out[0]["role"], "system");
        assert!(system.starts_with("# Tools\n"), "{system}");
        assert!(system.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Forecast\", \"parameters\": {"), "{system}");
        assert!(system.contains("\n{\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"properties\": {\"a\": {\"type\": \"integer\"}"), "{system}");
        assert!(system.ends_with("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"));
        assert_eq!(out[1], messages[0]);
        assert_eq!(
            out[2],
            json!({"role": "assistant", "content": "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"})
        );
        assert_eq!(
            out[3],
            json!({"role": "user", "content": "<tool_response>\n3\n</tool_response>\n<tool_response>\n4\n</tool_response>"})
        );
        assert_eq!(out[4], messages[4]);
        // What the model writes back in that format parses.
        let reply = out[2]["content"].as_str().unwrap();
        assert_eq!(
            names_args(&Codec::ChatMl.parse(reply, &t, 0)),
            [call("add", r#"{"a":1,"b":2}"#)]
        );
        // The SmolLM2 template renders the adapted history (it would fail on a null content).
        let prompt = crate::chat_template::render_chat(SMOLLM2, &out, None, true, "", "").unwrap();
        assert!(
            prompt.starts_with("<|im_start|>system\n# Tools\n"),
            "{prompt}"
        );
        assert!(prompt.contains("<|im_start|>user\n<tool_response>\n3\n</tool_response>"));
        assert!(crate::chat_template::render_chat(SMOLLM2, &messages, None, true, "", "").is_err());

        // An existing system message gets the instruction after a blank line.
        let with_system = [
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Hi"}),
        ];
        let out = adapt_messages(Some(Codec::ChatMl), &with_system, &t, false);
        assert_eq!(out.len(), 2);
        assert!(out[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Be brief.\n\n# Tools\n"));
        // Templates that render tools get the messages as they are; without tools or for
        // other codecs there is no instruction.
        assert_eq!(
            adapt_messages(Some(Codec::ChatMl), &messages, &t, true),
            messages
        );
        assert_eq!(
            adapt_messages(Some(Codec::ChatMl), &with_system, &[], false),
            with_system
        );
        assert_eq!(
            adapt_messages(Some(Codec::Mistral), &with_system, &t, false),
            with_system
        );
        assert_eq!(adapt_messages(None, &with_system, &t, false), with_system);
    }

    #[test]
    fn feature_matrix_is_in_the_module_docs() {
        let source = include_str!("tools.rs");
        for line in FEATURE_MATRIX.lines() {
            assert!(source.contains(&format!("//! {line}\n")), "{line}");
        }
        assert_eq!(FEATURE_MATRIX.lines().count(), 7);
        for codec in [Codec::ChatMl, Codec::Mistral, Codec::Llama3] {
            assert!(FEATURE_MATRIX.contains(&format!("`{}`", codec.name())));
        }
    }
}
