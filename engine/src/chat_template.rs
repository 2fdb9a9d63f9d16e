//! A checkpoint's chat template, rendered with minijinja so the prompt is byte-identical to
//! transformers' `apply_chat_template(..., tokenize=False)`.
//!
//! transformers renders with a Jinja2 environment set up in a particular way, and each of its
//! choices is copied here: `trim_blocks` and `lstrip_blocks`; Python string methods
//! (`.startswith`, `.split`, `.strip`, ...) through minijinja-contrib's pycompat callback; a
//! `raise_exception(msg)` global; a `tojson` filter that is `json.dumps(ensure_ascii=False)` with
//! Python's separators and key order (minijinja's own HTML-escapes); `strftime_now(fmt)`; and
//! `{{ x }}` printing Python's `str(x)` (`None`, `True`, `['a']`). The named special tokens
//! (`eos_token`, ...) are template variables, and the caller's extra kwargs (the API's
//! `chat_template_kwargs`, e.g. `enable_thinking`) come on top of them. Messages reach the
//! template as transformers 5 passes them (`template_message`): keys with null values dropped,
//! and an assistant's reasoning, whichever of `reasoning_content`, `thinking` or `reasoning` it
//! came under, also under the first two, so every template finds it under the name it reads.
//!
//! Where the template comes from, as transformers decides it: `chat_template.jinja` and
//! `additional_chat_templates/*.jinja` when the checkpoint has them, else `chat_template` of
//! `tokenizer_config.json` (one string, or a list of named templates). With several templates,
//! `tool_use` renders requests that carry tools and `default` the rest.
//!
//! One deliberate difference: OpenAI content-part arrays (`[{"type": "text", "text": ..}]`).
//! Qwen3's template only prints string content, so transformers renders such a message empty.
//! For templates that do not walk content parts themselves, `render` first joins the text parts
//! with "\n" (vLLM's rule), so the user's words reach the model.

mod python;
mod strftime;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Value as JinjaValue};
use minijinja::{Environment, ErrorKind};
use serde_json::{Map, Value};

use crate::tokenizer::{SpecialTokens, TokenizerError, read_tokenizer_config};

pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";
pub const CHAT_TEMPLATE_DIR: &str = "additional_chat_templates";

/// The template variables `render` sets itself; kwargs may not replace them (transformers
/// raises a TypeError for these).
const RESERVED_KWARGS: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error("failed to read the chat template's tokenizer config: {0}")]
    Config(#[from] TokenizerError),
    #[error("failed to read chat template {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: `chat_template` {problem}")]
    ConfigField { path: PathBuf, problem: String },
    #[error("chat template `{name}` does not compile (line {line}): {message}")]
    Compile {
        name: String,
        line: usize,
        message: String,
    },
    #[error("chat template `{name}` failed at line {line}: {message}")]
    Render {
        name: String,
        line: usize,
        message: String,
    },
    #[error("the model has chat templates {names:?} and none is named `default`")]
    NoDefault { names: Vec<String> },
    #[error("message {index}: {problem}")]
    Message { index: usize, problem: String },
    #[error("chat_template_kwargs may not set `{key}`: the server sets it")]
    ReservedKwarg { key: String },
}

/// How the template expects `message.content`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFormat {
    /// Content is printed as a string (Qwen3): text parts are joined before rendering.
    String,
    /// The template iterates over content parts itself (vision templates): passed through.
    Parts,
}

#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    /// Template names in `env` (`default` when there is one template) and how each reads content.
    names: Vec<(String, ContentFormat)>,
    special_tokens: SpecialTokens,
}

