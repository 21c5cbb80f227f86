"""Generates test/fixtures/prompt-embeds/tensors.json: real `torch.save` payloads, base64 as vLLM's
`prompt_embeds` takes them (vLLM --enable-prompt-embeds: torch.load(b64decode(...), weights_only=True),
a 3-D tensor squeezed at dim 0, then [tokens, hidden]), each with the prompt tokens vLLM takes from it
(null: vLLM rejects it, or it is no tensor). src/request/prompt-embeds-tokens.ts is checked against them.

No torch in CI: the payloads are committed. Run (torch from PyPI, a few GB with its CUDA libraries):
    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch && /tmp/tv/bin/python scripts/gen-prompt-embeds-fixture.py
Generated with torch 2.15.0. Not byte-for-byte deterministic (torch writes a random serialization id).
"""
import base64
import io
import json
import os

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "prompt-embeds", "tensors.json")


def payload(obj, **kw):
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def vllm_tokens(b64):
    """The tokens vLLM's load_prompt_embeds takes (None where it raises)."""
    try:
        t = torch.load(io.BytesIO(base64.b64decode(b64, validate=True)), weights_only=True)
    except Exception:  # noqa: BLE001 - vLLM answers 400
        return None
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None
    t = t.to_dense()
    if t.dim() > 2:
        t = t.squeeze(0)
        if t.dim() != 2:
            return None
    if t.dim() != 2:
        return None  # a 1-D tensor is no [tokens, hidden] prompt
    return t.shape[0]


torch.manual_seed(0)
CASES = [
    ("7 tokens, float16", torch.randn(7, 16).half(), {}),
    ("[1, 5, 8] bfloat16, squeezed", torch.randn(1, 5, 8).bfloat16(), {}),
    ("300 tokens, float32", torch.randn(300, 4), {}),
    ("70000 tokens, one stored row expanded", torch.randn(1, 8).half().expand(70000, 8), {}),
    ("requires_grad", torch.randn(3, 4, requires_grad=True), {}),
    ("pickle protocol 4", torch.randn(9, 4).half(), {"pickle_protocol": 4}),
    ("pickle protocol 5", torch.randn(11, 4).half(), {"pickle_protocol": 5}),
    ("a view into a larger storage", torch.randn(40, 4)[10:13], {}),
    ("1-D", torch.randn(16), {}),
    ("[2, 5, 8]: not squeezable", torch.randn(2, 5, 8), {}),
    ("int64", torch.arange(12).reshape(3, 4), {}),
    ("a dict holding a tensor", {"embeds": torch.randn(4, 4)}, {}),
]

out = []
for name, obj, kw in CASES:
    b64 = payload(obj, **kw)
    out.append({"name": name, "tokens": vllm_tokens(b64) if isinstance(obj, torch.Tensor) else None, "base64": b64})

os.makedirs(os.path.dirname(OUT), exist_ok=True)
with open(OUT, "w") as f:
    json.dump({"torch": torch.__version__.split("+")[0], "tensors": out}, f, indent=1)
    f.write("\n")
print(OUT, [(c["name"], c["tokens"], len(c["base64"])) for c in out])
