//! Parser events → response pieces: OpenAI chat deltas and messages, Anthropic stream events
//! and content blocks. Pure functions of the events, so a stream and a whole response built
//! from the same events say the same thing (the tests check it on recorded outputs).

use metrale_protocol::anthropic::{BlockDelta, ResponseBlock, StreamEvent};
use metrale_protocol::openai::{
    ChatDelta, FunctionCall, FunctionCallDelta, ToolCall, ToolCallDelta,
};
use serde_json::Value;

use crate::tool_parsers::ParseEvent;

/// One OpenAI delta per event (argument deltas of a call after its first carry only
/// `arguments`); call ends need no delta.
pub fn openai_deltas(events: Vec<ParseEvent>) -> Vec<ChatDelta> {
    events
        .into_iter()
        .filter_map(|ev| {
            let mut d = ChatDelta::default();
            match ev {
                ParseEvent::Text(t) => d.content = Some(t),
                ParseEvent::Reasoning(t) => d.reasoning_content = Some(t),
                ParseEvent::ToolCallStart { index, id, name } => {
                    d.tool_calls = Some(vec![ToolCallDelta {
                        index,
                        id: Some(id),
                        kind: Some("function".into()),
                        function: FunctionCallDelta {
                            name: Some(name),
                            arguments: Some(String::new()),
                        },
                    }]);
                }
                ParseEvent::ToolCallArgs { index, delta } => {
                    d.tool_calls = Some(vec![ToolCallDelta {
                        index,
                        id: None,
                        kind: None,
                        function: FunctionCallDelta {
                            name: None,
                            arguments: Some(delta),
                        },
                    }]);
                }
                ParseEvent::ToolCallEnd { .. } => return None,
            }
            Some(d)
        })
        .collect()
}

/// A whole OpenAI reply: content (None when there are calls and no text), reasoning, calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenAiReply {
    pub content: Option<String>,
    pub reasoning_content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

pub fn openai_reply(events: Vec<ParseEvent>) -> OpenAiReply {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<ToolCall> = Vec::new();
    for ev in events {
        match ev {
            ParseEvent::Text(t) => content.push_str(&t),
            ParseEvent::Reasoning(t) => reasoning.push_str(&t),
            ParseEvent::ToolCallStart { id, name, .. } => calls.push(ToolCall {
                id,
                kind: "function".into(),
                function: FunctionCall {
                    name,
                    arguments: String::new(),
                },
            }),
            ParseEvent::ToolCallArgs { index, delta } => {
                if let Some(c) = calls.get_mut(index) {
                    c.function.arguments.push_str(&delta);
                }
            }
            ParseEvent::ToolCallEnd { .. } => {}
        }
    }
    OpenAiReply {
        content: (!content.is_empty() || calls.is_empty()).then_some(content),
        reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
        tool_calls: calls,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Text,
    Thinking,
    ToolUse,
}

/// Anthropic content blocks from events, as a stream: opens a block when the kind of content
/// changes (or a call starts), closes it when the next begins or the reply ends.
#[derive(Debug, Default)]
pub struct AnthropicBlocks {
    open: Option<(usize, BlockKind)>,
    next: usize,
}

impl AnthropicBlocks {
    pub fn push(&mut self, events: Vec<ParseEvent>) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        for ev in events {
            match ev {
                ParseEvent::Text(text) => {
                    let index = self.ensure(BlockKind::Text, &mut out, || ResponseBlock::Text {
                        text: String::new(),
                    });
                    out.push(StreamEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::TextDelta { text },
                    });
                }
                ParseEvent::Reasoning(thinking) => {
                    let index =
                        self.ensure(BlockKind::Thinking, &mut out, || ResponseBlock::Thinking {
                            thinking: String::new(),
                            signature: String::new(),
                        });
                    out.push(StreamEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::ThinkingDelta { thinking },
                    });
                }
                ParseEvent::ToolCallStart { id, name, .. } => {
                    self.close(&mut out);
                    self.open_block(BlockKind::ToolUse, &mut out, || ResponseBlock::ToolUse {
                        id,
                        name,
                        input: Value::Object(Default::default()),
                    });
                }
                ParseEvent::ToolCallArgs { delta, .. } => {
                    if let Some((index, BlockKind::ToolUse)) = self.open {
                        out.push(StreamEvent::ContentBlockDelta {
                            index,
                            delta: BlockDelta::InputJsonDelta {
                                partial_json: delta,
                            },
                        });
                    }
                }
                ParseEvent::ToolCallEnd { .. } => self.close(&mut out),
            }
        }
        out
    }

    /// The reply ended: close the open block.
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        self.close(&mut out);
        out
    }

    fn ensure(
        &mut self,
        kind: BlockKind,
        out: &mut Vec<StreamEvent>,
        block: impl FnOnce() -> ResponseBlock,
    ) -> usize {
        match self.open {
            Some((index, k)) if k == kind => index,
            _ => {
                self.close(out);
                self.open_block(kind, out, block)
            }
        }
    }

    fn open_block(
        &mut self,
        kind: BlockKind,
        out: &mut Vec<StreamEvent>,
        block: impl FnOnce() -> ResponseBlock,
    ) -> usize {
        let index = self.next;
        self.next += 1;
        self.open = Some((index, kind));
        out.push(StreamEvent::ContentBlockStart {
            index,
            content_block: block(),
        });
        index
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some((index, _)) = self.open.take() {
            out.push(StreamEvent::ContentBlockStop { index });
        }
    }
}

