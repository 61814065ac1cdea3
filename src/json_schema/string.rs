//! Strings: ECMA-262 `pattern`s, `format`s and lengths, over the decoded value, then encoded
//! as the body of a JSON string.
//!
//! A pattern is translated to regex-syntax (ECMA's `\d`, `\w`, `\s` and `.` are narrower or
//! different from Rust's Unicode ones, so they become explicit classes), parsed, and turned
//! into a [`Node`] over *decoded characters*: unanchored ends become "any characters", so the
//! value need only contain a match. [`encode`] then maps each character class to the JSON text
//! that decodes to it. Characters inside a constrained part use their canonical encoding only
//! (the raw character; `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`; `\u00XX` for other control
//! characters), so every escape in the output decodes to a character the pattern allows.

use super::node::{contains, intersect, normalize, subtract, Node, Ranges};
use crate::limits::Limits;
use crate::regex::{Dfa, Refusal, DEAD};
use regex_syntax::hir::{Class, Hir, HirKind, Look};
use std::sync::Arc;

/// Every Unicode scalar value.
pub(crate) fn all_chars() -> Ranges {
    vec![('\0', char::MAX)]
}

const CONTROLS: (char, char) = ('\0', '\x1f');

/// The characters that appear raw in a JSON string.
fn raw_chars() -> &'static Ranges {
    // Made once: every character class inside a string is intersected with it.
    static RAW: std::sync::OnceLock<Ranges> = std::sync::OnceLock::new();
    RAW.get_or_init(|| subtract(&all_chars(), &vec![CONTROLS, ('"', '"'), ('\\', '\\')]))
}

/// Hex digits, both cases.
fn hex() -> Node {
    Node::class(vec![('0', '9'), ('A', 'F'), ('a', 'f')])
}

/// One character of a string: raw, a short escape, or `\u00XX` for a control character.
///
/// `\uXXXX` escapes of other characters are left out on purpose: every character can be
/// written raw, and the general escape costs ~5 automaton states and 6 byte classes in every
/// string of a schema (the automaton limit is what bounds large schemas).
pub(crate) fn any_unit() -> Node {
    counted_unit()
}

/// Whether `r` is every character.
fn is_all_chars(r: &Ranges) -> bool {
    r.len() == 1 && r[0] == ('\0', char::MAX)
}

/// [`any_chars`] encoded: the body of any JSON string, made once and shared (a repetition
/// holds its item behind an `Arc`). Every unconstrained string and every node of an "any
/// other key" trie is one, and making it afresh was ~20 allocations each, a tenth of a small
/// schema's IR.
fn any_string_body() -> Node {
    static BODY: std::sync::OnceLock<Node> = std::sync::OnceLock::new();
    BODY.get_or_init(|| Node::repeat(any_unit(), 0, None))
        .clone()
}

/// See [`any_unit`].
pub(crate) fn counted_unit() -> Node {
    Node::alt(vec![
        Node::Class(raw_chars().clone()),
        Node::concat(vec![
            Node::lit("\\"),
            Node::alt(vec![
                Node::class(vec![
                    ('"', '"'),
                    ('/', '/'),
                    ('\\', '\\'),
                    ('b', 'b'),
                    ('f', 'f'),
                    ('n', 'n'),
                    ('r', 'r'),
                    ('t', 't'),
                ]),
                Node::concat(vec![
                    Node::lit("u00"),
                    Node::class(vec![('0', '1')]),
                    Node::class(vec![('0', '9'), ('a', 'f')]),
                ]),
            ]),
        ]),
    ])
}

/// A whole JSON string whose decoded value is in `content` (a node over characters).
pub(crate) fn string_node(content: &Node) -> Node {
    Node::concat(vec![Node::lit("\""), encode(content), Node::lit("\"")])
}

/// The canonical JSON text of one character inside a string (without quotes).
fn escape_char(c: char) -> String {
    match c {
        '"' => "\\\"".into(),
        '\\' => "\\\\".into(),
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        '\u{8}' => "\\b".into(),
        '\u{c}' => "\\f".into(),
        c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32),
        c => c.to_string(),
    }
}

/// Maps a node over decoded characters to the JSON string text that decodes to it.
pub(crate) fn encode(n: &Node) -> Node {
    match n {
        Node::Empty | Node::Nothing => n.clone(),
        Node::Lit(s) => Node::lit(s.chars().map(escape_char).collect::<String>()),
        Node::Class(r) => {
            if is_all_chars(r) {
                return any_unit();
            }
            let mut alts = vec![Node::class(intersect(r, raw_chars()))];
            let controls = intersect(r, &vec![CONTROLS]);
            if controls == vec![CONTROLS] {
                alts.push(Node::concat(vec![
                    Node::lit("\\"),
                    Node::alt(vec![
                        Node::class(vec![
                            ('b', 'b'),
                            ('f', 'f'),
                            ('n', 'n'),
                            ('r', 'r'),
                            ('t', 't'),
                        ]),
                        Node::concat(vec![Node::lit("u00"), Node::class(vec![('0', '1')]), hex()]),
                    ]),
                ]));
            } else {
                for &(a, b) in &controls {
                    for c in a..=b {
                        alts.push(Node::lit(escape_char(c)));
                    }
                }
            }
            for c in ['"', '\\'] {
                if contains(r, c) {
                    alts.push(Node::lit(escape_char(c)));
                }
            }
            Node::alt(alts)
        }
        Node::Concat(items) => Node::concat(items.iter().map(encode).collect()),
        Node::Alt(items) => Node::alt(items.iter().map(encode).collect()),
        Node::Repeat(item, 0, None) if matches!(&**item, Node::Class(r) if is_all_chars(r)) => {
            any_string_body()
        }
        Node::Repeat(item, min, max) => Node::repeat(encode(item), *min, *max),
        Node::Seq { .. } | Node::List { .. } | Node::AnyJson => {
            unreachable!("string contents never hold Seq, List or AnyJson")
        }
        Node::Automaton(_) => unreachable!("content automata are encoded by encode_automaton"),
    }
}

