//! Objects: `properties`, `required`, `additionalProperties`, `patternProperties`,
//! `propertyNames`, `min/maxProperties` and the dependencies, to the language of an object's
//! text ([`Node::Seq`] of its listed keys, each optional or required,
//! and the loops of its other keys).

use super::*;

impl Compiler<'_> {
    pub(super) fn object(&mut self, m: &Map<String, Value>) -> R<Node> {
        let here = self.here();
        let (patterns, pattern_nodes) = self.pattern_properties(m, &here)?;
        let matches_pattern = |k: &str| pattern_nodes.iter().any(|n| n.matches(k.as_bytes()));
        let empty = Map::new();
        let props = match m.get("properties") {
            None => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => {
                return Err(Fail::Invalid(format!(
                    "`properties` at {here} must be an object"
                )))
            }
        };
        let required: BTreeSet<String> = match m.get("required") {
            None => BTreeSet::new(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            Some(Value::Bool(_)) => BTreeSet::new(), // draft 3, ignored by later validators
            Some(_) => {
                return Err(Fail::Invalid(format!(
                    "`required` at {here} must be an array"
                )))
            }
        };
        // Extra keys: explicit true/schema; a bare object (no properties) is free-form.
        // Keys beside `properties` are checked by additionalProperties, else (when an
        // applicator's branch was merged in) by unevaluatedProperties. Left out beside
        // listed properties, JSON Schema allows any other key (`implicit`), unless the
        // request opted out (`SchemaOptions::extra_keys`).
        let extra_schema = m
            .get("additionalProperties")
            .or_else(|| m.get("unevaluatedProperties"));
        let implicit = extra_schema.is_none()
            && !props.is_empty()
            && patterns.is_empty()
            && self.options.extra_keys;
        let mut extra: Option<Value> = match extra_schema {
            Some(Value::Bool(false)) => None,
            Some(v) => Some(v.clone()),
            None if props.is_empty() && patterns.is_empty() => Some(Value::Bool(true)),
            None if implicit => Some(Value::Bool(true)),
            None => None,
        };
        // propertyNames: listed keys must satisfy it; extra keys only without listed ones.
        let names_node = match m.get("propertyNames") {
            None => None,
            Some(pn) => {
                let mut s = self.at("propertyNames", |c| c.flatten(pn))?;
                s = merge(
                    s,
                    [("type".to_string(), Value::String("string".into()))]
                        .into_iter()
                        .collect(),
                    &here,
                )?;
                Some(self.at("propertyNames", |c| c.flat_schema(&s))?)
            }
        };
        if implicit && names_node.is_some() {
            // Extra keys would need `propertyNames` and "not a listed key" at once: the
            // implicit ones are left out rather than the schema refused.
            extra = None;
        }
        let key_ok = |k: &str| {
            names_node.as_ref().is_none_or(|n| {
                n.matches(
                    serde_json::to_string(k)
                        .expect("strings serialize")
                        .as_bytes(),
                )
            })
        };
        let mut keys: BTreeSet<String> = props.keys().cloned().collect();
        keys.extend(required.iter().cloned());
        let Some((items, costs)) =
            self.listed_properties(&keys, &required, props, extra_schema, &key_ok)?
        else {
            return Ok(Node::Nothing);
        };
        let r = items.iter().filter(|x| x.2).count() as u32;
        let listed = items.len() as u32;
        let min_p = count_keyword(m, "minProperties", &here)?.unwrap_or(0);
        let max_p = count_keyword(m, "maxProperties", &here)?;
        if max_p.is_some_and(|x| x < r) {
            return Ok(Node::Nothing);
        }
        // Without extra or pattern keys, the count is the listed keys present: what the
        // bounds below cannot say as a sequence of optional items is a choice of which
        // optional ones are present.
        let counts_optional = max_p.is_some_and(|x| listed > x) || (min_p > r && min_p != 1);
        if counts_optional && extra.is_none() && patterns.is_empty() {
            return counted_properties(self, items, &costs, min_p, max_p, &here);
        }
        let mut extra_max: Option<u32> = None;
        if let Some(x) = max_p {
            if listed > x {
                return Err(unsupported(
                    "maxProperties",
                    &here,
                    "counting optional properties",
                ));
            }
            extra_max = Some(x - listed);
        }
        let extras_possible = extra.is_some() && extra_max != Some(0);
        let nonempty = if min_p <= r {
            false
        } else if min_p == 1 {
            true
        } else if min_p <= r + 1 && listed == r && extras_possible {
            // Only extra keys can add to the count: require at least min_p - r of them.
            true
        } else {
            return Err(unsupported(
                "minProperties",
                &here,
                "counting optional properties",
            ));
        };
        let mut seq_items: Vec<(Node, bool)> = items
            .into_iter()
            .map(|(k, v, req)| (Node::concat(vec![key_lit(&k), colon(), v]), req))
            .collect();
        if let Some(x) = extra.filter(|_| extras_possible) {
            if names_node.is_some() && !keys.is_empty() {
                return Err(unsupported(
                    "propertyNames",
                    &here,
                    "constraining extra keys beside listed properties",
                ));
            }
            let key = self.extra_key(names_node.as_ref(), &keys, &here)?;
            let value = self.at("additionalProperties", |c| c.schema(&x))?;
            if value != Node::Nothing {
                self.implicit_extra_keys |= implicit;
                let free_value = value == Node::AnyJson;
                let item = Node::concat(vec![key, colon(), value]);
                // Among the listed keys when the value is one grammar rule (a free-form
                // one); a schema's value is copied into every position, and 70 listed keys
                // beside a 10-property value schema took 0.7 s to render and compile (debug),
                // so those extra keys follow the listed ones, as a canonical instance has
                // them when their names sort last.
                if extra_max.is_none() && !seq_items.is_empty() && free_value {
                    among_listed(&mut seq_items, item);
                } else {
                    let min_extra = if nonempty && listed == r && r < min_p {
                        min_p - r
                    } else {
                        1
                    };
                    seq_items.push((Node::list(item, sep(), min_extra, extra_max), false));
                }
            }
        }
        if !patterns.is_empty() {
            if keys.iter().any(|k| matches_pattern(k)) {
                return Err(unsupported(
                    "patternProperties",
                    &here,
                    "a pattern that matches a listed property",
                ));
            }
            self.pattern_keys(&patterns, &pattern_nodes, extra_max, &mut seq_items)?;
        }
        let body = Node::seq(seq_items, sep(), nonempty && r == 0);
        Ok(Node::concat(vec![Node::lit("{"), body, Node::lit("}")]))
    }

    /// `patternProperties`: each pattern with its value schema, and its key content (over
    /// decoded characters). Taken when the patterns share one value schema or no key
    /// matches two of them (it would need both schemas; disjointness is decided by DFA
    /// intersection), and no other extra keys are allowed (they would need "matches no
    /// pattern"); a listed key that matches a pattern is the caller's to refuse.
    fn pattern_properties(&self, m: &Map<String, Value>, here: &str) -> R<Patterns> {
        let patterns: Vec<(String, Value)> = match m.get("patternProperties") {
            None => Vec::new(),
            Some(Value::Object(pp)) => pp.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Some(_) => {
                return Err(Fail::Invalid(format!(
                    "`patternProperties` at {here} must be an object"
                )))
            }
        };
        let mut pattern_nodes = Vec::new();
        for (p, _) in &patterns {
            pattern_nodes.push(string::pattern_content(p).map_err(|why| {
                unsupported(
                    "patternProperties",
                    here,
                    &format!("{} uses {why}", quote(p)),
                )
            })?);
        }
        if !patterns.is_empty() {
            if patterns.iter().any(|(_, s)| *s != patterns[0].1) {
                // Snowplow's enriched events: `^contexts_.*` and `^unstruct_event_.*`. Each
                // pair is a product of two DFAs (each under the automaton bounds): the
                // patterns are capped so that the pairs stay few.
                if patterns.len() > MAX_DISJOINT_PATTERNS {
                    return Err(unsupported(
                        "patternProperties",
                        here,
                        &format!(
                            "{} patterns with different schemas (at most \
                             {MAX_DISJOINT_PATTERNS}, the disjoint patterns limit)",
                            patterns.len()
                        ),
                    ));
                }
                for (i, a) in pattern_nodes.iter().enumerate() {
                    for b in &pattern_nodes[i + 1..] {
                        let both = Node::intersect(a, b, &self.limits);
                        if !matches!(both, Ok(Node::Nothing)) {
                            return Err(unsupported(
                                "patternProperties",
                                here,
                                "several patterns with different schemas that one key can match",
                            ));
                        }
                    }
                }
            }
            if m.get("additionalProperties")
                .is_some_and(|a| *a != Value::Bool(false))
                || m.contains_key("propertyNames")
            {
                return Err(unsupported(
                    "patternProperties",
                    here,
                    "beside additionalProperties or propertyNames",
                ));
            }
        }
        Ok((patterns, pattern_nodes))
    }

    /// The listed keys' items (key, value, required) and the visits each value took (what a
    /// copy of it costs again); None when a required key can have no value, so the object
    /// has none. A required key outside `properties` takes the `additionalProperties` schema.
    fn listed_properties(
        &mut self,
        keys: &BTreeSet<String>,
        required: &BTreeSet<String>,
        props: &Map<String, Value>,
        extra_schema: Option<&Value>,
        key_ok: &impl Fn(&str) -> bool,
    ) -> R<Option<ListedItems>> {
        let mut items: Vec<(String, Node, bool)> = Vec::new();
        // Per item, the subschema visits its value took (what a copy of it costs again).
        let mut costs: Vec<usize> = Vec::new();
        for k in keys {
            let is_req = required.contains(k);
            if !key_ok(k) {
                if is_req {
                    return Ok(None);
                }
                continue;
            }
            // A required key outside `properties` takes the additionalProperties schema
            // (any value when it is absent); `additionalProperties: false` forbids it.
            let schema = match (props.get(k), extra_schema) {
                (Some(s), _) => s.clone(),
                (None, Some(Value::Bool(false))) => return Ok(None),
                (None, Some(x)) => x.clone(),
                (None, None) => Value::Bool(true),
            };
            let before = self.visits;
            let value = self.at(&format!("properties/{}", pointer_escape(k)), |c| {
                c.schema(&schema)
            })?;
            if value == Node::Nothing {
                if is_req {
                    return Ok(None);
                }
                continue;
            }
            items.push((k.clone(), value, is_req));
            costs.push(self.visits - before);
        }
        Ok(Some((items, costs)))
    }

    /// The key of an extra property: `propertyNames`' language when given, else any string
    /// but a listed key (it would bypass that key's schema) or a key a sibling `oneOf`
    /// branch names (see `avoided_keys`). A dependency's trigger is listed by then (see
    /// `dependencies`).
    fn extra_key(&self, names_node: Option<&Node>, keys: &BTreeSet<String>, here: &str) -> R<Node> {
        Ok(match names_node {
            Some(n) => n.clone(),
            None => {
                // Not a listed key (it would bypass that key's schema), nor a key a
                // sibling `oneOf` branch names (see `avoided_keys`). A dependency's
                // trigger is listed by then (see `dependencies`).
                let mut excluded: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
                if let Some((_, avoided)) = self.avoided_keys.as_ref().filter(|a| a.0 == here) {
                    excluded.extend(avoided.iter().map(String::as_str));
                }
                if let Some(long) = excluded
                    .iter()
                    .find(|k| k.chars().count() > MAX_EXCLUDED_KEY_CHARS)
                {
                    return Err(Fail::Limit(format!(
                        "the property name {} at {here} has {} characters; beside extra \
                         keys a listed name may have at most {MAX_EXCLUDED_KEY_CHARS} (the \
                         excluded key length limit)",
                        quote(long),
                        long.chars().count()
                    )));
                }
                if excluded.is_empty() {
                    any_json_parts().key.clone()
                } else {
                    let names: Vec<&str> = excluded.into_iter().collect();
                    string::string_node(&string::none_of(&names))
                }
            }
        })
    }

    /// The keys `patterns` allow ([`Compiler::pattern_properties`]), added to `seq_items`:
    /// among the listed keys, as extra keys with a free-form value are, when the values are
    /// small schemas (each listed key's position takes a copy), else after them.
    fn pattern_keys(
        &mut self,
        patterns: &[(String, Value)],
        pattern_nodes: &[Node],
        extra_max: Option<u32>,
        seq_items: &mut Vec<(Node, bool)>,
    ) -> R<()> {
        // One item per value schema, its key any of the patterns that have it (disjoint
        // from the other items' patterns, as `pattern_properties` checked).
        let mut items = Vec::new();
        let before = self.visits;
        let mut done = vec![false; patterns.len()];
        for i in 0..patterns.len() {
            if done[i] {
                continue;
            }
            let mut keys = Vec::new();
            for j in i..patterns.len() {
                if patterns[j].1 == patterns[i].1 {
                    done[j] = true;
                    keys.push(string::string_node(&pattern_nodes[j]));
                }
            }
            let value = self.at("patternProperties", |c| c.schema(&patterns[i].1))?;
            items.push(Node::concat(vec![Node::alt(keys), colon(), value]));
        }
        let item = Node::alt(items);
        // Among the listed keys, as extra keys with a free-form value are, when the values
        // are small schemas (each listed key's position takes a copy): a canonical
        // (sorted) instance has `I_foo` and `S_foo` before `foo`.
        let small = self.visits - before <= MAX_INTERLEAVED_PATTERN_VISITS;
        if item != Node::Nothing && extra_max != Some(0) {
            if extra_max.is_none() && !seq_items.is_empty() && small {
                among_listed(seq_items, item);
            } else {
                seq_items.push((Node::list(item, sep(), 1, extra_max), false));
            }
        }
        Ok(())
    }
}

