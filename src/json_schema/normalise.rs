//! Normalising: `allOf` and `$ref` merged into one schema whose valid set is their
//! intersection, where that can be written exactly ([`merge`]), and `unevaluated*` rewritten
//! as the keywords they amount to once everything is merged ([`localize_unevaluated`]). The
//! stage between resolving (`$ref` targets, [`super::Compiler::flatten`]) and the language
//! (schema to [`Node`]).

use super::*;

/// Merges two flattened schemas into one whose valid set is the intersection, where that
/// can be written exactly.
pub(super) fn merge(
    mut a: Map<String, Value>,
    b: Map<String, Value>,
    path: &str,
) -> R<Map<String, Value>> {
    // Object keys: a key's schema in each side is its property schema or that side's
    // additionalProperties, so merge those per key first.
    let a_has_props = a.contains_key("properties") || a.contains_key("additionalProperties");
    let b_has_props = b.contains_key("properties") || b.contains_key("additionalProperties");
    if a_has_props && b_has_props {
        if a.contains_key("patternProperties") || b.contains_key("patternProperties") {
            return Err(cannot_merge(path, "patternProperties"));
        }
        merge_properties(&mut a, &b);
    }
    // Arrays: item i is checked by each side's prefix schema at i or that side's rest.
    let array_keys = ["prefixItems", "items", "additionalItems"];
    let a_has_items = array_keys.iter().any(|k| a.contains_key(*k));
    let b_has_items = array_keys.iter().any(|k| b.contains_key(*k));
    let merge_items = a_has_items && b_has_items;
    if merge_items {
        merge_item_schemas(&mut a, &b, &array_keys);
    }
    for (k, vb) in b {
        if (k == "properties" || k == "additionalProperties") && a_has_props && b_has_props {
            continue;
        }
        if merge_items && array_keys.contains(&k.as_str()) {
            continue;
        }
        let Some(va) = a.get(&k).cloned() else {
            a.insert(k, vb);
            continue;
        };
        let va = &va;
        if ANNOTATIONS.contains(&k.as_str()) || !is_validation_key(&k) || *va == vb {
            continue;
        }
        if k == "enum" || k == "const" {
            merge_enums(&mut a, &k, va, &vb);
            continue;
        }
        let merged = merge_value(&k, va, vb, &a, path)?;
        a.insert(k, merged);
    }
    // `enum` beside `const` after merging: keep one list.
    if let (Some(c), Some(Value::Array(e))) = (a.get("const").cloned(), a.get("enum").cloned()) {
        let kept: Vec<Value> = e.into_iter().filter(|x| same_value(x, &c)).collect();
        a.remove("const");
        a.insert("enum".into(), Value::Array(kept));
    }
    Ok(a)
}

/// The error for two `k` keywords at `path` that cannot be merged exactly.
fn cannot_merge(path: &str, k: &str) -> Fail {
    Fail::Invalid(format!(
        "`allOf`/`$ref` at {path} combines two `{k}` keywords that cannot be merged exactly"
    ))
}

/// Merges the object keywords of two schemas (into `a`): a key's schema on each side is its
/// property schema or that side's `additionalProperties`, so both are taken per key.
fn merge_properties(a: &mut Map<String, Value>, b: &Map<String, Value>) {
    let empty = Map::new();
    let pa = a
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let pb = b
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let xa = a
        .get("additionalProperties")
        .cloned()
        .unwrap_or(Value::Bool(true));
    let xb = b
        .get("additionalProperties")
        .cloned()
        .unwrap_or(Value::Bool(true));
    let mut props = Map::new();
    let keys: BTreeSet<&String> = pa.keys().chain(pb.keys()).collect();
    for k in keys {
        let sa = pa.get(k).unwrap_or(&xa);
        let sb = pb.get(k).unwrap_or(&xb);
        props.insert(k.clone(), all_of(sa, sb));
    }
    let extra = all_of(&xa, &xb);
    a.insert("properties".into(), Value::Object(props));
    if extra == Value::Bool(true)
        && !a.contains_key("additionalProperties")
        && !b.contains_key("additionalProperties")
    {
        a.remove("additionalProperties");
    } else {
        a.insert("additionalProperties".into(), extra);
    }
}