/// A whole JSON string whose decoded value is in every one of `contents` (nodes over
/// characters: a pattern's, a format's) and, with `lengths`, has `min..=max` characters
/// (code points): the contents' automata intersected with a character counter, then encoded
/// as string text ([`encode_automaton`]) between quotes. The product is taken over decoded
/// characters, where a length is a count of UTF-8 lead bytes; over the encoded text it would
/// also have to count escapes. Values in one of `excluded` (nodes over characters too) are
/// taken out (a value has one encoding, so the difference over decoded characters is the
/// difference of the strings). [`Node::Nothing`] when no value is left; refused past
/// `limits` at any step.
pub(crate) fn constrained_string(
    contents: Vec<Node>,
    lengths: Option<(u32, Option<u32>)>,
    excluded: Vec<Node>,
    limits: &Limits,
) -> Result<Node, Refusal> {
    // The counter accepts any bytes: it is never the first operand.
    let mut parts = if contents.is_empty() {
        vec![any_chars()]
    } else {
        contents
    };
    if let Some((min, max)) = lengths {
        match char_count(min, max, limits)? {
            Some(d) => parts.push(Node::Automaton(Arc::new(d))),
            None => return Ok(Node::Nothing),
        }
    }
    let mut acc = parts.first().cloned().unwrap_or_else(any_chars);
    for p in parts.iter().skip(1) {
        acc = Node::intersect(&acc, p, limits)?;
        if acc == Node::Nothing {
            return Ok(Node::Nothing);
        }
    }
    for x in &excluded {
        acc = Node::difference(&acc, x, limits)?;
        if acc == Node::Nothing {
            return Ok(Node::Nothing);
        }
    }
    let Node::Automaton(content) = acc else {
        return Ok(string_node(&acc));
    };
    Ok(match encode_automaton(&content, limits)? {
        Some(d) => Node::concat(vec![
            Node::lit("\""),
            Node::Automaton(Arc::new(d)),
            Node::lit("\""),
        ]),
        None => Node::Nothing,
    })
}

/// Byte strings of `min..=max` characters, counted as bytes that are not UTF-8 continuation
/// bytes (exact for UTF-8 text, which is all the other operand of the product accepts):
/// `max + 1` states (`min + 1` when unbounded, the last one looping) over two byte classes.
fn char_count(min: u32, max: Option<u32>, limits: &Limits) -> Result<Option<Dfa>, Refusal> {
    if max.is_some_and(|m| m < min) {
        return Ok(None);
    }
    let top = max.unwrap_or(min) as usize;
    Dfa::from_fn_within(
        top + 1,
        0,
        |c| c >= min as usize,
        |c, b| {
            if (0x80..=0xBF).contains(&b) {
                Some(c)
            } else if c < top {
                Some(c + 1)
            } else {
                max.is_none().then_some(top)
            }
        },
        limits,
    )
}

