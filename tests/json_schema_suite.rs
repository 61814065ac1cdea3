//! The official JSON-Schema-Test-Suite (draft 2020-12, with `optional/`): for every test group
//! whose schema compiles, every valid instance (serialized canonically) must be accepted and
//! every invalid one rejected. The exceptions the design forces (and the groups that do not
//! compile, with why) are listed in `tests/data/json_schema/suite.expected`, whose diff is the
//! review; `POOT_BLESS=1` rewrites it. Wrong accepts and invalid sampled outputs always fail.

mod json_schema_support;

use json_schema_support::*;
use poot::json_schema::canonical_json;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("suite folder")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            files(&e, out);
        } else if e.extension().is_some_and(|x| x == "json") {
            out.push(e);
        }
    }
}

#[test]
fn test_suite_exceptions_match_the_golden_file_and_outputs_validate() {
    let root = data_dir().join("suite/draft2020-12");
    let mut paths = Vec::new();
    files(&root, &mut paths);
    let mut lines = String::new();
    let mut unsound = Vec::new();
    let mut wrong_accepts = Vec::new();
    let (mut groups, mut compiled, mut correct) = (0, 0, 0);
    for path in &paths {
        let rel = path.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
        for (g, case) in cases.iter().enumerate() {
            groups += 1;
            let schema = &case["schema"];
            let desc = case["description"].as_str().unwrap_or("");
            let schema_compiled = match compile(schema) {
                Ok(x) => x,
                Err(e) => {
                    lines.push_str(&format!(
                        "{rel}\t{desc}\tcompile_error\t{}\t{}\n",
                        e.code(),
                        short(e.message())
                    ));
                    continue;
                }
            };
            compiled += 1;
            let automaton = schema_compiled.automaton();
            let v = validator(schema);
            if let Some(v) = &v {
                let samples = random_walks(automaton, 8, g as u64 + 1, 120);
                for bad in unsound_samples(schema, v, &samples) {
                    unsound.push(format!("{rel} / {desc}: {bad}"));
                }
            }
            let mut all_right = true;
            for t in case["tests"].as_array().unwrap() {
                let tdesc = t["description"].as_str().unwrap_or("");
                let valid = t["valid"].as_bool().unwrap();
                let canon = canonical_json(&t["data"]);
                if let Some(v) = &v {
                    let reparsed: Value = serde_json::from_str(&canon).unwrap();
                    if v.is_valid(&reparsed) != valid {
                        lines.push_str(&format!(
                            "{rel}\t{desc}\t{tdesc}\tskipped: the canonical form {canon} is judged differently\n"
                        ));
                        continue;
                    }
                }
                let accepted = automaton.matches(canon.as_bytes());
                if valid && !accepted {
                    all_right = false;
                    lines.push_str(&format!("{rel}\t{desc}\t{tdesc}\twrong_reject\n"));
                } else if !valid && accepted {
                    all_right = false;
                    lines.push_str(&format!("{rel}\t{desc}\t{tdesc}\twrong_accept\n"));
                    wrong_accepts.push(format!("{rel} / {desc} / {tdesc}: {canon}"));
                }
            }
            if all_right {
                correct += 1;
            }
        }
    }
    lines.push_str(&format!(
        "groups {groups}, compiled {compiled}, all correct {correct}\n"
    ));
    eprintln!("groups {groups}, compiled {compiled}, all correct {correct}");
    golden("suite.expected", &lines);
    assert!(
        unsound.is_empty(),
        "{} sampled outputs fail the validator:\n{}",
        unsound.len(),
        unsound.join("\n")
    );
    assert!(
        wrong_accepts.is_empty(),
        "wrong accepts:\n{}",
        wrong_accepts.join("\n")
    );
}
