"""The official `openai` Python client against a running `met serve`.

Run by engine/tests/server_api.rs, which starts the server on the fixture model (a tiny random
Qwen3: its text is noise, but deterministic for a seed) and passes its URL in
METRALE_BASE_URL. Needs `pip install -r tests/requirements.txt`.
"""

import os
import unittest

import openai

BASE_URL = os.environ["METRALE_BASE_URL"]
MODEL = os.environ.get("METRALE_MODEL", "test")


def client():
    return openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0)


MESSAGES = [{"role": "user", "content": "Write a haiku about tokens."}]


class Chat(unittest.TestCase):
    def test_completion_has_text_usage_and_finish_reason(self):
        r = client().chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, seed=1)
        choice = r.choices[0]
        self.assertIsInstance(choice.message.content, str)
        self.assertEqual(choice.message.role, "assistant")
        self.assertIn(choice.finish_reason, ("stop", "length"))
        self.assertLessEqual(r.usage.completion_tokens, 10)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        self.assertEqual(r.model, MODEL)

    def test_stream_equals_non_stream_for_a_seed(self):
        args = dict(model=MODEL, messages=MESSAGES, max_tokens=24, seed=42, temperature=1.0)
        whole = client().chat.completions.create(**args)
        stream = client().chat.completions.create(
            **args, stream=True, stream_options={"include_usage": True}
        )
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        self.assertEqual(text, whole.choices[0].message.content)
        self.assertEqual(finish, whole.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)

    def test_same_seed_same_text(self):
        args = dict(model=MODEL, messages=MESSAGES, max_tokens=16, seed=9, temperature=1.0)
        a = client().chat.completions.create(**args).choices[0].message.content
        b = client().chat.completions.create(**args).choices[0].message.content
        self.assertEqual(a, b)

    def test_n_choices(self):
        r = client().chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, n=3, seed=5)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])

    def test_logprobs(self):
        r = client().chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=6, logprobs=True, top_logprobs=2,
            extra_body={"ignore_eos": True},
        )
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 6)
        for t in content:
            self.assertEqual(len(t.top_logprobs), 2)
            self.assertLessEqual(t.logprob, 0.0)

    def test_stop_string_is_not_returned(self):
        args = dict(model=MODEL, messages=MESSAGES, max_tokens=30, seed=11, temperature=1.0,
                    extra_body={"ignore_eos": True})
        full = client().chat.completions.create(**args).choices[0].message.content
        stop = full[8:11]
        r = client().chat.completions.create(**args, stop=[stop])
        self.assertEqual(r.choices[0].message.content, full[: full.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_thinking_kwarg_reaches_the_template(self):
        r = client().chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=2,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
        with_think = client().chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
        # enable_thinking=false appends an empty think block to the prompt.
        self.assertGreater(r.usage.prompt_tokens, with_think.usage.prompt_tokens)


class Completions(unittest.TestCase):
    def test_echo_logprobs_score_the_prompt(self):
        r = client().completions.create(model=MODEL, prompt="the quick brown fox", max_tokens=1,
                                        echo=True, logprobs=1)
        lp = r.choices[0].logprobs
        self.assertTrue(r.choices[0].text.startswith("the quick brown fox"))
        self.assertIsNone(lp.token_logprobs[0])
        self.assertTrue(all(x <= 0 for x in lp.token_logprobs[1:]))
        self.assertEqual(len(lp.tokens), r.usage.prompt_tokens + 1)

    def test_token_id_prompt_and_stream(self):
        args = dict(model=MODEL, prompt=[1, 2, 3, 4], max_tokens=12, seed=3)
        whole = client().completions.create(**args).choices[0].text
        streamed = "".join(c.choices[0].text for c in client().completions.create(**args, stream=True) if c.choices)
        self.assertEqual(whole, streamed)


class Errors(unittest.TestCase):
    def test_out_of_range_names_the_field(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model=MODEL, messages=MESSAGES, temperature=3)
        self.assertEqual(e.exception.body["param"], "temperature")

    def test_unknown_model_is_404(self):
        with self.assertRaises(openai.NotFoundError) as e:
            client().chat.completions.create(model="gpt-4", messages=MESSAGES)
        self.assertEqual(e.exception.code, "model_not_found")

    def test_context_length_exceeded(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client().completions.create(model=MODEL, prompt="x", max_tokens=10**6)
        self.assertEqual(e.exception.code, "context_length_exceeded")

    def test_empty_messages(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client().chat.completions.create(model=MODEL, messages=[])
        self.assertEqual(e.exception.body["param"], "messages")

    def test_models_list(self):
        self.assertEqual([m.id for m in client().models.list()], [MODEL])


if __name__ == "__main__":
    unittest.main(verbosity=2)
