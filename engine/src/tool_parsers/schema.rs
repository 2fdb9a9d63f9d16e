//! What a tool's JSON schema says about its arguments, as far as the parsers use it.
//!
//! `qwen3_coder` writes every parameter as bare text; the type the schema declares for it
//! decides what JSON value it becomes: `"42"` is the number 42 for an `integer`, the string
//! "42" for a `string`. Text that does not fit the declared type stays a string, so the
//! client's tool runner sees exactly what the model wrote and can say what is wrong.

use serde_json::{Map, Number, Value};

/// The type the schema declares for `param` (`properties.<param>.type`); the first non-null
/// one when it lists several. `None` when the schema says nothing usable.
pub fn declared_type<'a>(parameters: &'a Value, param: &str) -> Option<&'a str> {
    let prop = parameters.get("properties")?.get(param)?;
    match prop.get("type")? {
        Value::String(t) => Some(t.as_str()),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

/// Whether the schema declares `param` at all.
pub fn has_property(parameters: &Value, param: &str) -> bool {
    parameters
        .get("properties")
        .and_then(|p| p.get(param))
        .is_some()
}

/// The JSON value of parameter text `raw`, as the declared type `ty` reads it.
pub fn convert(raw: &str, ty: Option<&str>) -> Value {
    let as_string = || Value::String(raw.to_owned());
    let t = raw.trim();
    match ty {
        Some("string") => as_string(),
        Some("integer") => t
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| t.parse::<u64>().map(Value::from))
            .unwrap_or_else(|_| as_string()),
        Some("number") => {
            if let Ok(i) = t.parse::<i64>() {
                Value::from(i)
            } else {
                t.parse::<f64>()
                    .ok()
                    .and_then(Number::from_f64)
                    .map_or_else(as_string, Value::Number)
            }
        }
        Some("boolean") => match t.to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => as_string(),
        },
        Some("null") if t == "null" || t == "None" => Value::Null,
        Some("object") => match serde_json::from_str::<Value>(t) {
            Ok(v @ Value::Object(_)) => v,
            _ => as_string(),
        },
        Some("array") => match serde_json::from_str::<Value>(t) {
            Ok(v @ Value::Array(_)) => v,
            _ => as_string(),
        },
        // Untyped (anyOf, no type): JSON if it is JSON, else the text.
        _ => serde_json::from_str::<Value>(t).unwrap_or_else(|_| as_string()),
    }
}

/// Whether `args` satisfies the tool's `parameters` schema as far as a call's shape goes:
/// every `required` property present, each value of its declared `type` (one of a list), in
/// its `enum` when it has one, and no undeclared property when `additionalProperties` is
/// false. Nested schemas are not walked. A null schema (no tools declared) accepts anything.
/// `Err` says what is wrong, for the log.
pub fn validate(parameters: &Value, args: &Map<String, Value>) -> Result<(), String> {
    if parameters.is_null() {
        return Ok(());
    }
    if let Some(required) = parameters.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !args.contains_key(r) {
                return Err(format!("the required argument {r:?} is missing"));
            }
        }
    }
    let props = parameters.get("properties").and_then(Value::as_object);
    for (key, value) in args {
        let Some(prop) = props.and_then(|p| p.get(key)) else {
            if parameters.get("additionalProperties") == Some(&Value::Bool(false)) {
                return Err(format!("{key:?} is not an argument of this tool"));
            }
            continue;
        };
        let types: Vec<&str> = match prop.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !types.is_empty() && !types.iter().any(|t| is_of_type(value, t)) {
            return Err(format!(
                "{key:?} is {value}, not of type {}",
                types.join(" or ")
            ));
        }
        if let Some(allowed) = prop.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            return Err(format!("{key:?} is {value}, not one of its enum values"));
        }
    }
    Ok(())
}

/// JSON Schema's type names; an unknown name accepts anything.
fn is_of_type(v: &Value, ty: &str) -> bool {
    match ty {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        _ => true,
    }
}

/// An XML-style parameter (qwen3_coder's, minimax_m2's): its text `raw` as the JSON value the
/// tool's schema declares for `key`; a parameter the schema does not declare keeps the model's
/// text as a string, and with no schema at all the text's own JSON type is guessed.
pub fn typed_parameter(schema: &Value, key: &str, raw: &str) -> Value {
    let ty = if has_property(schema, key) {
        declared_type(schema, key)
    } else if schema.is_null() {
        None
    } else {
        Some("string")
    };
    convert(raw, ty)
}

