//! Model output text → text, reasoning and tool calls, as streaming state machines.
//!
//! The server feeds each choice's text deltas to an [`OutputParser`] and turns the
//! [`ParseEvent`]s it gets back into OpenAI chunks or Anthropic content blocks. Feeding the
//! same text in any chunking gives the same events once adjacent text and argument deltas are
//! joined (the tests feed every byte offset).
//!
//! - [`reasoning`]: `--reasoning-parser qwen3`, `<think>…</think>` → reasoning.
//! - [`hermes`]: `--tool-call-parser hermes`, `<tool_call>{"name": …, "arguments": {…}}</tool_call>`
//!   (Qwen3, Qwen2.5).
//! - [`qwen3_coder`]: `--tool-call-parser qwen3_coder`,
//!   `<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>`
//!   (Qwen3-Coder, Qwen3.5/3.6); values are converted by the types the tool's schema declares.
//! - [`llama3_json`]: `--tool-call-parser llama3_json`, a message that is
//!   `{"name": …, "parameters": {…}}` (Llama 3.1+), calls `;`-separated.
//! - [`mistral`]: `--tool-call-parser mistral`, `[TOOL_CALLS]name[ARGS]{…}` or
//!   `[TOOL_CALLS][{"name": …, "arguments": {…}}]` (Mistral).
//!
//! - [`minimax_m2`]: `--tool-call-parser minimax_m2`, `<minimax:tool_call><invoke
//!   name="NAME"><parameter name="KEY">VALUE</parameter></invoke>…</minimax:tool_call>`
//!   (MiniMax-M2), one block holding one or more calls; values converted as qwen3_coder's.
//! - [`deepseek`]: `--tool-call-parser deepseek_v3` and `deepseek_v31`, DeepSeek's calls
//!   between its special tokens (`<｜tool▁calls▁begin｜>…<｜tool▁calls▁end｜>`), V3's fenced JSON
//!   or V3.1's plain arguments.
//! - [`nemotron`]: `--tool-call-parser nemotron_json`, `<TOOLCALL>[{"name": …, "arguments":
//!   {…}}, …]</TOOLCALL>` (NVIDIA Nemotron Nano v2, Nemotron-H), one block holding a JSON list
//!   of one or more calls.
//! - [`harmony`]: `--tool-call-parser openai` and `--reasoning-parser openai_gptoss` (vLLM's
//!   names; `harmony` for either), gpt-oss's channels: `analysis` → reasoning,
//!   `commentary` to `functions.NAME` → a call, `final` → the answer. One parser reads the
//!   whole reply whichever flag names it.
//!
//! Llama's and Mistral's calls have no closing tag: [`tail`] holds them to the end of the
//! message.
//!
//! A call may be held to the format's grammar while it is generated (`grammar/tools.rs`), but
//! the parsers never assume it was (`--disable-tool-grammar`, a call cut by `max_tokens`, a
//! request without tools' schemas): the model may write anything. A call is held back
//! until its closing tag, parsed whole, and released as start (id, name), argument deltas and
//! end; if it does not parse (bad JSON, unknown tool, missing tags, cut off by `max_tokens`)
//! its raw text is released as text instead. Text outside calls streams as it comes, less
//! the few bytes that could be the start of a tag.

pub mod deepseek;
pub mod harmony;
pub mod hermes;
pub mod llama3_json;
pub mod minimax_m2;
pub mod mistral;
pub mod nemotron;
pub mod qwen3_coder;
pub mod reasoning;
pub mod schema;
mod tail;

use serde_json::Value;

use self::harmony::HarmonyParser;
use self::reasoning::ReasoningSplitter;
use self::tail::TailScanner;

/// What the parsers make of model output.
#[derive(Debug, Clone, PartialEq)]
pub enum ParseEvent {
    /// Answer text.
    Text(String),
    /// Thinking text (`reasoning_content`, Anthropic `thinking`).
    Reasoning(String),
    /// A tool call begins; `index` counts calls in this choice from 0.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of the call's arguments, JSON text; the deltas of a call join to a JSON object.
    ToolCallArgs {
        index: usize,
        delta: String,
    },
    ToolCallEnd {
        index: usize,
    },
}

