//! The tool-call, reasoning, vLLM and speculative grammar paths on the demo model's tokenizer,
//! through the host sampler: random logits (plus a push toward a tag where a test needs the
//! model to open something), so the mask alone makes the text valid, every time.

use serde_json::{Map, Value, json};

use super::tools::{CallMode, ToolSchema, call_grammar};
use super::{Constraint, Grammars, Spec, Think};
use crate::backend::sampling::{SampleRow, sample_row, uniform};
use crate::sampling_params::SamplingParams;
use crate::tokenizer::Tokenizer;
use crate::tool_parsers::{OutputParser, ParseEvent, ToolCallFormat, ToolSpec, coalesce};

pub(super) struct Demo {
    pub(super) tok: Tokenizer,
    pub(super) grammars: Grammars,
    pub(super) eos: u32,
}

fn demo() -> Demo {
    load("../models/demo")
}

/// The tokenizer in `dir` (from the engine crate), its grammar compiler and `<|im_end|>`.
pub(super) fn load(dir: &str) -> Demo {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let tok = Tokenizer::from_dir(&dir).expect("tokenizer");
    let eos = tok.token_to_id("<|im_end|>").expect("eos");
    let grammars = Grammars::new(tok.hf(), tok.vocab_size(), eos).expect("grammars");
    Demo { tok, grammars, eos }
}

impl Demo {
    pub(super) fn id(&self, t: &str) -> u32 {
        self.tok.token_to_id(t).expect("a token")
    }

    pub(super) fn compile(&self, spec: &Spec, think: Think) -> Constraint {
        self.grammars
            .compile(spec, "test", think)
            .unwrap_or_else(|e| panic!("{spec:?}: {e}"))
    }

    /// Sample under `c` from noise (plus `push(step, logits)`) until end-of-sequence or `max`
    /// tokens: the text and whether it ended.
    pub(super) fn generate(
        &self,
        c: &Constraint,
        seed: u64,
        max: usize,
        push: &dyn Fn(usize, &mut [f32]),
    ) -> (String, bool) {
        let params = SamplingParams {
            constraint: Some(c.clone()),
            eos_token_ids: vec![self.eos],
            seed,
            ..SamplingParams::default()
        };
        let vocab = self.tok.vocab_size();
        let mut out = Vec::new();
        for i in 0..max {
            let mut logits: Vec<f32> = (0..vocab)
                .map(|t| uniform(seed ^ t as u64, i as u64) as f32 * 8.0)
                .collect();
            push(i, &mut logits);
            let row = SampleRow {
                logits_row: 0,
                params: &params,
                all_token_ids: &out,
                num_prompt_tokens: 0,
                seq: Some(seed),
            };
            let t = sample_row(&logits, &row).token_id;
            if t == self.eos {
                return (self.text(&out), true);
            }
            out.push(t);
        }
        (self.text(&out), false)
    }

    pub(super) fn text(&self, ids: &[u32]) -> String {
        self.tok.decode(ids, false).expect("decode")
    }
}

const WEATHER: &str = r#"{"type": "object", "properties": {
    "city": {"type": "string", "minLength": 1, "maxLength": 8},
    "unit": {"enum": ["c", "f"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
  "required": ["city", "unit"], "additionalProperties": false}"#;
const ADD: &str = r#"{"type": "object", "properties": {
    "a": {"type": "integer", "minimum": 0, "maximum": 99},
    "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2},
    "note": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]},
    "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"}},
  "required": ["a", "code"], "additionalProperties": false}"#;

pub(super) fn specs() -> Vec<ToolSpec> {
    [("get_weather", WEATHER), ("add", ADD)]
        .iter()
        .map(|(n, s)| ToolSpec {
            name: (*n).into(),
            parameters: serde_json::from_str(s).expect("schema"),
        })
        .collect()
}

