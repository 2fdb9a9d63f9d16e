"""Forced tool calls under the server's call grammar, through the official `openai` and
`anthropic` clients (engine/tests/structured_outputs.rs serves the demo model with
`--tool-call-parser hermes`, `qwen3_coder`, `llama3_json`, `mistral`, `openai` (gpt-oss's harmony),
`minimax_m2` or `nemotron_json` and runs this for each; the calls are
written in that format and parsed back by its parser). Every forced call must parse into a call of an
allowed tool whose arguments validate against its schema (checked with `jsonschema`)."""

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import anthropic
import jsonschema
import openai

BASE = os.environ["METRALE_BASE_URL"]
oai = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=120)
ant = anthropic.Anthropic(base_url=BASE, api_key="unused", max_retries=0, timeout=120)
MODEL = "demo"

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
        "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
# Room for the longest call the grammar allows in any format, one token a character at worst:
# under 250 characters (the longest, a Hermes call whose 12-character city is written as JSON
# surrogate-pair escapes, 12 characters each, is about 230; the grammar's JSON has fixed
# whitespace). 120 was not: MiniMax-M2's calls took up to 115 tokens in 100 samples, and one in
# CI ran out before its closing tag.
MAX_TOKENS = 400
OPENAI_TOOLS = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in SCHEMAS.items()]
ANTHROPIC_TOOLS = [{"name": n, "input_schema": s} for n, s in SCHEMAS.items()]


def openai_call(i):
    named = i % 2 == 1
    choice = {"type": "function", "function": {"name": "add"}} if named else "required"
    r = oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Question {i}: what is the weather, or a sum?"}],
        tools=OPENAI_TOOLS,
        tool_choice=choice,
        temperature=0.8,
        seed=i,
        max_tokens=MAX_TOKENS,
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", (i, c)
    assert len(c.message.tool_calls) == 1, (i, c.message)
    call = c.message.tool_calls[0].function
    if named:
        assert call.name == "add", call
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def anthropic_call(i):
    named = i % 2 == 1
    choice = {"type": "tool", "name": "get_weather"} if named else {"type": "any"}
    r = ant.messages.create(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": f"Question {i}: what is the weather, or a sum?"}],
        tools=ANTHROPIC_TOOLS,
        tool_choice=choice,
    )
    assert r.stop_reason == "tool_use", (i, r)
    uses = [b for b in r.content if b.type == "tool_use"]
    assert len(uses) == 1, (i, r.content)
    if named:
        assert uses[0].name == "get_weather", uses[0]
    jsonschema.validate(uses[0].input, SCHEMAS[uses[0].name])


def test_fifty_forced_openai_calls_validate():
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(openai_call, range(50)))


def test_fifty_forced_anthropic_calls_validate():
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(anthropic_call, range(50)))


if __name__ == "__main__":
    for name, t in sorted(globals().items()):
        if name.startswith("test_"):
            t()
            print(f"ok {name}", flush=True)
    sys.exit(0)
