"""The grammar after the reasoning section, through the official `openai` client
(engine/tests/structured_outputs.rs serves the demo model with `--reasoning-parser qwen3` and
runs this). Thinking is free; the answer after `</think>` must validate against the schema.
The demo model's weights are random: a logit bias makes it open and close its thinking."""

import json
import os
import sys

import jsonschema
import openai

BASE = os.environ["METRALE_BASE_URL"]
client = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=120)
THINK, END_THINK = 6024, 6025  # `<think>` and `</think>` in the demo vocabulary
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 99}, "sure": {"type": "boolean"}},
    "required": ["answer", "sure"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}


def test_the_answer_after_thinking_validates():
    for seed in range(6):
        r = client.chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": f"Think, then answer {seed}."}],
            response_format=FORMAT,
            max_tokens=60,
            seed=seed,
            # `<think>` first (the grammar allows it or the answer, not `</think>`), then
            # `</think>`: the reply has a reasoning section before its answer.
            logit_bias={str(THINK): 50, str(END_THINK): 100},
        )
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "stop", r
        assert "think>" not in m.content, m
        jsonschema.validate(json.loads(m.content), SCHEMA)


def test_thinking_off_holds_the_whole_reply():
    for seed in range(4):
        r = client.chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": "Answer."}],
            response_format=FORMAT,
            max_tokens=60,
            seed=seed,
            # The template closes an empty block: `<think>` is not allowed, whatever its bias.
            logit_bias={str(THINK): 100},
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "stop", r
        jsonschema.validate(json.loads(m.content), SCHEMA)


if __name__ == "__main__":
    for name, t in sorted(globals().items()):
        if name.startswith("test_"):
            t()
            print(f"ok {name}", flush=True)
    sys.exit(0)
