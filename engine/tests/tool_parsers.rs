//! The output parsers on recorded model outputs: Qwen3 (`hermes` calls, `<think>` reasoning)
//! and Qwen3-Coder / Qwen3.6 (`qwen3_coder` calls), written as those models write them (the
//! layouts their chat templates render for earlier calls). Every output is also fed split at
//! every byte offset (and byte by byte): the joined events must equal the one-shot parse.

use metrale_engine::tool_parsers::{
    OutputParser, ParseEvent, ReasoningFormat, ToolCallFormat, ToolSpec, coalesce,
};
use serde_json::{Value, json};

use ParseEvent::{Reasoning, Text, ToolCallArgs, ToolCallEnd, ToolCallStart};

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "get_weather".into(),
            parameters: json!({"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"},
                "metric": {"type": "boolean"}}, "required": ["city"]}),
        },
        ToolSpec {
            name: "write_file".into(),
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string"}, "content": {"type": "string"},
                "options": {"type": "object"}, "tags": {"type": "array"},
                "ratio": {"type": "number"}}}),
        },
    ]
}

fn parser(format: Option<ToolCallFormat>, reasoning: bool, open: bool) -> OutputParser {
    OutputParser::new(
        reasoning.then_some(ReasoningFormat::Qwen3),
        open,
        format.map(|f| (f, tools())),
        "call_",
    )
}

/// Feed `chunks` and finish; the coalesced events.
fn run(mut p: OutputParser, chunks: &[&str]) -> Vec<ParseEvent> {
    let mut evs = Vec::new();
    for c in chunks {
        evs.extend(p.push(c));
    }
    evs.extend(p.finish());
    coalesce(evs)
}

/// Parse `text` whole, split in two at every byte offset (that is a character boundary: the
/// detokenizer never splits a character), and one character at a time; all must agree.
/// Returns the one-shot events.
fn parse_all_ways(
    format: Option<ToolCallFormat>,
    reasoning: bool,
    open: bool,
    text: &str,
) -> Vec<ParseEvent> {
    let whole = run(parser(format, reasoning, open), &[text]);
    for i in 0..=text.len() {
        if !text.is_char_boundary(i) {
            continue;
        }
        let split = run(parser(format, reasoning, open), &[&text[..i], &text[i..]]);
        assert_eq!(split, whole, "split at byte {i} of {text:?}");
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(
        run(parser(format, reasoning, open), &refs),
        whole,
        "char by char"
    );
    whole
}

fn start(index: usize, name: &str) -> ParseEvent {
    ToolCallStart {
        index,
        id: format!("call_{index}"),
        name: name.into(),
    }
}

fn args(index: usize, v: Value) -> ParseEvent {
    // Arguments come as `{"k": v, "k2": v2}` with serde_json's value text.
    let m = v.as_object().expect("object");
    let mut s = String::from("{");
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&format!("{}: {}", Value::String(k.clone()), v));
    }
    s.push('}');
    ToolCallArgs { index, delta: s }
}

fn end(index: usize) -> ParseEvent {
    ToolCallEnd { index }
}

const HERMES_TWO_CALLS: &str = "<think>\nThe user wants the weather in two cities. I'll call get_weather twice.\n</think>\n\nLet me check both cities.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", \"metric\": true}}\n</tool_call>";

#[test]
fn hermes_two_calls_after_thinking_and_text() {
    let evs = parse_all_ways(Some(ToolCallFormat::Hermes), true, false, HERMES_TWO_CALLS);
    assert_eq!(
        evs,
        vec![
            Reasoning(
                "The user wants the weather in two cities. I'll call get_weather twice.".into()
            ),
            Text("Let me check both cities.".into()),
            start(0, "get_weather"),
            args(0, json!({"city": "Paris", "days": 3})),
            end(0),
            start(1, "get_weather"),
            args(1, json!({"city": "東京", "metric": true})),
            end(1),
        ]
    );
}

