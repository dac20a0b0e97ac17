"""Experiment: can a policy of the demo's shape learn to *read* a statement in a warm-start budget? It builds demo
policies (``build_demo_policy``: the recipe every demo policy goes through) on synthetic statements at three levels
and scores each greedily, by exact match, on 30 statements it never saw:

- ``one_line``: one line item, one value asked; the answer copies the only number there is.
- ``four_lines``: four line items (as in ``finance_facts``: "Net income", asked as ``"net_income"``), one asked;
  the answer must find the line whose item is the key and copy its number (associative recall).
- ``four_lines_key_spelling``: the same with each line spelled as its key (``- net_income: 1821.4``), so the key's
  tokens appear verbatim in the line to find.

    python benchmarks/reading_probe.py                                # 2000 steps, batch 8: ~6 min on 2 cores
    python benchmarks/reading_probe.py --steps 2000 --batch 32 --levels four_lines
    python benchmarks/reading_probe.py --steps 2000 --batch 32 --levels four_lines --shape 256,768,4,4  # wider, deeper

It measures why the finance and scene suites earn nothing at the demo size (docs/multi-domain.md): copying is learnt
within a few hundred steps, finding which line to copy from is not. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time

from posttrain.config import DemoPolicyConfig
from posttrain.training.demo_policy import build_demo_policy

ITEMS = ("Revenue", "Cost of sales", "Cash", "Debt", "Capital spending", "Operating cash flow", "Net income",
         "Inventory")
LEVELS = ("one_line", "four_lines", "four_lines_key_spelling")
SHAPE = ("hidden_size", "intermediate_size", "num_layers", "num_heads")


def key(item: str) -> str:
    return item.lower().replace(" ", "_")


def statement(level: str, rng: random.Random) -> tuple[str, str]:
    """One ``(prompt, reference)`` pair of ``level``, values ``10.0``..``1999.9``.

    >>> prompt, reference = statement("one_line", random.Random(0))
    >>> reference.startswith('{"') and prompt.count("\\n- ") == 2   # the line item and the key asked
    True
    """
    items = rng.sample(ITEMS, 1 if level == "one_line" else 4)
    values = {item: f"{rng.randint(10, 1999)}.{rng.randint(0, 9)}" for item in items}
    label = key if level == "four_lines_key_spelling" else str
    asked = rng.choice(items)
    prompt = ("Results of Blue Media for fiscal 2023 (USD millions):\n"
              + "".join(f"- {label(item)}: {values[item]}\n" for item in items)
              + "Answer with one JSON object with exactly these keys, plain numbers:\n"
              + f'- "{key(asked)}": {asked.lower()} in 2023\n')
    return prompt, f'{{"{key(asked)}": {values[asked]}}}\n'


def exact_matches(policy_dir: str, pairs: list[tuple[str, str]]) -> int:
    """How many of ``pairs`` the policy completes greedily into exactly the reference."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir).eval()
    right = 0
    for prompt, reference in pairs:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=32, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                                 pad_token_id=tokenizer.pad_token_id)
        right += tokenizer.decode(out[0][ids.shape[1]:], skip_special_tokens=True).strip() == reference.strip()
    return right


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000, help="SFT steps of each build")
    parser.add_argument("--batch", type=int, default=8, help="SFT batch (the multi-domain recipe's: 8)")
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--train", type=int, default=8000, help="distinct training statements per level")
    parser.add_argument("--eval", type=int, default=30, help="held-out statements per level")
    parser.add_argument("--shape", default="",
                        help="model shape over the demo's, as hidden,intermediate,layers,heads (e.g. 256,768,4,4)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.shape.split(",")] if args.shape else []
    if sizes and len(sizes) != len(SHAPE):
        parser.error(f"--shape: {args.shape!r} needs {len(SHAPE)} numbers, {','.join(SHAPE)}")
    shape = dict(zip(SHAPE, sizes))
    cfg = DemoPolicyConfig(vocab_size=1024, max_position_embeddings=1024, sft_steps=args.steps,
                           sft_batch_size=args.batch, **shape)
    result: dict = {"steps": args.steps, "batch": args.batch, "shape": {k: getattr(cfg, k) for k in SHAPE},
                    "levels": {}}
    for level in args.levels.split(","):
        if level not in LEVELS:
            parser.error(f"--levels: {level!r} is not one of {', '.join(LEVELS)}")
        train = [statement(level, random.Random(n)) for n in range(args.train)]
        held_out = [statement(level, random.Random(-1 - n)) for n in range(args.eval)]
        began = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="reading-probe-") as out:
            build_demo_policy(out, cfg, train)
            built = time.perf_counter() - began
            right = exact_matches(out, held_out)
        result["levels"][level] = {"exact": f"{right}/{len(held_out)}", "exact_rate": round(right / len(held_out), 3),
                                   "build_s": round(built, 1)}
        print(f"{level:>24}: {right}/{len(held_out)} exact after {args.steps} steps of {args.batch} "
              f"({built:.0f} s)", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
