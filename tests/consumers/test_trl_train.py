"""SFTTrainer and DPOTrainer take the trl exports: the prepared (tokenized) rows train the assistant
turns, 2 steps of training run on CPU, and a max_length that leaves only the system prompt is caught.

The model is a 2-layer, 32-wide Qwen2 or Llama initialized at random; the tokenizer is a byte-level BPE
trained in-process on the exports, with a chat template from the installed trl package. Nothing is
downloaded.
"""

import copy

import pytest

from .conftest import MISSING, SKIP_REASON, read_rows

if MISSING:
    pytest.skip(SKIP_REASON, allow_module_level=True)

from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer  # noqa: E402

from . import hf  # noqa: E402

pytestmark = [
    pytest.mark.consumers,
    # transformers 5.23 deprecates names that trl 1.16 still calls; not ours to fix.
    pytest.mark.filterwarnings("ignore:.*checkpointing.*:FutureWarning"),
]

COMMON = dict(per_device_train_batch_size=2, max_steps=2, report_to=[], use_cpu=True, save_strategy="no",
              logging_steps=1, disable_tqdm=True, seed=0)

# (export, template, assistant_only_loss): the SFT combinations we prepare; `messages` rows need
# assistant_only_loss (TRL swaps in its `*_training.jinja` twin of the template), prompt/completion rows
# train the completion only by default.
SFT_CASES = [
    ("sft_trl_messages", "qwen2_5", True),
    ("sft_trl_messages", "qwen3", True),
    ("sft_trl_final", "qwen2_5", False),
    ("sft_trl_final", "qwen3", False),
    ("sft_trl_final", "llama3_1", False),
    ("sft_trl_unroll", "qwen2_5", False),
    ("sft_trl_unroll", "qwen3", False),
    ("sft_trl_unroll", "llama3_1", False),
]
# One 2-step run per export shape; the rest only prepare (tokenize) the data.
SFT_TRAIN = {("sft_trl_messages", "qwen2_5"), ("sft_trl_final", "qwen3"), ("sft_trl_unroll", "llama3_1")}
DPO_TEMPLATES = ["qwen2_5", "qwen3", "llama3_1"]
DPO_TRAIN = {"qwen2_5", "llama3_1"}


def _sft(exports, hf_cache, base_tokenizer, tmp_path, name, template, assistant_only, max_length=None):
    tokenizer = hf.wrap_tokenizer(base_tokenizer, template)
    ds = hf.load_jsonl(exports[name]["path"], hf_cache)
    args = SFTConfig(output_dir=str(tmp_path / "sft"), assistant_only_loss=assistant_only, max_length=max_length,
                     **COMMON)
    trainer = SFTTrainer(model=hf.tiny_model(template, tokenizer), args=args, train_dataset=ds,
                         processing_class=tokenizer)
    return trainer, tokenizer, ds


def _sft_expected(row, template):
    """What the loss must read: every assistant turn of a messages row, the completion's otherwise."""
    return hf.assistant_texts(row["messages"] if "messages" in row else row["completion"], template)


def _sft_forbidden(row):
    """Text that must never be trained: the system prompt and the first user ask."""
    messages = row.get("messages") or row.get("prompt")
    return [m["content"] for m in messages[:2] if m["role"] in ("system", "user")]


def check_sft_prepared(trainer, tokenizer, source_rows, template):
    prepared = trainer.train_dataset
    texts = ["".join(hf.trained_spans(r["input_ids"], r["labels"], tokenizer)) for r in prepared]
    if len(texts) != len(source_rows):
        raise hf.NothingTrained(
            f"{len(source_rows) - len(texts)} of {len(source_rows)} rows were dropped in preparation "
            "(TRL drops rows left with no trained token)") if texts else hf.NothingTrained(
            "no training row survived preparation: no assistant token is trained")
    forbidden = [_sft_forbidden(r) for r in source_rows]
    hf.assert_assistant_trained(texts, [_sft_expected(r, template) for r in source_rows])
    for i, (text, bad) in enumerate(zip(texts, forbidden)):
        for b in bad:
            assert b not in text, f"row {i}: {b[:60]!r} is trained but is not an assistant turn"
    return texts


