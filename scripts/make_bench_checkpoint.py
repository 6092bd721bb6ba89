"""Write a SmolLM2-135M-shaped random checkpoint with a matching word-level tokenizer.

`llmd bench sweep` needs a daemon, and a daemon needs a tokenizer whose vocabulary covers
every id the model can sample; random weights plus a 49,152-word tokenizer give a
realistic compute shape with no download.

    python scripts/make_bench_checkpoint.py /tmp/smollm2-135m-random
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from llmd.bench.workload import SMOLLM2_135M_SHAPE, make_checkpoint

SPECIAL_TOKENS = ("<|endoftext|>", "<|startoftext|>", "<|pad|>")


def write_word_tokenizer(path: Path, vocab_size: int) -> None:
    """A whitespace word-level tokenizer: the special tokens, then words w3 .. w{vocab-1}."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"w{index}": index for index in range(len(SPECIAL_TOKENS), vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<|pad|>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer.save(str(path / "tokenizer.json"))
    config = {
        "backend": "tokenizers",
        "tokenizer_class": "TokenizersBackend",
        "bos_token": SPECIAL_TOKENS[1],
        "eos_token": SPECIAL_TOKENS[0],
        "pad_token": SPECIAL_TOKENS[2],
        "model_max_length": SMOLLM2_135M_SHAPE["max_position_embeddings"],
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def main() -> int:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/smollm2-135m-random")
    path.mkdir(parents=True, exist_ok=True)
    make_checkpoint(path, SMOLLM2_135M_SHAPE)
    write_word_tokenizer(path, SMOLLM2_135M_SHAPE["vocab_size"])
    generation = {"eos_token_id": 0, "bos_token_id": 1}
    (path / "generation_config.json").write_text(json.dumps(generation))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
