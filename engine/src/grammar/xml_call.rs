//! The parameters of a `qwen3_coder` call as Lark rules, each value held to its property's
//! schema the way `tool_parsers::qwen3_coder` reads it back:
//!
//! ```text
//! <parameter=city>
//! Paris
//! </parameter>
//! ```
//!
//! The parser converts a value by the type the schema declares for the property
//! (`tool_parsers::schema::declared_type`), so the grammar writes it the same way: a `string`
//! raw (its `enum`/`const`, `maxLength`/`minLength` and `pattern` kept; it can never hold
//! `</parameter>`), every other declared type as compact JSON of that one type, an undeclared
//! type (`anyOf`, none) as JSON of the property's schema. Parameters come in any order, each at
//! most once, the required ones always, the others optionally (a rule for each set of
//! parameters written so far; past `ANY_ORDER_MAX` parameters, in the schema's order); a schema
//! without `properties` takes any parameter names with raw values.

use serde_json::{Map, Value};

use super::Spec;
use super::schema::{self, SchemaError};
use super::tools::lark_str;
use crate::tool_parsers::schema::declared_type;

const VALUE_END: &str = "\n</parameter>\n";

/// Text that holds no `</parameter>` (a regex body, for `&`).
const NO_CLOSE: &str = r"~/(?s:.*)<\/parameter>(?s:.*)/";

/// The parameters of tool `i` (schema `parameters`, at request path `param`): the expression
/// for its arguments and the rules it uses.
pub fn parameters(
    parameters: &Value,
    param: &str,
    i: usize,
) -> Result<(String, Vec<String>), SchemaError> {
    let props = parameters.get("properties").and_then(Value::as_object);
    let Some(props) = props.filter(|p| !p.is_empty()) else {
        // Anything: names the parser reads, raw values.
        let rules = vec![
            format!("any_{i}: \"<parameter=\" /[A-Za-z_][A-Za-z0-9_.\\-]*/ \">\\n\" raw_{i}"),
            format!("raw_{i}[suffix={}]: RAW_{i}", lark_str(VALUE_END)),
            format!("RAW_{i}: /(?s:.*)/ & {NO_CLOSE}"),
        ];
        return Ok((format!("any_{i}*"), rules));
    };
    let required: Vec<&str> = parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let defs = definitions(parameters);
    let mut rules = Vec::new();
    let mut seq = Vec::new();
    let mut names = Vec::new();
    let mut needed = Vec::new();
    for (k, (key, prop)) in props.iter().enumerate() {
        let path = format!("{param}.properties.{key}");
        if key.is_empty() || key.contains(['<', '>', '\n']) {
            return Err(SchemaError::new(
                path,
                "a qwen3_coder parameter name cannot be empty or hold `<`, `>` or a newline",
            ));
        }
        let name = format!("p_{i}_{k}");
        let value = value_rules(parameters, key, prop, &defs, &path, &name, &mut rules)?;
        rules.push(format!(
            "{name}: {} {value}",
            lark_str(&format!("<parameter={key}>\n"))
        ));
        let must = required.contains(&key.as_str());
        seq.push(if must {
            name.clone()
        } else {
            format!("{name}?")
        });
        names.push(name);
        needed.push(must);
    }
    if names.len() > ANY_ORDER_MAX {
        return Ok((seq.join(" "), rules));
    }
    Ok((any_order(&names, &needed, i, &mut rules), rules))
}

/// Tools with at most this many parameters take them in any order (a rule for each set of
/// parameters written so far: 2^n of them); more come in the schema's order.
const ANY_ORDER_MAX: usize = 8;

/// Each of `names` at most once, in any order, the `needed` ones always: a rule a set of
/// parameters already written (a bit each), from the empty set; returns the expression.
fn any_order(names: &[String], needed: &[bool], i: usize, rules: &mut Vec<String>) -> String {
    let all_needed: u32 = (0..names.len())
        .filter(|&k| needed[k])
        .map(|k| 1u32 << k)
        .sum();
    let full = (1u32 << names.len()) - 1;
    // Sets are reached by adding a bit, so every set is reachable: one rule each but the full
    // one (nothing can follow it).
    for set in 0..full {
        let alts: Vec<String> = (0..names.len())
            .filter(|&k| set & (1 << k) == 0)
            .map(|k| {
                let next = set | 1 << k;
                if next == full {
                    names[k].clone()
                } else {
                    format!("{} args_{i}_{next}", names[k])
                }
            })
            .collect();
        let done = set & all_needed == all_needed;
        rules.push(format!(
            "args_{i}_{set}: ({}){}",
            alts.join(" | "),
            if done { "?" } else { "" }
        ));
    }
    if names.is_empty() {
        String::new()
    } else {
        format!("args_{i}_0")
    }
}

