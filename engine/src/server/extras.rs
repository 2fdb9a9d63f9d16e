//! vLLM's structured-output fields, on chat and completions alike: `structured_outputs`
//! (`{"json": schema}`, `{"regex": ...}`, `{"choice": [...]}`, `{"grammar": lark}`,
//! `{"json_object": true}`) and the older top-level `guided_json`, `guided_regex`,
//! `guided_choice`, `guided_grammar`. Each becomes a [`Spec`] with the field to name in errors.
//! vLLM's tuning options beside them (`guided_decoding_backend`, `disable_any_whitespace`,
//! `whitespace_pattern`, ...) are accepted and ignored: the layout is ours (compact JSON).

use serde_json::Value;

use super::error::ApiError;
use crate::grammar::Spec;

/// The kinds, as `structured_outputs` keys and as `guided_` fields.
const KINDS: [&str; 4] = ["json", "regex", "choice", "grammar"];

/// Every structured-output field `body` sets, read.
pub fn vllm_specs(body: &Value) -> Result<Vec<(Spec, String)>, ApiError> {
    let mut out = Vec::new();
    for kind in KINDS {
        let param = format!("guided_{kind}");
        if let Some(v) = body.get(&param).filter(|v| !v.is_null()) {
            out.push((spec(kind, v, &param)?, param));
        }
    }
    let Some(so) = body.get("structured_outputs").filter(|v| !v.is_null()) else {
        return Ok(out);
    };
    let so = so.as_object().ok_or_else(|| {
        ApiError::invalid(
            "structured_outputs",
            "`structured_outputs` must be an object such as {\"json\": {...}}, \
             {\"regex\": \"...\"}, {\"choice\": [...]} or {\"grammar\": \"...\"}",
        )
    })?;
    for kind in KINDS {
        if let Some(v) = so.get(kind).filter(|v| !v.is_null()) {
            let param = format!("structured_outputs.{kind}");
            out.push((spec(kind, v, &param)?, param));
        }
    }
    if so.get("json_object") == Some(&Value::Bool(true)) {
        out.push((Spec::JsonObject, "structured_outputs.json_object".into()));
    }
    if so.get("structural_tag").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::Unsupported {
            message: "`structural_tag` is not supported; the tool-call parsers' grammars hold \
                      calls (`tool_choice`)"
                .into(),
            param: "structured_outputs.structural_tag".into(),
        });
    }
    Ok(out)
}

/// One field's value as a spec.
fn spec(kind: &str, v: &Value, param: &str) -> Result<Spec, ApiError> {
    let text = |what: &str| {
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| ApiError::invalid(param, format!("`{param}` must be {what}")))
    };
    Ok(match kind {
        "json" => {
            // A schema, or a schema as JSON text (vLLM takes both).
            let schema = match v {
                Value::String(s) => serde_json::from_str(s).map_err(|e| {
                    ApiError::invalid(param, format!("`{param}` is not valid JSON: {e}"))
                })?,
                v => v.clone(),
            };
            Spec::JsonSchema {
                schema,
                strict: false,
            }
        }
        "regex" => Spec::Regex(text("a regular expression (a string)")?),
        "grammar" => Spec::Lark(text("a Lark grammar (a string)")?),
        _ => {
            let choices = v
                .as_array()
                .filter(|a| !a.is_empty())
                .and_then(|a| {
                    a.iter()
                        .map(|c| c.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    ApiError::invalid(
                        param,
                        format!("`{param}` must be a non-empty list of strings"),
                    )
                })?;
            Spec::Choice(choices)
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn specs(v: Value) -> Result<Vec<(Spec, String)>, ApiError> {
        vllm_specs(&v)
    }

    fn param(v: Value) -> Option<String> {
        specs(v).expect_err("refused").body().error.param
    }

    #[test]
    fn fields_become_specs_named_by_field() {
        let got = specs(
            json!({"guided_regex": "a+", "structured_outputs": {"choice": ["x", "y"]},
            "guided_json": "{\"type\": \"object\"}", "guided_decoding_backend": "xgrammar"}),
        )
        .expect("read");
        let names: Vec<&str> = got.iter().map(|(_, p)| p.as_str()).collect();
        assert_eq!(
            names,
            ["guided_json", "guided_regex", "structured_outputs.choice"]
        );
        assert_eq!(got[1].0, Spec::Regex("a+".into()));
        assert_eq!(got[2].0, Spec::Choice(vec!["x".into(), "y".into()]));
        assert!(specs(json!({})).expect("none").is_empty());
    }

    #[test]
    fn bad_values_name_their_field() {
        assert_eq!(
            param(json!({"guided_choice": []})).as_deref(),
            Some("guided_choice")
        );
        assert_eq!(
            param(json!({"guided_regex": 3})).as_deref(),
            Some("guided_regex")
        );
        assert_eq!(
            param(json!({"guided_json": "{nope"})).as_deref(),
            Some("guided_json")
        );
        assert_eq!(
            param(json!({"structured_outputs": {"choice": [1]}})).as_deref(),
            Some("structured_outputs.choice")
        );
        assert_eq!(
            param(json!({"structured_outputs": "json"})).as_deref(),
            Some("structured_outputs")
        );
    }
}