@pytest.mark.parametrize("name,template,assistant_only", SFT_CASES, ids=[f"{n}-{t}" for n, t, _ in SFT_CASES])
def test_sft_prepared_rows_train_the_assistant_turns(exports, hf_cache, base_tokenizer, tmp_path,
                                                     name, template, assistant_only):
    trainer, tokenizer, ds = _sft(exports, hf_cache, base_tokenizer, tmp_path, name, template, assistant_only)
    rows = read_rows(exports[name]["path"])
    texts = check_sft_prepared(trainer, tokenizer, rows, template)
    # Tool calls are trained as the model must emit them: arguments encoded once.
    for text, row in zip(texts, rows):
        for _, arguments in hf.tool_calls_of({k: row[k] for k in ("messages", "completion") if k in row}):
            once, twice = hf.encodings(arguments)
            assert once in text and twice not in text
    if (name, template) in SFT_TRAIN:
        out = trainer.train()
        assert out.global_step == 2 and out.training_loss > 0


def _system_only_length(tokenizer, row):
    """Tokens up to the end of the rendered system prompt: a max_length that keeps nothing else."""
    messages = row.get("messages") or row.get("prompt")
    assert messages[0]["role"] == "system"
    system = messages[0]["content"]
    text = tokenizer.apply_chat_template(messages, tools=row.get("tools"), tokenize=False)
    end = text.index(system) + len(system)
    return len(tokenizer(text[:end], add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("name,template,assistant_only", [("sft_trl_messages", "qwen2_5", True),
                                                          ("sft_trl_unroll", "llama3_1", False)])
def test_sft_max_length_that_keeps_only_the_system_prompt_is_caught(exports, hf_cache, base_tokenizer, tmp_path,
                                                                    name, template, assistant_only):
    rows = read_rows(exports[name]["path"])
    tokenizer = hf.wrap_tokenizer(base_tokenizer, template)
    cut = _system_only_length(tokenizer, rows[0])
    trainer, tokenizer, _ = _sft(exports, hf_cache, base_tokenizer, tmp_path, name, template, assistant_only,
                                 max_length=cut)
    # What TRL does: every row is left with no trained token and is dropped without a word...
    assert trainer.train_dataset.num_rows == 0
    # ...so our check fails loudly, at preparation time,
    with pytest.raises(hf.NothingTrained, match="no assistant token is trained"):
        check_sft_prepared(trainer, tokenizer, rows, template)
    # ...and training itself dies later on an empty sampler, an error that names no cause.
    with pytest.raises(ValueError, match="num_samples=0"):
        trainer.train()


def test_sft_max_length_that_cuts_assistant_turns_is_caught(exports, hf_cache, base_tokenizer, tmp_path):
    """Between the two: a max_length that keeps the first assistant turn of the longest row but cuts its
    last ones. TRL keeps training on such rows without a word (it drops only rows left with no trained
    token); the check names the row and the reply that is not trained."""
    name, template = "sft_trl_messages", "qwen2_5"
    rows = read_rows(exports[name]["path"])
    tokenizer = hf.wrap_tokenizer(base_tokenizer, template)

    def render(row):
        return tokenizer.apply_chat_template(row["messages"], tools=row.get("tools"), tokenize=False)

    longest = max(rows, key=lambda r: len(render(r)))
    text = render(longest)
    first_reply = hf.assistant_texts(longest["messages"])[0]
    end = text.index(first_reply) + len(first_reply)
    cut = len(tokenizer(text[:end], add_special_tokens=False)["input_ids"]) + 8
    assert cut < len(tokenizer(text, add_special_tokens=False)["input_ids"])
    trainer, tokenizer, _ = _sft(exports, hf_cache, base_tokenizer, tmp_path, name, template, True, max_length=cut)
    kept = trainer.train_dataset.num_rows
    assert kept > 0  # TRL trains on: the rows still hold some assistant tokens
    with pytest.raises(hf.NothingTrained, match="are not among the trained tokens|dropped in preparation"):
        check_sft_prepared(trainer, tokenizer, rows, template)


def test_llama3_1_messages_rows_need_the_prompt_completion_export(exports, hf_cache, base_tokenizer, tmp_path):
    """TRL has no training twin of the Llama 3.1 template, so assistant-only loss on `messages` rows is
    refused: for Llama 3.1 use mask_mode="final" or unroll=True (prompt/completion rows)."""
    with pytest.raises(ValueError, match="not training-compatible"):
        _sft(exports, hf_cache, base_tokenizer, tmp_path, "sft_trl_messages", "llama3_1", True)


def _dpo(exports, hf_cache, base_tokenizer, tmp_path, template, max_length=None):
    tokenizer = hf.wrap_tokenizer(base_tokenizer, template)
    ds = hf.load_jsonl(exports["dpo_trl"]["path"], hf_cache)
    model = hf.tiny_model(template, tokenizer)
    args = DPOConfig(output_dir=str(tmp_path / "dpo"), max_length=max_length, **COMMON)
    trainer = DPOTrainer(model=model, ref_model=copy.deepcopy(model), args=args, train_dataset=ds,
                         processing_class=tokenizer)
    return trainer, tokenizer


def check_dpo_prepared(trainer, tokenizer, source_rows, template):
    prepared = trainer.train_dataset
    if prepared.num_rows != len(source_rows):
        raise hf.NothingTrained(
            "no training row survived preparation: no assistant token is trained" if prepared.num_rows == 0 else
            f"{len(source_rows) - prepared.num_rows} of {len(source_rows)} pairs were dropped in preparation")
    for side in ("chosen", "rejected"):
        texts = [tokenizer.decode(r[f"{side}_ids"], skip_special_tokens=False) for r in prepared]
        hf.assert_assistant_trained(texts, [hf.assistant_texts(r[side], template) for r in source_rows],
                                    forbidden=[m["content"] for m in source_rows[0]["prompt"]])
    prompts = [tokenizer.decode(r["prompt_ids"], skip_special_tokens=False) for r in prepared]
    for text, row in zip(prompts, source_rows):
        assert row["prompt"][-1]["content"] in text


@pytest.mark.parametrize("template", DPO_TEMPLATES)
def test_dpo_prepared_rows_hold_both_sides(exports, hf_cache, base_tokenizer, tmp_path, template):
    trainer, tokenizer = _dpo(exports, hf_cache, base_tokenizer, tmp_path, template)
    rows = read_rows(exports["dpo_trl"]["path"])
    check_dpo_prepared(trainer, tokenizer, rows, template)
    if template in DPO_TRAIN:
        out = trainer.train()
        assert out.global_step == 2


def test_dpo_max_length_that_keeps_only_the_system_prompt_is_caught(exports, hf_cache, base_tokenizer, tmp_path):
    rows = read_rows(exports["dpo_trl"]["path"])
    tokenizer = hf.wrap_tokenizer(base_tokenizer, "qwen2_5")
    trainer, tokenizer = _dpo(exports, hf_cache, base_tokenizer, tmp_path, "qwen2_5",
                              max_length=_system_only_length(tokenizer, rows[0]))
    assert trainer.train_dataset.num_rows == 0  # TRL drops every pair whose prompt fills max_length
    with pytest.raises(hf.NothingTrained, match="no assistant token is trained"):
        check_dpo_prepared(trainer, tokenizer, rows, "qwen2_5")
    with pytest.raises(ValueError, match="num_samples=0"):
        trainer.train()