/// The JSON string text (without quotes) of an automaton over decoded characters: each
/// character that JSON escapes (`"`, `\`, controls) takes its canonical escape instead of
/// the raw byte, as [`encode`] writes it: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, and
/// `\u00xx` (lower-case hex) for the other controls. A state with such a character gets an
/// escape state after `\` (and five more for `\u00xx` when it allows one of those
/// controls), so the encoded automaton has at most 7 states per state.
pub(crate) fn encode_automaton(content: &Dfa, limits: &Limits) -> Result<Option<Dfa>, Refusal> {
    /// The states after `\`, `\u`, `\u0`, `\u00`, `\u000` and `\u001`.
    #[derive(Clone, Copy)]
    enum Esc {
        Backslash,
        U,
        U0,
        U00,
        U00Hi(u8),
    }
    let n = content.state_count();
    let short = |b: u8| matches!(b, 0x08 | 0x09 | 0x0A | 0x0C | 0x0D);
    let live = |h: u32| (h != DEAD).then(|| content.index(h));
    // Per content state, the first of its escape states; the escape states' owners.
    let mut esc_of: Vec<Option<usize>> = vec![None; n];
    let mut extra: Vec<(usize, Esc)> = Vec::new();
    for s in content.live_states() {
        let i = content.index(s);
        let leads = |b: u8| content.next(s, b) != DEAD;
        let any_escaped = leads(b'"') || leads(b'\\') || (0..0x20).any(leads);
        if !any_escaped {
            continue;
        }
        esc_of[i] = Some(n + extra.len());
        extra.push((i, Esc::Backslash));
        if (0..0x20u8).any(|b| !short(b) && leads(b)) {
            extra.extend([Esc::U, Esc::U0, Esc::U00, Esc::U00Hi(0), Esc::U00Hi(1)].map(|e| (i, e)));
        }
    }
    let start = content.index(content.start());
    Dfa::from_fn_within(
        n + extra.len(),
        start,
        |s| s < n && s > 0 && content.is_accepting(content.state_at(s)),
        |s, b| {
            if s < n {
                if s == 0 {
                    return None;
                }
                return match b {
                    b'\\' => esc_of[s],
                    b'"' | 0x00..=0x1F => None,
                    _ => live(content.next(content.state_at(s), b)),
                };
            }
            let (owner, kind) = extra[s - n];
            let from = content.state_at(owner);
            match (kind, b) {
                (Esc::Backslash, b'"' | b'\\') => live(content.next(from, b)),
                (Esc::Backslash, b'b') => live(content.next(from, 0x08)),
                (Esc::Backslash, b'f') => live(content.next(from, 0x0C)),
                (Esc::Backslash, b'n') => live(content.next(from, 0x0A)),
                (Esc::Backslash, b'r') => live(content.next(from, 0x0D)),
                (Esc::Backslash, b't') => live(content.next(from, 0x09)),
                (Esc::Backslash, b'u') => {
                    matches!(extra.get(s + 1 - n), Some((o, Esc::U)) if *o == owner)
                        .then_some(s + 1)
                }
                (Esc::U, b'0') => Some(s + 1),
                (Esc::U0, b'0') => Some(s + 1),
                (Esc::U00, b'0') => Some(s + 1),
                (Esc::U00, b'1') => Some(s + 2),
                (Esc::U00Hi(hi), b'0'..=b'9' | b'a'..=b'f') => {
                    let d = (b as char).to_digit(16).expect("a hex digit") as u8;
                    let c = hi * 16 + d;
                    if short(c) {
                        None
                    } else {
                        live(content.next(from, c))
                    }
                }
                _ => None,
            }
        },
        limits,
    )
}

/// "Any characters": the unanchored side of a pattern.
pub(crate) fn any_chars() -> Node {
    Node::repeat(Node::Class(all_chars()), 0, None)
}

/// Characters of ECMA-262 `\s` (WhiteSpace and LineTerminator).
const ECMA_SPACE: &[(char, char)] = &[
    ('\t', '\r'),
    (' ', ' '),
    ('\u{a0}', '\u{a0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200a}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{202f}', '\u{202f}'),
    ('\u{205f}', '\u{205f}'),
    ('\u{3000}', '\u{3000}'),
    ('\u{feff}', '\u{feff}'),
];
const ECMA_WORD: &[(char, char)] = &[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')];
const ECMA_DIGIT: &[(char, char)] = &[('0', '9')];
/// ECMA-262 `.` without the `s` flag: anything but a line terminator.
const ECMA_NOT_DOT: &[(char, char)] = &[('\n', '\n'), ('\r', '\r'), ('\u{2028}', '\u{2029}')];

fn class_text(r: &[(char, char)], negate: bool) -> String {
    let mut out = String::from(if negate { "[^" } else { "[" });
    for &(a, b) in r {
        out.push_str(&format!("\\x{{{:X}}}", a as u32));
        if b != a {
            out.push_str(&format!("-\\x{{{:X}}}", b as u32));
        }
    }
    out.push(']');
    out
}

/// One parsed escape: a character or a whole class.
enum Escape {
    Char(char),
    Class(&'static [(char, char)], bool),
}

struct Reader<'a> {
    chars: Vec<char>,
    pos: usize,
    src: &'a str,
}

impl Reader<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }
    fn peek_at(&self, k: usize) -> Option<char> {
        self.chars.get(self.pos + k).copied()
    }
    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }
    fn hex(&mut self, n: usize) -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..n {
            let d = self.peek()?.to_digit(16)?;
            v = v * 16 + d;
            self.pos += 1;
        }
        Some(v)
    }

    /// Reads the escape after a `\` (already consumed).
    fn escape(&mut self, in_class: bool) -> Result<Escape, String> {
        let c = self
            .bump()
            .ok_or_else(|| format!("pattern `{}` ends with a lone backslash", self.src))?;
        Ok(match c {
            'd' => Escape::Class(ECMA_DIGIT, false),
            'D' => Escape::Class(ECMA_DIGIT, true),
            'w' => Escape::Class(ECMA_WORD, false),
            'W' => Escape::Class(ECMA_WORD, true),
            's' => Escape::Class(ECMA_SPACE, false),
            'S' => Escape::Class(ECMA_SPACE, true),
            'n' => Escape::Char('\n'),
            'r' => Escape::Char('\r'),
            't' => Escape::Char('\t'),
            'f' => Escape::Char('\u{c}'),
            'v' => Escape::Char('\u{b}'),
            'b' if in_class => Escape::Char('\u{8}'),
            '0' if !self.peek().is_some_and(|d| d.is_ascii_digit()) => Escape::Char('\0'),
            'c' => {
                let l = self
                    .bump()
                    .filter(char::is_ascii_alphabetic)
                    .ok_or_else(|| format!("pattern `{}` has a bad \\c escape", self.src))?;
                Escape::Char(char::from((l as u8) % 32))
            }
            'x' => {
                let v = self
                    .hex(2)
                    .ok_or_else(|| format!("pattern `{}` has a bad \\x escape", self.src))?;
                Escape::Char(char::from_u32(v).expect("two hex digits"))
            }
            'u' => {
                let bad = || "a bad \\u escape".to_string();
                let hi = if self.peek() == Some('{') {
                    self.pos += 1;
                    let mut v = 0u32;
                    let mut digits = 0;
                    while let Some(d) = self.peek().and_then(|c| c.to_digit(16)) {
                        v = v.saturating_mul(16).saturating_add(d);
                        digits += 1;
                        self.pos += 1;
                    }
                    if digits == 0 || self.bump() != Some('}') {
                        return Err(bad());
                    }
                    v
                } else {
                    self.hex(4).ok_or_else(bad)?
                };
                let v = if (0xD800..0xDC00).contains(&hi)
                    && self.peek() == Some('\\')
                    && self.peek_at(1) == Some('u')
                {
                    let save = self.pos;
                    self.pos += 2;
                    match self.hex(4) {
                        Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                        }
                        _ => {
                            self.pos = save;
                            hi
                        }
                    }
                } else {
                    hi
                };
                Escape::Char(char::from_u32(v).ok_or_else(|| {
                    "a \\u escape of a lone surrogate (not a character)".to_string()
                })?)
            }
            'b' | 'B' => return Err("word boundaries (\\b, \\B)".into()),
            '1'..='9' | 'k' => return Err("back-references".into()),
            'p' | 'P' => return Err("Unicode property escapes (\\p, \\P)".into()),
            c if c.is_ascii_alphanumeric() => {
                return Err(format!("the escape \\{c}, which ECMA-262 does not define"))
            }
            c => Escape::Char(c),
        })
    }
}

