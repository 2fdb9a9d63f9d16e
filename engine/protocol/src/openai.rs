//! Request and response bodies of the OpenAI HTTP API as `met serve` speaks it (and as
//! `metralectl bench` sends it): chat completions, completions, models, errors, plus vLLM's
//! `/tokenize` and `/detokenize`. Plain serde types; validation lives in the server.
//!
//! Optional request fields are `Option`s so that an absent field and an explicit `null` mean
//! the same thing (clients differ in which they send). Unknown request fields are ignored, as
//! OpenAI-compatible servers commonly do, so clients that send `user`, `store` or `metadata`
//! keep working.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Return log-probabilities of the output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    /// Alternatives per output token, 0..=20 (needs `logprobs: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u32>,
    /// Tool definitions, passed to the chat template as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// Extra variables for the chat template, e.g. `{"enable_thinking": false}` (vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// Open the assistant's turn after the messages (default true; vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_generation_prompt: Option<bool>,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub prompt: Prompt,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Alternatives per token, 0..=20 (OpenAI allows 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u32>,
    /// Return the prompt before the completion; with `logprobs`, the prompt's log-probabilities
    /// too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_of: Option<u32>,
}

/// Sampling fields shared by chat and completions requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// vLLM extension; -1 or 0 turn it off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    /// vLLM extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<Seed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// vLLM extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// vLLM extension; 1 is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    /// vLLM extension: keep generating past end-of-sequence tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// vLLM extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u64>,
    /// vLLM extension (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<Map<String, Value>>,
}

/// A random seed: any JSON integer. Negative values are taken modulo 2^64, so clients that
/// only know signed integers can still use the whole range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Seed(pub u64);

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Seed;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Seed, E> {
                Ok(Seed(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Seed, E> {
                Ok(Seed(v as u64))
            }
        }
        d.deserialize_any(V)
    }
}

/// `stop`: one string or several.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// A completions `prompt`: text, token ids, or a batch of either.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    TextBatch(Vec<String>),
    TokensBatch(Vec<Vec<u32>>),
}

impl Default for Prompt {
    fn default() -> Self {
        Prompt::Text(String::new())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    /// vLLM's extension: with `include_usage`, every chunk carries the usage so far, and a
    /// chunk goes out for every generated token even when its text is still empty (a partial
    /// UTF-8 sequence, a skipped special token), so a client can time each token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous_usage_stats: Option<bool>,
}

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    /// OpenAI's newer name for system instructions; templates see it as `system`.
    Developer,
    User,
    Assistant,
    Tool,
}

/// One chat message. Fields beyond these are dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    /// Text, or an array of content parts; may be null on an assistant message with tool calls.
    #[serde(default)]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The thinking of an earlier assistant turn (vLLM's name), for templates that use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(MessageContent::Text(text.into())),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            reasoning_content: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// A content part. Only text parts can be served by a text model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `POST /tokenize` (vLLM): text, or chat messages rendered through the template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenizeRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<ChatMessage>>,
    /// Default true for `prompt`, false for `messages` (the template adds them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_special_tokens: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_generation_prompt: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template_kwargs: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
}

/// `POST /detokenize` (vLLM).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetokenizeRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub tokens: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// Why a choice ended: `stop` (end-of-sequence, a stop token or a stop string), `length`,
/// or `tool_calls` (the reply made tool calls and ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
}

/// vLLM's `stop_reason`: the stop string or stop token that ended a choice (null for an
/// end-of-sequence token or a length limit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StopReason {
    Text(String),
    Token(u32),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    pub id: String,
    /// `chat.completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: FinishReason,
    #[serde(default)]
    pub stop_reason: Option<StopReason>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// `assistant`.
    pub role: String,
    pub content: Option<String>,
    /// The thinking before the answer (`--reasoning-parser`; vLLM's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// A tool call of a reply: `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// JSON text of an object.
    pub arguments: String,
}

/// A tool call in a stream: the first delta of a call has `id`, `type` and `function.name`
/// (and empty `arguments`), the next ones more `function.arguments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub function: FunctionCallDelta,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    /// Present (null until the last chunk) when `stream_options.include_usage` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<FinishReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// Chat log-probabilities: one entry per output token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    /// The token's exact bytes (a token can be part of a UTF-8 character).
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionResponse {
    pub id: String,
    /// `text_completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// A completions choice; in a stream chunk `text` is the delta and `finish_reason` is null
/// until the choice's last chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<FinishReason>,
    #[serde(default)]
    pub stop_reason: Option<StopReason>,
}