impl ChatTemplate {
    /// Loads the template of a checkpoint directory; `Ok(None)` when it has none (a base model).
    pub fn from_tokenizer_dir(dir: &Path) -> Result<Option<ChatTemplate>, ChatTemplateError> {
        let config = read_tokenizer_config(dir)?;
        let special_tokens = match &config {
            Some((path, value)) => SpecialTokens::from_config(value, path)?,
            None => SpecialTokens::default(),
        };
        let mut templates = read_template_files(dir)?;
        if templates.is_empty()
            && let Some((path, value)) = &config
        {
            templates = config_templates(value, path)?;
        }
        if templates.is_empty() {
            return Ok(None);
        }
        ChatTemplate::from_named(templates, special_tokens).map(Some)
    }

    /// A template given as source (a `--chat-template` override, or a test).
    pub fn new(
        source: &str,
        special_tokens: SpecialTokens,
    ) -> Result<ChatTemplate, ChatTemplateError> {
        let templates = BTreeMap::from([("default".to_string(), source.to_string())]);
        ChatTemplate::from_named(templates, special_tokens)
    }

    fn from_named(
        templates: BTreeMap<String, String>,
        special_tokens: SpecialTokens,
    ) -> Result<ChatTemplate, ChatTemplateError> {
        let mut env = Environment::new();
        configure(&mut env);
        let mut names = Vec::new();
        for (name, source) in templates {
            let format = if loops_over_content(&source) {
                ContentFormat::Parts
            } else {
                ContentFormat::String
            };
            let source = rewrite_generation_tags(&source);
            env.add_template_owned(name.clone(), source).map_err(|e| {
                ChatTemplateError::Compile {
                    name: name.clone(),
                    line: e.line().unwrap_or(0),
                    message: describe(&e),
                }
            })?;
            names.push((name, format));
        }
        Ok(ChatTemplate {
            env,
            names,
            special_tokens,
        })
    }

    /// The template `render` uses for a request with or without tools (transformers'
    /// `get_chat_template`).
    fn pick(&self, has_tools: bool) -> Result<(&str, ContentFormat), ChatTemplateError> {
        let find = |wanted: &str| self.names.iter().find(|(name, _)| name == wanted);
        let found = if has_tools { find("tool_use") } else { None };
        match found.or_else(|| find("default")) {
            Some((name, format)) => Ok((name.as_str(), *format)),
            None => Err(ChatTemplateError::NoDefault {
                names: self.names.iter().map(|(name, _)| name.clone()).collect(),
            }),
        }
    }

    /// How the template reads `message.content` (see `ContentFormat`): `Parts` when its source
    /// loops over something named `content`, the way vision templates walk image and text parts.
    pub fn content_format(&self, has_tools: bool) -> ContentFormat {
        self.pick(has_tools)
            .map_or(ContentFormat::String, |(_, format)| format)
    }

    /// Renders the prompt. `messages` and `tools` are OpenAI-shaped JSON; `kwargs` are extra
    /// template variables (`enable_thinking`, ...), which override the special-token variables.
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
        kwargs: &Map<String, Value>,
    ) -> Result<String, ChatTemplateError> {
        if let Some(key) = RESERVED_KWARGS.iter().find(|k| kwargs.contains_key(**k)) {
            return Err(ChatTemplateError::ReservedKwarg {
                key: key.to_string(),
            });
        }
        let (name, format) = self.pick(tools.is_some())?;
        let mut jinja_messages = Vec::with_capacity(messages.len());
        for (index, message) in messages.iter().enumerate() {
            let joined = match (format, message.get("content")) {
                (ContentFormat::String, Some(Value::Array(parts))) => {
                    Some(join_text_parts(parts, index)?)
                }
                _ => None,
            };
            jinja_messages.push(template_message(message, joined));
        }

        let mut context: BTreeMap<String, JinjaValue> = BTreeMap::new();
        for (var, token) in self.special_tokens.named() {
            context.insert(var.to_string(), JinjaValue::from(token));
        }
        for (key, value) in kwargs {
            context.insert(key.clone(), to_jinja(value));
        }
        context.insert("messages".into(), JinjaValue::from(jinja_messages));
        context.insert(
            "tools".into(),
            tools.map_or(JinjaValue::from(()), |tools| {
                tools.iter().map(to_jinja).collect()
            }),
        );
        context.insert("documents".into(), JinjaValue::from(()));
        context.insert(
            "add_generation_prompt".into(),
            JinjaValue::from(add_generation_prompt),
        );

        let render_error = |e: minijinja::Error| ChatTemplateError::Render {
            name: name.to_string(),
            line: e.line().unwrap_or(0),
            message: describe(&e),
        };
        let template = self.env.get_template(name).map_err(render_error)?;
        template.render(context).map_err(render_error)
    }
}