/// Translates an ECMA-262 pattern to regex-syntax text with the same meaning.
fn translate(pattern: &str) -> Result<String, String> {
    let mut r = Reader {
        chars: pattern.chars().collect(),
        pos: 0,
        src: pattern,
    };
    let lit = |c: char| format!("\\x{{{:X}}}", c as u32);
    let mut out = String::new();
    while let Some(c) = r.bump() {
        match c {
            '\\' => match r.escape(false)? {
                Escape::Char(c) => out.push_str(&lit(c)),
                Escape::Class(set, neg) => out.push_str(&class_text(set, neg)),
            },
            '.' => out.push_str(&class_text(ECMA_NOT_DOT, true)),
            '[' => {
                let negate = r.peek() == Some('^');
                if negate {
                    r.pos += 1;
                }
                // Items: single characters, ranges, and whole classes (\d ...).
                let mut ranges: Vec<(char, char)> = Vec::new();
                let mut classes: Vec<String> = Vec::new();
                loop {
                    let c = r
                        .bump()
                        .ok_or_else(|| "an unclosed character class".to_string())?;
                    if c == ']' {
                        break;
                    }
                    let first = if c == '\\' {
                        r.escape(true)?
                    } else {
                        Escape::Char(c)
                    };
                    let a = match first {
                        Escape::Class(set, neg) => {
                            classes.push(class_text(set, neg));
                            continue;
                        }
                        Escape::Char(a) => a,
                    };
                    if r.peek() == Some('-') && r.peek_at(1).is_some_and(|n| n != ']') {
                        r.pos += 1;
                        let c2 = r.bump().expect("peeked");
                        let second = if c2 == '\\' {
                            r.escape(true)?
                        } else {
                            Escape::Char(c2)
                        };
                        match second {
                            Escape::Char(b) if b >= a => ranges.push((a, b)),
                            Escape::Char(_) => {
                                return Err("a character range out of order".into());
                            }
                            Escape::Class(set, neg) => {
                                // `[a-\d]`: ECMA (Annex B) reads `a`, `-` and the class.
                                ranges.push((a, a));
                                ranges.push(('-', '-'));
                                classes.push(class_text(set, neg));
                            }
                        }
                    } else {
                        ranges.push((a, a));
                    }
                }
                if ranges.is_empty() && classes.is_empty() {
                    // `[]` matches nothing, `[^]` any character.
                    out.push_str(if negate {
                        r"[\x{0}-\x{10FFFF}]"
                    } else {
                        r"[^\x{0}-\x{10FFFF}]"
                    });
                    continue;
                }
                out.push_str(if negate { "[^" } else { "[" });
                for (a, b) in normalize(ranges) {
                    out.push_str(&lit(a));
                    if b != a {
                        out.push('-');
                        out.push_str(&lit(b));
                    }
                }
                for c in classes {
                    out.push_str(&c);
                }
                out.push(']');
            }
            '(' => {
                if r.peek() == Some('?') {
                    match (r.peek_at(1), r.peek_at(2)) {
                        (Some(':'), _) => {
                            r.pos += 2;
                            out.push_str("(?:");
                        }
                        (Some('<'), Some(n)) if n != '=' && n != '!' => {
                            r.pos += 2;
                            out.push_str("(?<");
                        }
                        (Some('=' | '!'), _) | (Some('<'), _) => {
                            return Err("look-around assertions".into())
                        }
                        _ => return Err("a `(?` group ECMA-262 does not define".into()),
                    }
                } else {
                    out.push('(');
                }
            }
            '{' => {
                // A quantifier `{n}`, `{n,}`, `{n,m}`; otherwise a literal brace (Annex B).
                let rest: String = r.chars[r.pos..].iter().take(24).collect();
                let end = rest.find('}');
                let ok = end.is_some_and(|e| {
                    let body = &rest[..e];
                    let mut parts = body.splitn(2, ',');
                    let a = parts.next().unwrap_or("");
                    let b = parts.next();
                    !a.is_empty()
                        && a.bytes().all(|x| x.is_ascii_digit())
                        && b.is_none_or(|b| b.bytes().all(|x| x.is_ascii_digit()))
                });
                if ok {
                    let body = &rest[..=end.expect("checked")];
                    out.push('{');
                    out.push_str(body);
                    r.pos += body.chars().count();
                } else {
                    out.push_str(&lit('{'));
                }
            }
            '}' | ']' => out.push_str(&lit(c)),
            c if c.is_ascii_alphanumeric() => out.push(c),
            '^' | '$' | '|' | ')' | '*' | '+' | '?' => out.push(c),
            c => out.push_str(&lit(c)),
        }
    }
    Ok(out)
}

