//! `guided_choice`: the output is exactly one of the listed strings.
//!
//! The list compiles to the alternation of the escaped strings, `(?:yes|no|maybe)`, and from
//! there to the same DFA as a `guided_regex` (see [`crate::regex`]), so one engine serves
//! both. A string that is a prefix of another (`"no"`, `"none"`) keeps both alive.
//!
//! A list is bounded before anything is built from it: at most [`MAX_CHOICES`](crate::limits::MAX_CHOICES) strings of at
//! most [`MAX_CHOICE_BYTES`](crate::limits::MAX_CHOICE_BYTES) in all.

use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::regex::{quote, Dfa};
use serde_json::Value;

/// Reads a request's `guided_choice` value: a non-empty array of strings.
pub fn parse(value: &Value) -> Result<Vec<String>> {
    parse_with(value, &Limits::DEFAULT)
}

/// [`parse`] under a deployment's `limits` ([`Limits::choices`], [`Limits::choice_bytes`]).
pub fn parse_with(value: &Value, limits: &Limits) -> Result<Vec<String>> {
    let invalid = |m: String| Error::invalid_input(m).with_param("guided_choice");
    let items = value.as_array().ok_or_else(|| {
        invalid(format!(
            "guided_choice must be an array of strings, got {}",
            json_kind(value)
        ))
    })?;
    if items.is_empty() {
        return Err(invalid(
            "guided_choice must list at least one string, got []".into(),
        ));
    }
    check_count(items.len(), limits.choices)?;
    // The total is checked as the strings are read, before any is copied.
    let mut total = 0usize;
    for (i, v) in items.iter().enumerate() {
        let s = v.as_str().ok_or_else(|| {
            invalid(format!(
                "guided_choice[{i}] must be a string, got {}",
                json_kind(v)
            ))
        })?;
        total = total.saturating_add(s.len());
    }
    check_bytes(total, limits.choice_bytes)?;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str().map(str::to_owned).ok_or_else(|| {
                invalid(format!(
                    "guided_choice[{i}] must be a string, got {}",
                    json_kind(v)
                ))
            })
        })
        .collect()
}

fn check_count(count: usize, limit: usize) -> Result<()> {
    if count > limit {
        return Err(Error::limit_exceeded(format!(
            "guided_choice lists {count} strings, over the limit of {limit} (choices)"
        ))
        .with_param("guided_choice"));
    }
    Ok(())
}

fn check_bytes(total: usize, limit: usize) -> Result<()> {
    if total > limit {
        return Err(Error::limit_exceeded(format!(
            "guided_choice strings total {total} bytes, over the limit of {limit} bytes \
             (choice_bytes)"
        ))
        .with_param("guided_choice"));
    }
    Ok(())
}

/// The JSON type of a value, for error messages.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Compiles the choices to a DFA accepting exactly those strings; a list over
/// [`MAX_CHOICES`] strings or [`MAX_CHOICE_BYTES`] bytes is refused before any pattern or
/// automaton is built.
///
/// ```
/// let dfa = poot::choice::compile(&["yes".into(), "no".into(), "none".into()]).unwrap();
/// assert!(dfa.matches(b"no") && dfa.matches(b"none") && !dfa.matches(b"non"));
/// ```
pub fn compile(choices: &[String]) -> Result<Dfa> {
    compile_with(choices, &Limits::DEFAULT)
}

/// [`compile`] under `limits`: the list ([`Limits::choices`], [`Limits::choice_bytes`]) and
/// the automaton ([`Limits::automaton_bytes`], [`Limits::determinize_bytes`]).
pub fn compile_with(choices: &[String], limits: &Limits) -> Result<Dfa> {
    if choices.is_empty() {
        return Err(
            Error::invalid_input("guided_choice must list at least one string, got []")
                .with_param("guided_choice"),
        );
    }
    check_count(choices.len(), limits.choices)?;
    check_bytes(
        choices
            .iter()
            .fold(0usize, |n, c| n.saturating_add(c.len())),
        limits.choice_bytes,
    )?;
    let mut pattern = String::from("(?:");
    for (i, c) in choices.iter().enumerate() {
        if i > 0 {
            pattern.push('|');
        }
        pattern.push_str(&regex_syntax::escape(c));
    }
    pattern.push(')');
    let shown = serde_json::to_string(choices).expect("strings serialize");
    Dfa::build(&pattern, "guided_choice", &quote(&shown), limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{MAX_CHOICES, MAX_CHOICE_BYTES};
    use serde_json::json;

    #[test]
    fn parse_checks_shape() {
        assert_eq!(parse(&json!(["a", "b"])).unwrap(), vec!["a", "b"]);
        let err = parse(&json!([])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "guided_choice must list at least one string, got []"
        );
        assert_eq!(err.param(), Some("guided_choice"));
        let err = parse(&json!(["a", 3])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "guided_choice[1] must be a string, got a number"
        );
        assert!(parse(&json!("a")).is_err());
    }

    #[test]
    fn lists_past_the_limits_are_refused_before_building() {
        // One string over the count, with empty strings (no bytes at all).
        let many = Value::Array(vec![json!(""); MAX_CHOICES + 1]);
        let err = parse(&many).unwrap_err();
        assert!(err.is_limit_exceeded());
        assert_eq!(err.param(), Some("guided_choice"));
        assert_eq!(
            err.to_string(),
            format!(
                "guided_choice lists {} strings, over the limit of {MAX_CHOICES} (choices)",
                MAX_CHOICES + 1
            )
        );
        // One byte over the total.
        let long = json!(["a".repeat(MAX_CHOICE_BYTES - 1), "bc"]);
        let err = parse(&long).unwrap_err();
        assert!(err.is_limit_exceeded());
        assert!(err.to_string().contains("(choice_bytes)"), "{err}");
        let choices: Vec<String> = vec!["x".repeat(MAX_CHOICE_BYTES + 1)];
        assert!(compile(&choices).unwrap_err().is_limit_exceeded());
        // A million strings: refused in microseconds.
        let huge = Value::Array(vec![json!("yes"); 1_000_000]);
        assert!(parse(&huge).unwrap_err().is_limit_exceeded());
    }

    #[test]
    fn lists_at_the_limits_compile_or_hit_the_automaton_bound_quickly() {
        // The worst list allowed: the most strings, the most bytes, no shared prefixes.
        let mut seed = 7u64;
        let choices: Vec<String> = (0..MAX_CHOICES)
            .map(|_| {
                (0..MAX_CHOICE_BYTES / MAX_CHOICES)
                    .map(|_| {
                        let r = crate::sampling::splitmix64(&mut seed);
                        char::from(b'!' + (r % 94) as u8)
                    })
                    .collect()
            })
            .collect();
        // Its time is bounded in tests/hostile_inputs.rs (the core has no clock).
        if let Err(e) = compile(&choices) {
            assert!(e.is_limit_exceeded(), "{e}");
        }
    }

    #[test]
    fn metacharacters_are_literal() {
        let dfa = compile(&["a.b".into(), "(x)*".into(), "".into()]).unwrap();
        assert!(dfa.matches(b"a.b") && dfa.matches(b"(x)*") && dfa.matches(b""));
        assert!(!dfa.matches(b"axb") && !dfa.matches(b"xx"));
    }
}
