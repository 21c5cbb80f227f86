"""Generates test/fixtures/tokenizer/: a tiny byte-level BPE tokenizer in Hugging Face format.

No model hub is reachable from CI, so the router's tokenizer tests and the simulator use this fixture:
- tokenizer.json: trained with the Rust `tokenizers` library (the one vLLM's fast tokenizers run on)
  on a small built-in English corpus, vocabulary 512, ByteLevel pre-tokenizer/decoder, special tokens
  <|begin_of_text|>, <|eot_id|>, <|start_header_id|>, <|end_header_id|>, and a template post-processor
  that prepends <|begin_of_text|> (like Llama 3's tokenizer adds BOS);
- tokenizer_config.json: bos/eos tokens and a Llama-3-style Jinja chat_template;
- expected.json: ids the Rust implementation gives for sample texts, and a conversation rendered by
  Jinja2 the way transformers' apply_chat_template renders it (sandboxed, trim_blocks, lstrip_blocks):
  golden values the router's JavaScript tokenizer and template renderer are checked against.

Run: python3 -m venv .venv-tok && .venv-tok/bin/pip install tokenizers==0.22.1 jinja2==3.1.6 &&
     .venv-tok/bin/python scripts/gen-tokenizer-fixture.py
Deterministic: the same tokenizers version writes the same files.
"""
import json
import os

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

OUT = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "tokenizer")
SPECIAL = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
CORPUS = [
    "You are a helpful assistant. Answer the question using the context below.",
    "The quick brown fox jumps over the lazy dog while the router sends requests to workers.",
    "Prefix caching keeps the key and value tensors of a prompt so a later request can reuse them.",
    "A worker that evicted a prefix must compute it again; the worker that holds it answers faster.",
    "system user assistant tool: summarise the document, then list the action items in order.",
    "Envoy asks the external processor which vLLM worker should serve each inference request.",
    "Tenants revisit their long contexts many times, and caches are far smaller than the working set.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000, punctuation: , . ; ! ? ( ) [ ] { } \" ' - _ / \\ \n",
] * 20
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] | trim }}"
    "{%- elif message['content'] %}{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] | trim }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
SAMPLES = [
    "Hello world",
    "You are a helpful assistant. Answer the question using the context below.",
    "Prefix caching keeps the key and value tensors of a prompt.",
    "unseen wordz: Zürich, naïve café, 日本語 🙂",
    "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
]

CHATS = [
    (
        [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "  Summarise the document.  "},
        ],
        True,
    ),
    (
        [
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " world"}]},
            {"role": "assistant", "content": "Hi!"},
        ],
        False,
    ),
]


def main() -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B", special_tokens=[("<|begin_of_text|>", bos)]
    )
    os.makedirs(OUT, exist_ok=True)
    tok.save(os.path.join(OUT, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "model_max_length": 8192,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(CHAT_TEMPLATE)
    chats = []
    for messages, gen in CHATS:
        text = template.render(messages=messages, add_generation_prompt=gen, bos_token="<|begin_of_text|>")
        chats.append(
            {
                "messages": messages,
                "add_generation_prompt": gen,
                "text": text,
                "ids": tok.encode(text, add_special_tokens=False).ids,
            }
        )
    expected = {
        "chats": chats,
        "samples": [
            {
                "text": s,
                "ids": tok.encode(s).ids,
                "ids_no_special": tok.encode(s, add_special_tokens=False).ids,
            }
            for s in SAMPLES
        ]
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")


if __name__ == "__main__":
    main()
