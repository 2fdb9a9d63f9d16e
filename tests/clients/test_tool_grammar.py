"""The tool grammar under `tool_choice: auto` and vLLM's structured-output fields, through the
official `openai` client (engine/tests/structured_outputs.rs serves the demo model with a
`--tool-call-parser` and runs this; METRALE_PARSER says which). The demo model's weights are
random: a logit bias pushes it to open calls, and the grammar must make every call it opens
parse into arguments that validate against the tool's schema (checked with `jsonschema`)."""

import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

BASE = os.environ["METRALE_BASE_URL"]
client = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=120)
MODEL = "demo"
TOOL_CALL = 6014  # `<tool_call>` in the demo vocabulary

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
ADD = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 99},
        "b": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in SCHEMAS.items()]


def auto_call(i):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Request {i}: the weather in a city, or a sum."}],
        tools=TOOLS,
        temperature=0.9,
        seed=i,
        max_tokens=150,
        # Opening a call is pushed (wherever the grammar allows it: in free text); a call then
        # follows call until `max_tokens` cuts the last, which comes back as text.
        logit_bias={str(TOOL_CALL): 30},
    )
    c = r.choices[0]
    calls = c.message.tool_calls or []
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    if c.finish_reason != "length":
        # Every call the model opened became a call: none is left in the text.
        assert "<tool_call>" not in (c.message.content or ""), (i, c)
        assert c.finish_reason == ("tool_calls" if calls else "stop"), (i, c)
    return len(calls)


def test_auto_calls_the_model_opens_validate():
    with ThreadPoolExecutor(max_workers=8) as pool:
        counts = list(pool.map(auto_call, range(24)))
    assert sum(counts) >= 5, counts


def ask(extra, **kw):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Answer."}],
        max_tokens=kw.pop("max_tokens", 60),
        temperature=1.0,
        extra_body=extra,
        **kw,
    )
    return r.choices[0]


def test_vllm_fields_hold_the_reply():
    for seed in range(4):
        c = ask({"guided_regex": "[a-z]{3}-[0-9]{2}"}, seed=seed)
        assert re.fullmatch("[a-z]{3}-[0-9]{2}", c.message.content), c
        c = ask({"guided_choice": ["alpha", "beta", "gamma delta"]}, seed=seed)
        assert c.message.content in ["alpha", "beta", "gamma delta"], c
        c = ask({"structured_outputs": {"choice": ["x", "y"]}}, seed=seed)
        assert c.message.content in ["x", "y"], c
        c = ask({"guided_grammar": 'start: "(" NUM ("+" NUM)* ")"\nNUM: /[0-9]{1,2}/'}, seed=seed, max_tokens=40)
        assert c.finish_reason == "length" or re.fullmatch(r"\(\d{1,2}(\+\d{1,2})*\)", c.message.content), c
        for field in ("guided_json", "structured_outputs"):
            extra = {"guided_json": ADD} if field == "guided_json" else {"structured_outputs": {"json": ADD}}
            c = ask(extra, seed=seed)
            assert c.finish_reason == "stop", c
            jsonschema.validate(json.loads(c.message.content), ADD)
    # Completions take them too.
    r = client.completions.create(
        model=MODEL, prompt="Pick:", max_tokens=10, seed=1, extra_body={"guided_choice": ["left", "right"]}
    )
    assert r.choices[0].text in ["left", "right"], r


def test_bad_fields_are_400s_naming_them():
    cases = [
        ({"guided_regex": "(unclosed"}, "guided_regex"),
        ({"guided_grammar": "start: undefined_rule"}, "guided_grammar"),
        ({"guided_choice": []}, "guided_choice"),
        ({"structured_outputs": {"json": {"type": "strng"}}}, "structured_outputs.json.type"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
        ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex"),
    ]
    for extra, param in cases:
        try:
            ask(extra)
            raise AssertionError(f"accepted: {extra}")
        except openai.BadRequestError as e:
            assert e.status_code == 400
            assert e.body["param"] == param, (e.body, param)
            assert e.body["message"], e.body


if __name__ == "__main__":
    for name, t in sorted(globals().items()):
        if name.startswith("test_"):
            t()
            print(f"ok {name}", flush=True)
    sys.exit(0)
