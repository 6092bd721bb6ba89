"""Writes a quantized copy of a dense checkpoint in one of the test writer's schemes.

For benchmarks on machines without llm-compressor (`bench offline --quantized`): the
codes are min-max (no calibration, so quality is not the point), the format is exactly
what compressed-tensors, AWQ and GPTQ store. Run from the repository root:

    .venv/bin/python scripts/make_quantized_checkpoint.py SOURCE OUT --recipe w4a16-g32 \\
        --group-size 128
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.quantized_checkpoints import RECIPES, write_quantized_pair


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="A dense safetensors checkpoint directory.")
    parser.add_argument("out", type=Path, help="Where to write the quantized checkpoint.")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="w4a16-g32")
    parser.add_argument("--group-size", type=int, default=None,
                        help="Replace the recipe's group size (grouped recipes).")  # fmt: skip
    args = parser.parse_args(argv)
    recipe = RECIPES[args.recipe]
    if args.group_size is not None:
        recipe = dataclasses.replace(recipe, group_size=args.group_size)
    work = args.out.with_name(args.out.name + ".tmp")
    quantized, _ = write_quantized_pair(
        work, "", recipe, dense_source=args.source, write_reference=False
    )
    shutil.move(str(quantized), str(args.out))
    shutil.rmtree(work)
    print(f"wrote {args.out} ({args.recipe}, group size {recipe.group_size})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