/// `--tool-call-parser`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCallFormat {
    Hermes,
    Qwen3Coder,
    Llama3Json,
    Mistral,
    /// gpt-oss's harmony format (`openai`, vLLM's name, or `harmony`).
    Harmony,
    /// MiniMax-M2's XML invocations (`minimax_m2`).
    MiniMaxM2,
    /// DeepSeek-V3's and R1's calls (`deepseek_v3`), and V3.1's (`deepseek_v31`).
    DeepSeekV3,
    DeepSeekV31,
    /// Nemotron Nano v2's `<TOOLCALL>` JSON lists (`nemotron_json`, or `nemotron_nano_v2`).
    NemotronJson,
}

impl ToolCallFormat {
    pub fn from_flag(s: &str) -> Option<Self> {
        match s {
            "hermes" => Some(Self::Hermes),
            "qwen3_coder" => Some(Self::Qwen3Coder),
            "llama3_json" => Some(Self::Llama3Json),
            "mistral" => Some(Self::Mistral),
            "openai" | "harmony" => Some(Self::Harmony),
            "minimax_m2" => Some(Self::MiniMaxM2),
            "deepseek_v3" => Some(Self::DeepSeekV3),
            "deepseek_v31" => Some(Self::DeepSeekV31),
            "nemotron_json" | "nemotron_nano_v2" => Some(Self::NemotronJson),
            _ => None,
        }
    }

    pub fn flag_value(self) -> &'static str {
        match self {
            Self::Hermes => "hermes",
            Self::Qwen3Coder => "qwen3_coder",
            Self::Llama3Json => "llama3_json",
            Self::Mistral => "mistral",
            Self::Harmony => "openai",
            Self::MiniMaxM2 => "minimax_m2",
            Self::DeepSeekV3 => "deepseek_v3",
            Self::DeepSeekV31 => "deepseek_v31",
            Self::NemotronJson => "nemotron_json",
        }
    }

    /// Whether the format's markers are special tokens, which the detokenizer must keep in
    /// the text of requests with tools (Mistral's `[TOOL_CALLS]`, `[ARGS]`; harmony's
    /// `<|channel|>`, `<|message|>`, ...; DeepSeek's `<｜tool▁calls▁begin｜>`, ...; Nemotron's
    /// `<TOOLCALL>`, which its tokenizer may mark special: kept either way).
    pub fn needs_special_tokens(self) -> bool {
        matches!(
            self,
            Self::Mistral
                | Self::Harmony
                | Self::DeepSeekV3
                | Self::DeepSeekV31
                | Self::NemotronJson
        )
    }

    /// DeepSeek's layout of the format, if it is one of DeepSeek's.
    fn deepseek(self) -> Option<deepseek::Layout> {
        match self {
            Self::DeepSeekV3 => Some(deepseek::Layout::V3),
            Self::DeepSeekV31 => Some(deepseek::Layout::V31),
            _ => None,
        }
    }

    /// Text that starts the assistant's turn when a call is forced (`tool_choice` `required`
    /// or a named tool): the model continues from inside a call. It is fed to the parser as
    /// if the model had written it.
    pub fn forced_prefix(self, name: Option<&str>) -> String {
        match (self, name) {
            (Self::Hermes, None) => "<tool_call>\n{\"name\": \"".into(),
            (Self::Hermes, Some(n)) => format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": ",
                serde_json::to_string(n).unwrap_or_default()
            ),
            (Self::Qwen3Coder, None) => "<tool_call>\n<function=".into(),
            (Self::Qwen3Coder, Some(n)) => format!("<tool_call>\n<function={n}>\n"),
            (Self::Llama3Json, None) => "{\"name\": \"".into(),
            (Self::Llama3Json, Some(n)) => format!(
                "{{\"name\": {}, \"parameters\": ",
                serde_json::to_string(n).unwrap_or_default()
            ),
            (Self::Mistral, None) => mistral::TOOL_CALLS.into(),
            (Self::Mistral, Some(n)) => format!("{}{n}[ARGS]", mistral::TOOL_CALLS),
            (Self::Harmony, None) => harmony::FORCED_OPEN.into(),
            (Self::Harmony, Some(n)) => {
                format!("{}{n}{}", harmony::FORCED_OPEN, harmony::ARGS_OPEN)
            }
            (Self::MiniMaxM2, None) => format!("{}\n<invoke name=\"", minimax_m2::OPEN),
            (Self::MiniMaxM2, Some(n)) => {
                format!("{}\n<invoke name=\"{n}\">\n", minimax_m2::OPEN)
            }
            (Self::DeepSeekV3, n) => deepseek::forced_prefix(deepseek::Layout::V3, n),
            (Self::DeepSeekV31, n) => deepseek::forced_prefix(deepseek::Layout::V31, n),
            (Self::NemotronJson, n) => nemotron::forced_prefix(n),
        }
    }

    /// The tags around a tag format's calls (hermes, qwen3_coder, minimax_m2, DeepSeek's,
    /// nemotron_json).
    pub fn tags(self) -> (&'static str, &'static str) {
        match self {
            Self::MiniMaxM2 => (minimax_m2::OPEN, minimax_m2::CLOSE),
            Self::NemotronJson => (nemotron::OPEN, nemotron::CLOSE),
            Self::DeepSeekV3 | Self::DeepSeekV31 => (deepseek::OPEN, deepseek::CLOSE),
            _ => (CALL_OPEN, CALL_CLOSE),
        }
    }
}

