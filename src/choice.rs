//! `guided_choice`: the output is exactly one of the listed strings.
//!
//! The list compiles to the alternation of the escaped strings, `(?:yes|no|maybe)`, and from
//! there to the same DFA as a `guided_regex` (see [`crate::regex`]), so one engine serves
//! both. A string that is a prefix of another (`"no"`, `"none"`) keeps both alive.

use crate::error::{Error, Result};
use crate::regex::{quote, Dfa};
use serde_json::Value;

/// Reads a request's `guided_choice` value: a non-empty array of strings.
pub fn parse(value: &Value) -> Result<Vec<String>> {
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

/// Compiles the choices to a DFA accepting exactly those strings.
///
/// ```
/// let dfa = poot::choice::compile(&["yes".into(), "no".into(), "none".into()]).unwrap();
/// assert!(dfa.matches(b"no") && dfa.matches(b"none") && !dfa.matches(b"non"));
/// ```
pub fn compile(choices: &[String]) -> Result<Dfa> {
    if choices.is_empty() {
        return Err(
            Error::invalid_input("guided_choice must list at least one string, got []")
                .with_param("guided_choice"),
        );
    }
    let mut pattern = String::from("(?:");
    for (i, c) in choices.iter().enumerate() {
        if i > 0 {
            pattern.push('|');
        }
        pattern.push_str(&regex_syntax::escape(c));
    }
    pattern.push(')');
    let shown = serde_json::to_string(choices).expect("strings serialize");
    Dfa::build(&pattern, "guided_choice", &quote(&shown))
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn metacharacters_are_literal() {
        let dfa = compile(&["a.b".into(), "(x)*".into(), "".into()]).unwrap();
        assert!(dfa.matches(b"a.b") && dfa.matches(b"(x)*") && dfa.matches(b""));
        assert!(!dfa.matches(b"axb") && !dfa.matches(b"xx"));
    }
}
