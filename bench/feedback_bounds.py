"""Feedback bounds of a base model on the synthetic eval split: how much does a second turn help, by feedback source?

    python -m bench.feedback_bounds --preset tiny [--samples 2] [--seed 0] [--threads 2] [--base-dir DIR]

Protocol: for every eval problem, `--samples` first attempts are sampled from the base model (chat template,
temperature from `generation.eval_temperature`, `generation.max_new_tokens`). Each attempt then gets four
second turns, all sampled the same way, that differ only in the feedback:
  single         no second turn (the first attempt's accuracy);
  initial_critic feedback sampled from the same base model in the critic role (`feedback_max_new_tokens`);
  oracle         `synthetic.oracle_feedback` (rule-based, error-aware);
  self_correct   the fixed `prompts.SELF_CORRECT_FEEDBACK`.
The base model is built first if the workspace has none for this config (`$BINAC_HOME/models/base-<digest>`).
Uses only `model.generate`; no adapters, no verifier in the loop.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

from binac_core.benchmarks import synthetic as syn
from binac_core.benchmarks.prompts import SELF_CORRECT_FEEDBACK
from binac_core.foundation.config import load_config


def sample(model, tok, conversations: list[list[dict]], max_new: int, temperature: float, batch: int = 128):
    """One sampled completion per conversation (left-padded batches, stops at `<|im_end|>`), decoded text."""
    out = []
    for start in range(0, len(conversations), batch):
        texts = [
            tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
            for c in conversations[start : start + batch]
        ]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            seq = model.generate(
                **enc,
                max_new_tokens=max_new,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=None,
                top_k=None,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
        out += tok.batch_decode(seq[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return out


def feedback_kind(feedback: str) -> str:
    if syn.LOOKS_CORRECT in feedback:
        return "looks_correct"
    return "names_step" if syn.named_step(feedback) is not None else "vague"


def evaluate(model, tok, rows: list[dict], cfg, samples: int) -> dict:
    """Accuracy of each protocol (see module doc) over `samples` attempts per row, plus feedback diagnostics."""
    g = cfg.generation
    temp = g.eval_temperature
    items = [r for r in rows for _ in range(samples)]
    attempts = sample(model, tok, [syn.actor_messages(r) for r in items], g.max_new_tokens, temp)
    critic = sample(
        model,
        tok,
        [syn.critic_messages(r, a) for r, a in zip(items, attempts, strict=True)],
        g.feedback_max_new_tokens,
        temp,
    )
    sources = {
        "initial_critic": critic,
        "oracle": [syn.oracle_feedback(r, a) for r, a in zip(items, attempts, strict=True)],
        "self_correct": [SELF_CORRECT_FEEDBACK] * len(items),
    }
    first = [syn.grade_response(r, a) for r, a in zip(items, attempts, strict=True)]
    result = {"n": len(items), "single": sum(first) / len(items)}
    for name, feedbacks in sources.items():
        convs = [syn.refine_messages(r, a, f) for r, a, f in zip(items, attempts, feedbacks, strict=True)]
        second = [
            syn.grade_response(r, y)
            for r, y in zip(items, sample(model, tok, convs, g.max_new_tokens, temp), strict=True)
        ]
        result[name] = sum(second) / len(items)
        result[f"{name}_fixed"] = sum(1 for a, b in zip(first, second, strict=True) if a < b) / len(items)
        result[f"{name}_broken"] = sum(1 for a, b in zip(first, second, strict=True) if a > b) / len(items)
    oracle = sources["oracle"]
    result["critic_kinds"] = dict(Counter(feedback_kind(f) for f in critic))
    result["critic_agrees_with_oracle"] = sum(c.strip() == o for c, o in zip(critic, oracle, strict=True)) / len(items)
    result["well_formed_attempts"] = sum(syn.final_answer(a) is not None for a in attempts) / len(items)
    result["examples"] = [
        {"question": r["question"], "attempt": a, "critic": c, "oracle": o}
        for r, a, c, o in list(zip(items, attempts, critic, oracle, strict=True))[:4]
    ]
    return result


def ensure_base(cfg, base_dir: Path | None, rebuild: bool) -> Path:
    from binac_core.foundation.workspace import workspace
    from binac_core.model.pretrain import build_base_model

    out = base_dir or workspace().base_model_dir(cfg.base_digest())
    if rebuild or not (out / "config.json").exists():
        build_base_model(cfg, out)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--samples", type=int, default=2, help="first attempts per eval problem")
    ap.add_argument("--seed", type=int, default=0, help="torch seed of all sampling")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base-dir", type=Path, default=None, help="a saved base model (default: workspace cache)")
    ap.add_argument("--rebuild", action="store_true", help="pretrain again even if the cache has a base model")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = load_config(args.preset)
    base = ensure_base(cfg, args.base_dir, args.rebuild)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base).eval()
    rows = syn.make_split(cfg.task, "eval")
    torch.manual_seed(args.seed)
    t0 = time.monotonic()
    res = evaluate(model, tok, rows, cfg, args.samples)
    meta = json.loads((base / "base_meta.json").read_text())
    res.update(
        preset=cfg.name,
        seed=args.seed,
        problems=len(rows),
        samples_per_problem=args.samples,
        temperature=cfg.generation.eval_temperature,
        base=str(base),
        pretrain_seconds=meta.get("seconds"),
        eval_seconds=round(time.monotonic() - t0, 1),
    )
    report(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return res


def report(res: dict) -> None:
    print(
        f"preset {res['preset']}: eval split, {res['problems']} problems x {res['samples_per_problem']} samples "
        f"= {res['n']} attempts, temperature {res['temperature']}, seed {res['seed']}"
    )
    print(f"  single-turn          {res['single']:.3f}")
    for name in ("initial_critic", "oracle", "self_correct"):
        print(
            f"  after {name:<14} {res[name]:.3f}  (gain {res[name] - res['single']:+.3f}; "
            f"fixed {res[name + '_fixed']:.3f}, broken {res[name + '_broken']:.3f})"
        )
    print(
        f"  initial critic feedback kinds {res['critic_kinds']}, equal to oracle {res['critic_agrees_with_oracle']:.3f}"
    )
    print(
        f"  well-formed attempts {res['well_formed_attempts']:.3f}; pretrain {res['pretrain_seconds']}s, "
        f"eval {res['eval_seconds']}s"
    )
    for ex in res["examples"]:
        print(f"  e.g. {ex['question']!r} -> {ex['attempt']!r} | critic {ex['critic']!r} | oracle {ex['oracle']!r}")


if __name__ == "__main__":
    main()