/// Merges the array keywords of two schemas (into `a`): item `i` is checked by each side's
/// prefix schema at `i` or that side's rest.
fn merge_item_schemas(a: &mut Map<String, Value>, b: &Map<String, Value>, array_keys: &[&str]) {
    let (pa, ra) = array_shape(a);
    let (pb, rb) = array_shape(b);
    let n = pa.len().max(pb.len());
    let prefix: Vec<Value> = (0..n)
        .map(|i| all_of(pa.get(i).unwrap_or(&ra), pb.get(i).unwrap_or(&rb)))
        .collect();
    // A side states its rest only with a schema `items` or a tuple's `additionalItems`;
    // otherwise the rest stays unstated, for `unevaluatedItems` to decide.
    let explicit_rest = |m: &Map<String, Value>| match m.get("items") {
        Some(Value::Array(_)) => m.contains_key("additionalItems"),
        Some(_) => true,
        None => false,
    };
    let stated = explicit_rest(a) || explicit_rest(b);
    for &k in array_keys {
        a.remove(k);
    }
    if !prefix.is_empty() {
        a.insert("prefixItems".into(), Value::Array(prefix));
    }
    if stated {
        a.insert("items".into(), all_of(&ra, &rb));
    }
}

/// The merge of one keyword `k` that both schemas hold (`va` in `a`, `vb`), as one value
/// that checks both; `enum`/`const` are [`merge_enums`]'.
fn merge_value(k: &str, va: &Value, vb: Value, a: &Map<String, Value>, path: &str) -> R<Value> {
    Ok(match k {
        "type" => {
            let ta = explicit_types(a, path)?.unwrap_or_default();
            let mut tb_map = Map::new();
            tb_map.insert("type".into(), vb.clone());
            let tb = explicit_types(&tb_map, path)?.unwrap_or_default();
            let mut out: Vec<Value> = Vec::new();
            for t in TYPES {
                let in_a = type_in(t, &ta);
                let in_b = type_in(t, &tb);
                if in_a && in_b {
                    out.push(Value::String(t.into()));
                }
            }
            // integer and number both in: number covers integer.
            if out.iter().any(|v| v == "number") {
                out.retain(|v| v != "integer");
            }
            Value::Array(out)
        }
        "required" => {
            let mut out: Vec<Value> = va.as_array().cloned().unwrap_or_default();
            for r in vb.as_array().cloned().unwrap_or_default() {
                if !out.contains(&r) {
                    out.push(r);
                }
            }
            Value::Array(out)
        }
        "minLength" | "minItems" | "minProperties" | "minimum" | "exclusiveMinimum"
            if va.is_number() && vb.is_number() =>
        {
            if va.as_f64() >= vb.as_f64() {
                va.clone()
            } else {
                vb
            }
        }
        "maxLength" | "maxItems" | "maxProperties" | "maximum" | "exclusiveMaximum"
            if va.is_number() && vb.is_number() =>
        {
            if va.as_f64() <= vb.as_f64() {
                va.clone()
            } else {
                vb
            }
        }
        "items" if va.is_object() || va.is_boolean() => all_of(va, &vb),
        "propertyNames" | "unevaluatedProperties" | "unevaluatedItems" | "additionalItems" => {
            all_of(va, &vb)
        }
        // not A and not B = not (A or B)
        "not" => serde_json::json!({"anyOf": [va, vb]}),
        // Both patterns hold: a list, which only a merge writes (a schema's own
        // `pattern` must be a string, `flatten` checks), matched by every one.
        "pattern" => {
            let list = |v: &Value| match v {
                Value::Array(a) => a.clone(),
                v => vec![v.clone()],
            };
            let mut all = list(va);
            for p in list(&vb) {
                if !all.contains(&p) {
                    all.push(p);
                }
            }
            Value::Array(all)
        }
        // Multiples of both integer steps: multiples of their least common multiple,
        // while that stays below 2^53 (validators divide in floating point).
        "multipleOf" => {
            let step = |v: &Value| {
                v.as_f64()
                    .filter(|f| *f >= 1.0 && f.fract() == 0.0 && *f < 9e15)
                    .map(|f| f as u64)
            };
            let (Some(x), Some(y)) = (step(va), step(&vb)) else {
                return Err(cannot_merge(path, k));
            };
            let gcd = |mut a: u64, mut b: u64| {
                while b != 0 {
                    (a, b) = (b, a % b);
                }
                a
            };
            match (x / gcd(x, y))
                .checked_mul(y)
                .filter(|l| *l < 9_000_000_000_000_000)
            {
                Some(l) => Value::from(l),
                None => return Err(cannot_merge(path, k)),
            }
        }
        "uniqueItems" => {
            Value::Bool(va.as_bool().unwrap_or(false) || vb.as_bool().unwrap_or(false))
        }
        "anyOf" | "oneOf" => {
            // (a1 | a2) & (b1 | b2) = a1&b1 | a1&b2 | ...; exclusive sides stay exclusive.
            let (Some(la), Some(lb)) = (va.as_array(), vb.as_array()) else {
                return Err(cannot_merge(path, k));
            };
            if la.len() * lb.len() > 64 {
                return Err(cannot_merge(path, k));
            }
            let mut out = Vec::new();
            for x in la {
                for y in lb {
                    out.push(all_of(x, y));
                }
            }
            Value::Array(out)
        }
        _ => return Err(cannot_merge(path, k)),
    })
}

