//! The language of a schema's strings: `pattern`, `format`, lengths and excluded values,
//! over the character-level constructions of `string.rs`.

use super::*;

impl Compiler<'_> {
    pub(super) fn string(&mut self, m: &Map<String, Value>, x: &Excluded) -> R<Node> {
        let here = self.here();
        if self.draft <= Draft::D7 {
            for k in ["contentEncoding", "contentMediaType"] {
                if m.contains_key(k) {
                    return Err(unsupported(k, &here, "an assertion before draft 2019-09"));
                }
            }
        }
        let min = count_keyword(m, "minLength", &here)?;
        let max = count_keyword(m, "maxLength", &here)?;
        let mut contents: Vec<(Node, &str)> = Vec::new();
        // Several patterns where `allOf` or `$ref` merged them (see `merge`).
        let patterns = match m.get("pattern") {
            None => Vec::new(),
            Some(Value::Array(ps)) => ps.iter().collect(),
            Some(p) => vec![p],
        };
        for p in patterns {
            let p = p
                .as_str()
                .ok_or_else(|| Fail::Invalid(format!("`pattern` at {here} must be a string")))?;
            let n = string::pattern_content(p).map_err(|why| {
                unsupported("pattern", &here, &format!("{} uses {why}", quote(p)))
            })?;
            contents.push((n, "pattern"));
        }
        if let Some(f) = m.get("format").and_then(Value::as_str) {
            match string::format_regex(f) {
                Some(re) => contents.push((string::format_content(re), "format")),
                None if KNOWN_FORMATS.contains(&f) => {
                    return Err(unsupported(
                        "format",
                        &here,
                        &format!("format `{f}` has no regex here"),
                    ))
                }
                None => {}
            }
        }
        // What a leaf `not` takes out, over decoded characters as the contents are.
        let mut excluded: Vec<Node> = Vec::new();
        for p in &x.patterns {
            excluded.push(string::pattern_content(p).map_err(|why| {
                unsupported("not", &here, &format!("pattern {} uses {why}", quote(p)))
            })?);
        }
        excluded.extend(
            x.values
                .iter()
                .filter_map(Value::as_str)
                .map(|v| Node::lit(v.to_owned())),
        );
        if !excluded.is_empty() {
            let lengths = (min.is_some() || max.is_some()).then_some((min.unwrap_or(0), max));
            let nodes = contents.into_iter().map(|(n, _)| n).collect();
            return string::constrained_string(nodes, lengths, excluded, &self.limits).map_err(
                |r| {
                    Fail::Limit(format!(
                        "`not` at {here} takes strings out of a set that needs more than {} ({r})",
                        r.limit_phrase()
                    ))
                },
            );
        }
        if contents.is_empty() {
            let body = match (min, max) {
                (None | Some(0), None) => Node::repeat(string::any_unit(), 0, None),
                (lo, hi) => Node::repeat(string::counted_unit(), lo.unwrap_or(0), hi),
            };
            return Ok(Node::concat(vec![Node::lit("\""), body, Node::lit("\"")]));
        }
        // Lengths a pattern or format already implies add nothing.
        let implied = |n: &Node| {
            let (lo, hi) = n.char_len();
            min.is_none_or(|m| lo >= u64::from(m))
                && max.is_none_or(|m| hi.is_some_and(|h| h <= u64::from(m)))
        };
        let lengths = (!contents.iter().any(|(n, _)| implied(n)))
            .then_some((min.unwrap_or(0), max))
            .filter(|_| min.is_some() || max.is_some());
        if let [(n, _)] = &contents[..] {
            match lengths {
                None => return Ok(string::string_node(n)),
                // One repeated class between fixed parts: the lengths cut its count.
                Some((lo, hi)) => {
                    if let Some(c) = clamp_lengths(n, lo, hi) {
                        return Ok(string::string_node(&c));
                    }
                }
            }
        }
        // Otherwise the intersection of the automata, over decoded characters.
        let (key, what) = match (lengths, contents.len()) {
            (Some(_), 1) => ("minLength/maxLength", format!("`{}`", contents[0].1)),
            (Some(_), _) => ("minLength/maxLength", "`pattern` and `format`".to_owned()),
            (None, _) if !m.contains_key("format") => ("pattern", "another `pattern`".to_owned()),
            (None, _) => ("format", "`pattern`".to_owned()),
        };
        let nodes = contents.into_iter().map(|(n, _)| n).collect();
        string::constrained_string(nodes, lengths, Vec::new(), &self.limits).map_err(|r| {
            Fail::Limit(format!(
                "`{key}` at {here} together with {what} needs more than {} ({r})",
                r.limit_phrase()
            ))
        })
    }
}
