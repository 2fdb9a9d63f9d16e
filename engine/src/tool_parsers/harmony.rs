//! gpt-oss's harmony response format (`--tool-call-parser openai`, `--reasoning-parser
//! openai_gptoss`, vLLM's names; `harmony` for either): the reply is a run of messages, each a
//! header and a body,
//!
//! ```text
//! <|channel|>analysis<|message|>…reasoning…<|end|>
//! <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Lisbon"}<|call|>
//! <|start|>assistant<|channel|>final<|message|>…answer…<|return|>
//! ```
//!
//! (the prompt ends with `<|start|>assistant`, so the first header has no role). `analysis` is
//! reasoning; `commentary` with a recipient `to=functions.NAME` (in the header, before or after
//! the channel) is a tool call whose body is the JSON arguments; `final`, and `commentary`
//! without a recipient (a preamble the user sees), are the answer. The markers are special
//! tokens, so the server keeps special tokens in the text of harmony replies.
//!
//! Reasoning and answer bodies stream as they come, less the few bytes that could be the start
//! of a marker. A call's body is held to its end marker (or the end of the reply: `<|call|>` is
//! a stop token) and parsed whole, as the other formats' calls are: a body that is not a JSON
//! object (a call cut off by `max_tokens`), a function the request did not declare or a
//! recipient that is not a function (the built-in `browser` and `python` tools) is released as
//! answer text instead.

use serde_json::Value;

use super::{ParseEvent, ParsedCall, ToolSpec, emit_call};

/// The markers that end a message's body (`<|start|>` only when a model skips the end).
const BODY_ENDS: [&str; 4] = ["<|end|>", "<|return|>", "<|call|>", "<|start|>"];
/// The marker that ends a header.
const MESSAGE: &str = "<|message|>";
/// A forced call's opening (`ToolCallFormat::forced_prefix`): the model names the function.
pub const FORCED_OPEN: &str = "<|channel|>commentary to=functions.";
/// What follows the function's name in a forced call, before the JSON arguments.
pub const ARGS_OPEN: &str = " <|constrain|>json<|message|>";
/// A header longer than this without `<|message|>` is not one: it is released as text.
const MAX_HEADER: usize = 256;

/// What a message's body is.
#[derive(Debug, Clone, PartialEq)]
enum Body {
    Reasoning,
    Answer,
    /// A call of function `name`, held to its end.
    Call {
        name: String,
        header: String,
    },
    /// A message to a recipient that is not a function: released as text, header and all.
    Other {
        header: String,
    },
}

#[derive(Debug)]
pub struct HarmonyParser {
    tools: Option<Vec<ToolSpec>>,
    id_prefix: String,
    /// `None` while reading a header.
    body: Option<Body>,
    /// Text not yet released: a header so far, a held call, or a possible partial marker.
    pending: String,
    calls: usize,
}

