//! Deciding whether one concrete value satisfies a schema, for `enum`/`const` schemas whose
//! other keywords (`not`, `if`, `oneOf`, `uniqueItems`, ...) a regex could not express but a
//! finite list of values can simply be filtered by.
//!
//! Every answer is exact or `None` ("cannot tell": the caller then refuses the schema). The
//! keywords are those of draft 2020-12 (draft-4 boolean exclusive bounds and integer typing
//! too); `unevaluated*`, dynamic references and non-integer `multipleOf` answer `None`.

use super::{same_value, string, type_of};
use serde_json::{Map, Value};
use std::cell::Cell;

/// Schema evaluation over concrete values; `root` resolves local `$ref`s.
pub(crate) struct Judge<'a> {
    pub root: &'a Value,
    pub draft4: bool,
    /// Work left, in units of one subschema visited or one byte matched against a pattern
    /// ([`Limits::schema_judge_work`](crate::limits::Limits::schema_judge_work) per compile). A `$ref`
    /// that refers to itself twice under `anyOf` doubles the visits at every level, so depth
    /// alone does not bound the work; once this runs out every answer is "cannot tell" and
    /// [`Judge::exhausted`] says why.
    pub fuel: Cell<u64>,
    /// Set when `fuel` ran out.
    pub exhausted: Cell<bool>,
}

type J = Option<bool>;