/// Every bound the schemas above set, beyond what `tool_parsers::schema::validate` checks.
fn check_bounds(name: &str, args: &Map<String, Value>) {
    let len = |k: &str| {
        args.get(k)
            .and_then(Value::as_str)
            .map(|s| s.chars().count())
    };
    if name == "get_weather" {
        assert!(
            len("city").is_some_and(|n| (1..=8).contains(&n)),
            "{args:?}"
        );
        if let Some(d) = args.get("days") {
            assert!(d.as_u64().is_some_and(|d| (1..=7).contains(&d)), "{args:?}");
        }
    } else {
        assert!(args["a"].as_u64().is_some_and(|a| a <= 99), "{args:?}");
        let code: Vec<char> = args["code"].as_str().expect("code").chars().collect();
        assert!(
            code.len() == 3 && code[..2].iter().all(char::is_ascii_uppercase),
            "{args:?}"
        );
        if let Some(n) = args.get("note").filter(|n| !n.is_null()) {
            assert!(
                n.as_str().is_some_and(|s| s.chars().count() <= 4),
                "{args:?}"
            );
        }
        if let Some(t) = args.get("tags") {
            assert!(t.as_array().is_some_and(|t| t.len() <= 2), "{args:?}");
        }
    }
}

/// Parse `text` as the server does; every call must be a call (no `<tool_call>` left in
/// text) whose arguments fit its schema. The calls' names.
pub(super) fn parsed_calls(format: ToolCallFormat, text: &str) -> Vec<String> {
    let specs = specs();
    let mut p = OutputParser::new(None, false, Some((format, specs.clone())), "c");
    let mut events = p.push(text);
    events.extend(p.finish());
    let mut calls = Vec::new();
    let mut args = String::new();
    for ev in coalesce(events) {
        match ev {
            ParseEvent::Text(t) => assert!(!t.contains(format.tags().0), "not a call: {text:?}"),
            ParseEvent::ToolCallStart { name, .. } => calls.push(name),
            ParseEvent::ToolCallArgs { delta, .. } => args.push_str(&delta),
            ParseEvent::ToolCallEnd { .. } => {
                let name = calls.last().expect("a call");
                let v: Value = serde_json::from_str(&args).expect("arguments are JSON");
                let obj = v.as_object().expect("an object");
                let schema = specs.iter().find(|s| &s.name == name).expect("declared");
                crate::tool_parsers::schema::validate(&schema.parameters, obj)
                    .unwrap_or_else(|e| panic!("{e}: {text:?}"));
                check_bounds(name, obj);
                args.clear();
            }
            ParseEvent::Reasoning(_) => {}
        }
    }
    calls
}

/// The formats whose calls open with a tag (their grammars share `tools.rs`'s frame) and
/// whose tags the demo tokenizer writes as text (DeepSeek's need special tokens:
/// `tests_marks.rs`).
const TAG_FORMATS: [ToolCallFormat; 4] = [
    ToolCallFormat::Qwen3Coder,
    ToolCallFormat::Hermes,
    ToolCallFormat::MiniMaxM2,
    ToolCallFormat::NemotronJson,
];

pub(super) fn tools(specs: &[ToolSpec]) -> Vec<ToolSchema<'_>> {
    specs
        .iter()
        .map(|t| ToolSchema {
            name: &t.name,
            parameters: &t.parameters,
        })
        .collect()
}

