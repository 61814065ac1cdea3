//! The GBNF parser: grammar text to rules of [`Expr`], with line:column errors.
//!
//! It follows llama.cpp's `llama_grammar_parser` (src/llama-grammar.cpp) token for token, so a
//! grammar llama.cpp accepts parses the same here: whitespace and `#` comments between items,
//! newlines only inside parentheses, after `::=` and after `|`; a rule ends at a newline.
//! Differences, each an error here where llama.cpp is silent or lenient: a rule defined twice,
//! an empty class `[]`, a reversed range `[z-a]`, a code point that is not a Unicode scalar
//! value, and token references `<...>` (which name model tokens, not text).

use super::GrammarError;
use crate::limits::Limits;
use std::collections::HashMap;

/// One item of a rule body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Expr {
    /// A literal: these bytes (UTF-8), possibly none.
    Literal(Vec<u8>),
    /// One character in (or, negated, outside) these inclusive code point ranges.
    Class {
        ranges: Vec<(u32, u32)>,
        negated: bool,
    },
    /// `.`: any one character.
    Any,
    /// A reference to rule `rules[index]`.
    Ref(usize),
    /// Items in order.
    Seq(Vec<Expr>),
    /// Alternatives.
    Alt(Vec<Expr>),
    /// `min..=max` repetitions (`max` `None`: unbounded).
    Repeat {
        expr: Box<Expr>,
        min: u32,
        max: Option<u32>,
    },
}

/// A rule: its name, where it is defined, and its body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Rule {
    pub name: String,
    /// Byte offset of the definition's name (for errors).
    pub at: usize,
    pub body: Expr,
}

/// The parsed grammar: every rule (referenced rules have an index even before their
/// definition) and the index of `root`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Ast {
    pub rules: Vec<Rule>,
    pub root: usize,
    /// A rule whose language is exactly the root's of a [`Prebuilt`](super::Prebuilt) grammar
    /// (a schema's free-form JSON value): the compiler may splice that grammar's automaton in
    /// instead of building the rule's own. Never set by parsing.
    pub prebuilt: Option<usize>,
}

impl Expr {
    /// Calls `f` with every rule reference, left to right as written.
    pub(crate) fn each_ref(&self, f: &mut impl FnMut(usize)) {
        match self {
            Expr::Ref(r) => f(*r),
            Expr::Seq(v) | Expr::Alt(v) => v.iter().for_each(|x| x.each_ref(f)),
            Expr::Repeat { expr, .. } => expr.each_ref(f),
            Expr::Literal(_) | Expr::Class { .. } | Expr::Any => {}
        }
    }

    /// [`Expr::each_ref`], each reference open to rewriting.
    pub(crate) fn each_ref_mut(&mut self, f: &mut impl FnMut(&mut usize)) {
        match self {
            Expr::Ref(r) => f(r),
            Expr::Seq(v) | Expr::Alt(v) => v.iter_mut().for_each(|x| x.each_ref_mut(f)),
            Expr::Repeat { expr, .. } => expr.each_ref_mut(f),
            Expr::Literal(_) | Expr::Class { .. } | Expr::Any => {}
        }
    }
}

/// Whether `e`'s tree is at most `levels` deep, counted as the parser counts it
/// ([`Limits::grammar_depth`]: a leaf is 1, a sequence, an alternation or a repetition one
/// more than its deepest part). Never descends past `levels`.
pub(crate) fn depth_within(e: &Expr, levels: u32) -> bool {
    match e {
        Expr::Literal(_) | Expr::Class { .. } | Expr::Any | Expr::Ref(_) => levels >= 1,
        Expr::Seq(v) | Expr::Alt(v) => levels >= 2 && v.iter().all(|x| depth_within(x, levels - 1)),
        Expr::Repeat { expr, .. } => levels >= 2 && depth_within(expr, levels - 1),
    }
}