/// `a && b` with "cannot tell" unless an answer is already known to be false.
fn and(a: J, b: J) -> J {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

impl Judge<'_> {
    /// Takes `units` of fuel; false (and [`Judge::exhausted`] set) when there are not enough.
    fn spend(&self, units: u64) -> bool {
        match self.fuel.get().checked_sub(units) {
            Some(left) => {
                self.fuel.set(left);
                true
            }
            None => {
                self.exhausted.set(true);
                false
            }
        }
    }

    pub fn valid(&self, s: &Value, v: &Value, depth: u32) -> J {
        // 64 levels of three frames each bound the stack; `spend` bounds the work.
        if depth > 64 || !self.spend(1) {
            return None;
        }
        match s {
            Value::Bool(b) => Some(*b),
            Value::Object(m) => self.object_schema(m, v, depth),
            _ => None,
        }
    }

    /// Whether `text` contains a match of the ECMA-262 `pattern` (None: cannot tell). A
    /// direct simulation costs about the pattern's size times the text's length, so that is
    /// the fuel it takes.
    fn matches_pattern(&self, pattern: &str, text: &str) -> J {
        let units = (pattern.len() as u64 + 1).saturating_mul(text.len() as u64 + 1);
        if !self.spend(units) {
            return None;
        }
        let node = string::pattern_content(pattern).ok()?;
        Some(node.matches(text.as_bytes()))
    }

    fn object_schema(&self, m: &Map<String, Value>, v: &Value, depth: u32) -> J {
        let mut ok = Some(true);
        for (k, kv) in m {
            let r = self.keyword(m, k, kv, v, depth);
            ok = and(ok, r);
            if ok == Some(false) {
                return ok;
            }
        }
        ok
    }

    fn is_type(&self, t: &str, v: &Value) -> J {
        Some(match t {
            "integer" => match v {
                Value::Number(n) if self.draft4 => n.is_i64() || n.is_u64(),
                Value::Number(_) => type_of(v) == "integer",
                _ => false,
            },
            "number" => v.is_number(),
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            "string" => v.is_string(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            "any" => true,
            _ => return None,
        })
    }

    fn keyword(&self, m: &Map<String, Value>, k: &str, kv: &Value, v: &Value, d: u32) -> J {
        let num = v.as_f64();
        match k {
            "$ref" => {
                let r = kv.as_str()?;
                let pointer = r.strip_prefix('#')?;
                let target = self.root.pointer(&super::percent_decode(pointer))?;
                self.valid(target, v, d + 1)
            }
            "$dynamicRef"
            | "$recursiveRef"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "disallow"
            | "extends"
            | "divisibleBy" => None,
            "type" => match kv {
                Value::String(t) => self.is_type(t, v),
                Value::Array(ts) => {
                    let mut any = Some(false);
                    for t in ts {
                        match self.is_type(t.as_str()?, v) {
                            Some(true) => return Some(true),
                            None => any = None,
                            _ => {}
                        }
                    }
                    any
                }
                _ => None,
            },
            "enum" => Some(kv.as_array()?.iter().any(|x| same_value(x, v))),
            "const" => Some(same_value(kv, v)),
            "allOf" => {
                let mut ok = Some(true);
                for s in kv.as_array()? {
                    ok = and(ok, self.valid(s, v, d + 1));
                }
                ok
            }
            "anyOf" => {
                let mut any = Some(false);
                for s in kv.as_array()? {
                    match self.valid(s, v, d + 1) {
                        Some(true) => return Some(true),
                        None => any = None,
                        _ => {}
                    }
                }
                any
            }
            "oneOf" => {
                let mut n = 0;
                for s in kv.as_array()? {
                    if self.valid(s, v, d + 1)? {
                        n += 1;
                    }
                }
                Some(n == 1)
            }
            "not" => self.valid(kv, v, d + 1).map(|b| !b),
            "if" => match self.valid(kv, v, d + 1)? {
                true => m
                    .get("then")
                    .map_or(Some(true), |t| self.valid(t, v, d + 1)),
                false => m
                    .get("else")
                    .map_or(Some(true), |e| self.valid(e, v, d + 1)),
            },
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                let Some(x) = num else { return Some(true) };
                if let Value::Bool(_) = kv {
                    return Some(true); // draft 4: modifies minimum/maximum, read there
                }
                let b = kv.as_f64()?;
                let excl = |key: &str| m.get(key).and_then(Value::as_bool) == Some(true);
                Some(match k {
                    "minimum" if excl("exclusiveMinimum") => x > b,
                    "minimum" => x >= b,
                    "maximum" if excl("exclusiveMaximum") => x < b,
                    "maximum" => x <= b,
                    "exclusiveMinimum" => x > b,
                    _ => x < b,
                })
            }
            "multipleOf" => {
                let Value::Number(n) = v else {
                    return Some(true);
                };
                let step = kv.as_f64()?;
                match (n.as_i64(), step.fract() == 0.0 && step > 0.0) {
                    (Some(i), true) => Some(i % (step as i64) == 0),
                    _ => None,
                }
            }
            "minLength" | "maxLength" => {
                let Value::String(s) = v else {
                    return Some(true);
                };
                let n = s.chars().count() as f64;
                let b = kv.as_f64()?;
                Some(if k == "minLength" { n >= b } else { n <= b })
            }
            "pattern" => {
                let Value::String(s) = v else {
                    return Some(true);
                };
                let pattern = kv.as_str()?;
                self.matches_pattern(pattern, s)
            }
            "format" => {
                let Value::String(s) = v else {
                    return Some(true);
                };
                let Some(re) = string::format_regex(kv.as_str()?) else {
                    return if super::KNOWN_FORMATS.contains(&kv.as_str()?) {
                        None
                    } else {
                        Some(true)
                    };
                };
                // Our regexes are subsets: a match is valid, a miss is unknown.
                if !self.spend((re.len() as u64 + 1).saturating_mul(s.len() as u64 + 1)) {
                    return None;
                }
                string::format_content(re)
                    .matches(s.as_bytes())
                    .then_some(true)
            }
            "minItems" | "maxItems" | "uniqueItems" | "items" | "prefixItems"
            | "additionalItems" | "contains" | "minContains" | "maxContains" => {
                let Value::Array(a) = v else {
                    return Some(true);
                };
                self.array_keyword(m, k, kv, a, d)
            }
            "minProperties"
            | "maxProperties"
            | "required"
            | "properties"
            | "additionalProperties"
            | "patternProperties"
            | "propertyNames"
            | "dependentRequired"
            | "dependentSchemas"
            | "dependencies" => {
                let Value::Object(o) = v else {
                    return Some(true);
                };
                self.object_keyword(m, k, kv, o, d)
            }
            _ => Some(true), // annotations and unknown keywords
        }
    }

    fn array_keyword(&self, m: &Map<String, Value>, k: &str, kv: &Value, a: &[Value], d: u32) -> J {
        let n = a.len() as f64;
        match k {
            "minItems" => Some(n >= kv.as_f64()?),
            "maxItems" => Some(n <= kv.as_f64()?),
            "uniqueItems" => {
                if kv.as_bool()? {
                    // Pairwise: an array of n items costs n^2 / 2 comparisons.
                    if !self.spend((a.len() as u64).pow(2) / 2) {
                        return None;
                    }
                    for i in 0..a.len() {
                        for j in i + 1..a.len() {
                            if same_value(&a[i], &a[j]) {
                                return Some(false);
                            }
                        }
                    }
                }
                Some(true)
            }
            "prefixItems" => {
                let mut ok = Some(true);
                for (s, x) in kv.as_array()?.iter().zip(a) {
                    ok = and(ok, self.valid(s, x, d + 1));
                }
                ok
            }
            "items" => {
                let (skip, schema) = match kv {
                    Value::Array(tuple) => {
                        let mut ok = Some(true);
                        for (s, x) in tuple.iter().zip(a) {
                            ok = and(ok, self.valid(s, x, d + 1));
                        }
                        return ok;
                    }
                    s => (
                        m.get("prefixItems")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len),
                        s,
                    ),
                };
                let mut ok = Some(true);
                for x in a.iter().skip(skip) {
                    ok = and(ok, self.valid(schema, x, d + 1));
                }
                ok
            }
            "additionalItems" => {
                let Some(Value::Array(tuple)) = m.get("items") else {
                    return Some(true);
                };
                let mut ok = Some(true);
                for x in a.iter().skip(tuple.len()) {
                    ok = and(ok, self.valid(kv, x, d + 1));
                }
                ok
            }
            "contains" => {
                let mut count = 0u64;
                for x in a {
                    if self.valid(kv, x, d + 1)? {
                        count += 1;
                    }
                }
                let min = m.get("minContains").and_then(Value::as_f64).unwrap_or(1.0);
                let max = m.get("maxContains").and_then(Value::as_f64);
                Some(count as f64 >= min && max.is_none_or(|x| count as f64 <= x))
            }
            _ => Some(true), // minContains/maxContains: read with contains
        }
    }

    fn object_keyword(
        &self,
        m: &Map<String, Value>,
        k: &str,
        kv: &Value,
        o: &Map<String, Value>,
        d: u32,
    ) -> J {
        let n = o.len() as f64;
        match k {
            "minProperties" => Some(n >= kv.as_f64()?),
            "maxProperties" => Some(n <= kv.as_f64()?),
            "required" => match kv {
                Value::Array(r) => Some(
                    r.iter()
                        .all(|x| x.as_str().is_some_and(|x| o.contains_key(x))),
                ),
                Value::Bool(_) => Some(true),
                _ => None,
            },
            "properties" => {
                let mut ok = Some(true);
                for (key, s) in kv.as_object()? {
                    if let Some(x) = o.get(key) {
                        ok = and(ok, self.valid(s, x, d + 1));
                    }
                }
                ok
            }
            "patternProperties" => {
                let mut ok = Some(true);
                for (p, s) in kv.as_object()? {
                    for (key, x) in o {
                        if self.matches_pattern(p, key)? {
                            ok = and(ok, self.valid(s, x, d + 1));
                        }
                    }
                }
                ok
            }
            "additionalProperties" => {
                let props = m.get("properties").and_then(Value::as_object);
                let patterns: Vec<&String> = m
                    .get("patternProperties")
                    .and_then(Value::as_object)
                    .map_or(Vec::new(), |pp| pp.keys().collect());
                let mut ok = Some(true);
                for (key, x) in o {
                    let mut listed = props.is_some_and(|p| p.contains_key(key));
                    for p in &patterns {
                        listed = listed || self.matches_pattern(p, key)?;
                    }
                    if !listed {
                        ok = and(ok, self.valid(kv, x, d + 1));
                    }
                }
                ok
            }
            "propertyNames" => {
                let mut ok = Some(true);
                for key in o.keys() {
                    ok = and(ok, self.valid(kv, &Value::String(key.clone()), d + 1));
                }
                ok
            }
            "dependentRequired" | "dependentSchemas" | "dependencies" => {
                let mut ok = Some(true);
                for (trigger, dep) in kv.as_object()? {
                    if !o.contains_key(trigger) {
                        continue;
                    }
                    ok = and(
                        ok,
                        match dep {
                            Value::Array(names) => Some(
                                names
                                    .iter()
                                    .all(|x| x.as_str().is_some_and(|x| o.contains_key(x))),
                            ),
                            s => self.valid(s, &Value::Object(o.clone()), d + 1),
                        },
                    );
                }
                ok
            }
            _ => Some(true),
        }
    }
}
