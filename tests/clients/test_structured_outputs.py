"""Structured outputs through the official `openai` client (engine/tests/structured_outputs.rs
serves the demo model and runs this). Every constrained reply must validate against its schema
(checked with the `jsonschema` package), bad schemas must be 400s naming the part, and
`logit_bias` must move the choice. Exits non-zero on the first failure."""

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import urllib.request
import jsonschema
import openai

BASE = os.environ["METRALE_BASE_URL"]
client = openai.OpenAI(base_url=BASE, api_key="unused", max_retries=0, timeout=120)
MODEL = "demo"
ROOT = BASE.removesuffix("/v1")


def post(path, body):
    """POST JSON to the server's own endpoints (/tokenize, /detokenize)."""
    req = urllib.request.Request(ROOT + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def word(n):
    return {"type": "string", "maxLength": n}


def small_int():
    return {"type": "integer", "minimum": 0, "maximum": 99}


def schemas():
    """50 schemas: flat and nested objects, arrays, enums, required fields, anyOf, nullables.
    Strings, arrays and integers are bounded so every value closes within max_tokens."""
    colours = ["red", "green", "blue", "black", "white"]
    out = []
    for i in range(50):
        kind = i % 5
        if kind == 0:  # a flat object, all required
            s = {
                "type": "object",
                "properties": {"name": word(6 + i % 4), "age": small_int(), "ok": {"type": "boolean"}},
                "required": ["name", "age", "ok"],
            }
        elif kind == 1:  # a nested object with an enum
            s = {
                "type": "object",
                "properties": {
                    "person": {
                        "type": "object",
                        "properties": {"first": word(5), "colour": {"enum": colours[: 2 + i % 4]}},
                        "required": ["first", "colour"],
                    },
                    "id": small_int(),
                },
                "required": ["person", "id"],
            }
        elif kind == 2:  # arrays of bounded items
            s = {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": word(4), "minItems": 1, "maxItems": 1 + i % 3},
                    "scores": {"type": "array", "items": small_int(), "maxItems": 3},
                },
                "required": ["tags", "scores"],
            }
        elif kind == 3:  # anyOf and a nullable field
            s = {
                "type": "object",
                "properties": {
                    "value": {"anyOf": [small_int(), word(5), {"type": "boolean"}]},
                    "note": {"anyOf": [word(3), {"type": "null"}]},
                },
                "required": ["value", "note"],
            }
        else:  # an array of objects, some fields optional
            s = {
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "maxItems": 2,
                        "items": {
                            "type": "object",
                            "properties": {"sku": word(4), "qty": small_int(), "kind": {"enum": ["a", "b"]}},
                            "required": ["sku", "qty"],
                        },
                    },
                    "total": small_int(),
                },
                "required": ["items", "total"],
            }
        out.append(s)
    return out


def one(i_schema):
    i, schema = i_schema
    # Even schemas lean on strict mode to close their objects; odd ones say so themselves (an
    # open object lets a model add properties until max_tokens).
    strict = i % 2 == 0
    if not strict:
        schema = close(schema)
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Describe item {i} as JSON."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": f"s{i}", "schema": schema, "strict": strict},
        },
        temperature=0.8,
        seed=i,
        max_tokens=300,
    )
    c = r.choices[0]
    assert c.finish_reason == "stop", f"schema {i}: finish {c.finish_reason}: {c.message.content!r}"
    value = json.loads(c.message.content)
    jsonschema.validate(value, close(schema))
    return value


def close(schema):
    """The schema with every object closed (what strict enforces)."""
    if isinstance(schema, dict):
        s = {k: close(v) if k not in ("enum", "const") else v for k, v in schema.items()}
        if s.get("type") == "object":
            s.setdefault("additionalProperties", False)
        return s
    if isinstance(schema, list):
        return [close(x) for x in schema]
    return schema


def test_fifty_schemas_all_validate():
    with ThreadPoolExecutor(max_workers=8) as pool:
        values = list(pool.map(one, enumerate(schemas())))
    assert len(values) == 50
    # The model is free inside the grammar: the replies are not all the same.
    assert len({json.dumps(v, sort_keys=True) for v in values}) > 10


def test_json_object_is_parseable_and_completions_take_response_format_too():
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Give me a JSON object."}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=400,
    )
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict), c.message.content
    else:  # an object still open at max_tokens is reported as cut, never as complete
        assert c.finish_reason == "length"
        assert c.message.content.startswith("{")
    schema = {"type": "object", "properties": {"n": small_int()}, "required": ["n"]}
    r = client.completions.create(
        model=MODEL,
        prompt="The answer:",
        max_tokens=50,
        temperature=0,
        extra_body={"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}}},
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), close(schema))


def test_max_tokens_too_small_ends_with_length():
    schema = {"type": "object", "properties": {"a": word(20), "b": word(20)}, "required": ["a", "b"]}
    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "JSON please"}],
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        max_tokens=3,
    )
    assert r.choices[0].finish_reason == "length", r.choices[0]


def test_logit_bias_moves_the_choice():
    ids = post("/tokenize", {"model": MODEL, "prompt": "zebra"})["tokens"]
    target = ids[0]
    plain = client.completions.create(model=MODEL, prompt="Hello", max_tokens=3, temperature=0)
    biased = client.completions.create(
        model=MODEL, prompt="Hello", max_tokens=3, temperature=0, logit_bias={str(target): 100}
    )
    want = post("/detokenize", {"model": MODEL, "tokens": [target] * 3})["prompt"]
    assert biased.choices[0].text == want, (biased.choices[0].text, want)
    assert plain.choices[0].text != want
    # -100 bans the greedy first token.
    first = post("/tokenize", {"model": MODEL, "prompt": "Hello" + plain.choices[0].text})["tokens"]
    hello = post("/tokenize", {"model": MODEL, "prompt": "Hello"})["tokens"]
    if first[: len(hello)] == hello and len(first) > len(hello):
        banned = first[len(hello)]
        r = client.completions.create(
            model=MODEL, prompt="Hello", max_tokens=1, temperature=0, logit_bias={str(banned): -100}
        )
        assert r.choices[0].text != plain.choices[0].text[: len(r.choices[0].text)] or r.choices[0].text == ""
    try:
        client.completions.create(model=MODEL, prompt="x", max_tokens=1, logit_bias={"99999999": 5})
        raise AssertionError("an out-of-vocabulary logit_bias key was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "logit_bias.99999999", e.body


def test_bad_schemas_are_400s_naming_the_part():
    cases = [
        ({"type": "object", "properties": {"age": {"type": "integr"}}}, "response_format.json_schema.schema.properties.age.type"),
        ({"anyOf": [{"type": "string"}, {"enum": []}]}, "response_format.json_schema.schema.anyOf[1].enum"),
        ([1, 2], "response_format.json_schema.schema"),
    ]
    for schema, param in cases:
        try:
            client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hi"}],
                response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": schema}},
                max_tokens=5,
            )
            raise AssertionError(f"{schema} was accepted")
        except openai.BadRequestError as e:
            assert e.body["param"] == param, (e.body, param)
            assert param.split(".")[-1].split("[")[0] in e.body["message"], e.body
    # A keyword the grammar engine does not implement is refused, not ignored.
    try:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "string", "format": "no-such-format"}}},
            max_tokens=5,
        )
        raise AssertionError("an unknown format was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "response_format.json_schema.schema", e.body
    try:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], response_format={"type": "xml"}, max_tokens=5
        )
        raise AssertionError("an unknown response_format type was accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "response_format.type", e.body


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    for t in tests:
        t()
        print(f"ok {t.__name__}", flush=True)
    sys.exit(0)