#[test]
fn forced_calls_in_every_tag_format_parse_and_fit_their_schemas() {
    let d = demo();
    let specs = specs();
    for format in TAG_FORMATS {
        for named in [None, Some("add"), Some("get_weather")] {
            let spec = call_grammar(
                format,
                &tools(&specs),
                CallMode::Forced(named),
                d.grammars.specials(),
            )
            .expect("ok");
            let c = d.compile(&spec, Think::Off);
            for seed in 0..6 {
                let (text, ended) = d.generate(&c, seed, 150, &|_, _| {});
                let text = format!("{}{text}", format.forced_prefix(named));
                assert!(
                    ended,
                    "{format:?} seed {seed}: no end in 150 tokens: {text:?}"
                );
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
fn auto_calls_are_free_text_until_a_call_opens_then_well_formed() {
    let d = demo();
    let specs = specs();
    let eos = d.eos;
    for format in TAG_FORMATS {
        let spec = call_grammar(
            format,
            &tools(&specs),
            CallMode::Auto,
            d.grammars.specials(),
        )
        .expect("ok");
        let c = d.compile(&spec, Think::Off);
        // The opening tag's tokens (one special token, or MiniMax-M2's text).
        let open = d.tok.encode(format.tags().0, false).expect("encode");
        // Nemotron's list closes on `]`, which random logits pick no more often than `, `
        // (another call): pushed with the end, so a list ends in a few calls.
        let list_end = d.tok.encode("]", false).expect("encode");
        let mut called = 0;
        for seed in 0..8 {
            // Some free text first, then a push toward opening a call or ending, then toward
            // ending only (after a call, the reply may end). A tag of several tokens (MiniMax-M2's
            // text) is pushed token by token on even seeds, harder than the end.
            let push = |i: usize, l: &mut [f32]| {
                if open.len() == 1 && (3..30).contains(&i) {
                    l[open[0] as usize] += 20.0;
                }
                if open.len() > 1 && seed % 2 == 0 && (3..3 + open.len()).contains(&i) {
                    l[open[i - 3] as usize] += 30.0;
                }
                if i >= 3 {
                    l[eos as usize] += 20.0;
                    if format == ToolCallFormat::NemotronJson {
                        l[list_end[0] as usize] += 20.0;
                    }
                }
            };
            let (text, ended) = d.generate(&c, seed, 300, &push);
            assert!(ended, "{format:?} seed {seed}: no end: {text:?}");
            called += parsed_calls(format, &text).len();
        }
        assert!(called > 0, "{format:?}: no seed opened a call");
    }
}

#[test]
fn reasoning_stays_free_and_the_answer_follows_the_grammar() {
    let d = demo();
    let spec = Spec::JsonSchema {
        schema: json!({"type": "object", "properties": {"n": {"type": "integer",
            "minimum": 0, "maximum": 9}}, "required": ["n"]}),
        strict: true,
    };
    let (think, close) = (d.id("<think>"), d.id("</think>"));
    for (mode, prefix) in [(Think::Open, "<think>"), (Think::Optional, "")] {
        let c = d.compile(&spec, mode);
        for seed in 0..4 {
            let push = |i: usize, l: &mut [f32]| {
                if i == 0 && mode == Think::Optional {
                    l[think as usize] += 20.0;
                }
                if i >= 6 {
                    l[close as usize] += 20.0;
                }
            };
            let (text, ended) = d.generate(&c, seed, 80, &push);
            assert!(ended, "{mode:?} seed {seed}: {text:?}");
            let full = format!("{prefix}{text}");
            let (thought, answer) = full.split_once("</think>").expect("a closed block");
            assert!(
                thought.starts_with("<think>") && thought.len() > 10,
                "{full:?}"
            );
            let v: Value = serde_json::from_str(answer.trim_start_matches('\n'))
                .unwrap_or_else(|e| panic!("{full:?}: {e}"));
            assert!(v["n"].as_u64().is_some_and(|n| n <= 9), "{full:?}");
        }
    }
    // Without a block, the answer is held from the first token (`<think>` pushed away, and
    // `<`, which could spell it too).
    let c = d.compile(&spec, Think::Optional);
    let lt = d.tok.encode("<", false).expect("encode")[0];
    let (text, _) = d.generate(&c, 9, 40, &|_, l| {
        l[think as usize] -= 100.0;
        l[lt as usize] -= 100.0;
    });
    assert!(text.starts_with("{\"n\": "), "{text:?}");
}

/// A grammar and the check every reply under it must pass.
type Case = (Spec, fn(&str) -> bool);

#[test]
fn regex_choice_and_lark_hold_the_reply() {
    let d = demo();
    let cases: [Case; 3] = [
        (Spec::Regex("[a-z]{3}-[0-9]{2}".into()), |t| {
            let b = t.as_bytes();
            b.len() == 6
                && b[..3].iter().all(u8::is_ascii_lowercase)
                && b[3] == b'-'
                && b[4..].iter().all(u8::is_ascii_digit)
        }),
        (
            Spec::Choice(vec!["yes".into(), "no".into(), "maybe \"so\"".into()]),
            |t| ["yes", "no", "maybe \"so\""].contains(&t),
        ),
        (
            Spec::Lark("start: \"(\" NUM (\"+\" NUM)? \")\"\nNUM: /[0-9]{1,2}/".into()),
            |t| t.starts_with('(') && t.ends_with(')') && t.len() <= 7,
        ),
    ];
    for (spec, ok) in cases {
        let c = d.compile(&spec, Think::Off);
        for seed in 0..4 {
            let (text, ended) = d.generate(&c, seed, 20, &|_, _| {});
            assert!(ended && ok(&text), "{spec:?}: {text:?}");
        }
    }
    let e = d
        .grammars
        .compile(&Spec::Regex("(a".into()), "guided_regex", Think::Off);
    assert!(e.is_err_and(|e| e.to_string().starts_with("guided_regex: ")));
    let e = d.grammars.compile(
        &Spec::Lark("start: nope".into()),
        "guided_grammar",
        Think::Off,
    );
    assert!(e.is_err_and(|e| e.to_string().starts_with("guided_grammar: ")));
}

#[test]
fn a_draft_the_grammar_forbids_leaves_later_rows_unmasked_and_rolls_back() {
    let d = demo();
    let c = d.compile(&Spec::JsonObject, Think::Off);
    let vocab = d.tok.vocab_size();
    let mask = |out: &[u32]| {
        let mut l = vec![0.0f32; vocab];
        c.mask(Some(5), out, &mut l, &[d.eos]);
        l.iter().map(|v| v.is_finite()).collect::<Vec<bool>>()
    };
    let open = d.tok.encode("{\"k\": ", false).expect("encode");
    let bad = d.tok.encode("}", false).expect("encode")[0];
    let first = mask(&open);
    assert!(!first[bad as usize], "a value must come first");
    // Rows of one verify step: the output, then the output and the forbidden draft.
    let mut row = open.clone();
    row.push(bad);
    assert!(
        mask(&row).iter().all(|&a| a),
        "after a forbidden draft: unmasked"
    );
    // The next step: the draft was rejected, the matcher serves the output as before.
    assert_eq!(mask(&open), first);
    let fresh = d.compile(&Spec::JsonObject, Think::Off);
    let mut l = vec![0.0f32; vocab];
    fresh.mask(None, &open, &mut l, &[d.eos]);
    assert_eq!(
        first,
        l.iter().map(|v| v.is_finite()).collect::<Vec<bool>>()
    );
}

/// A `qwen3_coder` call may write its parameters in any order, each at most once; a required one
/// left out is still refused. Checked by feeding whole call texts to the grammar of a forced
/// call (after its forced opening) and asking how far it accepts them.
#[test]
fn qwen3_coder_parameters_come_in_any_order_and_required_ones_still_hold() {
    let d = demo();
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"], "type": "string"}
    }, "required": ["city", "days"]});
    let tools = [ToolSchema {
        name: "weather",
        parameters: &schema,
    }];
    let spec = call_grammar(
        ToolCallFormat::Qwen3Coder,
        &tools,
        CallMode::Forced(Some("weather")),
        d.grammars.specials(),
    )
    .expect("grammar");
    let c = d.compile(&spec, Think::Off);
    let prefix = ToolCallFormat::Qwen3Coder.forced_prefix(Some("weather"));
    let p = |k: &str, v: &str| format!("<parameter={k}>\n{v}\n</parameter>\n");
    let call = |params: &[String]| format!("{}</function>\n</tool_call>", params.concat());
    let (city, days, unit) = (p("city", "Paris"), p("days", "3"), p("unit", "c"));
    let accepts = |text: &str, seq: u64| {
        let body = text.strip_prefix(&prefix).unwrap_or(text);
        let ids = d.tok.encode(body, false).expect("encode");
        // The whole text, then the end.
        let mut all = ids.clone();
        all.push(d.eos);
        c.valid_drafts(seq, &[], &all) == all.len()
    };
    let full = |params: &[String]| format!("{prefix}{}", call(params));
    for (n, order) in [
        vec![city.clone(), days.clone(), unit.clone()],
        vec![unit.clone(), days.clone(), city.clone()],
        vec![days.clone(), city.clone()],
        vec![days.clone(), unit.clone(), city.clone()],
    ]
    .iter()
    .enumerate()
    {
        assert!(
            accepts(&full(order), n as u64),
            "order {n}: {:?}",
            full(order)
        );
    }
    // A required parameter missing, or one written twice: refused.
    assert!(!accepts(&full(&[unit.clone(), city.clone()]), 10));
    assert!(!accepts(
        &full(&[days.clone(), city.clone(), days.clone()]),
        11
    ));
    // Values still hold their types in any order.
    assert!(!accepts(&full(&[p("days", "three"), city]), 12));
}

/// MiniMax-M2 writes values inline (`<parameter name="k">v</parameter>`) and its parser drops
/// one newline on each side of a value: the grammar holds raw values to neither starting nor
/// ending with one, writes a literal that does with one more, and takes parameters in any
/// order with the required ones always.
#[test]
fn minimax_values_are_inline_and_never_lose_a_newline() {
    let d = demo();
    let schema = json!({"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "unit": {"enum": ["c", "\nf"], "type": "string"}
    }, "required": ["city", "days"]});
    let tools = [ToolSchema {
        name: "weather",
        parameters: &schema,
    }];
    let format = ToolCallFormat::MiniMaxM2;
    let spec = call_grammar(
        format,
        &tools,
        CallMode::Forced(Some("weather")),
        d.grammars.specials(),
    )
    .expect("grammar");
    let c = d.compile(&spec, Think::Off);
    let prefix = format.forced_prefix(Some("weather"));
    let p = |k: &str, v: &str| format!("<parameter name=\"{k}\">{v}</parameter>\n");
    let body = |params: &[String]| format!("{}</invoke>\n</minimax:tool_call>", params.concat());
    let accepts = |params: &[String], seq: u64| {
        let ids = d.tok.encode(&body(params), false).expect("encode");
        let mut all = ids.clone();
        all.push(d.eos);
        c.valid_drafts(seq, &[], &all) == all.len()
    };
    let (city, days) = (p("city", "Paris"), p("days", "3"));
    let unit_f = p("unit", "\n\nf");
    assert!(accepts(&[city.clone(), days.clone()], 1));
    assert!(accepts(&[days.clone(), unit_f.clone(), city.clone()], 2));
    assert!(accepts(&[p("unit", "c"), city.clone(), days.clone()], 3));
    // Missing a required parameter, one twice, a value of the wrong type: refused.
    assert!(!accepts(std::slice::from_ref(&city), 4));
    assert!(!accepts(&[city.clone(), days.clone(), days.clone()], 5));
    assert!(!accepts(&[city.clone(), p("days", "three")], 6));
    // A raw value the parser would cut, and a literal written without its extra newline.
    assert!(!accepts(&[p("city", "\nParis"), days.clone()], 7));
    assert!(!accepts(&[p("city", "Paris\n"), days.clone()], 8));
    assert!(!accepts(&[p("unit", "\nf"), city.clone(), days.clone()], 9));
    // What the grammar accepts, the parser reads back as the schema's values.
    let specs = [ToolSpec {
        name: "weather".into(),
        parameters: schema.clone(),
    }];
    let text = format!("{prefix}{}", body(&[unit_f, city, days]));
    let inner = text
        .strip_prefix(crate::tool_parsers::minimax_m2::OPEN)
        .and_then(|t| t.strip_suffix(crate::tool_parsers::minimax_m2::CLOSE))
        .expect("one block");
    let calls = crate::tool_parsers::minimax_m2::parse_block(inner, &specs).expect("parses");
    assert_eq!(calls.len(), 1);
    let args: Value = serde_json::from_str(&calls[0].args.concat()).expect("JSON");
    assert_eq!(args, json!({"unit": "\nf", "city": "Paris", "days": 3}));
}