/// The rules for one property's value followed by `VALUE_END`; returns the expression.
fn value_rules(
    parameters: &Value,
    key: &str,
    prop: &Value,
    defs: &Map<String, Value>,
    path: &str,
    name: &str,
    rules: &mut Vec<String>,
) -> Result<String, SchemaError> {
    let end = lark_str(VALUE_END);
    match declared_type(parameters, key) {
        Some("string") => {
            let literals = prop
                .get("const")
                .map(|c| vec![c.clone()])
                .or_else(|| prop.get("enum").and_then(Value::as_array).cloned());
            if let Some(lits) = literals {
                let strs: Option<Vec<String>> = lits
                    .iter()
                    .map(|v| v.as_str().map(|s| lark_str(&format!("{s}{VALUE_END}"))))
                    .collect();
                if let Some(strs) = strs.filter(|s| !s.is_empty()) {
                    return Ok(format!("({})", strs.join(" | ")));
                }
            }
            let term = name.to_uppercase();
            rules.push(format!("{name}_v[suffix={end}]: {term}"));
            rules.push(format!("{term}: {}", raw_string(prop, path)?));
            Ok(format!("{name}_v"))
        }
        ty => {
            let mut schema = prop.clone();
            if let (Some(ty), Some(obj)) = (ty, schema.as_object_mut()) {
                obj.insert("type".into(), Value::String(ty.into()));
            }
            if let Some(obj) = schema.as_object_mut() {
                for (k, v) in defs {
                    obj.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            let spec = Spec::JsonSchema {
                schema,
                strict: false,
            };
            Ok(format!("%json {} {end}", schema::prepare(&spec, path)?))
        }
    }
}

/// The root's `$defs`/`definitions`, which a property's `$ref` may name.
fn definitions(parameters: &Value) -> Map<String, Value> {
    ["$defs", "definitions"]
        .iter()
        .filter_map(|k| parameters.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

/// A raw string value's terminal: its length bounds and `pattern`, never `</parameter>`.
fn raw_string(prop: &Value, path: &str) -> Result<String, SchemaError> {
    let bound = |k: &str| prop.get(k).and_then(Value::as_u64);
    let (min, max) = (bound("minLength").unwrap_or(0), bound("maxLength"));
    if max.is_some_and(|m| m < min) {
        return Err(SchemaError::new(
            format!("{path}.maxLength"),
            "`maxLength` is below `minLength`",
        ));
    }
    let len = match max {
        Some(m) => format!("(?s:.{{{min},{m}}})"),
        None => format!("(?s:.{{{min},}})"),
    };
    let mut term = format!("/{}/ & {NO_CLOSE}", rx_body(&len, ""));
    if let Some(p) = prop.get("pattern") {
        let p = p.as_str().ok_or_else(|| {
            SchemaError::new(format!("{path}.pattern"), "`pattern` must be a string")
        })?;
        // JSON Schema's `\d` and `\w` are ASCII.
        term.push_str(&format!(" & /{}/", rx_body(&search_regex(p), "dw")));
    }
    Ok(term)
}

/// JSON Schema's `pattern` matches anywhere unless anchored: the whole-string regex.
fn search_regex(p: &str) -> String {
    let start = p.strip_prefix('^');
    let body = start.unwrap_or(p);
    let end = body.strip_suffix('$').filter(|b| !b.ends_with('\\'));
    let body = end.unwrap_or(body);
    format!(
        "{}(?:{body}){}",
        if start.is_some() { "" } else { "(?s:.*)" },
        if end.is_some() { "" } else { "(?s:.*)" }
    )
}

/// A regex as the inside of a Lark `/.../` literal; `ascii`: which of `\d`, `\w`, `\s`
/// are ASCII only (`llguidance::regex_to_lark`).
pub(super) fn rx_body(rx: &str, ascii: &str) -> String {
    llguidance::regex_to_lark(rx, ascii)
}
