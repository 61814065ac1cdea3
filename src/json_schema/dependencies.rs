//! Conditionals as branches. `if`/`then`/`else` is "`if` and `then`, or not `if` and
//! `else`" (the negation as in `negate`). `dependentRequired`, `dependentSchemas` and
//! `dependencies` (both forms): "if
//! `t` is present then `D`" is "`t` is absent, or `t` is present and `D`", so each
//! dependency becomes an `anyOf` of `{"properties": {t: false}}` and `{"required": [t],
//! ...D}`, merged into the rest of the schema (several dependencies multiply, up to the
//! merge's 64 branches). A trigger the object never emits (not listed, not required, no
//! pattern or extra key could spell it) never fires and adds nothing.

use super::*;

const DEPENDENCY_KEYS: [&str; 3] = ["dependentRequired", "dependentSchemas", "dependencies"];

impl Compiler<'_> {
    /// `m` with `if`/`then`/`else` rewritten as branches, or `None` when it has no `if`.
    /// An `if` without `then` and `else` asserts nothing and is dropped.
    pub(super) fn conditional_as_branches(
        &self,
        m: &Map<String, Value>,
    ) -> R<Option<Map<String, Value>>> {
        let Some(condition) = m.get("if") else {
            return Ok(None);
        };
        let here = self.here();
        let mut rest = m.clone();
        rest.remove("if");
        let then = rest.remove("then");
        let otherwise = rest.remove("else");
        if then.is_none() && otherwise.is_none() {
            return Ok(Some(rest));
        }
        let yes = json!({ "allOf": [condition, then.unwrap_or(Value::Bool(true))] });
        let no = json!({ "not": condition, "allOf": [otherwise.unwrap_or(Value::Bool(true))] });
        let mut branches = Map::new();
        branches.insert("anyOf".into(), json!([yes, no]));
        merge(rest, branches, &here).map(Some).map_err(|_| {
            Fail::Limit(format!(
                "`if` at {here}: its two branches beside the schema's others are more than \
                     the 64 branches a merge writes out"
            ))
        })
    }

    /// `m` with its dependencies rewritten as branches, or `None` when it has none.
    pub(super) fn dependencies_as_branches(
        &self,
        m: &Map<String, Value>,
    ) -> R<Option<Map<String, Value>>> {
        if !DEPENDENCY_KEYS.iter().any(|k| m.contains_key(*k)) {
            return Ok(None);
        }
        let here = self.here();
        let listed = |t: &str| {
            m.get("properties")
                .and_then(|p| p.get(t))
                .is_some_and(|s| *s != Value::Bool(false))
        };
        let required = |t: &str| {
            m.get("required")
                .and_then(Value::as_array)
                .is_some_and(|r| r.iter().any(|k| k == t))
        };
        // Whether the object takes keys it does not list, as `object` reads it: an
        // `additionalProperties` that is not `false`, or none and nothing listed (a free-form
        // object), or none beside listed keys when the request asks for extra keys.
        let extra_schema = m
            .get("additionalProperties")
            .or_else(|| m.get("unevaluatedProperties"));
        let lists = m
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty())
            || m.contains_key("patternProperties");
        let free_form = extra_schema.is_none() && !lists;
        let extras = match extra_schema {
            Some(x) => *x != Value::Bool(false),
            None => !lists || self.options.extra_keys,
        };
        let spelled_otherwise =
            m.contains_key("patternProperties") || m.contains_key("propertyNames") || extras;
        let mut out = m.clone();
        out.retain(|k, _| !DEPENDENCY_KEYS.contains(&k.as_str()));
        let mut firing = 0;
        for dk in DEPENDENCY_KEYS {
            let Some(deps) = m.get(dk) else {
                continue;
            };
            let Value::Object(deps) = deps.clone() else {
                return Err(Fail::Invalid(format!("`{dk}` at {here} must be an object")));
            };
            for (trigger, dep) in deps {
                let fires = listed(&trigger) || required(&trigger) || spelled_otherwise;
                // What is always there already holds: no branch.
                let holds = match &dep {
                    Value::Array(names) if dk != "dependentSchemas" => {
                        names.iter().all(|n| n.as_str().is_some_and(&required))
                    }
                    Value::Bool(true) => true,
                    Value::Object(o) => o.keys().all(|k| !is_validation_key(k)),
                    _ => false,
                };
                if !fires || holds {
                    continue;
                }
                let present = match dep {
                    Value::Array(names) if dk != "dependentSchemas" => {
                        let mut all = vec![Value::String(trigger.clone())];
                        for n in names {
                            if !n.is_string() {
                                return Err(Fail::Invalid(format!(
                                    "`{dk}` at {here} must list property names"
                                )));
                            }
                            all.push(n);
                        }
                        json!({ "required": all })
                    }
                    s @ (Value::Object(_) | Value::Bool(_)) => {
                        json!({ "required": [trigger], "allOf": [s] })
                    }
                    _ => {
                        return Err(Fail::Invalid(format!(
                            "`{dk}` at {here}: the dependency of `{trigger}` must be an array of \
                             names or a schema"
                        )))
                    }
                };
                let mut absent = json!({ "properties": { trigger.as_str(): false } });
                if free_form {
                    // Listing the trigger must not end the free-form object's other keys.
                    absent["additionalProperties"] = Value::Bool(true);
                }
                let mut branches = Map::new();
                branches.insert("anyOf".into(), json!([absent, present]));
                firing += 1;
                out = merge(out, branches, &here).map_err(|_| {
                    Fail::Limit(format!(
                        "`{dk}` at {here}: {firing} dependencies that may fire, beside the \
                         schema's other branches, are more than the 64 branches a merge \
                         writes out"
                    ))
                })?;
            }
        }
        Ok(Some(out))
    }
}