/// The names a message's reasoning comes under (transformers' `_REASONING_FIELDS`), in the
/// order transformers picks the one to copy when a message has several.
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// One message as transformers 5 hands it to the template. Keys whose value is null are dropped
/// (`content: null` beside tool calls, as OpenAI clients send it: templates see it absent, not
/// None). Content parts become `joined` when the template prints string content. Reasoning,
/// under whichever of `REASONING_FIELDS` it came, is also put under `thinking` (gpt-oss reads
/// that) and `reasoning_content` (the others do), in transformers' key order:
/// `{"thinking": r, **message, "reasoning_content": r}`.
fn template_message(message: &Value, joined: Option<String>) -> JinjaValue {
    let Value::Object(fields) = message else {
        return to_jinja(message);
    };
    let present = |key: &str| fields.get(key).filter(|v| !v.is_null());
    let reasoning = REASONING_FIELDS.iter().find_map(|key| present(key));
    let mut pairs = Vec::with_capacity(fields.len() + 2);
    if let Some(reasoning) = reasoning {
        let thinking = present("thinking").unwrap_or(reasoning);
        pairs.push(("thinking", to_jinja(thinking)));
    }
    for (key, value) in fields.iter().filter(|(_, v)| !v.is_null()) {
        let value = match (key.as_str(), &joined, reasoning) {
            ("thinking", _, Some(_)) => continue,
            ("reasoning_content", _, Some(reasoning)) => to_jinja(reasoning),
            ("content", Some(text), _) => JinjaValue::from(text.as_str()),
            _ => to_jinja(value),
        };
        pairs.push((key.as_str(), value));
    }
    if let (Some(reasoning), None) = (reasoning, present("reasoning_content")) {
        pairs.push(("reasoning_content", to_jinja(reasoning)));
    }
    JinjaValue::from_pairs(pairs)
}

/// JSON to a template value, keeping object key order (templates print tool schemas with it).
fn to_jinja(value: &Value) -> JinjaValue {
    match value {
        Value::Null => JinjaValue::from(()),
        Value::Bool(b) => JinjaValue::from(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => JinjaValue::from(i),
            (None, Some(u), _) => JinjaValue::from(u),
            (None, None, Some(f)) => JinjaValue::from(f),
            (None, None, None) => JinjaValue::from(()),
        },
        Value::String(s) => JinjaValue::from(s.as_str()),
        Value::Array(items) => items.iter().map(to_jinja).collect(),
        Value::Object(map) => {
            JinjaValue::from_pairs(map.iter().map(|(k, v)| (k.as_str(), to_jinja(v))))
        }
    }
}

