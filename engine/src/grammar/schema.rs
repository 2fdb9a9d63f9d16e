//! A request's schema made ready for llguidance: checked where our checks name the part better
//! than the compiler's message would, OpenAI's strict defaults applied, and the JSON layout
//! fixed (one space after `,` and `:`, no other whitespace: a model cannot pad a value forever,
//! and the text reads like `json.dumps`).

use serde_json::{Map, Value, json};

use super::Spec;

/// A schema that cannot be compiled; `path` is the request field and the part of the schema
/// (`response_format.json_schema.schema.properties.age.type`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SchemaError {
    pub path: String,
    pub message: String,
}

impl SchemaError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// The JSON types a schema's `type` may name.
const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// The schema llguidance compiles for `spec`; `param` is where it came from in the request.
pub fn prepare(spec: &Spec, param: &str) -> Result<Value, SchemaError> {
    let mut schema = match spec {
        Spec::JsonObject => json!({"type": "object"}),
        Spec::Lark(_) | Spec::Regex(_) | Spec::Choice(_) => {
            return Err(SchemaError::new(param, "a grammar is not a JSON schema"));
        }
        Spec::JsonSchema { schema, strict } => {
            let mut schema = schema.clone();
            if !schema.is_object() {
                return Err(SchemaError::new(
                    param,
                    "a JSON schema must be an object (`{\"type\": \"object\", ...}`)",
                ));
            }
            check(&schema, param)?;
            if *strict {
                close_objects(&mut schema);
            }
            schema
        }
    };
    if let Some(obj) = schema.as_object_mut() {
        obj.insert(
            "x-guidance".into(),
            json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
                "lenient": false,
            }),
        );
    }
    Ok(schema)
}

/// Walk `v` at `path`: every `type` names JSON types, keyword values have the shape the
/// keyword needs. What llguidance checks itself (unsupported keywords, unsatisfiable
/// combinations) is left to it.
fn check(v: &Value, path: &str) -> Result<(), SchemaError> {
    let Some(obj) = v.as_object() else {
        return match v {
            Value::Bool(_) => Ok(()),
            _ => Err(SchemaError::new(
                path,
                format!("a schema must be an object or a boolean, got {v}"),
            )),
        };
    };
    if let Some(t) = obj.get("type") {
        let names: Vec<&Value> = match t {
            Value::Array(a) => a.iter().collect(),
            other => vec![other],
        };
        for n in names {
            if !n.as_str().is_some_and(|n| TYPES.contains(&n)) {
                return Err(SchemaError::new(
                    format!("{path}.type"),
                    format!("unknown type {n}; expected one of {}", TYPES.join(", ")),
                ));
            }
        }
    }
    if let Some(e) = obj.get("enum")
        && e.as_array().is_none_or(|a| a.is_empty())
    {
        return Err(SchemaError::new(
            format!("{path}.enum"),
            "`enum` must be a non-empty array of values",
        ));
    }
    if let Some(r) = obj.get("required")
        && !r.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        return Err(SchemaError::new(
            format!("{path}.required"),
            "`required` must be an array of property names",
        ));
    }
    // Keywords holding a map of schemas, a schema, or a list of schemas.
    for key in ["properties", "$defs", "definitions", "patternProperties"] {
        if let Some(m) = obj.get(key) {
            let Some(m) = m.as_object() else {
                return Err(SchemaError::new(
                    format!("{path}.{key}"),
                    format!("`{key}` must be an object mapping names to schemas"),
                ));
            };
            for (name, s) in m {
                check(s, &format!("{path}.{key}.{name}"))?;
            }
        }
    }
    for key in ["items", "additionalProperties", "not", "contains"] {
        if let Some(s) = obj.get(key) {
            check(s, &format!("{path}.{key}"))?;
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(list) = obj.get(key) {
            let Some(list) = list.as_array().filter(|l| !l.is_empty()) else {
                return Err(SchemaError::new(
                    format!("{path}.{key}"),
                    format!("`{key}` must be a non-empty array of schemas"),
                ));
            };
            for (i, s) in list.iter().enumerate() {
                check(s, &format!("{path}.{key}[{i}]"))?;
            }
        }
    }
    Ok(())
}

/// OpenAI's strict mode: an object schema with no `additionalProperties` allows none.
fn close_objects(v: &mut Value) {
    match v {
        Value::Object(obj) => {
            if is_object_schema(obj) && !obj.contains_key("additionalProperties") {
                obj.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (k, child) in obj.iter_mut() {
                // Literal values, not schemas.
                if !matches!(k.as_str(), "enum" | "const" | "default" | "examples") {
                    close_objects(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(close_objects),
        _ => {}
    }
}

fn is_object_schema(obj: &Map<String, Value>) -> bool {
    obj.get("type").and_then(Value::as_str) == Some("object") || obj.contains_key("properties")
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "response_format.json_schema.schema";

    fn err(schema: Value) -> String {
        let spec = Spec::JsonSchema {
            schema,
            strict: false,
        };
        prepare(&spec, P).expect_err("should be refused").path
    }

    #[test]
    fn bad_parts_are_named_by_path() {
        assert_eq!(
            err(json!({"type": "object", "properties": {"age": {"type": "integr"}}})),
            format!("{P}.properties.age.type")
        );
        assert_eq!(
            err(json!({"anyOf": [{"type": "string"}, {"enum": []}]})),
            format!("{P}.anyOf[1].enum")
        );
        assert_eq!(
            err(json!({"type": "object", "required": "a"})),
            format!("{P}.required")
        );
        assert_eq!(err(json!(["not", "a", "schema"])), P);
    }

    #[test]
    fn strict_closes_objects_but_not_literals() {
        let spec = Spec::JsonSchema {
            schema: json!({"properties": {"a": {"type": "object", "properties": {}},
                "b": {"enum": [{"properties": {}}]}}}),
            strict: true,
        };
        let s = prepare(&spec, P).expect("ok");
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["a"]["additionalProperties"], false);
        assert!(
            s["properties"]["b"]["enum"][0]
                .get("additionalProperties")
                .is_none()
        );
    }
}
