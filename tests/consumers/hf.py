"""Offline Hugging Face pieces for the consumer tests: chat templates from the installed trl package, a
tokenizer trained in-process, a tiny randomly initialized model, and readers for tokenized rows.

Imported only by the consumer test modules, after they checked that the packages are installed.
Nothing here touches the network: the tokenizer is trained on the export's own text and the model is
built from a config.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import datasets  # noqa: E402
import torch  # noqa: E402
import trl  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

TRL_TEMPLATES_DIR = Path(trl.__file__).resolve().parent / "chat_templates"

# The chat templates we render with, by file name inside the installed trl package, and the special
# tokens of each family.
FAMILIES = {
    "qwen": {"bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>",
             "special": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]},
    "llama": {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "pad": "<|finetune_right_pad_id|>",
              "special": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                          "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"]},
}
TEMPLATES = {
    "qwen2_5": ("qwen2_5.jinja", "qwen"),
    "qwen3": ("qwen3.jinja", "qwen"),
    "llama3_1": ("llama3_1.jinja", "llama"),
}
SPECIAL_TOKENS = sorted({t for f in FAMILIES.values() for t in f["special"]})


def found_templates() -> dict[str, bool]:
    """Which of the templates we want ship inside the installed trl package."""
    return {name: (TRL_TEMPLATES_DIR / file).is_file() for name, (file, _) in TEMPLATES.items()}


def template_text(name: str) -> str:
    return (TRL_TEMPLATES_DIR / TEMPLATES[name][0]).read_text(encoding="utf-8")


def train_tokenizer(texts, vocab_size=800) -> Tokenizer:
    """A byte-level BPE trained in-process: every string encodes and decodes back exactly."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def wrap_tokenizer(base: Tokenizer, template: str) -> PreTrainedTokenizerFast:
    """A transformers tokenizer around ``base`` with the template's special tokens and chat template."""
    family = FAMILIES[TEMPLATES[template][1]]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(base.to_str()),
        bos_token=family["bos"], eos_token=family["eos"], pad_token=family["pad"],
        additional_special_tokens=[t for t in family["special"]
                                   if t not in (family["bos"], family["eos"], family["pad"])],
    )
    fast.chat_template = template_text(template)
    return fast


def tiny_model(template: str, tokenizer):
    """A 2-layer, 32-wide model of the template's family, randomly initialized (seeded)."""
    torch.manual_seed(0)
    common = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
    if TEMPLATES[template][1] == "qwen":
        return Qwen2ForCausalLM(Qwen2Config(**common))
    return LlamaForCausalLM(LlamaConfig(**common))


def load_jsonl(path, cache_dir) -> datasets.Dataset:
    """The consumer's own loader, as a user would call it."""
    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(cache_dir))


def tool_calls_of(example):
    """Every (function name, arguments) in the conversational fields of a row."""
    out = []
    for key in ("messages", "prompt", "completion", "chosen", "rejected"):
        value = example.get(key)
        if not isinstance(value, list):
            continue
        for message in value:
            for call in message.get("tool_calls") or []:
                out.append((call["function"]["name"], call["function"]["arguments"]))
    return out


def encodings(arguments):
    """(once, twice): how an arguments object renders under ``| tojson``, and the same text quoted again."""
    once = json.dumps(arguments, ensure_ascii=False)
    return once, json.dumps(once, ensure_ascii=False)[1:-1]


def trained_spans(input_ids, labels, tokenizer) -> list[str]:
    """Decoded runs of consecutive tokens whose label is not -100 (what the loss reads)."""
    spans, current = [], []
    for token, label in zip(input_ids, labels):
        if label != -100:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    return [tokenizer.decode(s, skip_special_tokens=False) for s in spans]


class NothingTrained(AssertionError):
    """The prepared training rows hold no assistant token: the loss would read nothing we exported."""


def assert_assistant_trained(texts_by_row, expected_by_row, *, forbidden=()):
    """Each prepared row's trained text holds every one of its expected assistant replies, and none of
    ``forbidden`` (text that is not an assistant turn: the system prompt, the user's ask).

    ``texts_by_row``: the trained text of each prepared row (decoded label spans, or decoded completion
    ids); ``expected_by_row``: for each row, the assistant replies its loss must read. Raises
    ``NothingTrained`` when no row survived preparation or a row trains none of its assistant text.
    """
    if not texts_by_row:
        raise NothingTrained("no training row survived preparation: no assistant token is trained")
    for i, (text, replies) in enumerate(zip(texts_by_row, expected_by_row, strict=True)):
        if not text:
            raise NothingTrained(f"row {i}: no token of this row is trained")
        for bad in forbidden:
            assert bad not in text, f"row {i}: {bad!r} is trained but is not an assistant turn"
        missing = [r for r in replies if r not in text]
        if missing:
            raise NothingTrained(f"row {i}: assistant replies {missing} are not among the trained tokens "
                                 f"(trained: {text[:300]!r})")
    return len(texts_by_row)


# Templates that render an assistant turn with tool_calls as the call alone: the words said with the
# call ("Let me look that up.") are not in the rendered text (Llama 3.1 writes one bare JSON call).
DROPS_TOOL_CALL_TEXT = {"llama3_1"}


def assistant_texts(messages, template=None):
    """The non-empty text of the assistant turns of a message list, as ``template`` renders them."""
    return [m["content"] for m in messages
            if m.get("role") == "assistant" and (m.get("content") or "").strip()
            and not (template in DROPS_TOOL_CALL_TEXT and m.get("tool_calls"))]