/// `patternProperties`' patterns with their value schemas, and each one's key content.
type Patterns = (Vec<(String, Value)>, Vec<Node>);

/// The listed keys' items (key, value, required) and the visits each value took.
type ListedItems = (Vec<(String, Node, bool)>, Vec<usize>);

/// Keys of `item` anywhere among the listed ones (`seq_items`), as a canonical (sorted)
/// instance has them: a group before the first listed key present, and after each one
/// present. Each such key belongs to the listed key before it, so a text has one parse.
fn among_listed(seq_items: &mut Vec<(Node, bool)>, item: Node) {
    let trailing = Node::repeat(Node::concat(vec![sep(), item.clone()]), 0, None);
    for (listed, _) in seq_items.iter_mut() {
        *listed = Node::concat(vec![
            std::mem::replace(listed, Node::Empty),
            trailing.clone(),
        ]);
    }
    seq_items.insert(0, (Node::list(item, sep(), 1, None), false));
}

/// Most subschema visits the values of `patternProperties` may take for their keys to go
/// among the listed keys rather than after them (a copy at each listed key's position).
const MAX_INTERLEAVED_PATTERN_VISITS: usize = 16;

/// Most `patternProperties` patterns with different value schemas, each pair checked for a
/// key both match (28 products of two pattern DFAs at most).
const MAX_DISJOINT_PATTERNS: usize = 8;