/// A pattern's language over decoded characters, where the value need only contain a match
/// (ECMA-262 `test` semantics). Errors say what is unsupported.
pub(crate) fn pattern_content(pattern: &str) -> Result<Node, String> {
    let text = translate(pattern)?;
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(crate::limits::MAX_REGEX_NESTING)
        .build()
        .parse(&text)
        .map_err(|e| match e {
            regex_syntax::Error::Parse(p) => p.kind().to_string(),
            regex_syntax::Error::Translate(t) => t.kind().to_string(),
            other => other.to_string(),
        })?;
    let alts = anchored(&hir)?;
    Ok(Node::alt(
        alts.into_iter()
            .map(|(start, n, end)| {
                let n = if start {
                    n
                } else {
                    shortest_end(n, Side::Start)
                };
                let n = if end { n } else { shortest_end(n, Side::End) };
                Node::concat(vec![
                    if start { Node::Empty } else { any_chars() },
                    n,
                    if end { Node::Empty } else { any_chars() },
                ])
            })
            .collect(),
    ))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Start,
    End,
}

/// `n` with its repetitions at one unanchored side cut to their fewest: beside "any
/// characters", `X{m,n}` there matches exactly where `X{m}` does (`.*a{1,255}.*` is `.*a.*`),
/// and so on through alternatives and the parts a cut repetition leaves at that side. The
/// language does not change; its automaton does: an unanchored `[A-Za-z0-9-_.:]{1,255}` key
/// pattern (o78117) determinized 255 counting positions in every state (~46 ms, 305 states).
fn shortest_end(n: Node, side: Side) -> Node {
    match n {
        Node::Repeat(sub, min, _) => Node::repeat(Arc::unwrap_or_clone(sub), min, Some(min)),
        Node::Alt(alts) => Node::alt(alts.into_iter().map(|a| shortest_end(a, side)).collect()),
        Node::Concat(mut items) => {
            // Cut the outermost part; when it vanishes, the next one is at the side.
            while let Some(part) = match side {
                Side::Start => (!items.is_empty()).then(|| items.remove(0)),
                Side::End => items.pop(),
            } {
                let cut = shortest_end(part, side);
                if cut != Node::Empty {
                    match side {
                        Side::Start => items.insert(0, cut),
                        Side::End => items.push(cut),
                    }
                    break;
                }
            }
            Node::concat(items)
        }
        other => other,
    }
}

