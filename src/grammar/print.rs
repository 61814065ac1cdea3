//! GBNF text of rules built in memory (a JSON Schema's grammar): the export for engines that
//! take grammar text (llama.cpp, a remote server, a forced tool call's combined grammar).
//!
//! Written so that [`super::parse::parse`] reads back the same rules: a sequence or an
//! alternation inside a sequence, an alternation inside an alternation and anything but a
//! leaf under a quantifier are parenthesized; nothing else is.

use super::parse::{Ast, Expr, Rule};
use std::fmt::{self, Write};

impl Ast {
    /// The rules as GBNF text, `root` first, then the others in order.
    pub(crate) fn to_gbnf(&self) -> String {
        let mut out = String::new();
        // A String takes any text.
        let _ = self.write_gbnf(&mut out);
        out
    }

    /// [`Ast::to_gbnf`]'s length in bytes, counted without writing it, up to `cap` (the
    /// count stops at the first rule past it).
    pub(crate) fn gbnf_len(&self, cap: usize) -> usize {
        let mut m = Measure { len: 0, cap };
        let _ = self.write_gbnf(&mut m);
        m.len
    }

    /// The same rules numbered as [`super::parse::parse`] numbers them in
    /// [`Ast::to_gbnf`]'s text: by first mention, `root` first (the text of the result lists
    /// them in that order, and parses back to other numbers). The compiled automaton
    /// numbers its states rule by rule, and its packed tables' size depends on that order:
    /// Snowplow sp_0's grammar took 1.12 MB numbered as its rules were made, and fit in
    /// 1 MiB numbered as its text parses; so rules built here compile as their exported
    /// text would.
    pub(crate) fn numbered_as_parsed(self) -> Ast {
        let n = self.rules.len();
        let mut id = vec![usize::MAX; n];
        let mut order = Vec::with_capacity(n);
        let mut mention = |r: usize| {
            if id[r] == usize::MAX {
                id[r] = order.len();
                order.push(r);
            }
        };
        for r in self.text_order() {
            mention(r);
            self.rules[r].body.each_ref(&mut mention);
        }
        let root = id[self.root];
        let mut slots: Vec<Option<Rule>> = self.rules.into_iter().map(Some).collect();
        let rules = order
            .iter()
            .map(|&r| {
                let mut rule = slots[r].take().expect("each rule is mentioned once first");
                rule.body.each_ref_mut(&mut |x| *x = id[*x]);
                rule
            })
            .collect();
        Ast {
            rules,
            root,
            prebuilt: self.prebuilt.map(|r| id[r]),
        }
    }

    /// The order [`Ast::to_gbnf`] writes the rules in: `root`, then the others by index.
    fn text_order(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.root).chain((0..self.rules.len()).filter(|&r| r != self.root))
    }

    fn write_gbnf(&self, out: &mut impl Write) -> fmt::Result {
        for r in self.text_order() {
            let rule = &self.rules[r];
            out.write_str(&rule.name)?;
            out.write_str(" ::= ")?;
            write_expr(&rule.body, &self.rules, out)?;
            out.write_char('\n')?;
        }
        Ok(())
    }
}

/// Counts the bytes written; fails once they reach `cap`, so that a walk stops there.
struct Measure {
    len: usize,
    cap: usize,
}

impl Write for Measure {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.len = self.len.saturating_add(s.len());
        if self.len >= self.cap {
            return Err(fmt::Error);
        }
        Ok(())
    }
}

/// The length of `e`'s text (rule references by their names in `rules`), counted up to
/// `cap`: at least `cap` exactly when the text is.
pub(crate) fn expr_len(e: &Expr, rules: &[Rule], cap: usize) -> usize {
    let mut m = Measure { len: 0, cap };
    let _ = write_expr(e, rules, &mut m);
    m.len
}

/// `e` as GBNF, rule references by their names in `rules`.
fn write_expr(e: &Expr, rules: &[Rule], out: &mut impl Write) -> fmt::Result {
    match e {
        Expr::Literal(bytes) => {
            out.write_char('"')?;
            for c in String::from_utf8_lossy(bytes).chars() {
                write_char(out, u32::from(c), false)?;
            }
            out.write_char('"')
        }
        Expr::Class { ranges, negated } => {
            out.write_char('[')?;
            if *negated {
                out.write_char('^')?;
            }
            for &(a, b) in ranges {
                write_char(out, a, true)?;
                if b != a {
                    out.write_char('-')?;
                    write_char(out, b, true)?;
                }
            }
            out.write_char(']')
        }
        Expr::Any => out.write_char('.'),
        Expr::Ref(r) => out.write_str(&rules[*r].name),
        Expr::Seq(items) if items.is_empty() => out.write_str("()"),
        Expr::Seq(items) => {
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.write_char(' ')?;
                }
                write_item(x, matches!(x, Expr::Seq(_) | Expr::Alt(_)), rules, out)?;
            }
            Ok(())
        }
        Expr::Alt(alts) => {
            for (i, x) in alts.iter().enumerate() {
                if i > 0 {
                    out.write_str(" | ")?;
                }
                write_item(x, matches!(x, Expr::Alt(_)), rules, out)?;
            }
            Ok(())
        }
        Expr::Repeat { expr, min, max } => {
            let group = matches!(**expr, Expr::Seq(_) | Expr::Alt(_) | Expr::Repeat { .. });
            write_item(expr, group, rules, out)?;
            match (min, max) {
                (0, None) => out.write_char('*'),
                (1, None) => out.write_char('+'),
                (0, Some(1)) => out.write_char('?'),
                (m, None) => write!(out, "{{{m},}}"),
                (m, Some(x)) if m == x => write!(out, "{{{m}}}"),
                (m, Some(x)) => write!(out, "{{{m},{x}}}"),
            }
        }
    }
}