/// Sets up `env` the way transformers sets up its Jinja2 environment (see the module docs).
fn configure(env: &mut Environment<'static>) {
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build();
    // The default delimiters always build; keep minijinja's defaults otherwise.
    if let Ok(syntax) = syntax {
        env.set_syntax(syntax);
    }
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_formatter(python::format_value);
    env.add_function(
        "raise_exception",
        |message: String| -> Result<JinjaValue, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    env.add_function("strftime_now", |format: String| {
        strftime::strftime_now(&format)
    });
    env.add_filter(
        "tojson",
        |value: JinjaValue,
         ensure_ascii: Option<JinjaValue>,
         indent: Option<JinjaValue>,
         separators: Option<JinjaValue>,
         kwargs: Kwargs|
         -> Result<String, minijinja::Error> {
            // minijinja functions take at most five arguments: `sort_keys` is keyword-only.
            let positional = [ensure_ascii, indent, separators];
            python::Dumps::from_filter_args(&positional, &kwargs)?.dumps(&value)
        },
    );
}

/// The error's own message: for `raise_exception("...")`, exactly the template's text.
fn describe(e: &minijinja::Error) -> String {
    match (e.kind(), e.detail()) {
        (ErrorKind::InvalidOperation, Some(detail)) => detail.to_string(),
        (kind, Some(detail)) => format!("{kind}: {detail}"),
        (kind, None) => kind.to_string(),
    }
}

/// transformers' `{% generation %}...{% endgeneration %}` marks assistant text for training
/// masks and renders its body unchanged. minijinja has no such tag, so each marker becomes
/// `{% if true %}` / `{% endif %}`, keeping its whitespace-control signs: the same output, with
/// `trim_blocks` and `lstrip_blocks` acting on it as on any block tag.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}").map(|end| end + 2) else {
            break;
        };
        let tag = &rest[start..start + len];
        let inner = &tag[2..len - 2];
        let keyword = inner.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str(&rest[..start]);
        match keyword {
            "generation" => out.push_str(&tag.replacen("generation", "if true", 1)),
            "endgeneration" => out.push_str(&tag.replacen("endgeneration", "endif", 1)),
            _ => out.push_str(tag),
        }
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    out
}

/// True when the template has `{% for x in <...>content %}`: it walks content parts.
fn loops_over_content(source: &str) -> bool {
    source.match_indices("{%").any(|(at, _)| {
        let tag = &source[at + 2..];
        let tag = tag[..tag.find("%}").unwrap_or(tag.len())]
            .trim_matches(|c: char| c == '-' || c.is_whitespace());
        let Some(rest) = tag.strip_prefix("for ") else {
            return false;
        };
        let Some((_, iterable)) = rest.split_once(" in ") else {
            return false;
        };
        let iterable = iterable.trim();
        let iterable = iterable
            .split(|c: char| c.is_whitespace() || c == '|')
            .next()
            .unwrap_or("");
        iterable
            .trim_end_matches(['\'', '"', ']'])
            .ends_with("content")
    })
}

/// The text parts of one message's content array, joined with "\n".
fn join_text_parts(parts: &[Value], index: usize) -> Result<String, ChatTemplateError> {
    let refuse = |problem: String| ChatTemplateError::Message { index, problem };
    let mut texts = Vec::with_capacity(parts.len());
    for part in parts {
        let text = match part {
            Value::String(s) => s.as_str(),
            Value::Object(p) => match (p.get("type").and_then(Value::as_str), p.get("text")) {
                (Some("text") | None, Some(Value::String(s))) => s.as_str(),
                (Some(kind), _) => {
                    return Err(refuse(format!(
                        "content part of type `{kind}` is not supported by this model"
                    )));
                }
                (None, _) => return Err(refuse("content part without `type` or `text`".into())),
            },
            _ => {
                return Err(refuse(
                    "content part is neither an object nor a string".into(),
                ));
            }
        };
        texts.push(text);
    }
    Ok(texts.join("\n"))
}

/// `chat_template.jinja` (as `default`) and `additional_chat_templates/<name>.jinja`.
fn read_template_files(dir: &Path) -> Result<BTreeMap<String, String>, ChatTemplateError> {
    let read = |path: PathBuf| -> Result<Option<String>, ChatTemplateError> {
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ChatTemplateError::Read { path, source }),
        }
    };
    let mut templates = BTreeMap::new();
    if let Some(text) = read(dir.join(CHAT_TEMPLATE_FILE))? {
        templates.insert("default".to_string(), text);
    }
    let extra_dir = dir.join(CHAT_TEMPLATE_DIR);
    let entries = match std::fs::read_dir(&extra_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(templates),
        Err(source) => {
            return Err(ChatTemplateError::Read {
                path: extra_dir,
                source,
            });
        }
    };
    for entry in entries {
        let entry = entry.map_err(|source| ChatTemplateError::Read {
            path: extra_dir.clone(),
            source,
        })?;
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".jinja"))
        else {
            continue;
        };
        let name = name.to_string();
        if let Some(text) = read(path)? {
            templates.insert(name, text);
        }
    }
    Ok(templates)
}