/// The content of a `format` whose regex is `regex` ([`format_regex`]), parsed once per
/// process: the regexes are fixed, large configuration schemas repeat `date-time` or `uri`
/// in dozens of properties, and parsing one was ~2 % of a median DFA-backed compile that
/// uses a format.
pub(crate) fn format_content(regex: &'static str) -> Node {
    type Parsed = std::sync::Mutex<rustc_hash::FxHashMap<&'static str, Node>>;
    static PARSED: std::sync::OnceLock<Parsed> = std::sync::OnceLock::new();
    let mut parsed = PARSED
        .get_or_init(Parsed::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    parsed
        .entry(regex)
        .or_insert_with(|| exact_content(regex))
        .clone()
}

/// A fully anchored regex (formats) over characters.
pub(crate) fn exact_content(regex: &str) -> Node {
    let hir = regex_syntax::Parser::new()
        .parse(regex)
        .expect("built-in format regexes parse");
    plain(&hir).expect("built-in format regexes have no anchors")
}

type Anchored = Vec<(bool, Node, bool)>;

/// Alternatives `(starts at ^, node, ends at $)` of a pattern.
fn anchored(h: &Hir) -> Result<Anchored, String> {
    if h.properties().look_set().is_empty() {
        return Ok(vec![(false, plain(h)?, false)]);
    }
    match h.kind() {
        HirKind::Look(Look::Start) => Ok(vec![(true, Node::Empty, false)]),
        HirKind::Look(Look::End) => Ok(vec![(false, Node::Empty, true)]),
        HirKind::Look(_) => Err("look-around assertions other than ^ and $".into()),
        HirKind::Capture(c) => anchored(&c.sub),
        HirKind::Alternation(subs) => {
            let mut out = Vec::new();
            for s in subs {
                out.extend(anchored(s)?);
            }
            Ok(out)
        }
        HirKind::Concat(subs) => {
            let mut acc: Anchored = vec![(false, Node::Empty, false)];
            for s in subs {
                let next = anchored(s)?;
                let mut combined = Vec::new();
                for (sa, na, ea) in &acc {
                    for (sb, nb, eb) in &next {
                        if *sb && *na != Node::Empty {
                            return Err("^ after the start of the pattern".into());
                        }
                        if *ea && *nb != Node::Empty {
                            return Err("$ before the end of the pattern".into());
                        }
                        combined.push((
                            *sa || *sb,
                            Node::concat(vec![na.clone(), nb.clone()]),
                            *ea || *eb,
                        ));
                    }
                }
                if combined.len() > 64 {
                    return Err("too many anchored alternatives".into());
                }
                acc = combined;
            }
            Ok(acc)
        }
        _ => Err("^ or $ inside a repetition".into()),
    }
}

/// A regex without assertions as a node over characters.
fn plain(h: &Hir) -> Result<Node, String> {
    Ok(match h.kind() {
        HirKind::Empty => Node::Empty,
        HirKind::Literal(l) => Node::lit(
            std::str::from_utf8(&l.0)
                .map_err(|_| "a non-UTF-8 literal".to_string())?
                .to_owned(),
        ),
        HirKind::Class(Class::Unicode(c)) => {
            Node::class(c.ranges().iter().map(|r| (r.start(), r.end())).collect())
        }
        HirKind::Class(Class::Bytes(_)) => return Err("byte classes".into()),
        HirKind::Look(_) => return Err("assertions".into()),
        HirKind::Repetition(r) => Node::repeat(plain(&r.sub)?, r.min, r.max),
        HirKind::Capture(c) => plain(&c.sub)?,
        HirKind::Concat(subs) => Node::concat(subs.iter().map(plain).collect::<Result<_, _>>()?),
        HirKind::Alternation(subs) => Node::alt(subs.iter().map(plain).collect::<Result<_, _>>()?),
    })
}

/// A decoded string is not one of `names` (for keys beside the listed properties).
pub(crate) fn none_of(names: &[&str]) -> Node {
    #[derive(Default)]
    struct Trie {
        end: bool,
        kids: std::collections::BTreeMap<char, Trie>,
    }
    let mut root = Trie::default();
    for name in names {
        let mut t = &mut root;
        for c in name.chars() {
            t = t.kids.entry(c).or_default();
        }
        t.end = true;
    }
    fn go(t: &Trie) -> Node {
        let mut alts = Vec::new();
        if !t.end {
            alts.push(Node::Empty);
        }
        let kid_chars: Ranges = t.kids.keys().map(|&c| (c, c)).collect();
        let others = subtract(&all_chars(), &normalize(kid_chars));
        // The characters written escaped, apart: with no listed name holding one, their
        // alternative is the same at every node, one shared rule whose inlined copies are
        // one copy, instead of each node's escapes determinized and then merged.
        let (raw, escaped) = (
            intersect(&others, raw_chars()),
            subtract(&others, raw_chars()),
        );
        for class in [raw, escaped] {
            if !class.is_empty() {
                alts.push(Node::concat(vec![Node::class(class), any_chars()]));
            }
        }
        for (&c, kid) in &t.kids {
            alts.push(Node::concat(vec![Node::lit(c.to_string()), go(kid)]));
        }
        Node::alt(alts)
    }
    go(&root)
}

/// Regexes (over characters, anchored) for the supported `format`s, chosen so that every
/// value they accept passes a strict validator. Each is documented in the module docs.
pub(crate) fn format_regex(name: &str) -> Option<&'static str> {
    Some(match name {
        "date" => DATE,
        "time" => TIME,
        "date-time" => DATE_TIME,
        "uuid" => "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        "email" => EMAIL,
        "ipv4" => IPV4,
        "ipv6" => IPV6,
        "hostname" => HOSTNAME,
        // An ASCII URI is an IRI, and its references are IRI references.
        "uri" | "iri" => URI,
        "uri-reference" | "iri-reference" => URI_REFERENCE,
        "json-pointer" => JSON_POINTER,
        "relative-json-pointer" => RELATIVE_JSON_POINTER,
        "duration" => DURATION,
        "uri-template" => URI_TEMPLATE,
        _ => return None,
    })
}

const DATE: &str = "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)";
const TIME: &str = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const DATE_TIME: &str = "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
/// Labels of 1 to 20 letters/digits, no hyphens at the ends or side by side; 1 to 4 labels
/// (at most 83 characters, far under the 253 limit).
const HOSTNAME: &str =
    "[A-Za-z0-9]{1,10}(?:-[A-Za-z0-9]{1,9})?(?:\\.[A-Za-z0-9]{1,10}(?:-[A-Za-z0-9]{1,9})?){0,3}";
