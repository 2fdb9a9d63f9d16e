//! Grammars whose markers are special tokens, on a tokenizer that has them
//! (tests/fixtures/tool_tokenizer: the demo's with DeepSeek's tool markers, Nemotron's
//! `<TOOLCALL>` and `</TOOLCALL>`, and `<think>`/`</think>` made special; built by
//! tests/fixtures/make_tool_tokenizer.py with the `tokenizers` package). The marker must come
//! as its one special token: the same text spelled in plain tokens is refused.

use serde_json::{Value, json};

use super::tests_calls::{Demo, load, parsed_calls, specs, tools};
use super::tools::{CallMode, call_grammar};
use super::{Spec, Think};
use crate::tool_parsers::ToolCallFormat;

fn fixture() -> Demo {
    load("../tests/fixtures/tool_tokenizer")
}

/// The formats written with special markers on this tokenizer.
const SPECIAL_FORMATS: [ToolCallFormat; 3] = [
    ToolCallFormat::DeepSeekV3,
    ToolCallFormat::DeepSeekV31,
    ToolCallFormat::NemotronJson,
];

#[test]
fn forced_calls_written_with_special_markers_parse_and_fit_their_schemas() {
    let d = fixture();
    let specs = specs();
    for format in SPECIAL_FORMATS {
        for named in [None, Some("add"), Some("get_weather")] {
            let mode = CallMode::Forced(named);
            let spec = call_grammar(format, &tools(&specs), mode, d.grammars.specials())
                .expect("a grammar");
            let c = d.compile(&spec, Think::Off);
            for seed in 0..4 {
                let (text, ended) = d.generate(&c, seed, 150, &|_, _| {});
                let text = format!("{}{text}", format.forced_prefix(named));
                assert!(ended, "{format:?} seed {seed}: no end: {text:?}");
                let calls = parsed_calls(format, &text);
                assert_eq!(calls.len(), 1, "{text:?}");
                if let Some(n) = named {
                    assert_eq!(calls[0], n);
                }
            }
        }
    }
}

#[test]
fn auto_blocks_open_on_the_special_token_and_may_hold_several_calls() {
    let d = fixture();
    let specs = specs();
    for format in SPECIAL_FORMATS {
        let spec = call_grammar(
            format,
            &tools(&specs),
            CallMode::Auto,
            d.grammars.specials(),
        )
        .expect("a grammar");
        let c = d.compile(&spec, Think::Off);
        let open = d.id(format.tags().0);
        let mut called = 0;
        for seed in 0..8 {
            // Free text, then a push toward opening a block, then toward ending.
            let push = |i: usize, l: &mut [f32]| {
                if (3..30).contains(&i) {
                    l[open as usize] += 20.0;
                }
                if i >= 3 {
                    l[d.eos as usize] += 20.0;
                }
            };
            let (text, ended) = d.generate(&c, seed, 300, &push);
            assert!(ended, "{format:?} seed {seed}: no end: {text:?}");
            called += parsed_calls(format, &text).len();
        }
        assert!(called > 0, "{format:?}: no seed opened a block");
    }
}

/// Whole replies fed to a grammar: how far it accepts `ids` then the end.
fn accepts(d: &Demo, spec: &Spec, think: Think, ids: &[u32]) -> bool {
    let c = d.compile(spec, think);
    let mut all = ids.to_vec();
    all.push(d.eos);
    c.valid_drafts(1, &[], &all) == all.len()
}

/// Under `auto` a block may hold two calls; a forced call must write its markers as the
/// special tokens (the same text spelled in plain tokens is refused; under `auto` it is free
/// text, which the parser reads all the same).
#[test]
fn blocks_of_two_calls_and_markers_that_must_be_special_tokens() {
    let d = fixture();
    let specs = specs();
    let tools = tools(&specs);
    let call = |format| match format {
        ToolCallFormat::DeepSeekV3 => {
            "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\", \"unit\": \"c\"}\n```<｜tool▁call▁end｜>"
        }
        ToolCallFormat::DeepSeekV31 => {
            "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\", \"unit\": \"c\"}<｜tool▁call▁end｜>"
        }
        _ => "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}",
    };
    let specials = d.grammars.specials();
    for format in SPECIAL_FORMATS {
        let (open, close) = format.tags();
        let (before, sep, after) = match format {
            ToolCallFormat::NemotronJson => ("[", ", ", "]"),
            _ => ("", "", ""),
        };
        let c = call(format);
        let block = format!("{open}{before}{c}{sep}{c}{after}{close}");
        let auto = call_grammar(format, &tools, CallMode::Auto, specials).expect("a grammar");
        let text = format!("Let me look.{block} Done.");
        let ids = d.tok.encode(&text, false).expect("encode");
        assert!(accepts(&d, &auto, Think::Off, &ids), "{format:?}: {text:?}");
        assert_eq!(parsed_calls(format, &text).len(), 2, "{text:?}");
        // Forced: one call after the opening, its markers as special tokens.
        let forced =
            call_grammar(format, &tools, CallMode::Forced(None), specials).expect("a grammar");
        let one = format!("{open}{before}{c}{after}{close}");
        let rest = one
            .strip_prefix(&format.forced_prefix(None))
            .expect("the forced opening starts the call");
        let ids = d.tok.encode(rest, false).expect("encode");
        assert!(
            accepts(&d, &forced, Think::Off, &ids),
            "{format:?}: {rest:?}"
        );
        let plain = d.tok.encode_as_text(rest).expect("encode");
        assert_ne!(plain, ids);
        assert!(!accepts(&d, &forced, Think::Off, &plain), "{format:?}");
    }
}

/// A `</think>` that is a special token ends the free reasoning section where the model writes
/// it (as `<think>` opens it), and the answer after it follows the grammar.
#[test]
fn special_think_tags_bound_the_free_reasoning_section() {
    let d = fixture();
    let spec = Spec::JsonSchema {
        schema: json!({"type": "object", "properties": {"n": {"type": "integer",
            "minimum": 0, "maximum": 9}}, "required": ["n"]}),
        strict: true,
    };
    let (think, close) = (d.id("<think>"), d.id("</think>"));
    let answer = d.tok.encode("{\"n\": 4}", false).expect("encode");
    let reply = |open: bool| {
        let mut ids = Vec::new();
        if open {
            ids.push(think);
        }
        ids.extend(d.tok.encode("Four, I think.", false).expect("encode"));
        ids.push(close);
        ids.extend(&answer);
        ids
    };
    assert!(accepts(&d, &spec, Think::Open, &reply(false)));
    assert!(accepts(&d, &spec, Think::Optional, &reply(true)));
    assert!(accepts(&d, &spec, Think::Optional, &answer));
    // The tags spelled in text tokens: the section never ends.
    let text = d.text(&reply(false));
    let plain = d.tok.encode_as_text(&text).expect("encode");
    assert!(!accepts(&d, &spec, Think::Open, &plain), "{text:?}");
    // Sampled: the reasoning is free and ends on the pushed `</think>`; the answer parses.
    let c = d.compile(&spec, Think::Open);
    for seed in 0..4 {
        let (text, ended) = d.generate(&c, seed, 80, &|i, l| {
            if i >= 6 {
                l[close as usize] += 20.0;
            }
        });
        assert!(ended, "seed {seed}: {text:?}");
        let (_, answer) = text.split_once("</think>").expect("a closed block");
        let v: Value = serde_json::from_str(answer.trim_start_matches('\n'))
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(v["n"].as_u64().is_some_and(|n| n <= 9), "{text:?}");
    }
}