/// `--reasoning-parser`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningFormat {
    Qwen3,
    /// gpt-oss's `analysis` channel (`openai_gptoss`, vLLM's name, or `harmony`).
    Harmony,
}

impl ReasoningFormat {
    pub fn from_flag(s: &str) -> Option<Self> {
        match s {
            "qwen3" => Some(Self::Qwen3),
            "openai_gptoss" | "harmony" => Some(Self::Harmony),
            _ => None,
        }
    }

    pub fn flag_value(self) -> &'static str {
        match self {
            Self::Qwen3 => "qwen3",
            Self::Harmony => "openai_gptoss",
        }
    }
}

/// A tool the request declared: its name and JSON schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub parameters: Value,
}

/// A parsed call: its name and its arguments as JSON text in pieces (joined: an object).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    pub args: Vec<String>,
}

/// A parsed call as events: start (the call's index, its id `id_prefix` + index, its name),
/// its argument pieces, end; `calls` counts the choice's calls.
pub(crate) fn emit_call(
    call: ParsedCall,
    id_prefix: &str,
    calls: &mut usize,
    out: &mut Vec<ParseEvent>,
) {
    let index = *calls;
    *calls += 1;
    out.push(ParseEvent::ToolCallStart {
        index,
        id: format!("{id_prefix}{index}"),
        name: call.name,
    });
    out.extend(
        call.args
            .into_iter()
            .map(|delta| ParseEvent::ToolCallArgs { index, delta }),
    );
    out.push(ParseEvent::ToolCallEnd { index });
}

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