/// Most sets of optional properties an object with `minProperties`/`maxProperties` is written
/// out as (each an alternative with those properties required and the others absent).
const MAX_PROPERTY_SETS: u64 = 64;

/// An object of exactly the listed `items` (name, value, required) whose number of keys is
/// within `[min_p, max_p]`: one alternative per set of optional properties of an allowed size,
/// refused past [`MAX_PROPERTY_SETS`] alternatives.
///
/// Each copy of a value past its first is charged as the visits its subschema took
/// (`costs`), as an inlined `$ref` is: nested counts multiply the copies level by level.
fn counted_properties(
    c: &mut Compiler,
    items: Vec<(String, Node, bool)>,
    costs: &[usize],
    min_p: u32,
    max_p: Option<u32>,
    here: &str,
) -> R<Node> {
    let r = items.iter().filter(|x| x.2).count() as u64;
    let optional: Vec<usize> = (0..items.len()).filter(|&i| !items[i].2).collect();
    let m = optional.len() as u64;
    let lo = u64::from(min_p).saturating_sub(r);
    let hi = max_p.map_or(m, |x| (u64::from(x) - r).min(m));
    // C(m, k), saturating: the sum is only compared with a small bound.
    let choose = |k: u64| (0..k).fold(1u64, |c, i| c.saturating_mul(m - i) / (i + 1));
    let sets = (lo..=hi).fold(0u64, |a, k| a.saturating_add(choose(k)));
    if sets > MAX_PROPERTY_SETS {
        let key = if max_p.is_some_and(|x| items.len() as u64 > u64::from(x)) {
            "maxProperties"
        } else {
            "minProperties"
        };
        return Err(unsupported(
            key,
            here,
            &format!(
                "counting optional properties: {sets} sets of them, more than the \
                 {MAX_PROPERTY_SETS} written out"
            ),
        ));
    }
    let mut bodies = Vec::new();
    let mut copied = vec![false; items.len()];
    // Sets of each size in lexicographic order of their positions in `optional`.
    for k in lo..=hi {
        let k = k as usize;
        let mut pick: Vec<usize> = (0..k).collect();
        loop {
            let mut present: Vec<bool> = items.iter().map(|x| x.2).collect();
            for &i in &pick {
                present[optional[i]] = true;
            }
            for i in (0..items.len()).filter(|&i| present[i]) {
                if std::mem::replace(&mut copied[i], true) {
                    c.charge_visits(costs[i])?;
                }
            }
            let body = items
                .iter()
                .zip(&present)
                .filter(|(_, &p)| p)
                .map(|((name, value, _), _)| {
                    (
                        Node::concat(vec![key_lit(name), colon(), value.clone()]),
                        true,
                    )
                })
                .collect();
            bodies.push(Node::seq(body, sep(), false));
            // The next set: the rightmost position that can move, moved, and those after it
            // packed behind it.
            let Some(j) = (0..k).rev().find(|&j| pick[j] < optional.len() - k + j) else {
                break;
            };
            pick[j] += 1;
            for t in j + 1..k {
                pick[t] = pick[t - 1] + 1;
            }
        }
    }
    if bodies.is_empty() {
        return Ok(Node::Nothing);
    }
    Ok(Node::concat(vec![
        Node::lit("{"),
        Node::alt(bodies),
        Node::lit("}"),
    ]))
}
