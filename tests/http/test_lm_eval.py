"""lm-eval's `local-completions` model scores a multiple-choice and a generate-until task
against `llmd serve` on the tiny model, from a local JSON dataset (no download).

lm-eval 0.4.13 is installed into its own virtual environment (LM_EVAL_VENV, by default
~/.cache/llmd/lm-eval-venv; never the project's), with transformers for its tokenizer; the test
skips with the reason when it cannot be installed. Multiple choice is what needs
`echo: true, logprobs, max_tokens: 1`: the prompt's logprobs score each choice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

LM_EVAL_VERSION = "0.4.13"
VENV = Path(os.environ.get("LM_EVAL_VENV", Path.home() / ".cache/llmd/lm-eval-venv"))
INSTALL_TIMEOUT_S = 900
PACKAGES = [f"lm-eval[api]=={LM_EVAL_VERSION}", "transformers"]
"""What the test venv needs: the API models' extras, and transformers for the tokenizer
lm-eval counts context tokens with (the tiny model's own, from its directory)."""

MC_TASK = """\
task: llmd_local_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: multiple_choice
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: label
doc_to_choice: choices
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
GEN_TASK = """\
task: llmd_local_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: answer
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""
MC_DOCS = [
    {"question": "What color is the sky?", "choices": [" blue", " green", " red"], "label": 0},
    {"question": "How many legs has a cat?", "choices": [" two", " four"], "label": 1},
    {"question": "Which is a fruit?", "choices": [" apple", " stone", " chair"], "label": 0},
]
GEN_DOCS = [
    {"question": "What is one plus one?", "answer": "two"},
    {"question": "Name a color.", "answer": "blue"},
]


def _venv_python() -> Path:
    """The test venv's python with lm-eval importable; installs it once, or skips."""
    python = VENV / "bin" / "python"
    probe = (
        "import lm_eval, tenacity, aiohttp, transformers, importlib.metadata as m; "
        f"assert m.version('lm_eval') == '{LM_EVAL_VERSION}'"
    )
    check = [str(python), "-c", probe]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    try:
        if not python.exists():
            subprocess.run(
                [sys.executable, "-m", "venv", "--system-site-packages", str(VENV)],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *PACKAGES],
            check=True, capture_output=True, timeout=INSTALL_TIMEOUT_S,
        )  # fmt: skip
    except (subprocess.SubprocessError, OSError) as error:
        pytest.skip(f"lm-eval {LM_EVAL_VERSION} cannot be installed into {VENV}: {error}")
    if subprocess.run(check, capture_output=True).returncode != 0:
        pytest.skip(f"lm-eval {LM_EVAL_VERSION} does not import in {VENV}")
    return python


def _write_tasks(root: Path) -> Path:
    tasks = root / "tasks"
    tasks.mkdir()
    for name, docs, template in (("mc", MC_DOCS, MC_TASK), ("gen", GEN_DOCS, GEN_TASK)):
        data = root / f"{name}.jsonl"
        data.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
        (tasks / f"llmd_local_{name}.yaml").write_text(template.format(data=data))
    return tasks


@pytest.mark.slow
def test_lm_eval_scores_multiple_choice_and_generation(served_http, tmp_path):
    python = _venv_python()
    tasks = _write_tasks(tmp_path)
    model_id = httpx.get(f"{served_http.v1}/models", timeout=10).json()["data"][0]["id"]
    model_args = ",".join([
        f"model={model_id}",
        f"base_url={served_http.v1}/completions",
        f"tokenizer={served_http.model_dir}",
        "tokenizer_backend=huggingface",
        "num_concurrent=1",
        "max_retries=1",
        "max_length=512",
    ])  # fmt: skip
    output = tmp_path / "results"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # lm-eval needs nothing of llmd's: HTTP is the interface
    run = subprocess.run(
        [
            str(python), "-m", "lm_eval", "run", "--model", "local-completions",
            "--model_args", model_args, "--tasks", "llmd_local_mc,llmd_local_gen",
            "--include_path", str(tasks), "--output_path", str(output), "--batch_size", "1",
            "--log_samples",
        ],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    [results_file] = list(output.rglob("results_*.json"))
    results = json.loads(results_file.read_text())["results"]
    mc = results["llmd_local_mc"]
    assert 0.0 <= mc["acc,none"] <= 1.0
    assert mc["acc_stderr,none"] is not None
    assert 0.0 <= results["llmd_local_gen"]["exact_match,none"] <= 1.0
    [samples_file] = list(output.rglob("samples_llmd_local_mc_*.jsonl"))
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    assert len(samples) == len(MC_DOCS)
    for sample, doc in zip(sorted(samples, key=lambda s: s["doc_id"]), MC_DOCS):
        # One (loglikelihood, is_greedy) per choice, from the echoed prompt logprobs: a
        # real, negative sum that differs between choices of different tokens.
        scores = [float(resp[0][0]) for resp in sample["resps"]]
        assert len(scores) == len(doc["choices"])
        assert all(-100.0 < score < 0.0 for score in scores), scores
        assert len(set(scores)) == len(scores), scores