const EMAIL: &str = "[A-Za-z0-9_+-]{1,16}(?:\\.[A-Za-z0-9_+-]{1,16})?@[A-Za-z0-9]{1,10}(?:-[A-Za-z0-9]{1,9})?(?:\\.[A-Za-z0-9]{1,10}(?:-[A-Za-z0-9]{1,9})?){1,2}";
const IPV4: &str = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}";
const IPV6: &str = "(?:(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|(?:[0-9a-fA-F]{1,4}:){1,7}:|(?:[0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|::(?:[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4}){0,6})?)";
/// `uri`'s regex (a macro so that `uri-reference` can be written with it).
macro_rules! uri {
    () => {
        "[a-zA-Z][a-zA-Z0-9+.-]*://[A-Za-z0-9._~-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~!$&'()*+,;=:@-]*)*(?:\\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?(?:#[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?"
    };
}
const URI: &str = uri!();
/// A URI, or a relative reference: an optional path whose first segment is not empty and has
/// no `:` (so it is not read as a scheme, and `//` never starts an authority), then an
/// optional query and fragment, over unreserved characters and `/?=&`.
const URI_REFERENCE: &str = concat!(
    "(?:",
    uri!(),
    "|(?:/?[A-Za-z0-9._~-]+(?:/[A-Za-z0-9._~-]*)*)?(?:\\?[A-Za-z0-9._~/?=&-]*)?(?:#[A-Za-z0-9._~/?=&-]*)?)"
);
/// Reference tokens of letters, digits and `._-`, or the escapes `~0` and `~1`.
const JSON_POINTER: &str = "(?:/(?:[A-Za-z0-9._-]|~[01])*)*";
/// A level of up to 9 digits, then `#` or a JSON pointer.
const RELATIVE_JSON_POINTER: &str = "(?:0|[1-9][0-9]{0,8})(?:#|(?:/(?:[A-Za-z0-9._-]|~[01])*)*)";
/// RFC 3339 appendix A: date units in order, then time units in order after `T`, or weeks;
/// numbers of 1 to 4 digits.
const DURATION: &str = "P(?:(?:[0-9]{1,4}D|[0-9]{1,4}M(?:[0-9]{1,4}D)?|[0-9]{1,4}Y(?:[0-9]{1,4}M(?:[0-9]{1,4}D)?)?)(?:T(?:[0-9]{1,4}H(?:[0-9]{1,4}M(?:[0-9]{1,4}S)?)?|[0-9]{1,4}M(?:[0-9]{1,4}S)?|[0-9]{1,4}S))?|T(?:[0-9]{1,4}H(?:[0-9]{1,4}M(?:[0-9]{1,4}S)?)?|[0-9]{1,4}M(?:[0-9]{1,4}S)?|[0-9]{1,4}S)|[0-9]{1,4}W)";
/// RFC 6570 literals of unreserved and reserved characters but `'`, and expressions of an
/// optional operator and comma-separated variable names of up to 16 characters (no prefix
/// or explode modifiers).
const URI_TEMPLATE: &str = "(?:[A-Za-z0-9._~/:?#@!$&()*+,;=-]|\\{[+#./;?&]?[A-Za-z_][A-Za-z0-9_]{0,15}(?:,[A-Za-z_][A-Za-z0-9_]{0,15})*\\})*";

#[cfg(test)]
mod tests {
    use super::*;

    fn content_matches(pattern: &str, value: &str) -> bool {
        pattern_content(pattern).unwrap().matches(value.as_bytes())
    }

    #[test]
    fn patterns_are_unanchored_unless_anchored() {
        assert!(content_matches("ab", "xxabyy"));
        assert!(!content_matches("^ab", "xab"));
        assert!(content_matches("^ab", "abx"));
        assert!(!content_matches("ab$", "abx"));
        assert!(content_matches("^a|b$", "ax") && content_matches("^a|b$", "xb"));
        assert!(!content_matches("^a|b$", "xa"));
        assert!(content_matches("^(a|b)$", "b"));
    }

    /// Repetitions at an unanchored side are cut to their fewest ([`shortest_end`]): the
    /// language is the regex crate's unanchored `is_match` on every string up to 6
    /// characters over the patterns' alphabet.
    #[test]
    fn repetitions_at_unanchored_sides_keep_the_language() {
        let patterns = [
            "a{1,3}",
            "[ab]{2,}",
            "a+b",
            "ba*",
            "^a{2,3}",
            "a{2,3}$",
            "(ab|b{2,})c*",
            "(a+|b)(c|a{0,2})",
            "a?b?",
            "^(ab){1,2}|b+$",
            "c(a{1,2}b+)+",
        ];
        let mut values = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..6 {
            layer = layer
                .iter()
                .flat_map(|s| ['a', 'b', 'c'].into_iter().map(move |c| format!("{s}{c}")))
                .collect();
            values.extend(layer.iter().cloned());
        }
        for p in patterns {
            let oracle = regex::Regex::new(p).unwrap();
            let node = pattern_content(p).unwrap();
            for v in &values {
                assert_eq!(
                    node.matches(v.as_bytes()),
                    oracle.is_match(v),
                    "{p} on {v:?}"
                );
            }
        }
        // The cut is what makes the automaton small: `a{1,255}` is `a` between any text.
        assert_eq!(
            pattern_content("a{1,255}").unwrap(),
            pattern_content("a").unwrap()
        );
    }

