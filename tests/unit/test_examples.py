"""The example jobs in examples/ load as job specs, the GPT-2 124M fine-tuning ones are
GPT-2 124M (its real vocabulary) from a Hugging Face-format file on one GPU and with pp=2,
and the tiny one's vocabulary holds every token `gantry data`'s byte tokenizer writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.data import byte_tokenizer
from launcher.job_spec import ModelSpec, check_layout, load_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPT2_124M = ModelSpec(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, seq_len=1024)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_loads(path: Path) -> None:
    spec = load_job(path)
    check_layout(spec, spec.resources.gpus_per_node or 1)


@pytest.mark.parametrize(("name", "pp"), [("gpt2-124m-finetune.yaml", 1),
                                          ("gpt2-124m-finetune-pp2.yaml", 2)])
def test_gpt2_124m_finetune_examples(name: str, pp: int) -> None:
    spec = load_job(EXAMPLES / name)
    assert spec.model == GPT2_124M
    assert spec.parallelism.pp == pp and spec.parallelism.dp == 1
    assert spec.resources.nodes * (spec.resources.gpus_per_node or 0) == pp
    assert spec.train.init_weights == "gpt2-124m/model.safetensors"
    assert spec.train.data == "data/gpt2/train_*.bin"
    assert spec.checkpoint.dir is not None


def test_the_tiny_example_covers_the_byte_tokenizers_vocabulary() -> None:
    spec = load_job(EXAMPLES / "gpt2-tiny-pp2-dp2.yaml")
    assert spec.model.vocab_size >= byte_tokenizer.VOCAB_SIZE > byte_tokenizer.EOT_TOKEN
