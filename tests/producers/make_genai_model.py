"""Build a tiny int4 LLM with ONNX Runtime GenAI's model builder, nothing downloaded.

A randomly initialised Llama (2 layers, hidden 64, vocab 512, tied embeddings) and a
word-level tokenizer are written as a Hugging Face folder, then
``python -m onnxruntime_genai.models.builder -i HF -o OUT -p int4 -e cpu`` turns it into
``OUT/model.onnx`` with MatMulNBits weights and a GatherBlockQuantized embedding.

Needs torch (``pip install torch==2.13.0``), transformers and onnxruntime-genai: heavy, so
tests/passes/test_nbits_producer.py runs it only when they import (marked slow).
Usage: ``python tests/producers/make_genai_model.py OUT_FOLDER``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def make_hf_folder(folder: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(509)}}
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.save_pretrained(folder)


def main(out: Path) -> Path:
    hf = out / "hf"
    make_hf_folder(hf)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "onnxruntime_genai.models.builder",
            "-i",
            str(hf),
            "-o",
            str(out / "int4"),
            "-p",
            "int4",
            "-e",
            "cpu",
            "-c",
            str(out / "cache"),
        ],
        check=True,
    )
    return out / "int4" / "model.onnx"


if __name__ == "__main__":
    print(main(Path(sys.argv[1])))