    #[test]
    fn ecma_classes_are_ascii_and_dot_skips_line_terminators() {
        assert!(!content_matches(r"^\d$", "٣"));
        assert!(content_matches(r"^\d$", "3"));
        assert!(!content_matches(r"^\w$", "é"));
        assert!(content_matches(r"^[\w-]+$", "a-b_c"));
        assert!(!content_matches("^.$", "\n"));
        assert!(content_matches("^.$", "é"));
        assert!(content_matches(r"^\s$", "\u{feff}"));
        assert!(content_matches(r"^a{$", "a{"));
        assert!(content_matches(r"^[0-9]{2,3}$", "123") && !content_matches(r"^[0-9]{2,3}$", "1"));
        assert!(content_matches(r"^x{2}}$", "xx}"));
        assert!(content_matches(r"^[^]$", "\n"));
        assert!(content_matches(r"^\/\<$", "/<"));
        assert!(pattern_content(r"\bx").is_err());
        assert!(pattern_content(r"(a)\1").is_err());
        assert!(pattern_content(r"a(?=b)").is_err());
    }

    #[test]
    fn encoding_escapes_what_json_must() {
        let n = string_node(&pattern_content("^[\"\\\\a\n]+$").unwrap());
        assert!(n.matches(br#""\"\\a\n""#));
        assert!(!n.matches(b"\"\"\""));
        assert!(!n.matches(br#""\u0061""#));
    }

    /// Patterns and lengths through the automaton path: the encoded language against the
    /// content node and the length on every string over an alphabet of characters JSON
    /// escapes and characters it does not, each written as serde_json writes it (the
    /// canonical escapes); other spellings of the same value are not emitted.
    #[test]
    fn constrained_strings_take_the_canonical_text_of_exactly_the_allowed_values() {
        let limits = Limits::DEFAULT;
        let alphabet = ['a', '"', '\\', '\n', '\u{1}', '\u{1f}', 'é', '😀', '/', 'b'];
        let values = strings_over(&alphabet, 4);
        let cases: [(&[&str], u32, Option<u32>); 5] = [
            (&["^a[\\x00-\\x1f\"\\\\]*b?$"], 2, Some(3)),
            (&["[^a]"], 0, Some(2)),
            (&["^.*$"], 3, None),
            (&["a", "b"], 0, Some(3)),
            (&["^[ab/é😀]+$", "[^b]$"], 2, Some(3)),
        ];
        for (patterns, min, max) in cases {
            let contents: Vec<Node> = patterns
                .iter()
                .map(|p| pattern_content(p).unwrap())
                .collect();
            let n = constrained_string(contents.clone(), Some((min, max)), Vec::new(), &limits)
                .unwrap();
            assert!(n.contains_automaton(), "{patterns:?}");
            for v in &values {
                let len = v.chars().count() as u32;
                let want = contents.iter().all(|c| c.matches(v.as_bytes()))
                    && len >= min
                    && max.is_none_or(|m| len <= m);
                let text = serde_json::to_string(v).unwrap();
                assert_eq!(n.matches(text.as_bytes()), want, "{patterns:?} on {text}");
            }
        }
        // Only the canonical escape: not `\u0061`, `\/`, upper-case hex or a raw control.
        let n =
            constrained_string(vec![any_chars()], Some((1, Some(1))), Vec::new(), &limits).unwrap();
        for ok in [r#""a""#, r#""\u0001""#, r#""\n""#, r#""/""#, r#""\"""#] {
            assert!(n.matches(ok.as_bytes()), "{ok}");
        }
        for bad in [
            r#""\u0061""#,
            r#""\/""#,
            r#""\u001F""#,
            "\"\u{1}\"",
            r#""\u000a""#,
        ] {
            assert!(!n.matches(bad.as_bytes()), "{bad}");
        }
        // An empty intersection is Nothing.
        let none = constrained_string(
            vec![pattern_content("^a+$").unwrap()],
            Some((0, Some(0))),
            Vec::new(),
            &limits,
        );
        assert_eq!(none.unwrap(), Node::Nothing);
    }

    /// Every string over `alphabet` of at most `max_len` characters, shortest first.
    fn strings_over(alphabet: &[char], max_len: usize) -> Vec<String> {
        let mut out = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..max_len {
            layer = layer
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            out.extend(layer.iter().cloned());
        }
        out
    }

    /// Brute force: every string of up to 4 characters over a small alphabet, against random
    /// sets of names over it (prefixes of each other, a quote, a 2-byte character).
    #[test]
    fn none_of_takes_every_string_but_the_names() {
        let strings = strings_over(&['a', 'b', '"', 'é'], 4);
        let mut rng = crate::test_rng::XorShift::new(0x2545_F491_4F6C_DD1Du64);
        let mut rand = move |n: u64| rng.below(n);
        for _ in 0..60 {
            let names: Vec<&str> = (0..1 + rand(5))
                .map(|_| strings[rand(strings.len() as u64 / 4) as usize].as_str())
                .collect();
            let n = none_of(&names);
            for s in &strings {
                let want = !names.contains(&s.as_str());
                assert_eq!(n.matches(s.as_bytes()), want, "{names:?} {s:?}");
            }
        }
    }

    #[test]
    fn none_of_excludes_exactly_the_names() {
        let n = none_of(&["ab", "a", "b\"c"]);
        for s in ["", "x", "abc", "aa", "b", "b\"", "b\"cd"] {
            assert!(n.matches(s.as_bytes()), "{s}");
        }
        for s in ["a", "ab", "b\"c"] {
            assert!(!n.matches(s.as_bytes()), "{s}");
        }
    }
}
