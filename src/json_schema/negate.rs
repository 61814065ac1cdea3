//! `not` by negation normal form. The negation of a subschema is rewritten as a union of
//! schemas in keywords the compiler takes, and merged into the rest of the schema as an
//! `anyOf`: `not {type: T}` is the other types, `not {minLength: n}` strings of at most
//! `n - 1` characters, `not {required: [k]}` objects without `k`, `not {properties: {k: S}}`
//! objects whose `k` is `not S`, `not {anyOf: [A, B]}` is `not A` and `not B`. A keyword
//! that cannot be pushed further stays as a leaf `not` beside the one type it constrains:
//! `{"type": "string", "not": {"pattern": p}}`, `{"type": "number", "not": {"multipleOf":
//! k}}`, `{"not": {"enum": [...]}}`. The type compilers subtract those from their automata
//! ([`Excluded`]): a string's content automaton minus the pattern's, over decoded characters
//! (a value has one encoding here, so that is exact), integers minus the digits read modulo
//! `k`, and fixed values by their canonical text. What has no exact rewrite (`not` of
//! `oneOf`, `items`, `format`, ...) is refused, naming the keyword.

use super::*;

/// Most schemas the negation of one subschema becomes: a negated `anyOf` is the product of
/// its branches' negations (two keywords per branch over three branches is 8).
const MAX_NEGATIONS: usize = 64;

/// What a leaf `not` takes out of one type's values.
#[derive(Default, Debug)]
pub(super) struct Excluded {
    /// Strings matching one of these patterns.
    pub(super) patterns: Vec<String>,
    /// Numbers that are a multiple of one of these.
    pub(super) multiples: Vec<f64>,
    /// These values.
    pub(super) values: Vec<Value>,
}

impl Excluded {
    /// The leaves of `not: n` when `n` is in leaf form: `pattern`, `multipleOf`, `enum` or
    /// `const` alone, or an `anyOf` of such schemas (two leaves merged: `not A` and `not B`
    /// is `not (A or B)`); `None` otherwise.
    pub(super) fn of(n: &Value) -> Option<Excluded> {
        let mut out = Excluded::default();
        out.add(n).then_some(out)
    }

    fn add(&mut self, n: &Value) -> bool {
        let Value::Object(m) = n else {
            return false;
        };
        let mut keys = m.keys().filter(|k| is_validation_key(k));
        let (Some(k), None) = (keys.next(), keys.next()) else {
            return false;
        };
        match (k.as_str(), &m[k]) {
            ("pattern", Value::String(p)) => self.patterns.push(p.clone()),
            ("multipleOf", v) if v.as_f64().is_some_and(|k| k > 0.0) => {
                self.multiples.push(v.as_f64().expect("a number"))
            }
            ("enum", Value::Array(vs)) => self.values.extend(vs.iter().cloned()),
            ("const", v) => self.values.push(v.clone()),
            ("anyOf", Value::Array(branches)) => return branches.iter().all(|b| self.add(b)),
            _ => return false,
        }
        true
    }

    /// Whether the leaves apply to `types` as they are: a pattern constrains strings only
    /// and a step numbers only, so beside other types they must be rewritten first (`not
    /// {pattern: p}` also rejects every non-string).
    pub(super) fn applies_to(&self, types: &BTreeSet<&'static str>) -> bool {
        (self.patterns.is_empty() || types.iter().all(|t| *t == "string"))
            && (self.multiples.is_empty()
                || types.iter().all(|t| *t == "integer" || *t == "number"))
    }
}

/// `{"type": t, key: value}`.
fn typed(t: &str, key: &str, value: Value) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), Value::String(t.into()));
    m.insert(key.into(), value);
    Value::Object(m)
}

