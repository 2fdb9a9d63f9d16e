#!/usr/bin/env python3
"""Train the demo model's byte-level BPE tokenizer, Qwen3-style.

Same pieces as Qwen2/Qwen3's tokenizer.json: NFC normalizer, the Qwen2 pre-tokenizer regex split
followed by ByteLevel, a BPE model over the 256 byte symbols, ByteLevel decoder. The learned
vocabulary comes first; Qwen3's 26 added tokens follow, in Qwen3's order, with Qwen3's flags
(`<|endoftext|>` .. `<|video_pad|>` special; `<tool_call>`, the FIM tokens, `<tool_response>`,
`<think>` and `</think>` added but not special).

Writes tokenizer.json and tokenizer_config.json (eos `<|im_end|>`, pad `<|endoftext|>`, no bos,
chat_template read from --chat-template), then checks with transformers that AutoTokenizer loads the
directory and that apply_chat_template renders the corpus samples byte for byte.

Usage: train_tokenizer.py --corpus DIR/corpus.txt --samples DIR/samples.jsonl \
           --chat-template tests/fixtures/chat_template/qwen3.jinja --out TOKDIR [--vocab-size 6000]
"""

import argparse
import json
import os
import re
import sys
import time

# Qwen2/Qwen3's pre-tokenizer pattern (tokenizer.json, pre_tokenizer.pretokenizers[0].pattern.Regex)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen3's added tokens, in id order (151643..151668 there), with their `special` flag.
ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]


def fail(msg):
    print(f"train_tokenizer: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def corpus_pieces(path, max_bytes, chunk=1 << 20):
    """Yield corpus text with the added-token strings cut out, so BPE spends no merges on them."""
    split_re = re.compile("|".join(re.escape(t) for t, _ in ADDED_TOKENS))
    done = 0
    with open(path, encoding="utf-8") as f:
        rest = ""
        while done < max_bytes:
            block = f.read(chunk)
            if not block:
                break
            done += len(block)
            text = rest + block
            # keep an unfinished document for the next block
            cut = text.rfind("<|endoftext|>")
            if cut < 0:
                rest = text
                continue
            text, rest = text[:cut], text[cut:]
            for piece in split_re.split(text):
                if piece:
                    yield piece
        for piece in split_re.split(rest):
            if piece:
                yield piece


def build(args):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    t0 = time.time()
    tok.train_from_iterator(corpus_pieces(args.corpus, int(args.train_mb * 1e6)), trainer=trainer)
    n_learned = tok.get_vocab_size()
    print(f"train_tokenizer: learned {n_learned} tokens in {time.time() - t0:.1f}s", flush=True)

    for content, special in ADDED_TOKENS:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    for i, (content, _) in enumerate(ADDED_TOKENS):
        if tok.token_to_id(content) != n_learned + i:
            fail(f"added token {content} got id {tok.token_to_id(content)}, expected {n_learned + i}")
    return tok, n_learned


def write_config(out, tok, n_learned, chat_template, model_max_length):
    decoder = {}
    for i, (content, special) in enumerate(ADDED_TOKENS):
        decoder[str(n_learned + i)] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special,
        }
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [t for t, s in ADDED_TOKENS if s and t != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def verify(out, samples_path):
    """transformers loads it, and its chat template renders our training format exactly."""
    from transformers import AutoTokenizer

    tk = AutoTokenizer.from_pretrained(out)
    ids = {t: tk.convert_tokens_to_ids(t) for t, _ in ADDED_TOKENS}
    if tk.eos_token != "<|im_end|>" or tk.pad_token != "<|endoftext|>" or tk.bos_token is not None:
        fail(f"special tokens wrong: eos={tk.eos_token} pad={tk.pad_token} bos={tk.bos_token}")
    n = n_prompt = 0
    with open(samples_path, encoding="utf-8") as f:
        for line in f:
            s = json.loads(line)
            msgs, text = s["messages"], s["text"]
            got = tk.apply_chat_template(msgs, tokenize=False)
            if got != text:
                fail("chat template does not render the corpus format.\n"
                     f"--- corpus:\n{text!r}\n--- template:\n{got!r}")
            # the generation prompt, thinking on or off as the sample was, is a prefix of the text
            think = bool(msgs[-1].get("reasoning_content"))
            prompt = tk.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True,
                                            enable_thinking=think)
            if not text.startswith(prompt):
                fail(f"generation prompt is not a prefix of the text:\n{prompt!r}\n{text!r}")
            n_prompt += 1
            enc = tk(text, add_special_tokens=False)["input_ids"]
            if tk.decode(enc) != text:
                fail(f"decode(encode(x)) != x for {text!r}")
            for t in ("<|im_start|>", "<|im_end|>", "<think>", "</think>"):
                if text.count(t) != enc.count(ids[t]):
                    fail(f"{t} is not encoded as one token in {text!r}")
            n += 1
    if n == 0:
        fail(f"no samples in {samples_path}")
    print(f"train_tokenizer: verified {n} conversations against the chat template "
          f"({type(tk).__name__}, {len(tk)} tokens)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--samples", required=True, help="samples.jsonl from make_corpus.py")
    ap.add_argument("--chat-template", required=True, help="the Qwen3 chat template (jinja file)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=6000, help="learned tokens, before the 26 added ones")
    ap.add_argument("--train-mb", type=float, default=24.0, help="train BPE on the first MB of the corpus")
    ap.add_argument("--model-max-length", type=int, default=2048)
    args = ap.parse_args()

    if not os.path.isfile(args.chat_template):
        fail(f"chat template {args.chat_template!r} not found. The demo model needs Qwen3's chat template "
             "(tests/fixtures/chat_template/qwen3.jinja in the repository); pass its path with --chat-template "
             "(run.sh: CHAT_TEMPLATE=path).")
    with open(args.chat_template, encoding="utf-8") as f:
        chat_template = f.read()
    if "<|im_start|>" not in chat_template or "enable_thinking" not in chat_template:
        fail(f"{args.chat_template} does not look like Qwen3's chat template")
    for p in (args.corpus, args.samples):
        if not os.path.isfile(p):
            fail(f"{p} not found (run make_corpus.py first)")

    os.makedirs(args.out, exist_ok=True)
    tok, n_learned = build(args)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    write_config(args.out, tok, n_learned, chat_template, args.model_max_length)
    verify(args.out, args.samples)
    print(f"train_tokenizer: wrote {args.out}/tokenizer.json and tokenizer_config.json "
          f"({n_learned} learned + {len(ADDED_TOKENS)} added tokens)", flush=True)


if __name__ == "__main__":
    main()
