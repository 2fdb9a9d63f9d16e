"""The official `anthropic` Python client against a running `met serve`.

Run by engine/tests/server_messages.rs, which starts the server on the fixture model (a tiny
random Qwen3: its text is noise, but greedy decoding makes it deterministic) with
`--api-key`, `--tool-call-parser hermes` and `--reasoning-parser qwen3`, and passes its root
URL in METRALE_BASE_URL and the key in METRALE_API_KEY. Needs
`pip install -r tests/requirements.txt`.
"""

import os
import unittest

import anthropic

BASE_URL = os.environ["METRALE_BASE_URL"]
API_KEY = os.environ["METRALE_API_KEY"]
MODEL = os.environ.get("METRALE_MODEL", "test")


def client(key=API_KEY):
    # The client sends the key as `x-api-key`.
    return anthropic.Anthropic(base_url=BASE_URL, api_key=key, max_retries=0)


MESSAGES = [{"role": "user", "content": "Write a haiku about tokens."}]
# The current client has no `temperature` argument; the server still reads the field.
GREEDY = dict(model=MODEL, extra_body={"temperature": 0.0})
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


class Messages(unittest.TestCase):
    def test_message_has_text_usage_and_stop_reason(self):
        r = client().messages.create(**GREEDY, max_tokens=12, messages=MESSAGES)
        self.assertEqual(r.type, "message")
        self.assertEqual(r.role, "assistant")
        self.assertEqual(r.model, MODEL)
        self.assertTrue(r.id.startswith("msg"))
        self.assertIn(r.stop_reason, ("end_turn", "max_tokens"))
        self.assertLessEqual(r.usage.output_tokens, 12)
        self.assertGreater(r.usage.input_tokens, 0)
        for block in r.content:
            self.assertIn(block.type, ("text", "thinking"))

    def test_stream_equals_the_whole_message(self):
        args = dict(**GREEDY, max_tokens=20, messages=MESSAGES)
        whole = client().messages.create(**args)
        names = []
        with client().messages.stream(**args) as stream:
            for event in stream:
                names.append(event.type)
            final = stream.get_final_message()
        self.assertEqual([b.model_dump() for b in final.content], [b.model_dump() for b in whole.content])
        self.assertEqual(final.stop_reason, whole.stop_reason)
        self.assertEqual(final.usage.output_tokens, whole.usage.output_tokens)
        self.assertEqual(names[0], "message_start")
        self.assertEqual(names[-2:], ["message_delta", "message_stop"])

    def test_raw_stream_event_sequence(self):
        events = list(client().messages.create(**GREEDY, max_tokens=8, messages=MESSAGES, stream=True))
        kinds = [e.type for e in events]
        self.assertEqual(kinds[0], "message_start")
        self.assertEqual(events[0].message.content, [])
        self.assertEqual(kinds[-2:], ["message_delta", "message_stop"])
        self.assertIsNotNone(events[-2].delta.stop_reason)
        starts = [e.index for e in events if e.type == "content_block_start"]
        stops = [e.index for e in events if e.type == "content_block_stop"]
        self.assertEqual(starts, stops)
        self.assertEqual(starts, list(range(len(starts))))

    def test_system_prompt_as_text_and_blocks_counts_the_same(self):
        text = client().messages.count_tokens(model=MODEL, system="Be terse.", messages=MESSAGES)
        blocks = client().messages.count_tokens(
            model=MODEL, system=[{"type": "text", "text": "Be terse."}], messages=MESSAGES
        )
        none = client().messages.count_tokens(model=MODEL, messages=MESSAGES)
        self.assertEqual(text.input_tokens, blocks.input_tokens)
        self.assertGreater(text.input_tokens, none.input_tokens)
        r = client().messages.create(**GREEDY, max_tokens=2, system="Be terse.", messages=MESSAGES)
        self.assertEqual(r.usage.input_tokens + r.usage.cache_read_input_tokens, text.input_tokens)

    def test_stop_sequence_is_not_returned(self):
        args = dict(**GREEDY, max_tokens=40, messages=MESSAGES)
        full = "".join(b.text for b in client().messages.create(**args).content if b.type == "text")
        self.assertGreaterEqual(len(full), 12, f"greedy reply too short to cut: {full!r}")
        stop = full[8:11]
        r = client().messages.create(**args, stop_sequences=[stop])
        text = "".join(b.text for b in r.content if b.type == "text")
        self.assertEqual(text, full[: full.index(stop)])
        self.assertEqual(r.stop_reason, "stop_sequence")
        self.assertEqual(r.stop_sequence, stop)

    def test_tools_and_thinking_reach_the_template(self):
        base = client().messages.count_tokens(model=MODEL, messages=MESSAGES).input_tokens
        tools = client().messages.count_tokens(model=MODEL, messages=MESSAGES, tools=[WEATHER]).input_tokens
        off = client().messages.count_tokens(
            model=MODEL, messages=MESSAGES, thinking={"type": "disabled"}
        ).input_tokens
        self.assertGreater(tools, base)
        self.assertGreater(off, base, "thinking off closes an empty think block in the prompt")
        adaptive = client().messages.count_tokens(
            model=MODEL, messages=MESSAGES, thinking={"type": "adaptive", "display": "summarized"}
        ).input_tokens
        self.assertEqual(adaptive, base)

    def test_forced_tool_use_starts_the_call_and_noise_comes_back_as_text(self):
        # The fixture model writes noise after the forced opening: not a call, so text.
        r = client().messages.create(
            **GREEDY, max_tokens=3, messages=MESSAGES, tools=[WEATHER],
            tool_choice={"type": "tool", "name": "get_weather"},
        )
        self.assertEqual([b.type for b in r.content], ["text"])
        self.assertTrue(r.content[0].text.startswith('<tool_call>\n{"name": "get_weather", "arguments": '))
        self.assertEqual(r.stop_reason, "max_tokens")

    def test_tool_round_trip_history_is_accepted(self):
        history = MESSAGES + [
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Need the weather.", "signature": ""},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Ünterhaching"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "12 °C"}]},
            ]},
        ]
        n = client().messages.count_tokens(model=MODEL, messages=history, tools=[WEATHER]).input_tokens
        r = client().messages.create(**GREEDY, max_tokens=2, messages=history, tools=[WEATHER])
        self.assertEqual(r.usage.input_tokens + r.usage.cache_read_input_tokens, n)