/// Parses GBNF text. Errors carry the byte offset where they were found.
pub(crate) fn parse(text: &str, limits: &Limits) -> Result<Ast, GrammarError> {
    let mut p = Parser {
        src: text.as_bytes(),
        pos: 0,
        ids: HashMap::new(),
        rules: Vec::new(),
        first_use: Vec::new(),
        nesting: 0,
        max_nesting: limits.grammar_nesting,
        max_depth: limits.grammar_depth,
    };
    p.pos = p.space(0, true);
    while p.pos < p.src.len() {
        p.rule()?;
    }
    for (i, r) in p.rules.iter().enumerate() {
        if r.is_none() {
            return Err(GrammarError::at(
                p.first_use[i],
                format!("undefined rule `{}`", p.name_of(i)),
            ));
        }
    }
    let root = *p.ids.get("root").ok_or_else(|| {
        GrammarError::at(
            text.len(),
            "the grammar has no `root` rule (the entry point)".into(),
        )
    })?;
    let rules = p.rules.into_iter().map(|r| r.expect("checked")).collect();
    Ok(Ast {
        rules,
        root,
        prebuilt: None,
    })
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    ids: HashMap<String, usize>,
    rules: Vec<Option<Rule>>,
    /// Where each rule was first mentioned (for "undefined rule").
    first_use: Vec<usize>,
    nesting: u32,
    /// [`Limits::grammar_nesting`].
    max_nesting: u32,
    /// [`Limits::grammar_depth`].
    max_depth: u32,
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_'
}