/// `chat_template` of `tokenizer_config.json`: a string, or `[{"name": .., "template": ..}]`.
fn config_templates(
    config: &Value,
    path: &Path,
) -> Result<BTreeMap<String, String>, ChatTemplateError> {
    let field_error = |problem: &str| ChatTemplateError::ConfigField {
        path: path.to_path_buf(),
        problem: problem.to_string(),
    };
    let mut templates = BTreeMap::new();
    match config.get("chat_template") {
        None | Some(Value::Null) => {}
        Some(Value::String(source)) => {
            templates.insert("default".to_string(), source.clone());
        }
        Some(Value::Array(items)) => {
            for item in items {
                let name = item.get("name").and_then(Value::as_str);
                let source = item.get("template").and_then(Value::as_str);
                let (Some(name), Some(source)) = (name, source) else {
                    return Err(field_error(
                        "has an entry without string `name` and `template`",
                    ));
                };
                templates.insert(name.to_string(), source.to_string());
            }
        }
        Some(_) => {
            return Err(field_error(
                "is neither a string nor a list of named templates",
            ));
        }
    }
    Ok(templates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_markers_become_plain_blocks() {
        let source = "a{% generation %}b{%- endgeneration -%} c{% if x %}y{% endif %}";
        assert_eq!(
            rewrite_generation_tags(source),
            "a{% if true %}b{%- endif -%} c{% if x %}y{% endif %}"
        );
    }

    /// Each expected line is `json.dumps` of what transformers 5.25 hands the template for that
    /// message (null keys dropped, then `_alias_reasoning_fields`), printed by Python.
    #[test]
    fn reasoning_fields_are_aliased_like_transformers() {
        let template = ChatTemplate::new(
            "{% for m in messages %}{{ m | tojson }}\n{% endfor %}",
            SpecialTokens::default(),
        )
        .expect("compiles");
        let messages = [
            serde_json::json!({"role": "assistant", "content": "x", "reasoning": "r"}),
            serde_json::json!({"role": "assistant", "reasoning_content": "a", "content": "x",
                               "thinking": "b"}),
            serde_json::json!({"role": "assistant", "reasoning_content": null, "content": "x",
                               "thinking": "t"}),
            serde_json::json!({"role": "user", "content": "q", "reasoning": null}),
        ];
        let got = template
            .render(&messages, None, false, &Map::new())
            .expect("renders");
        let want = [
            r#"{"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r", "reasoning_content": "r"}"#,
            r#"{"thinking": "b", "role": "assistant", "reasoning_content": "a", "content": "x"}"#,
            r#"{"thinking": "t", "role": "assistant", "content": "x", "reasoning_content": "t"}"#,
            r#"{"role": "user", "content": "q"}"#,
        ];
        assert_eq!(got, want.map(|line| format!("{line}\n")).concat());
    }

    #[test]
    fn content_loops_are_recognised() {
        assert!(loops_over_content(
            "{%- for item in message.content %}{{ item.text }}{% endfor %}"
        ));
        assert!(loops_over_content(
            "{% for part in message['content'] %}{% endfor %}"
        ));
        assert!(loops_over_content(
            "{%- for c in content | selectattr('type') %}{% endfor %}"
        ));
        assert!(!loops_over_content(
            "{%- for message in messages %}{{ message.content }}{% endfor %}"
        ));
        assert!(!loops_over_content(
            "{%- for tool_call in message.tool_calls %}{% endfor %}"
        ));
    }
}