class Errors(unittest.TestCase):
    def test_bad_request_has_anthropics_envelope(self):
        with self.assertRaises(anthropic.BadRequestError) as e:
            client().messages.create(model=MODEL, max_tokens=0, messages=MESSAGES)
        self.assertEqual(e.exception.body["type"], "error")
        self.assertEqual(e.exception.body["error"]["type"], "invalid_request_error")
        self.assertIn("max_tokens", e.exception.body["error"]["message"])

    def test_images_are_refused_by_name(self):
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
        with self.assertRaises(anthropic.BadRequestError) as e:
            client().messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": [image]}])
        self.assertIn("image", e.exception.body["error"]["message"])

    def test_unknown_model_is_not_found(self):
        with self.assertRaises(anthropic.NotFoundError) as e:
            client().messages.create(model="claude-opus-4-1", max_tokens=4, messages=MESSAGES)
        self.assertEqual(e.exception.body["error"]["type"], "not_found_error")

    def test_wrong_key_is_an_authentication_error(self):
        with self.assertRaises(anthropic.AuthenticationError) as e:
            client("wrong").messages.create(model=MODEL, max_tokens=4, messages=MESSAGES)
        self.assertEqual(e.exception.body["error"]["type"], "authentication_error")


if __name__ == "__main__":
    unittest.main(verbosity=2)
