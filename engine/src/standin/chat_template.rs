//! STAND-IN for `crate::chat_template` (tokenizer branch): the template from
//! `tokenizer_config.json` through minijinja with Python-style string methods. Not
//! byte-exact with transformers (its `tojson` differs); good enough for the server's tests.

use std::path::Path;

use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChatTemplateError(pub String);

pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

fn raise_exception(msg: String) -> Result<String, minijinja::Error> {
    Err(minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        msg,
    ))
}

impl ChatTemplate {
    pub fn from_tokenizer_dir(dir: &Path) -> Result<Option<ChatTemplate>, ChatTemplateError> {
        let path = dir.join("tokenizer_config.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(None);
        };
        let config: Value = serde_json::from_str(&text)
            .map_err(|e| ChatTemplateError(format!("{}: {e}", path.display())))?;
        let Some(source) = config.get("chat_template").and_then(Value::as_str) else {
            return Ok(None);
        };
        let mut env = minijinja::Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| ChatTemplateError(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned("chat", source.to_owned())
            .map_err(|e| ChatTemplateError(format!("invalid chat template: {e}")))?;
        Ok(Some(ChatTemplate { env }))
    }

    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
        kwargs: &Map<String, Value>,
    ) -> Result<String, ChatTemplateError> {
        let mut ctx = Map::new();
        for (k, v) in kwargs {
            ctx.insert(k.clone(), v.clone());
        }
        let ctx = Value::Object(ctx);
        let mut ctx = ctx;
        if let Value::Object(m) = &mut ctx {
            m.insert("messages".into(), Value::Array(messages.to_vec()));
            m.insert(
                "tools".into(),
                tools.map_or(Value::Null, |t| Value::Array(t.to_vec())),
            );
            m.insert(
                "add_generation_prompt".into(),
                Value::Bool(add_generation_prompt),
            );
        }
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| ChatTemplateError(e.to_string()))?;
        tmpl.render(to_jinja(&ctx))
            .map_err(|e| ChatTemplateError(format!("the chat template failed: {e}")))
    }
}

fn to_jinja(v: &Value) -> minijinja::Value {
    match v {
        Value::Null => minijinja::Value::from(()),
        Value::Bool(b) => minijinja::Value::from(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => minijinja::Value::from(i),
            (None, Some(f)) => minijinja::Value::from(f),
            _ => minijinja::Value::from(()),
        },
        Value::String(s) => minijinja::Value::from(s.as_str()),
        Value::Array(a) => a.iter().map(to_jinja).collect(),
        Value::Object(o) => {
            minijinja::Value::from_pairs(o.iter().map(|(k, v)| (k.as_str(), to_jinja(v))))
        }
    }
}