#[test]
fn hermes_nested_and_unicode_arguments_keep_their_order_and_values() {
    let out = "<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"src/ñ.rs\", \"options\": {\"mode\": {\"octal\": \"0644\", \"flags\": [1, [2, {\"x\": null}]]}}, \"content\": \"fn main() {\\n    println!(\\\"héllo 👋 </tool_call>\\\");\\n}\\n\", \"ratio\": 0.5}}\n</tool_call>";
    // A `</tool_call>` inside a JSON string ends the call early: the model's text cannot be
    // told apart from a real closing tag, so that call is malformed and returned as text.
    let evs = parse_all_ways(Some(ToolCallFormat::Hermes), false, false, out);
    assert!(matches!(&evs[0], Text(t) if t.starts_with("<tool_call>\n{\"name\": \"write_file\"")));
    let good = out.replace(" </tool_call>", " done");
    let evs = parse_all_ways(Some(ToolCallFormat::Hermes), false, false, &good);
    let ToolCallArgs { delta, .. } = &evs[1] else {
        panic!("{evs:?}")
    };
    let v: Value = serde_json::from_str(delta).expect("arguments are JSON");
    assert_eq!(
        v,
        json!({"path": "src/ñ.rs", "options": {"mode": {"octal": "0644", "flags": [1, [2, {"x": null}]]}},
               "content": "fn main() {\n    println!(\"héllo 👋 done\");\n}\n", "ratio": 0.5})
    );
    let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
    assert_eq!(
        keys,
        ["path", "options", "content", "ratio"],
        "model's order"
    );
}

#[test]
fn hermes_malformed_calls_come_back_as_text() {
    for out in [
        // Not JSON.
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}\n</tool_call>",
        // No name.
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        // A tool that was not declared.
        "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",
        // Arguments that are not an object.
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1]}\n</tool_call>",
        // Cut off (max_tokens) inside the call.
        "<tool_call>\n{\"name\": \"get_weather\", \"argum",
    ] {
        let evs = parse_all_ways(Some(ToolCallFormat::Hermes), false, false, out);
        assert_eq!(evs, vec![Text(out.into())], "{out}");
    }
    // Text around a malformed call stays, and a good call after it still parses.
    let out = "Try: <tool_call>oops</tool_call> then <tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}\n</tool_call>";
    let evs = parse_all_ways(Some(ToolCallFormat::Hermes), false, false, out);
    assert_eq!(
        evs,
        vec![
            Text("Try: <tool_call>oops</tool_call> then".into()),
            start(0, "get_weather"),
            args(0, json!({"city": "Oslo"})),
            end(0),
        ]
    );
}

const CODER_CALLS: &str = "I'll write the file and then check the weather.\n<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/ünï.txt\n</parameter>\n<parameter=content>\nline 1\n\n  indented <b>tag</b> & {\"json\": true}\n</parameter>\n<parameter=options>\n{\"overwrite\": true, \"nested\": {\"a\": [1, 2]}}\n</parameter>\n<parameter=tags>\n[\"x\", \"y\"]\n</parameter>\n<parameter=ratio>\n0.25\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\n7\n</parameter>\n<parameter=metric>\nfalse\n</parameter>\n</function>\n</tool_call>";

#[test]
fn qwen3_coder_parameters_become_the_declared_types() {
    let evs = parse_all_ways(Some(ToolCallFormat::Qwen3Coder), false, false, CODER_CALLS);
    assert_eq!(
        evs,
        vec![
            Text("I'll write the file and then check the weather.".into()),
            start(0, "write_file"),
            args(
                0,
                json!({"path": "/tmp/ünï.txt",
                       "content": "line 1\n\n  indented <b>tag</b> & {\"json\": true}",
                       "options": {"overwrite": true, "nested": {"a": [1, 2]}},
                       "tags": ["x", "y"], "ratio": 0.25})
            ),
            end(0),
            start(1, "get_weather"),
            // `city` is declared a string: "42" stays text; `days` is an integer.
            args(1, json!({"city": "42", "days": 7, "metric": false})),
            end(1),
        ]
    );
}