impl Parser<'_> {
    fn peek(&self, at: usize) -> u8 {
        self.src.get(at).copied().unwrap_or(0)
    }

    fn name_of(&self, id: usize) -> &str {
        self.ids
            .iter()
            .find(|(_, &v)| v == id)
            .map(|(k, _)| k.as_str())
            .unwrap_or("?")
    }

    /// Skips spaces, tabs and `#` comments, and newlines when `newline_ok`.
    fn space(&self, mut pos: usize, newline_ok: bool) -> usize {
        loop {
            match self.peek(pos) {
                b' ' | b'\t' => pos += 1,
                b'\r' | b'\n' if newline_ok => pos += 1,
                b'#' => {
                    while pos < self.src.len() && !matches!(self.src[pos], b'\r' | b'\n') {
                        pos += 1;
                    }
                }
                _ => return pos,
            }
        }
    }

    fn id(&mut self, name: &str, at: usize) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.rules.len();
        self.ids.insert(name.to_owned(), id);
        self.rules.push(None);
        self.first_use.push(at);
        id
    }

    fn name(&mut self) -> Result<(String, usize), GrammarError> {
        let start = self.pos;
        while is_word(self.peek(self.pos)) {
            self.pos += 1;
        }
        if self.pos == start {
            let what = match self.peek(start) {
                b'|' => "a rule name; an alternative `|` continues a rule only on the same line \
                         or inside parentheses"
                    .to_owned(),
                0 => "a rule name, found the end of the grammar".to_owned(),
                _ => format!("a rule name, found {}", self.shown_char(start)),
            };
            return Err(GrammarError::at(start, format!("expected {what}")));
        }
        let name = std::str::from_utf8(&self.src[start..self.pos])
            .expect("ASCII")
            .to_owned();
        Ok((name, start))
    }

    fn shown_char(&self, at: usize) -> String {
        match std::str::from_utf8(&self.src[at..])
            .ok()
            .and_then(|s| s.chars().next())
        {
            Some(c) if c.is_control() => format!("{:?}", c),
            Some(c) => format!("`{c}`"),
            None => "the end of the grammar".into(),
        }
    }

    fn rule(&mut self) -> Result<(), GrammarError> {
        let (name, at) = self.name()?;
        self.pos = self.space(self.pos, false);
        if !self.src[self.pos..].starts_with(b"::=") {
            return Err(GrammarError::at(
                self.pos,
                format!(
                    "expected `::=` after the rule name `{name}`, found {}",
                    self.shown_char(self.pos)
                ),
            ));
        }
        let id = self.id(&name, at);
        if let Some(prev) = &self.rules[id] {
            let prev_at = prev.at;
            return Err(GrammarError::at(
                at,
                format!(
                    "rule `{name}` is defined twice (first at {})",
                    super::line_col_text(self.src, prev_at)
                ),
            ));
        }
        self.pos = self.space(self.pos + 3, true);
        let (body, _) = self.alternates(false)?;
        match self.peek(self.pos) {
            b'\r' => {
                self.pos += if self.peek(self.pos + 1) == b'\n' {
                    2
                } else {
                    1
                }
            }
            b'\n' => self.pos += 1,
            0 if self.pos >= self.src.len() => {}
            b')' => {
                return Err(GrammarError::at(
                    self.pos,
                    "unbalanced `)`: no `(` is open".into(),
                ))
            }
            _ => {
                return Err(GrammarError::at(
                    self.pos,
                    format!(
                        "expected a newline or the end of the grammar, found {}",
                        self.shown_char(self.pos)
                    ),
                ))
            }
        }
        self.rules[id] = Some(Rule { name, at, body });
        self.pos = self.space(self.pos, true);
        Ok(())
    }

    /// Alternatives, and the depth of their tree (see [`Parser::sequence`]).
    fn alternates(&mut self, nested: bool) -> Result<(Expr, u32), GrammarError> {
        let start = self.pos;
        let (first, mut depth) = self.sequence(nested)?;
        let mut alts = vec![first];
        while self.peek(self.pos) == b'|' {
            self.pos = self.space(self.pos + 1, true);
            let (alt, d) = self.sequence(nested)?;
            alts.push(alt);
            depth = depth.max(d);
        }
        Ok(if alts.len() == 1 {
            (alts.pop().expect("one"), depth)
        } else {
            (Expr::Alt(alts), self.deeper(depth, start)?)
        })
    }

    /// One level above a tree `depth` deep, within [`Limits::grammar_depth`].
    fn deeper(&self, depth: u32, at: usize) -> Result<u32, GrammarError> {
        if depth >= self.max_depth {
            return Err(GrammarError::limit(
                at,
                format!(
                    "groups, alternatives and repetitions nest deeper than the limit of \
                     {} levels",
                    self.max_depth
                ),
            ));
        }
        Ok(depth + 1)
    }

    /// A sequence, and the depth of its tree: a leaf is 1, a sequence, an alternation or a
    /// repetition one more than its deepest part. Bounded while it is built
    /// ([`Limits::grammar_depth`]): the compiler recurses on the tree, and a run of repetition
    /// operators (`"a"***...`) nests it without any parentheses.
    fn sequence(&mut self, nested: bool) -> Result<(Expr, u32), GrammarError> {
        let seq_start = self.pos;
        let mut items: Vec<Expr> = Vec::new();
        // The depth of each item.
        let mut depths: Vec<u32> = Vec::new();
        loop {
            let c = self.peek(self.pos);
            let start = self.pos;
            match c {
                b'"' => {
                    self.pos += 1;
                    let mut bytes = Vec::new();
                    loop {
                        if self.pos >= self.src.len() {
                            return Err(GrammarError::at(
                                start,
                                "unterminated string literal: no closing `\"`".into(),
                            ));
                        }
                        if self.peek(self.pos) == b'"' {
                            break;
                        }
                        let (cp, at) = self.char()?;
                        push_utf8(&mut bytes, cp, at)?;
                    }
                    self.pos = self.space(self.pos + 1, nested);
                    items.push(Expr::Literal(bytes));
                    depths.push(1);
                }
                b'[' => {
                    self.pos += 1;
                    let negated = self.peek(self.pos) == b'^';
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        if self.pos >= self.src.len() {
                            return Err(GrammarError::at(
                                start,
                                "unbalanced `[`: the character class is never closed with `]`"
                                    .into(),
                            ));
                        }
                        if self.peek(self.pos) == b']' {
                            break;
                        }
                        let (lo, lo_at) = self.char()?;
                        let mut hi = lo;
                        if self.peek(self.pos) == b'-' && self.peek(self.pos + 1) != b']' {
                            if self.pos + 1 >= self.src.len() {
                                return Err(GrammarError::at(
                                    start,
                                    "unbalanced `[`: the character class is never closed with `]`"
                                        .into(),
                                ));
                            }
                            self.pos += 1;
                            hi = self.char()?.0;
                            if hi < lo {
                                return Err(GrammarError::at(
                                    lo_at,
                                    format!("invalid range: U+{lo:04X} is after U+{hi:04X}"),
                                ));
                            }
                        }
                        ranges.push((lo, hi));
                    }
                    if ranges.is_empty() {
                        return Err(GrammarError::at(
                            start,
                            "empty character class: it would match no character".into(),
                        ));
                    }
                    self.pos = self.space(self.pos + 1, nested);
                    items.push(Expr::Class { ranges, negated });
                    depths.push(1);
                }
                b'(' => {
                    self.nesting += 1;
                    if self.nesting > self.max_nesting {
                        return Err(GrammarError::limit(
                            start,
                            format!(
                                "parentheses nest deeper than the limit of {}",
                                self.max_nesting
                            ),
                        ));
                    }
                    self.pos = self.space(self.pos + 1, true);
                    let (inner, depth) = self.alternates(true)?;
                    if self.peek(self.pos) != b')' {
                        return Err(GrammarError::at(
                            start,
                            format!(
                                "unbalanced `(`: expected `)` to close it, found {}",
                                self.shown_char(self.pos)
                            ),
                        ));
                    }
                    self.nesting -= 1;
                    self.pos = self.space(self.pos + 1, nested);
                    items.push(inner);
                    depths.push(depth);
                }
                b'.' => {
                    self.pos = self.space(self.pos + 1, nested);
                    items.push(Expr::Any);
                    depths.push(1);
                }
                b'*' | b'+' | b'?' | b'{' => {
                    let (min, max) = if c == b'{' {
                        self.counts(nested)?
                    } else {
                        self.pos = self.space(self.pos + 1, nested);
                        match c {
                            b'*' => (0, None),
                            b'+' => (1, None),
                            _ => (0, Some(1)),
                        }
                    };
                    let last = items.pop().ok_or_else(|| {
                        GrammarError::at(
                            start,
                            format!("`{}` repeats nothing: put an item before it", c as char),
                        )
                    })?;
                    let depth = depths.pop().expect("one depth per item");
                    depths.push(self.deeper(depth, start)?);
                    items.push(Expr::Repeat {
                        expr: Box::new(last),
                        min,
                        max,
                    });
                }
                b'<' | b'!' => {
                    return Err(GrammarError::at(
                        start,
                        "token references (`<...>`, `!<...>`) are not supported: they name \
                         model tokens, and a guided_grammar constrains text"
                            .into(),
                    ))
                }
                c if is_word(c) => {
                    let (name, at) = self.name()?;
                    let id = self.id(&name, at);
                    self.pos = self.space(self.pos, nested);
                    items.push(Expr::Ref(id));
                    depths.push(1);
                }
                _ => break,
            }
        }
        let depth = depths.iter().copied().max().unwrap_or(0);
        Ok(if items.len() == 1 {
            (items.pop().expect("one"), depth)
        } else {
            (Expr::Seq(items), self.deeper(depth, seq_start)?)
        })
    }

    /// `{m}`, `{m,}`, `{m,n}` (spaces allowed inside), with the counts bounded.
    fn counts(&mut self, nested: bool) -> Result<(u32, Option<u32>), GrammarError> {
        let start = self.pos;
        self.pos = self.space(self.pos + 1, nested);
        let min = self.int(start)?;
        self.pos = self.space(self.pos, nested);
        let max = match self.peek(self.pos) {
            b'}' => Some(min),
            b',' => {
                self.pos = self.space(self.pos + 1, nested);
                let max = if self.peek(self.pos).is_ascii_digit() {
                    let m = self.int(start)?;
                    self.pos = self.space(self.pos, nested);
                    Some(m)
                } else {
                    None
                };
                if self.peek(self.pos) != b'}' {
                    return Err(GrammarError::at(
                        self.pos,
                        format!(
                            "expected `}}` to close the repetition, found {}",
                            self.shown_char(self.pos)
                        ),
                    ));
                }
                max
            }
            _ => {
                return Err(GrammarError::at(
                    self.pos,
                    format!(
                        "expected `,` or `}}` in the repetition, found {}",
                        self.shown_char(self.pos)
                    ),
                ))
            }
        };
        if let Some(max) = max {
            if max < min {
                return Err(GrammarError::at(
                    start,
                    format!("invalid repetition {{{min},{max}}}: the maximum is below the minimum"),
                ));
            }
        }
        self.pos = self.space(self.pos + 1, nested);
        Ok((min, max))
    }

    fn int(&mut self, start: usize) -> Result<u32, GrammarError> {
        let from = self.pos;
        while self.peek(self.pos).is_ascii_digit() {
            self.pos += 1;
        }
        if from == self.pos {
            return Err(GrammarError::at(
                from,
                format!(
                    "expected a number in the repetition, found {}",
                    self.shown_char(from)
                ),
            ));
        }
        let digits = std::str::from_utf8(&self.src[from..self.pos]).expect("ASCII digits");
        // Counts past `MAX_GRAMMAR_REPETITION` are checked where the item is known
        // (`compile::with_counters`): a counter's count costs nothing.
        digits.parse::<u32>().map_err(|_| {
            GrammarError::limit(
                start,
                format!(
                    "repetition count {digits} is over the limit of {}",
                    u32::MAX
                ),
            )
        })
    }

    /// One character of a literal or class: an escape or a UTF-8 character. Returns the code
    /// point and where it started.
    fn char(&mut self) -> Result<(u32, usize), GrammarError> {
        let at = self.pos;
        if self.peek(at) == b'\\' {
            let e = self.peek(at + 1);
            let hex = |p: &mut Self, n: usize| -> Result<u32, GrammarError> {
                let digits = p.src.get(at + 2..at + 2 + n).unwrap_or(&[]);
                if digits.len() != n || !digits.iter().all(u8::is_ascii_hexdigit) {
                    return Err(GrammarError::at(
                        at,
                        format!("invalid escape: `\\{}` needs {n} hex digits", e as char),
                    ));
                }
                p.pos = at + 2 + n;
                let s = std::str::from_utf8(digits).expect("hex digits are ASCII");
                Ok(u32::from_str_radix(s, 16).expect("hex digits"))
            };
            let cp = match e {
                b'x' => hex(self, 2)?,
                b'u' => hex(self, 4)?,
                b'U' => hex(self, 8)?,
                b'n' | b'r' | b't' | b'\\' | b'"' | b'[' | b']' | b'-' => {
                    self.pos = at + 2;
                    match e {
                        b'n' => u32::from(b'\n'),
                        b'r' => u32::from(b'\r'),
                        b't' => u32::from(b'\t'),
                        other => u32::from(other),
                    }
                }
                0 if at + 1 >= self.src.len() => {
                    return Err(GrammarError::at(
                        at,
                        "invalid escape: `\\` at the end of the grammar".into(),
                    ))
                }
                _ => {
                    return Err(GrammarError::at(
                        at,
                        format!(
                            "invalid escape `\\{}` (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\xNN \\uNNNN \\UNNNNNNNN)",
                            std::str::from_utf8(&self.src[at + 1..])
                                .ok()
                                .and_then(|s| s.chars().next())
                                .unwrap_or('?')
                        ),
                    ))
                }
            };
            if cp > 0x10FFFF {
                return Err(GrammarError::at(
                    at,
                    format!("invalid escape: U+{cp:X} is past U+10FFFF, the last code point"),
                ));
            }
            return Ok((cp, at));
        }
        // The text is a `str`, so a character starts here and is whole; its first byte gives
        // its width. (Decoding the rest of the text instead, at every character, made parsing
        // quadratic: 40 % of a 930-byte schema's 62 ms refusal, over 300 KiB of rendered GBNF.)
        let width = match self.src[at] {
            b if b < 0x80 => 1,
            b if b >= 0xF0 => 4,
            b if b >= 0xE0 => 3,
            _ => 2,
        };
        let s = std::str::from_utf8(&self.src[at..at + width]).expect("char boundary");
        let c = s.chars().next().expect("not at the end");
        self.pos += c.len_utf8();
        Ok((u32::from(c), at))
    }
}