impl Compiler<'_> {
    /// A schema with a `not` that is not a leaf for its types: the rest of the schema and
    /// any one of the negation's schemas.
    pub(super) fn negated(&mut self, m: &Map<String, Value>) -> R<Node> {
        let here = self.here();
        let mut rest = m.clone();
        let n = rest.remove("not").expect("called with a `not`");
        // `not` evaluates nothing: `unevaluated*` is this schema's own, fixed before the
        // negation's keywords join it.
        localize_unevaluated(&mut rest);
        if rest.contains_key("unevaluatedProperties") || rest.contains_key("unevaluatedItems") {
            return Err(unsupported(
                "not",
                &here,
                "beside `unevaluatedProperties`/`unevaluatedItems` and another applicator",
            ));
        }
        let negations = self.at("not", |c| c.negations(&n))?;
        if negations.is_empty() {
            return Ok(Node::Nothing);
        }
        let mut union = Map::new();
        union.insert("anyOf".into(), Value::Array(negations));
        let combined = merge(rest, union, &here)?;
        // A level of the schema depth limit: `not` of `not` of ... recurses here.
        self.nested(|c| c.flat_schema(&combined))
    }

    /// `oneOf` whose branches the compiler could not prove exclusive, as `anyOf` of each
    /// branch and not the others: exclusive by construction, refused where a negation has
    /// no exact form. `merged`: the branches with the rest of the schema merged in; `own`:
    /// each branch alone (negating the shared rest would only add contradictions); `live`:
    /// the branches that emit anything.
    pub(super) fn exclusive_branches(
        &mut self,
        merged: &[Map<String, Value>],
        own: &[Map<String, Value>],
        live: &[usize],
    ) -> R<Node> {
        let here = self.here();
        let mut nodes = Vec::new();
        for &x in live {
            let others: Vec<Value> = live
                .iter()
                .filter(|&&y| y != x)
                .map(|&y| Value::Object(own[y].clone()))
                .collect();
            let mut not_others = Map::new();
            not_others.insert("not".into(), json!({ "anyOf": others }));
            let branch = merge(merged[x].clone(), not_others, &here)?;
            nodes.push(self.at(&format!("oneOf/{x}"), |c| c.flat_schema(&branch))?);
        }
        Ok(Node::alt(nodes))
    }

    /// Schemas whose union is the values `n` rejects (empty: none).
    fn negations(&mut self, n: &Value) -> R<Vec<Value>> {
        let depth = self.refs.len();
        let out = self.nested(|c| {
            // Not (A and B) is not A or not B: an `allOf` is split here rather than merged
            // (two patterns have no merged form, their negations a union).
            if let Value::Object(m) = n {
                if let Some(Value::Array(all)) = m.get("allOf") {
                    let mut rest = m.clone();
                    rest.remove("allOf");
                    let mut out = c.negations(&Value::Object(rest))?;
                    for (i, a) in all.iter().enumerate() {
                        out.extend(c.at(&format!("allOf/{i}"), |c| c.negations(a))?);
                    }
                    return Ok(out);
                }
            }
            let m = c.flatten(n)?;
            c.negations_of(&m)
        });
        self.refs.truncate(depth);
        let out = out?;
        if out.len() > MAX_NEGATIONS {
            return Err(Fail::Limit(format!(
                "`not` at {} is more than {MAX_NEGATIONS} schemas once distributed (the \
                 negation limit)",
                self.here()
            )));
        }
        Ok(out)
    }

    /// [`Compiler::negations`] of a flattened schema: one or more schemas per keyword (the
    /// schema is the conjunction of its keywords, so its negation is the union of theirs).
    fn negations_of(&mut self, m: &Map<String, Value>) -> R<Vec<Value>> {
        let here = self.here();
        let cannot = |k: &str| unsupported("not", &here, &format!("the negation of `{k}`"));
        let draft4_bound = |k: &str| m.get(k).is_some_and(Value::is_boolean);
        let mut out: Vec<Value> = Vec::new();
        for (k, v) in m {
            if !is_validation_key(k) {
                continue;
            }
            match k.as_str() {
                "type" => {
                    let ts = explicit_types(m, &here)?.unwrap_or_default();
                    let mut others: Vec<Value> = ["null", "boolean", "string", "array", "object"]
                        .into_iter()
                        .filter(|t| !ts.contains(t))
                        .map(|t| Value::String(t.into()))
                        .collect();
                    if !ts.contains("number") {
                        if ts.contains("integer") {
                            // Numbers with a fraction: not a multiple of 1 (the number
                            // compiler refuses that leaf, unless a merge leaves no numbers).
                            out.push(typed("number", "not", json!({"multipleOf": 1})));
                        } else {
                            others.push(Value::String("number".into()));
                        }
                    }
                    if !others.is_empty() {
                        out.push(json!({ "type": others }));
                    }
                }
                "enum" | "const" => out.push(json!({ "not": { k.as_str(): v } })),
                "pattern" => out.push(typed("string", "not", json!({ "pattern": v }))),
                "multipleOf" => out.push(typed("number", "not", json!({ "multipleOf": v }))),
                "minLength" | "minItems" | "minProperties" => {
                    let n = as_count(v, k, &here)?;
                    if n > 0 {
                        let (t, max) = match k.as_str() {
                            "minLength" => ("string", "maxLength"),
                            "minItems" => ("array", "maxItems"),
                            _ => ("object", "maxProperties"),
                        };
                        out.push(typed(t, max, json!(n - 1)));
                    }
                }
                "maxLength" | "maxItems" | "maxProperties" => {
                    let n = as_count(v, k, &here)?;
                    let (t, min) = match k.as_str() {
                        "maxLength" => ("string", "minLength"),
                        "maxItems" => ("array", "minItems"),
                        _ => ("object", "minProperties"),
                    };
                    out.push(typed(t, min, json!(u64::from(n) + 1)));
                }
                "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                    if !v.is_number() {
                        // A draft-4 boolean: read with its bound below.
                        continue;
                    }
                    let exclusive = match k.as_str() {
                        "minimum" => {
                            draft4_bound("exclusiveMinimum") && m["exclusiveMinimum"] == true
                        }
                        "maximum" => {
                            draft4_bound("exclusiveMaximum") && m["exclusiveMaximum"] == true
                        }
                        _ => true,
                    };
                    // Not at least m: below m; not above m: at least m; and so on.
                    let flipped = match (k.starts_with("exclusiveMin") || k == "minimum", exclusive)
                    {
                        (true, false) => "exclusiveMaximum",
                        (true, true) => "maximum",
                        (false, false) => "exclusiveMinimum",
                        (false, true) => "minimum",
                    };
                    out.push(typed("number", flipped, v.clone()));
                }
                "required" => {
                    let Value::Array(keys) = v else {
                        return Err(Fail::Invalid(format!(
                            "`required` at {here} must be an array"
                        )));
                    };
                    for key in keys {
                        let key = key.as_str().ok_or_else(|| {
                            Fail::Invalid(format!("`required` at {here} must list strings"))
                        })?;
                        out.push(typed("object", "properties", json!({ key: false })));
                    }
                }
                "properties" => {
                    let Value::Object(props) = v else {
                        return Err(Fail::Invalid(format!(
                            "`properties` at {here} must be an object"
                        )));
                    };
                    for (key, s) in props {
                        out.push(json!({
                            "type": "object",
                            "required": [key],
                            "properties": { key.as_str(): { "not": s } },
                        }));
                    }
                }
                // Not not S is S.
                "not" => out.push(v.clone()),
                "anyOf" => {
                    // Not (A or B) is not A and not B: the product of their negations.
                    let Value::Array(branches) = v else {
                        return Err(Fail::Invalid(format!(
                            "`anyOf` at {here} must be a non-empty array"
                        )));
                    };
                    let mut product: Vec<Map<String, Value>> = vec![Map::new()];
                    for (i, b) in branches.iter().enumerate() {
                        let negs = self.at(&format!("anyOf/{i}"), |c| c.negations(b))?;
                        let mut next = Vec::new();
                        for p in &product {
                            for n in &negs {
                                let n = match n {
                                    Value::Object(n) => n.clone(),
                                    Value::Bool(true) => Map::new(),
                                    _ => false_schema(),
                                };
                                next.push(merge(p.clone(), n, &here)?);
                            }
                        }
                        if next.len() > MAX_NEGATIONS {
                            return Err(Fail::Limit(format!(
                                "`not` of `anyOf` at {here} is more than {MAX_NEGATIONS} \
                                 schemas once distributed (the negation limit)"
                            )));
                        }
                        product = next;
                    }
                    out.extend(product.into_iter().map(Value::Object));
                }
                _ => return Err(cannot(k)),
            }
        }
        Ok(out)
    }
}