/// Length of the longest suffix of `text` that is a proper prefix of `tag` (text that might
/// become the tag when more arrives), at a character boundary.
pub(crate) fn partial_tag_len(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// Finds `<tool_call>…</tool_call>` spans in a text stream and parses each whole.
#[derive(Debug)]
struct CallScanner {
    format: ToolCallFormat,
    tools: Vec<ToolSpec>,
    id_prefix: String,
    /// Text not yet released: outside a call, a possible partial `<tool_call>` and trailing
    /// whitespace; inside, the call so far (after `<tool_call>`).
    pending: String,
    /// Whitespace just before the open call: dropped if it parses, kept if not.
    ws_before: String,
    in_call: bool,
    /// Bytes of `pending` (inside a call) already searched for `</tool_call>`, so a long
    /// call is scanned once, not once per delta.
    scanned: usize,
    calls: usize,
}

impl CallScanner {
    fn push(&mut self, text: &str, out: &mut Vec<ParseEvent>) {
        self.pending.push_str(text);
        let (open, close) = self.format.tags();
        loop {
            if self.in_call {
                let mut from = self.scanned.saturating_sub(close.len() - 1);
                while !self.pending.is_char_boundary(from) {
                    from -= 1;
                }
                let Some(end) = self.pending[from..].find(close).map(|i| from + i) else {
                    self.scanned = self.pending.len();
                    return;
                };
                self.scanned = 0;
                let body = self.pending[..end].to_owned();
                self.pending.drain(..end + close.len());
                self.in_call = false;
                self.release_call(&body, out);
            } else if let Some(start) = self.pending.find(open) {
                // Whitespace between text and a call (or between calls) is dropped.
                let before = self.pending[..start].trim_end().to_owned();
                self.ws_before = self.pending[before.len()..start].to_owned();
                self.text(before, out);
                self.pending.drain(..start + open.len());
                self.in_call = true;
            } else {
                let keep = partial_tag_len(&self.pending, open);
                let cut = self.pending.len() - keep;
                // Hold back trailing whitespace too: it is dropped if a call follows.
                let cut = self.pending[..cut].trim_end().len();
                let text: String = self.pending.drain(..cut).collect();
                self.text(text, out);
                return;
            }
        }
    }

    fn text(&mut self, text: String, out: &mut Vec<ParseEvent>) {
        if !text.is_empty() {
            out.push(ParseEvent::Text(text));
        }
    }

    fn release_call(&mut self, body: &str, out: &mut Vec<ParseEvent>) {
        let parsed = match self.format {
            ToolCallFormat::Qwen3Coder => {
                qwen3_coder::parse_call(body, &self.tools).map(|c| vec![c])
            }
            ToolCallFormat::MiniMaxM2 => minimax_m2::parse_block(body, &self.tools),
            f @ (ToolCallFormat::DeepSeekV3 | ToolCallFormat::DeepSeekV31) => f
                .deepseek()
                .and_then(|layout| deepseek::parse_block(body, layout, &self.tools)),
            ToolCallFormat::NemotronJson => nemotron::parse_block(body, &self.tools),
            // The tag formats; the others go through `TailScanner`.
            _ => hermes::parse_call(body, &self.tools).map(|c| vec![c]),
        };
        match parsed {
            Some(calls) => {
                for call in calls {
                    emit_call(call, &self.id_prefix, &mut self.calls, out);
                }
            }
            None => {
                let (open, close) = self.format.tags();
                out.push(ParseEvent::Text(format!(
                    "{}{open}{body}{close}",
                    self.ws_before
                )));
            }
        }
        self.ws_before.clear();
    }

    fn finish(&mut self, out: &mut Vec<ParseEvent>) {
        let rest = std::mem::take(&mut self.pending);
        if self.in_call {
            // Cut off inside a call: it cannot be parsed, so it is text.
            self.in_call = false;
            out.push(ParseEvent::Text(format!(
                "{}{}{rest}",
                std::mem::take(&mut self.ws_before),
                self.format.tags().0
            )));
        } else if self.calls == 0 || !rest.trim().is_empty() {
            self.text(rest, out);
        }
    }
}

/// How a format's calls are found in the answer.
#[derive(Debug)]
enum Scanner {
    /// Between open and close tags (hermes, qwen3_coder, minimax_m2, DeepSeek's,
    /// nemotron_json).
    Tags(CallScanner),
    /// The rest of the message (llama3_json, mistral).
    Tail(TailScanner),
}

impl Scanner {
    fn push(&mut self, text: &str, out: &mut Vec<ParseEvent>) {
        match self {
            Self::Tags(s) => s.push(text, out),
            Self::Tail(s) => s.push(text, out),
        }
    }

    fn finish(&mut self, out: &mut Vec<ParseEvent>) {
        match self {
            Self::Tags(s) => s.finish(out),
            Self::Tail(s) => s.finish(out),
        }
    }
}

/// One choice's output parser: reasoning first (when on), then tool calls in the answer.
#[derive(Debug)]
pub struct OutputParser {
    reasoning: Option<ReasoningSplitter>,
    calls: Option<Scanner>,
    /// Harmony reads reasoning and calls together (either flag naming it turns it on).
    harmony: Option<HarmonyParser>,
    /// Calls parsed so far.
    pub num_calls: usize,
}

impl OutputParser {
    /// `reasoning_open`: the prompt already opened a `<think>` block (the model starts inside
    /// it). `id_prefix`: call ids are the prefix and the call's index.
    pub fn new(
        reasoning: Option<ReasoningFormat>,
        reasoning_open: bool,
        tools: Option<(ToolCallFormat, Vec<ToolSpec>)>,
        id_prefix: &str,
    ) -> Self {
        let harmony_calls = matches!(&tools, Some((ToolCallFormat::Harmony, _)));
        if reasoning == Some(ReasoningFormat::Harmony) || harmony_calls {
            let specs = tools.and_then(|(f, t)| (f == ToolCallFormat::Harmony).then_some(t));
            return Self {
                reasoning: None,
                calls: None,
                harmony: Some(HarmonyParser::new(specs, id_prefix)),
                num_calls: 0,
            };
        }
        Self {
            harmony: None,
            reasoning: reasoning.map(|_| ReasoningSplitter::new(reasoning_open)),
            calls: tools.map(|(format, tools)| match format {
                ToolCallFormat::Hermes
                | ToolCallFormat::Qwen3Coder
                | ToolCallFormat::MiniMaxM2
                | ToolCallFormat::DeepSeekV3
                | ToolCallFormat::DeepSeekV31
                | ToolCallFormat::NemotronJson => Scanner::Tags(CallScanner {
                    format,
                    tools,
                    id_prefix: id_prefix.to_owned(),
                    pending: String::new(),
                    ws_before: String::new(),
                    in_call: false,
                    scanned: 0,
                    calls: 0,
                }),
                ToolCallFormat::Llama3Json | ToolCallFormat::Mistral | ToolCallFormat::Harmony => {
                    Scanner::Tail(TailScanner::new(format, tools, id_prefix))
                }
            }),
            num_calls: 0,
        }
    }

    /// Whether this parser does anything (else text passes through as it is).
    pub fn is_active(&self) -> bool {
        self.reasoning.is_some() || self.calls.is_some() || self.harmony.is_some()
    }

    pub fn push(&mut self, text: &str) -> Vec<ParseEvent> {
        if let Some(h) = &mut self.harmony {
            let events = h.push(text);
            return self.count(events);
        }
        let split = match &mut self.reasoning {
            Some(r) => r.push(text),
            None => vec![ParseEvent::Text(text.to_owned())],
        };
        self.answer(split, false)
    }

    /// The stream ended: release what was held back.
    pub fn finish(&mut self) -> Vec<ParseEvent> {
        if let Some(h) = &mut self.harmony {
            let events = h.finish();
            return self.count(events);
        }
        let split = match &mut self.reasoning {
            Some(r) => r.finish(),
            None => vec![],
        };
        self.answer(split, true)
    }

    /// Pass the answer text through the call scanner; reasoning goes straight out.
    fn answer(&mut self, split: Vec<ParseEvent>, finish: bool) -> Vec<ParseEvent> {
        let mut out = Vec::new();
        for ev in split {
            match (ev, &mut self.calls) {
                (ParseEvent::Text(t), Some(c)) => c.push(&t, &mut out),
                (ev, _) => out.push(ev),
            }
        }
        if finish && let Some(c) = &mut self.calls {
            c.finish(&mut out);
        }
        self.count(out)
    }

    /// Drop empty text and count the calls started.
    fn count(&mut self, mut out: Vec<ParseEvent>) -> Vec<ParseEvent> {
        out.retain(
            |e| !matches!(e, ParseEvent::Text(t) | ParseEvent::Reasoning(t) if t.is_empty()),
        );
        self.num_calls += out
            .iter()
            .filter(|e| matches!(e, ParseEvent::ToolCallStart { .. }))
            .count();
        out
    }
}

/// Join adjacent text, reasoning and same-call argument events (what a client assembling a
/// stream sees), for comparing chunkings.
pub fn coalesce(events: impl IntoIterator<Item = ParseEvent>) -> Vec<ParseEvent> {
    let mut out: Vec<ParseEvent> = Vec::new();
    for ev in events {
        match (out.last_mut(), ev) {
            (Some(ParseEvent::Text(a)), ParseEvent::Text(b)) => a.push_str(&b),
            (Some(ParseEvent::Reasoning(a)), ParseEvent::Reasoning(b)) => a.push_str(&b),
            (
                Some(ParseEvent::ToolCallArgs { index: i, delta: a }),
                ParseEvent::ToolCallArgs { index: j, delta: b },
            ) if *i == j => a.push_str(&b),
            (_, ev) => out.push(ev),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_tags_are_held_back_at_char_boundaries() {
        assert_eq!(partial_tag_len("abc<tool", CALL_OPEN), 5);
        assert_eq!(partial_tag_len("abc<", CALL_OPEN), 1);
        assert_eq!(partial_tag_len("abc", CALL_OPEN), 0);
        assert_eq!(
            partial_tag_len("<tool_call>", CALL_OPEN),
            0,
            "a whole tag is not partial"
        );
        assert_eq!(partial_tag_len("é", CALL_OPEN), 0);
    }
}