impl HarmonyParser {
    /// `tools`: the functions the request declared (`None`: no tools, so every call is text).
    pub fn new(tools: Option<Vec<ToolSpec>>, id_prefix: &str) -> Self {
        Self {
            tools,
            id_prefix: id_prefix.to_owned(),
            body: None,
            pending: String::new(),
            calls: 0,
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<ParseEvent> {
        let mut out = Vec::new();
        self.pending.push_str(text);
        while self.step(&mut out) {}
        out
    }

    /// The stream ended: what is held is released. `<|call|>` and `<|return|>` are stop
    /// tokens, so a reply usually ends without its last marker: a call whose body is a whole
    /// JSON object is a call, one cut off inside its arguments is text.
    pub fn finish(&mut self) -> Vec<ParseEvent> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        match self.body.take() {
            Some(Body::Reasoning) => out.push(ParseEvent::Reasoning(rest)),
            Some(Body::Call { name, header }) => {
                self.release_call(&name, &header, &rest, "", &mut out);
            }
            Some(Body::Other { header }) => out.push(ParseEvent::Text(format!("{header}{rest}"))),
            // A header never finished is not a message: it is what the model wrote.
            Some(Body::Answer) | None => out.push(ParseEvent::Text(rest)),
        }
        out
    }

    /// One step over `pending`; false when it needs more text.
    fn step(&mut self, out: &mut Vec<ParseEvent>) -> bool {
        let Some(body) = &self.body else {
            return self.header();
        };
        let (end, held) = find_end(&self.pending);
        let Some((at, marker)) = end else {
            // Bodies that stream release all but a possible partial marker; calls wait.
            if matches!(body, Body::Reasoning | Body::Answer) {
                let cut = self.pending.len() - held;
                let text: String = self.pending.drain(..cut).collect();
                out.push(match body {
                    Body::Reasoning => ParseEvent::Reasoning(text),
                    _ => ParseEvent::Text(text),
                });
            }
            return false;
        };
        let content: String = self.pending.drain(..at).collect();
        self.pending.drain(..marker.len());
        match self.body.take() {
            Some(Body::Reasoning) => out.push(ParseEvent::Reasoning(content)),
            Some(Body::Answer) => out.push(ParseEvent::Text(content)),
            Some(Body::Call { name, header }) => {
                self.release_call(&name, &header, &content, marker, out);
            }
            Some(Body::Other { header }) => {
                out.push(ParseEvent::Text(format!("{header}{content}{marker}")));
            }
            None => {}
        }
        // `<|start|>` ends a body and opens the next header, which starts with the role.
        if marker == "<|start|>" {
            self.pending.insert_str(0, marker);
        }
        true
    }

    /// Read a header up to `<|message|>`; false when it needs more text.
    fn header(&mut self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let Some(at) = self.pending.find(MESSAGE) else {
            let t = self.pending.trim_start();
            let looks_like_one = t.starts_with("<|")
                || "<|".starts_with(t)
                || t.starts_with("to=")
                || "to=".starts_with(t);
            if looks_like_one && self.pending.len() <= MAX_HEADER {
                return false;
            }
            // Not a header: the model wrote text without one.
            self.body = Some(Body::Answer);
            return true;
        };
        let header: String = self.pending.drain(..at + MESSAGE.len()).collect();
        let (channel, recipient) = parse_header(&header[..at]);
        self.body = Some(match (channel.as_deref(), recipient) {
            (_, Some(r)) => match r.strip_prefix("functions.") {
                Some(name) if !name.is_empty() => Body::Call {
                    name: name.to_owned(),
                    header,
                },
                _ => Body::Other { header },
            },
            (Some("analysis"), None) => Body::Reasoning,
            _ => Body::Answer,
        });
        true
    }

    fn release_call(
        &mut self,
        name: &str,
        header: &str,
        body: &str,
        marker: &str,
        out: &mut Vec<ParseEvent>,
    ) {
        let declared = self
            .tools
            .as_ref()
            .is_some_and(|tools| tools.iter().any(|t| t.name == name));
        let args = body.trim();
        let is_object = matches!(serde_json::from_str::<Value>(args), Ok(Value::Object(_)));
        if declared && is_object {
            let call = ParsedCall {
                name: name.to_owned(),
                args: vec![args.to_owned()],
            };
            emit_call(call, &self.id_prefix, &mut self.calls, out);
        } else {
            out.push(ParseEvent::Text(format!("{header}{body}{marker}")));
        }
    }
}

/// The first body-ending marker in `text` (where, which), and how many trailing bytes could be
/// the start of one (held back until more text comes).
fn find_end(text: &str) -> (Option<(usize, &'static str)>, usize) {
    let mut from = 0;
    while let Some(i) = text[from..].find("<|").map(|i| from + i) {
        let rest = &text[i..];
        if let Some(m) = BODY_ENDS.iter().find(|m| rest.starts_with(**m)) {
            return (Some((i, m)), 0);
        }
        if BODY_ENDS.iter().any(|m| m.starts_with(rest)) {
            return (None, rest.len());
        }
        from = i + 2;
    }
    // A lone `<` at the very end may begin a marker.
    (None, usize::from(text.ends_with('<')))
}

/// The channel and the recipient of a header (`<|start|>assistant to=functions.f<|channel|>
/// commentary <|constrain|>json`, or any of its orders), each if present.
fn parse_header(header: &str) -> (Option<String>, Option<String>) {
    let words = header
        .split("<|")
        .flat_map(|part| part.split(['|', '>', ' ', '\n']))
        .filter(|w| !w.is_empty());
    let (mut channel, mut recipient) = (None, None);
    let mut after_channel = false;
    for w in words {
        if let Some(r) = w.strip_prefix("to=") {
            recipient = Some(r.to_owned());
        } else if w == "channel" {
            after_channel = true;
            continue;
        } else if after_channel && channel.is_none() {
            channel = Some(w.to_owned());
        }
        after_channel = false;
    }
    (channel, recipient)
}

#[cfg(test)]
mod tests {
    use super::super::coalesce;
    use super::*;

    fn tools() -> Option<Vec<ToolSpec>> {
        Some(vec![ToolSpec {
            name: "get_weather".into(),
            parameters: serde_json::json!({"type": "object"}),
        }])
    }

    /// Every split of `text` into two deltas, and byte by byte, gives the same events.
    fn parse_all_ways(text: &str, tools: Option<Vec<ToolSpec>>) -> Vec<ParseEvent> {
        let run = |parts: &[&str]| {
            let mut p = HarmonyParser::new(tools.clone(), "call_");
            let mut evs: Vec<ParseEvent> = parts.iter().flat_map(|t| p.push(t)).collect();
            evs.extend(p.finish());
            evs.retain(
                |e| !matches!(e, ParseEvent::Text(t) | ParseEvent::Reasoning(t) if t.is_empty()),
            );
            coalesce(evs)
        };
        let whole = run(&[text]);
        for cut in (1..text.len()).filter(|&c| text.is_char_boundary(c)) {
            assert_eq!(run(&[&text[..cut], &text[cut..]]), whole, "cut at {cut}");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&refs), whole, "char by char");
        whole
    }

    #[test]
    fn analysis_is_reasoning_and_final_is_the_answer() {
        let evs = parse_all_ways(
            "<|channel|>analysis<|message|>User asks 2+2. Easy: 4 < 5.<|end|>\
             <|start|>assistant<|channel|>final<|message|>It is 4.<|return|>",
            None,
        );
        assert_eq!(
            evs,
            [
                ParseEvent::Reasoning("User asks 2+2. Easy: 4 < 5.".into()),
                ParseEvent::Text("It is 4.".into()),
            ]
        );
    }

    #[test]
    fn a_commentary_message_to_a_function_is_a_call() {
        for header in [
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
            " to=functions.get_weather<|channel|>commentary json<|message|>",
        ] {
            let text = format!(
                "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant{header}\
                 {{\"city\": \"Lisbon\"}}<|call|>"
            );
            let evs = parse_all_ways(&text, tools());
            assert_eq!(
                evs,
                [
                    ParseEvent::Reasoning("Need weather.".into()),
                    ParseEvent::ToolCallStart {
                        index: 0,
                        id: "call_0".into(),
                        name: "get_weather".into()
                    },
                    ParseEvent::ToolCallArgs {
                        index: 0,
                        delta: "{\"city\": \"Lisbon\"}".into()
                    },
                    ParseEvent::ToolCallEnd { index: 0 },
                ],
                "{header}"
            );
        }
    }

    /// `<|call|>` is a stop token: the reply ends right after the arguments.
    #[test]
    fn a_call_at_the_end_of_the_reply_needs_no_marker() {
        let evs = parse_all_ways(
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Porto\"}",
            tools(),
        );
        assert!(matches!(&evs[0], ParseEvent::ToolCallStart { name, .. } if name == "get_weather"));
        assert_eq!(evs.len(), 3, "{evs:?}");
    }

    #[test]
    fn a_preamble_is_answer_text() {
        let evs = parse_all_ways(
            "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>\
             commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|>",
            tools(),
        );
        assert_eq!(evs[0], ParseEvent::Text("Let me check.".into()));
        assert!(matches!(&evs[1], ParseEvent::ToolCallStart { name, .. } if name == "get_weather"));
    }

    #[test]
    fn calls_that_do_not_parse_are_text() {
        let undeclared =
            "<|channel|>commentary to=functions.search <|constrain|>json<|message|>{}<|call|>";
        assert_eq!(
            parse_all_ways(undeclared, tools()),
            [ParseEvent::Text(undeclared.into())]
        );
        let no_tools = "<|channel|>commentary to=functions.get_weather<|message|>{}<|call|>";
        assert_eq!(
            parse_all_ways(no_tools, None),
            [ParseEvent::Text(no_tools.into())]
        );
        let bad_json = "<|channel|>commentary to=functions.get_weather<|message|>{\"city\"<|call|>";
        assert_eq!(
            parse_all_ways(bad_json, tools()),
            [ParseEvent::Text(bad_json.into())]
        );
        let builtin = "<|channel|>analysis to=browser.search<|message|>{\"q\": 1}<|call|>";
        assert_eq!(
            parse_all_ways(builtin, tools()),
            [ParseEvent::Text(builtin.into())]
        );
        // Cut off by max_tokens inside the arguments.
        let cut = "<|channel|>commentary to=functions.get_weather<|message|>{\"city\": \"Li";
        assert_eq!(parse_all_ways(cut, tools()), [ParseEvent::Text(cut.into())]);
    }

    #[test]
    fn text_without_a_header_is_the_answer() {
        assert_eq!(
            parse_all_ways("Just text, é.", None),
            [ParseEvent::Text("Just text, é.".into())]
        );
        // Reasoning cut off by max_tokens stays reasoning.
        assert_eq!(
            parse_all_ways("<|channel|>analysis<|message|>thinking <|", None),
            [ParseEvent::Reasoning("thinking <|".into())]
        );
    }

    #[test]
    fn headers_are_read_in_any_order() {
        assert_eq!(
            parse_header("<|start|>assistant to=functions.f<|channel|>commentary json"),
            (Some("commentary".into()), Some("functions.f".into()))
        );
        assert_eq!(
            parse_header("<|channel|>final"),
            (Some("final".into()), None)
        );
    }
}