/// Merges `enum`/`const` `k` of both schemas (`va` in `a`, `vb`) as one `enum` in `a`: the
/// values both allow, within any `enum` `a` already holds.
fn merge_enums(a: &mut Map<String, Value>, k: &str, va: &Value, vb: &Value) {
    let la: Vec<Value> = if k == "const" {
        vec![va.clone()]
    } else {
        va.as_array().cloned().unwrap_or_default()
    };
    let lb: Vec<Value> = if k == "const" {
        vec![vb.clone()]
    } else {
        vb.as_array().cloned().unwrap_or_default()
    };
    let both: Vec<Value> = la
        .into_iter()
        .filter(|x| lb.iter().any(|y| same_value(x, y)))
        .collect();
    a.remove(k);
    let mut e: Vec<Value> = a
        .remove("enum")
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_else(|| both.clone());
    e.retain(|x| both.iter().any(|y| same_value(x, y)));
    a.insert("enum".into(), Value::Array(e));
}

/// Rewrites `unevaluatedProperties`/`unevaluatedItems` of a flattened schema as the
/// `additionalProperties`/`items` they amount to, so a later merge keeps their scope (a
/// cousin's `properties` must not count as evaluated). Everything `$ref` and `allOf` brought
/// in is already merged, so "unevaluated" means "not matched by this schema's own
/// `properties`/`additionalProperties`" (or items past `prefixItems`). Left as is beside
/// applicators that are not merged (`anyOf`, `oneOf`, `if`, `dependentSchemas`, `contains`):
/// the branches of `anyOf`/`oneOf` receive them, the others are refused anyway.
pub(super) fn localize_unevaluated(m: &mut Map<String, Value>) {
    let unmerged = [
        "anyOf",
        "oneOf",
        "if",
        "then",
        "else",
        "dependentSchemas",
        "contains",
        "not",
    ];
    if unmerged.iter().any(|k| m.contains_key(*k)) {
        return;
    }
    if let Some(u) = m.remove("unevaluatedProperties") {
        if !m.contains_key("additionalProperties") && !m.contains_key("patternProperties") {
            m.insert("additionalProperties".into(), u);
        }
    }
    if let Some(u) = m.remove("unevaluatedItems") {
        match m.get("items") {
            // A schema `items` evaluates every item past the prefix.
            Some(Value::Object(_) | Value::Bool(_)) => {}
            // Draft-7 tuples: the rest is `additionalItems`.
            Some(Value::Array(_)) => {
                m.entry("additionalItems").or_insert(u);
            }
            None => {
                m.insert("items".into(), u);
            }
            Some(_) => {}
        }
    }
}

/// `(prefix schemas, schema of the rest)` of an array schema.
fn array_shape(m: &Map<String, Value>) -> (Vec<Value>, Value) {
    match (m.get("prefixItems"), m.get("items")) {
        (_, Some(Value::Array(tuple))) => (
            tuple.clone(),
            m.get("additionalItems")
                .cloned()
                .unwrap_or(Value::Bool(true)),
        ),
        (Some(Value::Array(p)), items) => (p.clone(), items.cloned().unwrap_or(Value::Bool(true))),
        (_, items) => (vec![], items.cloned().unwrap_or(Value::Bool(true))),
    }
}

/// `{"allOf": [a, b]}`, simplified when either is `true`/`{}`.
fn all_of(a: &Value, b: &Value) -> Value {
    let trivial = |v: &Value| *v == Value::Bool(true) || v.as_object().is_some_and(Map::is_empty);
    if trivial(a) {
        return b.clone();
    }
    if trivial(b) || a == b {
        return a.clone();
    }
    if *a == Value::Bool(false) || *b == Value::Bool(false) {
        return Value::Bool(false);
    }
    serde_json::json!({"allOf": [a, b]})
}

/// A `{"enum": []}` stand-in for the `false` schema after flattening.
pub(super) fn false_schema() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("enum".into(), Value::Array(vec![]));
    m
}
