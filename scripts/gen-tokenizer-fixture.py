"""Generates test/fixtures/tokenizer/: a tiny byte-level BPE tokenizer in Hugging Face format.

No model hub is reachable from CI, so the router's tokenizer tests and the simulator use this fixture:
- tokenizer.json: trained with the Rust `tokenizers` library (the one vLLM's fast tokenizers run on)
  on a small built-in English corpus, vocabulary 512, ByteLevel pre-tokenizer/decoder, special tokens
  <|begin_of_text|>, <|eot_id|>, <|start_header_id|>, <|end_header_id|>, and a template post-processor
  that prepends <|begin_of_text|> (like Llama 3's tokenizer adds BOS);
- tokenizer_config.json: bos/eos tokens and a Llama-3-style Jinja chat_template;
- expected.json: ids the Rust implementation gives for sample texts, and conversations rendered by
  Jinja2 the way transformers' apply_chat_template renders them (sandboxed, trim_blocks, lstrip_blocks,
  its tojson), one of them a coding agent's request (tools, a tool call) rendered from what vLLM hands
  the template (vllm_input): golden values the router's JavaScript tokenizer, template renderer and
  request normalization (src/tokenize/vllm-chat-input.ts) are checked against.

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
    "{%- if tools %}{{- '<|start_header_id|>tools<|end_header_id|>\\n\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n' }}{%- endfor %}{{- '<|eot_id|>' }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] | trim }}"
    "{%- elif message['content'] %}{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] | trim }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{%- if message['tool_calls'] %}{%- for call in message['tool_calls'] %}"
    "{{- '<tool_call>' + call['function']['name'] + ' ' }}{{- call['function']['arguments'] | tojson }}"
    "{%- endfor %}{%- endif %}"
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

# A coding agent's chat request as a client sends it: a tool without a description, a tool with its
# keys in another order, a call's arguments as a compact JSON string, an empty tool_calls list.
AGENT_REQUEST = {
    "tools": [
        {
            "type": "function",
            "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
        },
        {"function": {"description": "Runs the tests.", "name": "run_tests"}, "type": "function"},
    ],
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "The test fails. Fix it."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"src/a.ts"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "export const a = 1;"},
        {"role": "assistant", "content": "Fixed.", "tool_calls": []},
    ],
}


def tojson(x, indent=None, separators=None, sort_keys=False):
    """transformers' tojson filter (its chat template environment): json.dumps, non-ASCII kept."""
    return json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def vllm_input(request):
    """What vLLM hands the template for a chat request (chat_utils, the protocol's pydantic models).

    Tools as ChatCompletionToolsParam.model_dump() writes them; tool-call arguments parsed
    (_postprocess_messages), an empty tool_calls list dropped; contents in the "openai" format this
    template's loop over message['content'] makes vLLM detect (a string: one text part; None: none).
    """
    tools = []
    for t in request["tools"]:
        fn = t["function"]
        dumped = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
        dumped.update({k: v for k, v in fn.items() if k not in dumped})
        tools.append({"type": t.get("type", "function"), "function": dumped})
    messages = []
    for m in request["messages"]:
        m = dict(m)
        c = m.get("content")
        m["content"] = [] if c is None else [{"type": "text", "text": c}] if isinstance(c, str) else c
        if m["role"] == "assistant" and isinstance(m.get("tool_calls"), list):
            if not m["tool_calls"]:
                del m["tool_calls"]
            else:
                calls = []
                for call in m["tool_calls"]:
                    args = call["function"].get("arguments")
                    fn = dict(call["function"], arguments=json.loads(args) if args else {})
                    calls.append(dict(call, function=fn))
                m["tool_calls"] = calls
        messages.append(m)
    return messages, tools


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
    env.filters["tojson"] = tojson
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
    agent_messages, agent_tools = vllm_input(AGENT_REQUEST)
    agent_text = template.render(
        messages=agent_messages, tools=agent_tools, add_generation_prompt=True, bos_token="<|begin_of_text|>"
    )
    expected = {
        "agent": {
            "request": AGENT_REQUEST,
            "text": agent_text,
            "ids": tok.encode(agent_text, add_special_tokens=False).ids,
        },
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