#[test]
fn qwen3_coder_streams_each_parameter_as_an_argument_delta() {
    let mut p = parser(Some(ToolCallFormat::Qwen3Coder), false, false);
    let evs: Vec<ParseEvent> = p.push(CODER_CALLS);
    let deltas: Vec<&str> = evs
        .iter()
        .filter_map(|e| match e {
            ToolCallArgs { index: 1, delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        [
            "{\"city\": \"42\"",
            ", \"days\": 7",
            ", \"metric\": false",
            "}"
        ]
    );
    assert_eq!(p.num_calls, 2);
}

#[test]
fn qwen3_coder_after_reasoning_in_an_open_think_block() {
    // Qwen3.6's template opens `<think>\n` in the prompt: the reply starts inside it.
    let out = "The user asked for Berlin.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nBerlin\n</parameter>\n</function>\n</tool_call>";
    let evs = parse_all_ways(Some(ToolCallFormat::Qwen3Coder), true, true, out);
    assert_eq!(
        evs,
        vec![
            Reasoning("The user asked for Berlin.".into()),
            start(0, "get_weather"),
            args(0, json!({"city": "Berlin"})),
            end(0),
        ]
    );
}

#[test]
fn qwen3_coder_malformed_calls_come_back_as_text() {
    for out in [
        // No </parameter>.
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",
        // No </function>.
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>",
        // Unknown function.
        "<tool_call>\n<function=launch>\n</function>\n</tool_call>",
        // Hermes JSON where XML was expected.
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
        // Cut off.
        "<tool_call>\n<function=get_weather>\n<parameter=ci",
    ] {
        let evs = parse_all_ways(Some(ToolCallFormat::Qwen3Coder), false, false, out);
        assert_eq!(evs, vec![Text(out.into())], "{out}");
    }
}

#[test]
fn reasoning_is_split_and_the_answer_keeps_its_text() {
    let out = "<think>\nOkay, 2 + 2 is 4. A `<tool_call>` here is just thinking.\n</think>\n\nThe answer is **4**.";
    let evs = parse_all_ways(Some(ToolCallFormat::Hermes), true, false, out);
    assert_eq!(
        evs,
        vec![
            Reasoning("Okay, 2 + 2 is 4. A `<tool_call>` here is just thinking.".into()),
            Text("The answer is **4**.".into()),
        ]
    );
    // Thinking off: the template closed an empty block in the prompt; the reply is all text.
    let evs = parse_all_ways(None, true, false, "Just 4.\n<think>not a block</think>");
    assert_eq!(
        evs,
        vec![Text("Just 4.\n<think>not a block</think>".into())]
    );
    // Cut off while thinking: all reasoning.
    let evs = parse_all_ways(None, true, false, "<think>\nHmm, let me th");
    assert_eq!(evs, vec![Reasoning("Hmm, let me th".into())]);
    // Without the reasoning parser the tags are text.
    let evs = parse_all_ways(None, false, false, out);
    assert_eq!(evs, vec![Text(out.into())]);
}

#[test]
fn plain_text_passes_through_whole_with_tools_on() {
    for out in [
        "Hello! How can I help you today? <tool",
        "a < b and c <tool_cal d",
        "trailing spaces  \n\n",
        "",
    ] {
        let evs = parse_all_ways(Some(ToolCallFormat::Hermes), true, false, out);
        let want = if out.is_empty() {
            vec![]
        } else {
            vec![Text(out.into())]
        };
        assert_eq!(evs, want, "{out:?}");
    }
}

#[test]
fn forced_prefixes_parse_when_the_model_continues_them() {
    let f = ToolCallFormat::Qwen3Coder;
    let text = format!(
        "{}\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>",
        f.forced_prefix(Some("get_weather")).trim_end()
    );
    let evs = parse_all_ways(Some(f), false, false, &text);
    assert_eq!(evs[0], start(0, "get_weather"));
    let f = ToolCallFormat::Hermes;
    let text = format!(
        "{}{{\"city\": \"Rome\"}}}}\n</tool_call>",
        f.forced_prefix(Some("get_weather"))
    );
    let evs = parse_all_ways(Some(f), false, false, &text);
    assert_eq!(evs[1], args(0, json!({"city": "Rome"})));
    let text = format!(
        "{}get_weather\", \"arguments\": {{\"city\": \"Oslo\"}}}}\n</tool_call>",
        f.forced_prefix(None)
    );
    assert_eq!(
        parse_all_ways(Some(f), false, false, &text)[1],
        args(0, json!({"city": "Oslo"}))
    );
}

#[test]
fn calls_that_do_not_fit_the_tool_schema_come_back_as_text() {
    // get_weather requires `city`; `days` is an integer and `metric` a boolean.
    let outs = [
        (
            ToolCallFormat::Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}\n</tool_call>",
        ),
        (
            ToolCallFormat::Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": \"two\"}}\n</tool_call>",
        ),
        (
            ToolCallFormat::Qwen3Coder,
            "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
        ),
        (
            ToolCallFormat::Qwen3Coder,
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=metric>\nmaybe\n</parameter>\n</function>\n</tool_call>",
        ),
    ];
    for (f, out) in outs {
        let evs = parse_all_ways(Some(f), false, false, out);
        assert_eq!(evs, vec![Text(out.into())], "{out}");
    }
}

#[test]
fn qwen3_coder_reads_the_compact_layout_of_newer_templates() {
    // Qwen3.5/3.6 templates render earlier calls as `<parameter=k>value</parameter>` with no
    // newlines inside the tags; models trained on them write it that way.
    let out = "<tool_call>\n<function=get_weather>\n<parameter=city>Den Haag</parameter>\n<parameter=days>2</parameter>\n</function>\n</tool_call>";
    let evs = parse_all_ways(Some(ToolCallFormat::Qwen3Coder), false, false, out);
    assert_eq!(
        evs,
        vec![
            start(0, "get_weather"),
            args(0, json!({"city": "Den Haag", "days": 2})),
            end(0),
        ]
    );
}

/// MiniMax-M2's interleaved thinking then one block of two invocations, as its guide shows
/// them; then a block whose invocation names no declared tool, which stays text.
const MINIMAX_TWO_CALLS: &str = "<think>\nTwo cities: two calls.\n</think>\n\nLet me look.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n</invoke>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">東京</parameter>\n<parameter name=\"metric\">true</parameter>\n</invoke>\n</minimax:tool_call>";

#[test]
fn minimax_one_block_of_two_calls_after_thinking() {
    let evs = parse_all_ways(
        Some(ToolCallFormat::MiniMaxM2),
        true,
        false,
        MINIMAX_TWO_CALLS,
    );
    assert_eq!(
        evs,
        vec![
            Reasoning("Two cities: two calls.".into()),
            Text("Let me look.".into()),
            start(0, "get_weather"),
            args(0, json!({"city": "Paris", "days": 3})),
            end(0),
            start(1, "get_weather"),
            args(1, json!({"city": "東京", "metric": true})),
            end(1),
        ]
    );
    let bad = "Sure.\n<minimax:tool_call>\n<invoke name=\"nope\">\n</invoke>\n</minimax:tool_call>";
    let evs = parse_all_ways(Some(ToolCallFormat::MiniMaxM2), false, false, bad);
    assert_eq!(evs, vec![Text(bad.into())]);
    // Cut off inside a block (max_tokens): text.
    let cut = "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"ci";
    let evs = parse_all_ways(Some(ToolCallFormat::MiniMaxM2), false, false, cut);
    assert_eq!(evs, vec![Text(cut.into())]);
    assert_eq!(
        ToolCallFormat::from_flag("minimax_m2"),
        Some(ToolCallFormat::MiniMaxM2)
    );
}

/// DeepSeek's calls between its special tokens: V3's (type, name, fenced JSON) and V3.1's
/// (name, arguments), reasoning first as R1 and V3.1 write it; a block that names no declared
/// tool or is cut off stays text.
#[test]
fn deepseek_blocks_in_both_layouts() {
    let (open, close) = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>");
    let (begin, end_, sep) = (
        "<｜tool▁call▁begin｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁sep｜>",
    );
    let v3 = format!(
        "<think>\nLook it up.\n</think>\n\nChecking.{open}{begin}function{sep}get_weather\n```json\n{{\"city\": \"Paris\", \"days\": 3}}\n```{end_}{begin}function{sep}get_weather\n```json\n{{\"city\": \"東京\"}}\n```{end_}{close}"
    );
    let v31 = format!(
        "<think>\nLook it up.\n</think>\n\nChecking.{open}{begin}get_weather{sep}{{\"city\": \"Paris\", \"days\": 3}}{end_}{begin}get_weather{sep}{{\"city\": \"東京\"}}{end_}{close}"
    );
    for (format, text) in [
        (ToolCallFormat::DeepSeekV3, &v3),
        (ToolCallFormat::DeepSeekV31, &v31),
    ] {
        let evs = parse_all_ways(Some(format), true, false, text);
        assert_eq!(
            evs,
            vec![
                Reasoning("Look it up.".into()),
                Text("Checking.".into()),
                start(0, "get_weather"),
                args(0, json!({"city": "Paris", "days": 3})),
                end(0),
                start(1, "get_weather"),
                args(1, json!({"city": "東京"})),
                end(1),
            ],
            "{format:?}"
        );
        assert!(format.needs_special_tokens());
        assert_eq!(ToolCallFormat::from_flag(format.flag_value()), Some(format));
    }
    let bad = format!("Sure.{open}{begin}nope{sep}{{}}{end_}{close}");
    let evs = parse_all_ways(Some(ToolCallFormat::DeepSeekV31), false, false, &bad);
    assert_eq!(evs, vec![Text(bad.clone())]);
    let cut = format!("{open}{begin}get_weather{sep}{{\"ci");
    let evs = parse_all_ways(Some(ToolCallFormat::DeepSeekV31), false, false, &cut);
    assert_eq!(evs, vec![Text(cut.clone())]);
}

/// Nemotron Nano v2's `<TOOLCALL>` JSON lists (`nemotron_json`), as the model writes them
/// after its template opened `<think>\n` (thinking on: the reply starts inside the block) or
/// wrote `<think></think>` (`/no_think`: no tags in the reply); a list naming no declared tool,
/// an empty list, and a block cut off stay text.
#[test]
fn nemotron_json_lists_after_open_or_closed_thinking() {
    let f = Some(ToolCallFormat::NemotronJson);
    let calls = "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\"}}]</TOOLCALL>";
    let expected = |reasoning: Option<&str>| {
        let mut v: Vec<ParseEvent> = reasoning.map(|r| Reasoning(r.into())).into_iter().collect();
        v.extend([
            Text("Checking both.".into()),
            start(0, "get_weather"),
            args(0, json!({"city": "Paris", "days": 3})),
            end(0),
            start(1, "get_weather"),
            args(1, json!({"city": "東京"})),
            end(1),
        ]);
        v
    };
    // Thinking on: the prompt ended in `<think>\n`.
    let thinking = format!("Two cities.\n</think>\n\nChecking both.\n{calls}");
    let evs = parse_all_ways(f, true, true, &thinking);
    assert_eq!(evs, expected(Some("Two cities.")));
    // `/no_think`: the prompt closed an empty block; the reply is all answer.
    let answer = format!("Checking both.\n{calls}");
    assert_eq!(parse_all_ways(f, true, false, &answer), expected(None));
    assert_eq!(parse_all_ways(f, false, false, &answer), expected(None));
    for bad in [
        "Sure.\n<TOOLCALL>[{\"name\": \"nope\", \"arguments\": {}}]</TOOLCALL>",
        "<TOOLCALL>[]</TOOLCALL>",
        "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}]</TOOLCALL>",
        // Cut off inside the block (max_tokens).
        "<TOOLCALL>[{\"name\": \"get_weather\", \"argu",
    ] {
        assert_eq!(parse_all_ways(f, false, false, bad), vec![Text(bad.into())]);
    }
    let f = ToolCallFormat::NemotronJson;
    assert!(f.needs_special_tokens());
    assert_eq!(ToolCallFormat::from_flag("nemotron_json"), Some(f));
    assert_eq!(ToolCallFormat::from_flag("nemotron_nano_v2"), Some(f));
    assert_eq!(f.flag_value(), "nemotron_json");
}