fn write_item(e: &Expr, group: bool, rules: &[Rule], out: &mut impl Write) -> fmt::Result {
    if group {
        out.write_char('(')?;
        write_expr(e, rules, out)?;
        out.write_char(')')
    } else {
        write_expr(e, rules, out)
    }
}

/// One code point of a literal or (`in_class`) a character class, escaped where the parser
/// would read it otherwise, and outside printable ASCII.
fn write_char(out: &mut impl Write, c: u32, in_class: bool) -> fmt::Result {
    match char::from_u32(c) {
        Some('"') if !in_class => out.write_str("\\\""),
        Some('\\') => out.write_str("\\\\"),
        Some(']' | '[' | '^' | '-') if in_class => write!(out, "\\x{c:02X}"),
        Some(ch) if ch.is_ascii_graphic() || ch == ' ' => out.write_char(ch),
        _ if c < 0x100 => write!(out, "\\x{c:02X}"),
        _ if c < 0x10000 => write!(out, "\\u{c:04X}"),
        _ => write!(out, "\\U{c:08X}"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse;
    use super::*;
    use crate::limits::Limits;

    /// Rules by name, references by name: the same grammar whatever order the parser gave
    /// the rules (it numbers them by first mention).
    fn by_name(ast: &Ast) -> Vec<(String, String)> {
        fn named(e: &Expr, rules: &[Rule]) -> String {
            match e {
                Expr::Ref(r) => format!("Ref({})", rules[*r].name),
                Expr::Seq(v) | Expr::Alt(v) => {
                    let kind = if matches!(e, Expr::Seq(_)) {
                        "Seq"
                    } else {
                        "Alt"
                    };
                    let items: Vec<String> = v.iter().map(|x| named(x, rules)).collect();
                    format!("{kind}({})", items.join(","))
                }
                Expr::Repeat { expr, min, max } => {
                    format!("Repeat({},{min},{max:?})", named(expr, rules))
                }
                leaf => format!("{leaf:?}"),
            }
        }
        let mut out: Vec<(String, String)> = ast
            .rules
            .iter()
            .map(|r| (r.name.clone(), named(&r.body, &ast.rules)))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn printed_grammars_parse_back_to_the_same_rules() {
        let texts = [
            include_str!("../../tests/data/grammars/json.gbnf"),
            include_str!("../../tests/data/grammars/arithmetic.gbnf"),
            include_str!("../../tests/data/grammars/c_like.gbnf"),
            include_str!("../../tests/data/grammars/chess.gbnf"),
            // Nested groups, stacked quantifiers, escapes, negated classes, `()`.
            "root ::= (\"a\" (\"b\" | \"c\")) ((\"d\")*)? [^\\x5D\\-a-z\\U0001F600] x{2,} x{3}\n\
             x ::= (\"\\\"\\\\\" | (\"q\" | .)) \"\\n\\u00E9\" ()? \"\"\n",
        ];
        for text in texts {
            let ast = parse(text, &Limits::DEFAULT).unwrap();
            let printed = ast.to_gbnf();
            let again = parse(&printed, &Limits::DEFAULT).unwrap();
            assert_eq!(by_name(&ast), by_name(&again), "{printed}");
            // Renumbered as parsed: the very rules, indices included, that parsing gives.
            let names: Vec<&str> = again.rules.iter().map(|r| r.name.as_str()).collect();
            let renumbered = ast.clone().numbered_as_parsed();
            let renamed: Vec<&str> = renumbered.rules.iter().map(|r| r.name.as_str()).collect();
            assert_eq!(names, renamed);
            let bodies = |a: &Ast| -> Vec<(String, Expr)> {
                a.rules
                    .iter()
                    .map(|r| (r.name.clone(), r.body.clone()))
                    .collect()
            };
            assert_eq!(bodies(&renumbered), bodies(&again));
            assert_eq!(renumbered.root, again.root);
            assert_eq!(ast.gbnf_len(usize::MAX), printed.len());
            // Past a cap the count stops: at least the cap, less than the whole.
            let cap = printed.len() / 2;
            let len = ast.gbnf_len(cap);
            assert!(
                len >= cap && len < printed.len(),
                "{len} of {}",
                printed.len()
            );
        }
    }
}
