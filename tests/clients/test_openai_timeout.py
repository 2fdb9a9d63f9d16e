"""The official `openai` Python client, with its default retries, against a `met serve` whose
--request-timeout a request outlives (issue 37): the server's answer must be one the client
does not retry (it retries 408, 409, 429 and every 5xx unless `x-should-retry: false`).

Run by engine/tests/server_abuse.rs, which passes the server's URL in METRALE_BASE_URL.
"""

import os
import unittest

import openai

BASE_URL = os.environ["METRALE_BASE_URL"]


class Timeout(unittest.TestCase):
    def test_a_request_timeout_is_not_retried(self):
        sent = []
        # The client's own HTTP client class (httpx or its successor), counting what is sent.
        http = openai.DefaultHttpxClient(event_hooks={"request": [sent.append]})
        # The client's default retry policy (max_retries=2): only the status decides.
        client = openai.OpenAI(base_url=BASE_URL, api_key="unused", http_client=http)
        with self.assertRaises(openai.BadRequestError) as caught:
            client.completions.create(
                model="test", prompt="hello", max_tokens=1000, extra_body={"ignore_eos": True}
            )
        self.assertEqual(caught.exception.status_code, 400)
        self.assertEqual(caught.exception.code, "request_timeout")
        self.assertEqual(len(sent), 1, "the client retried the timeout")


if __name__ == "__main__":
    unittest.main()
