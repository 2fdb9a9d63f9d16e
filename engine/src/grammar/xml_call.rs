//! The parameters of a tag-format call as Lark rules, each value held to its property's
//! schema the way the format's parser reads it back. qwen3_coder (`tool_parsers::qwen3_coder`)
//! and MiniMax-M2 (`tool_parsers::minimax_m2`) write parameters alike but for the tag:
//!
//! ```text
//! <parameter=city>                    <parameter name="city">Paris</parameter>
//! Paris
//! </parameter>
//! ```
//!
//! Both parsers drop one newline after the opening tag and one before `</parameter>`, so
//! qwen3_coder's layout holds any value as written; MiniMax-M2's own (inline) layout holds a
//! raw value that neither starts nor ends with a newline, and a literal that does is written
//! with one more newline on that side ([`Style`]).
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

/// Text that holds no `</parameter>` (a regex body, for `&`).
const NO_CLOSE: &str = r"~/(?s:.*)<\/parameter>(?s:.*)/";

/// How a format lays out one parameter (see the module's text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `<parameter=KEY>\n` VALUE `\n</parameter>\n`.
    Qwen3Coder,
    /// `<parameter name="KEY">` VALUE `</parameter>\n`.
    MiniMax,
}

impl Style {
    fn open(self, key: &str) -> String {
        match self {
            Self::Qwen3Coder => format!("<parameter={key}>\n"),
            Self::MiniMax => format!("<parameter name=\"{key}\">"),
        }
    }

    /// What follows a value.
    fn end(self) -> &'static str {
        match self {
            Self::Qwen3Coder => "\n</parameter>\n",
            Self::MiniMax => "</parameter>\n",
        }
    }

    /// The characters a parameter name cannot hold, as the error says them.
    fn forbidden(self) -> (&'static [char], &'static str) {
        match self {
            Self::Qwen3Coder => (&['<', '>', '\n'], "`<`, `>` or a newline"),
            Self::MiniMax => (&['<', '>', '\n', '"'], "`<`, `>`, `\"` or a newline"),
        }
    }

    /// Any parameter name the parser reads, in its opening tag (a Lark expression).
    fn any_open(self) -> &'static str {
        match self {
            Self::Qwen3Coder => r#""<parameter=" /[A-Za-z_][A-Za-z0-9_.\-]*/ ">\n""#,
            Self::MiniMax => r#""<parameter name=\"" /[A-Za-z_][A-Za-z0-9_.\-]*/ "\">""#,
        }
    }

    /// A literal string value as written, so that the parser reads back `s`.
    fn literal(self, s: &str) -> String {
        match self {
            Self::Qwen3Coder => s.to_owned(),
            Self::MiniMax => format!(
                "{}{s}{}",
                if s.starts_with('\n') { "\n" } else { "" },
                if s.ends_with('\n') { "\n" } else { "" }
            ),
        }
    }

    /// A raw value's terminal besides its schema's bounds.
    fn raw(self) -> String {
        match self {
            Self::Qwen3Coder => NO_CLOSE.to_owned(),
            Self::MiniMax => format!("{NO_CLOSE} & ~/\\n(?s:.*)/ & ~/(?s:.*)\\n/"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Qwen3Coder => "qwen3_coder",
            Self::MiniMax => "minimax_m2",
        }
    }
}

/// The parameters of tool `i` (schema `parameters`, at request path `param`): the expression
/// for its arguments and the rules it uses.
pub fn parameters(
    style: Style,
    parameters: &Value,
    param: &str,
    i: usize,
) -> Result<(String, Vec<String>), SchemaError> {
    let props = parameters.get("properties").and_then(Value::as_object);
    let Some(props) = props.filter(|p| !p.is_empty()) else {
        // Anything: names the parser reads, raw values.
        let rules = vec![
            format!("any_{i}: {} raw_{i}", style.any_open()),
            format!("raw_{i}[suffix={}]: RAW_{i}", lark_str(style.end())),
            format!("RAW_{i}: /(?s:.*)/ & {}", style.raw()),
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
        let (bad, said) = style.forbidden();
        if key.is_empty() || key.contains(bad) {
            return Err(SchemaError::new(
                path,
                format!(
                    "a {} parameter name cannot be empty or hold {said}",
                    style.name()
                ),
            ));
        }
        let name = format!("p_{i}_{k}");
        let value = value_rules(
            style,
            parameters,
            (key, prop),
            &defs,
            &path,
            &name,
            &mut rules,
        )?;
        rules.push(format!("{name}: {} {value}", lark_str(&style.open(key))));
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

/// The rules for one property's value followed by the style's end; returns the expression.
fn value_rules(
    style: Style,
    parameters: &Value,
    (key, prop): (&str, &Value),
    defs: &Map<String, Value>,
    path: &str,
    name: &str,
    rules: &mut Vec<String>,
) -> Result<String, SchemaError> {
    let end = lark_str(style.end());
    match declared_type(parameters, key) {
        Some("string") => {
            let literals = prop
                .get("const")
                .map(|c| vec![c.clone()])
                .or_else(|| prop.get("enum").and_then(Value::as_array).cloned());
            if let Some(lits) = literals {
                let strs: Option<Vec<String>> = lits
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(|s| lark_str(&format!("{}{}", style.literal(s), style.end())))
                    })
                    .collect();
                if let Some(strs) = strs.filter(|s| !s.is_empty()) {
                    return Ok(format!("({})", strs.join(" | ")));
                }
            }
            let term = name.to_uppercase();
            rules.push(format!("{name}_v[suffix={end}]: {term}"));
            rules.push(format!("{term}: {}", raw_string(style, prop, path)?));
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
fn raw_string(style: Style, prop: &Value, path: &str) -> Result<String, SchemaError> {
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
    let mut term = format!("/{}/ & {}", rx_body(&len, ""), style.raw());
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