/// The content blocks a stream of events describes, as a whole response has them: text and
/// thinking joined, tool inputs parsed from their joined JSON.
pub fn anthropic_content(events: &[StreamEvent]) -> Vec<ResponseBlock> {
    let mut blocks: Vec<ResponseBlock> = Vec::new();
    let mut json: Vec<String> = Vec::new();
    for ev in events {
        match ev {
            StreamEvent::ContentBlockStart { content_block, .. } => {
                blocks.push(content_block.clone());
                json.push(String::new());
            }
            StreamEvent::ContentBlockDelta { index, delta } => {
                match (blocks.get_mut(*index), delta) {
                    (Some(ResponseBlock::Text { text }), BlockDelta::TextDelta { text: t }) => {
                        text.push_str(t);
                    }
                    (
                        Some(ResponseBlock::Thinking { thinking, .. }),
                        BlockDelta::ThinkingDelta { thinking: t },
                    ) => thinking.push_str(t),
                    (
                        Some(ResponseBlock::ToolUse { .. }),
                        BlockDelta::InputJsonDelta { partial_json },
                    ) => {
                        if let Some(j) = json.get_mut(*index) {
                            j.push_str(partial_json);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    for (block, j) in blocks.iter_mut().zip(&json) {
        if let ResponseBlock::ToolUse { input, .. } = block
            && let Ok(v) = serde_json::from_str::<Value>(j)
        {
            *input = v;
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use metrale_protocol::anthropic::StreamEvent as E;
    use serde_json::json;

    use super::*;
    use crate::tool_parsers::{OutputParser, ReasoningFormat, ToolCallFormat, ToolSpec};

    const REPLY: &str = "<think>\nCheck the weather.\n</think>\n\nOn it.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\", \"nested\": {\"a\": [1]}}}\n</tool_call>";

    fn parser() -> OutputParser {
        OutputParser::new(
            Some(ReasoningFormat::Qwen3),
            false,
            Some((
                ToolCallFormat::Hermes,
                vec![ToolSpec {
                    name: "get_weather".into(),
                    parameters: json!({}),
                }],
            )),
            "toolu_",
        )
    }

    /// The reply fed in chunks of `size` bytes (at character boundaries), events per chunk.
    fn chunked(size: usize) -> Vec<Vec<ParseEvent>> {
        let mut p = parser();
        let mut out = Vec::new();
        let mut rest = REPLY;
        while !rest.is_empty() {
            let mut n = size.min(rest.len());
            while !rest.is_char_boundary(n) {
                n += 1;
            }
            out.push(p.push(&rest[..n]));
            rest = &rest[n..];
        }
        out.push(p.finish());
        out
    }

    #[test]
    fn anthropic_stream_rebuilds_the_whole_reply_at_any_chunking() {
        let whole: Vec<ParseEvent> = chunked(REPLY.len()).concat();
        let mut b = AnthropicBlocks::default();
        let mut evs = b.push(whole);
        evs.extend(b.finish());
        let want = vec![
            ResponseBlock::Thinking {
                thinking: "Check the weather.".into(),
                signature: String::new(),
            },
            ResponseBlock::Text {
                text: "On it.".into(),
            },
            ResponseBlock::ToolUse {
                id: "toolu_0".into(),
                name: "get_weather".into(),
                input: json!({"city": "Lyon"}),
            },
            ResponseBlock::ToolUse {
                id: "toolu_1".into(),
                name: "get_weather".into(),
                input: json!({"city": "Nice", "nested": {"a": [1]}}),
            },
        ];
        assert_eq!(anthropic_content(&evs), want);
        for size in 1..REPLY.len() {
            let mut b = AnthropicBlocks::default();
            let mut evs: Vec<E> = chunked(size).into_iter().flat_map(|e| b.push(e)).collect();
            evs.extend(b.finish());
            assert_eq!(anthropic_content(&evs), want, "chunks of {size}");
            // Every block opened is closed once, in order, and deltas land in the open block.
            let mut open = None;
            let mut next = 0;
            for e in &evs {
                match e {
                    E::ContentBlockStart { index, .. } => {
                        assert_eq!((open, *index), (None, next));
                        open = Some(*index);
                        next += 1;
                    }
                    E::ContentBlockDelta { index, .. } => assert_eq!(open, Some(*index)),
                    E::ContentBlockStop { index } => {
                        assert_eq!(open.take(), Some(*index));
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(open, None);
        }
    }

    #[test]
    fn openai_stream_deltas_join_to_the_whole_reply() {
        let whole = openai_reply(chunked(REPLY.len()).concat());
        assert_eq!(whole.content.as_deref(), Some("On it."));
        assert_eq!(
            whole.reasoning_content.as_deref(),
            Some("Check the weather.")
        );
        assert_eq!(whole.tool_calls.len(), 2);
        assert_eq!(whole.tool_calls[1].id, "toolu_1");
        let args: Value =
            serde_json::from_str(&whole.tool_calls[1].function.arguments).expect("json");
        assert_eq!(args, json!({"city": "Nice", "nested": {"a": [1]}}));
        for size in [1, 2, 3, 7, 16, 64] {
            // Join the deltas the way the openai client's stream helpers do.
            let (mut content, mut reasoning) = (String::new(), String::new());
            let mut calls: Vec<ToolCall> = Vec::new();
            for d in chunked(size).into_iter().flat_map(openai_deltas) {
                content.push_str(d.content.as_deref().unwrap_or_default());
                reasoning.push_str(d.reasoning_content.as_deref().unwrap_or_default());
                for tc in d.tool_calls.unwrap_or_default() {
                    if let Some(id) = tc.id {
                        assert_eq!(tc.index, calls.len(), "calls are numbered in order");
                        calls.push(ToolCall {
                            id,
                            kind: tc.kind.unwrap_or_default(),
                            function: FunctionCall {
                                name: tc.function.name.unwrap_or_default(),
                                arguments: String::new(),
                            },
                        });
                    }
                    let c = calls
                        .get_mut(tc.index)
                        .expect("started before its arguments");
                    c.function
                        .arguments
                        .push_str(tc.function.arguments.as_deref().unwrap_or_default());
                }
            }
            assert_eq!(Some(content), whole.content, "chunks of {size}");
            assert_eq!(Some(reasoning), whole.reasoning_content);
            assert_eq!(calls, whole.tool_calls);
        }
    }

    /// gpt-oss's harmony reply (reasoning, a preamble, a call ended by the `<|call|>` stop
    /// token, so without it) gives the same OpenAI message and Anthropic blocks at any
    /// chunking.
    #[test]
    fn a_harmony_reply_assembles_at_any_chunking() {
        const HARMONY: &str = "<|channel|>analysis<|message|>Weather: Lyon.<|end|>\
            <|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>\
            <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json\
            <|message|>{\"city\": \"Lyon\"}";
        let events = |size: usize| {
            let tools = vec![ToolSpec {
                name: "get_weather".into(),
                parameters: json!({}),
            }];
            let mut p = OutputParser::new(
                Some(ReasoningFormat::Harmony),
                false,
                Some((ToolCallFormat::Harmony, tools)),
                "call_",
            );
            let bytes: Vec<char> = HARMONY.chars().collect();
            let mut out: Vec<ParseEvent> = bytes
                .chunks(size)
                .flat_map(|c| p.push(&c.iter().collect::<String>()))
                .collect();
            out.extend(p.finish());
            out
        };
        for size in [1, 2, 5, 13, HARMONY.len()] {
            let r = openai_reply(events(size));
            assert_eq!(
                r.reasoning_content.as_deref(),
                Some("Weather: Lyon."),
                "{size}"
            );
            assert_eq!(r.content.as_deref(), Some("Checking."), "{size}");
            assert_eq!(r.tool_calls.len(), 1, "{size}");
            assert_eq!(r.tool_calls[0].function.name, "get_weather");
            assert_eq!(r.tool_calls[0].function.arguments, "{\"city\": \"Lyon\"}");
            let mut b = AnthropicBlocks::default();
            let mut evs = b.push(events(size));
            evs.extend(b.finish());
            assert_eq!(anthropic_content(&evs).len(), 3, "thinking, text, tool_use");
        }
    }

    #[test]
    fn a_reply_of_calls_only_has_null_content() {
        let r = openai_reply(vec![
            ParseEvent::ToolCallStart {
                index: 0,
                id: "c0".into(),
                name: "f".into(),
            },
            ParseEvent::ToolCallArgs {
                index: 0,
                delta: "{}".into(),
            },
            ParseEvent::ToolCallEnd { index: 0 },
        ]);
        assert_eq!(r.content, None);
        assert_eq!(openai_reply(vec![]).content.as_deref(), Some(""));
    }
}