/// Appends the UTF-8 encoding of `cp`; a surrogate cannot be encoded and is an error.
fn push_utf8(out: &mut Vec<u8>, cp: u32, at: usize) -> Result<(), GrammarError> {
    let c = char::from_u32(cp).ok_or_else(|| {
        GrammarError::at(
            at,
            format!("U+{cp:04X} is a surrogate, not a character, so a literal cannot contain it"),
        )
    })?;
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> Expr {
        let ast = parse(text, &Limits::DEFAULT).unwrap();
        ast.rules[ast.root].body.clone()
    }

    /// Built rules are held to the depth the parser holds text to: a tree exactly at the
    /// limit passes both, one level more fails both ([`depth_within`], and the grammar
    /// engine's entry for built rules).
    #[test]
    fn built_rules_nest_as_deep_as_parsed_ones() {
        let limits = Limits {
            grammar_depth: 40,
            ..Limits::DEFAULT
        };
        for stars in [39, 40] {
            // `"a"` under `stars` quantifiers: a tree of `stars + 1` levels.
            let text = format!("root ::= \"a\"{}", "*".repeat(stars));
            let parsed = parse(&text, &limits);
            let mut e = Expr::Literal(b"a".to_vec());
            for _ in 0..stars {
                e = Expr::Repeat {
                    expr: Box::new(e),
                    min: 0,
                    max: None,
                };
            }
            let fits = stars < 40;
            assert_eq!(parsed.is_ok(), fits, "{stars}");
            assert_eq!(depth_within(&e, limits.grammar_depth), fits, "{stars}");
            let built = Ast {
                rules: vec![Rule {
                    name: "root".into(),
                    at: 0,
                    body: e,
                }],
                root: 0,
                prebuilt: None,
            };
            let compiled = super::super::Grammar::from_rules(built, None, &limits, &mut 0);
            match compiled {
                Ok(_) => assert!(fits, "{stars} levels compiled"),
                Err(e) => assert!(!fits && e.contains("deeper than the limit"), "{e}"),
            }
        }
    }

    #[test]
    fn literals_and_escapes_are_utf8() {
        assert_eq!(
            body(r#"root ::= "a\n\x41\u00e9\U0001F600\"\\""#),
            Expr::Literal("a\nAé😀\"\\".as_bytes().to_vec())
        );
        assert_eq!(
            body(r#"root ::= "日本""#),
            Expr::Literal("日本".as_bytes().to_vec())
        );
    }

    #[test]
    fn classes_ranges_and_negation() {
        assert_eq!(
            body(r"root ::= [^a-z\]-]"),
            Expr::Class {
                ranges: vec![(97, 122), (93, 93), (45, 45)],
                negated: true
            }
        );
    }

    #[test]
    fn repetitions_and_groups() {
        assert_eq!(
            body("root ::= (\n  \"a\" |\n  \"b\"\n){2,3} x?\nx ::= \"c\""),
            Expr::Seq(vec![
                Expr::Repeat {
                    expr: Box::new(Expr::Alt(vec![
                        Expr::Literal(b"a".to_vec()),
                        Expr::Literal(b"b".to_vec())
                    ])),
                    min: 2,
                    max: Some(3)
                },
                Expr::Repeat {
                    expr: Box::new(Expr::Ref(1)),
                    min: 0,
                    max: Some(1)
                },
            ])
        );
    }

    #[test]
    fn comments_and_empty_alternatives() {
        let ast = parse(
            "# a comment\nroot ::= \"a\" | # trailing\n  # own line\n  \"\" x\nx ::= \"\"\n",
            &Limits::DEFAULT,
        )
        .unwrap();
        assert_eq!(ast.rules.len(), 2);
    }
}