/// Tool `name`'s call with `args`, if they fit its schema ([`validate`]); else `None` (the call
/// is returned as text).
pub fn checked_call(
    name: &str,
    schema: &Value,
    args: Map<String, Value>,
) -> Option<super::ParsedCall> {
    if let Err(why) = validate(schema, &args) {
        tracing::debug!("a {name} call does not fit its schema ({why}): returned as text");
        return None;
    }
    Some(super::ParsedCall {
        name: name.to_owned(),
        args: argument_pieces(&args),
    })
}

/// The schema of tool `name` among `tools`; `Some(Null)` when `tools` is empty (nothing to
/// check against), `None` when the tool is not declared.
pub fn tool_schema<'a>(tools: &'a [super::ToolSpec], name: &str) -> Option<&'a Value> {
    static EMPTY: Value = Value::Null;
    if tools.is_empty() {
        return Some(&EMPTY);
    }
    tools.iter().find(|t| t.name == name).map(|t| &t.parameters)
}

/// Arguments as JSON text in pieces: `{"a": 1`, `, "b": 2`, `}` (one per parameter, so a
/// stream shows them as they are parsed); `{}` when there are none.
pub fn argument_pieces(args: &Map<String, Value>) -> Vec<String> {
    if args.is_empty() {
        return vec!["{}".into()];
    }
    let mut pieces: Vec<String> = args
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            format!(
                "{}{}: {}",
                if i == 0 { "{" } else { ", " },
                Value::String(k.clone()),
                v
            )
        })
        .collect();
    pieces.push("}".into());
    pieces
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn text_becomes_the_declared_type_or_stays_text() {
        assert_eq!(convert("42", Some("integer")), json!(42));
        assert_eq!(convert("42", Some("string")), json!("42"));
        assert_eq!(convert("4.5", Some("number")), json!(4.5));
        assert_eq!(convert("many", Some("integer")), json!("many"));
        assert_eq!(convert("True", Some("boolean")), json!(true));
        assert_eq!(convert("{\"a\": [1]}", Some("object")), json!({"a": [1]}));
        assert_eq!(convert("[1, 2]", Some("array")), json!([1, 2]));
        assert_eq!(convert("[1, 2", Some("array")), json!("[1, 2"));
        assert_eq!(convert("null", Some("null")), Value::Null);
        assert_eq!(convert("7", None), json!(7));
        assert_eq!(convert("hi there", None), json!("hi there"));
    }

    #[test]
    fn arguments_are_checked_against_required_types_enums_and_extras() {
        let s = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": ["integer", "null"]},
                "unit": {"type": "string", "enum": ["c", "f"]}
            },
            "required": ["city"],
            "additionalProperties": false
        });
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert_eq!(validate(&s, &args(json!({"city": "Oslo"}))), Ok(()));
        assert_eq!(
            validate(
                &s,
                &args(json!({"city": "Oslo", "days": null, "unit": "c"}))
            ),
            Ok(())
        );
        assert!(validate(&s, &args(json!({"days": 3}))).is_err_and(|e| e.contains("\"city\"")));
        assert!(validate(&s, &args(json!({"city": "Oslo", "days": "three"}))).is_err());
        assert!(validate(&s, &args(json!({"city": "Oslo", "days": 2.5}))).is_err());
        assert!(validate(&s, &args(json!({"city": "Oslo", "unit": "k"}))).is_err());
        assert!(validate(&s, &args(json!({"city": "Oslo", "x": 1}))).is_err());
        // Without additionalProperties: false, extras pass; a null schema takes anything.
        let open = json!({"properties": {"a": {"type": "number"}}});
        assert_eq!(validate(&open, &args(json!({"a": 1.5, "b": true}))), Ok(()));
        assert_eq!(validate(&Value::Null, &args(json!({"a": "x"}))), Ok(()));
    }

    #[test]
    fn declared_types_are_read_from_properties() {
        let s =
            json!({"properties": {"n": {"type": ["null", "integer"]}, "s": {"type": "string"}}});
        assert_eq!(declared_type(&s, "n"), Some("integer"));
        assert_eq!(declared_type(&s, "s"), Some("string"));
        assert_eq!(declared_type(&s, "x"), None);
    }

    #[test]
    fn argument_pieces_join_to_the_object() {
        let mut m = Map::new();
        m.insert("city".into(), json!("Zürich"));
        m.insert("days".into(), json!(3));
        let joined = argument_pieces(&m).concat();
        assert_eq!(joined, r#"{"city": "Zürich", "days": 3}"#);
        assert_eq!(
            serde_json::from_str::<Value>(&joined).expect("json"),
            json!(m)
        );
    }
}