/// The legacy completions log-probability layout: parallel arrays, one entry per token.
/// With `echo`, the prompt's tokens come first, and the first has no log-probability.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<Map<String, Value>>>,
    /// Offset of each token's text in the choice's whole text, in characters (as Python
    /// counts them, which is what OpenAI's clients expect).
    pub text_offset: Vec<usize>,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    /// `list`.
    pub object: String,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCard {
    pub id: String,
    /// `model`.
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    pub max_model_len: usize,
}

/// The error envelope of every 4xx and 5xx: `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, e.g. `messages[1].role`.
    pub param: Option<String>,
    pub code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_takes_text_tokens_and_batches() {
        let p = |s: &str| serde_json::from_str::<Prompt>(s).expect(s);
        assert_eq!(p(r#""hi""#), Prompt::Text("hi".into()));
        assert_eq!(p("[1, 2]"), Prompt::Tokens(vec![1, 2]));
        assert_eq!(
            p(r#"["a", "b"]"#),
            Prompt::TextBatch(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            p("[[1], [2, 3]]"),
            Prompt::TokensBatch(vec![vec![1], vec![2, 3]])
        );
        assert!(serde_json::from_str::<Prompt>("[-1]").is_err());
    }

    #[test]
    fn seed_accepts_the_whole_u64_range_and_negative_numbers() {
        let s = |t: &str| serde_json::from_str::<Seed>(t).expect(t).0;
        assert_eq!(s("18446744073709551615"), u64::MAX);
        assert_eq!(s("-1"), u64::MAX);
        assert_eq!(s("7"), 7);
        assert!(serde_json::from_str::<Seed>("1.5").is_err());
        assert!(serde_json::from_str::<Seed>(r#""7""#).is_err());
    }

    #[test]
    fn null_and_absent_fields_mean_the_same() {
        let a: ChatCompletionRequest =
            serde_json::from_str(r#"{"messages": [], "max_tokens": null, "stop": null}"#)
                .expect("null");
        let b: ChatCompletionRequest = serde_json::from_str(r#"{"messages": []}"#).expect("absent");
        assert_eq!(a, b);
    }

    #[test]
    fn chunk_usage_is_null_until_the_end_and_absent_when_not_asked() {
        let mut c = ChatCompletionChunk {
            id: "x".into(),
            object: "chat.completion.chunk".into(),
            created: 0,
            model: "m".into(),
            choices: vec![],
            usage: None,
        };
        assert!(!serde_json::to_string(&c).expect("json").contains("usage"));
        c.usage = Some(None);
        assert!(
            serde_json::to_string(&c)
                .expect("json")
                .contains(r#""usage":null"#)
        );
    }

    #[test]
    fn tool_calls_have_openais_shape_whole_and_in_deltas() {
        let m = AssistantMessage {
            role: "assistant".into(),
            content: None,
            reasoning_content: None,
            tool_calls: Some(vec![ToolCall {
                id: "call_0".into(),
                kind: "function".into(),
                function: FunctionCall {
                    name: "f".into(),
                    arguments: r#"{"a": 1}"#.into(),
                },
            }]),
        };
        assert_eq!(
            serde_json::to_value(&m).expect("json"),
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]})
        );
        let first = ChatDelta {
            tool_calls: Some(vec![ToolCallDelta {
                index: 0,
                id: Some("call_0".into()),
                kind: Some("function".into()),
                function: FunctionCallDelta {
                    name: Some("f".into()),
                    arguments: Some(String::new()),
                },
            }]),
            ..ChatDelta::default()
        };
        assert_eq!(
            serde_json::to_value(&first).expect("json"),
            serde_json::json!({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                                               "function": {"name": "f", "arguments": ""}}]})
        );
        let more = ChatDelta {
            tool_calls: Some(vec![ToolCallDelta {
                index: 0,
                id: None,
                kind: None,
                function: FunctionCallDelta {
                    name: None,
                    arguments: Some("{}".into()),
                },
            }]),
            ..ChatDelta::default()
        };
        assert_eq!(
            serde_json::to_value(&more).expect("json"),
            serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})
        );
    }

    #[test]
    fn error_envelope_has_openai_field_names() {
        let e = ErrorResponse {
            error: ErrorBody {
                message: "m".into(),
                kind: "invalid_request_error".into(),
                param: Some("temperature".into()),
                code: None,
            },
        };
        assert_eq!(
            serde_json::to_string(&e).expect("json"),
            r#"{"error":{"message":"m","type":"invalid_request_error","param":"temperature","code":null}}"#
        );
    }
}
