"""The command line itself: help that shows defaults, `--set` and preset-file errors that
name the valid fields and the closest one, a mistyped option answered with its subcommand's usage, and a
comparison budget that every method's iterations fit in. All of it fails before any compute: no training here."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from binac_core.errors import BinacError
from binac_core.foundation.config import RENAMED, TrainConfig, load_config
from binac_core.rl.methods import METHODS, method_spec
from binac_core.runs.plans import plan, plan_compare
from flows import cli

REPO = Path(__file__).resolve().parents[2]
# Actor training samples per iteration on micro: 4 problems x 4 attempts x (1, 1 + K = 2 refinements; binac's
# look-ahead refinements are not trained on; critic_only trains no actor).
MICRO_PER_ITERATION = {"grpo": 16, "fixed_critic": 48, "binac": 48, "critic_only": 0}


@pytest.fixture
def binac(monkeypatch, capsys):
    """`binac ARGS` in this process: (exit status, stdout, stderr). No Prefect settings are exported: every case
    here stops before `_env_defaults` would matter."""
    monkeypatch.setattr(cli, "_env_defaults", lambda: None)

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            rc = cli.main(list(argv))
        except SystemExit as exc:
            rc = exc.code
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def _subparsers():
    parser = cli.build_parser()
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return action.choices


@pytest.mark.parametrize("command", ["train", "compare", "demo", "evaluate", "study", "sql", "config"])
def test_help_shows_every_default_and_no_none_noise(command):
    sub = _subparsers()[command]
    text = " ".join(sub.format_help().split())  # argparse wraps lines at the terminal's width
    shown = 0
    for action in sub._actions:
        if not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
            continue
        assert f"(default: {action.default})" in text, (command, action.dest, text)
        shown += 1
    assert "default: None" not in text and "default: False" not in text and "default: []" not in text, text
    assert command in ("study", "sql", "config") or shown >= 2


def test_train_help_names_its_defaults(binac):
    rc, out, _ = binac("train", "-h")
    text = " ".join(out.split())
    assert rc == 0 and text.startswith("usage: binac train")
    for needle in (
        "--preset PRESET",
        "(default: tiny)",
        "(default: grpo)",
        "--steps STEPS training iterations (default: 20)",
        "(default: 0)",
    ):
        assert needle in text, (needle, text)


def test_set_unknown_field_names_the_closest_and_the_valid_fields(binac):
    rc, out, err = binac("train", "--preset", "micro", "--set", "train.lr=0.1")
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    valid = ", ".join(sorted(TrainConfig.model_fields))
    assert lines == [
        "error: --set train.lr: unknown field of section train (did you mean train.actor_lr or "
        f"train.critic_lr?); valid: {valid}"
    ], err
    assert valid.startswith("activation_checkpointing, actor_lr, alpha_shaping, alternation, batch_problems")


@pytest.mark.parametrize(
    "item, needle",
    [
        ("train.actor_l=1", "--set train.actor_l: unknown field of section train (did you mean train.actor_lr?); "),
        (
            "model.temperature=0",
            "--set model.temperature: unknown field of section model (did you mean "
            "generation.temperature?); valid: architecture, base_weights, device, dtype, ",
        ),
        ("train.zzz=1", "--set train.zzz: unknown field of section train; valid: activation_checkpointing, actor_lr, "),
        (
            "trian.actor_lr=1",
            "--set trian.actor_lr: unknown section trian (did you mean train?); valid sections: "
            "bank, critic, generation, grading, lora, model, task, train",
        ),
        (
            "name.x=1",
            "--set name.x: unknown section name; valid sections: bank, critic, generation, grading, lora, model, task, train",
        ),
    ],
)
def test_set_unknown_key_is_one_line_naming_it(binac, item, needle):
    rc, _, err = binac("compare", "--preset", "micro", "--set", item)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"error: {needle}"), err


def test_a_valid_field_with_a_bad_value_still_names_the_constraint(binac):
    rc, _, err = binac("train", "--preset", "micro", "--set", "train.group_size=1")
    assert (
        rc == 2
        and err.strip()
        == "error: invalid config micro: train.group_size: Input should be greater than or equal to 2 (got 1)"
    ), err


def test_overrides_outside_the_cli_and_preset_files_get_the_same_hint(tmp_path):
    """A deployment's or study file's `overrides` and a preset file's keys go through `load_config` alone."""
    with pytest.raises(
        BinacError,
        match=r"^override train\.lr: unknown field of section train \(did you mean "
        r"train\.actor_lr or train\.critic_lr\?\); valid: activation_checkpointing, actor_lr, ",
    ):
        load_config("micro", {"train.lr": 0.1})
    preset = tmp_path / "mine.yaml"
    preset.write_text("train:\n  lr: 0.1\n")
    with pytest.raises(BinacError) as info:
        load_config(str(preset))
    assert str(info.value).startswith(
        f"invalid config {preset}: train.lr: unknown field of section train (did you "
        "mean train.actor_lr or train.critic_lr?); valid: activation_checkpointing, actor_lr, "
    )
    preset.write_text("trian:\n  actor_lr: 0.1\n")
    with pytest.raises(BinacError) as info:
        load_config(str(preset))
    assert str(info.value) == (
        f"invalid config {preset}: unknown top-level key trian (did you mean train?); valid "
        "top-level keys: bank, critic, generation, grading, lora, model, name, task, train"
    )


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["train", "--stesp", "3"], "binac train: error: unrecognized arguments: --stesp 3 (did you mean --steps?)"),
        (["train", "--steps", "abc"], "binac train: error: argument --steps: invalid int value: 'abc'"),
        (["compare", "--method", "grpo", "--steps", "5"], None),  # argparse's prefix match: --method is --methods
        (
            ["compare", "--sedes", "0"],
            "binac compare: error: unrecognized arguments: --sedes 0 (did you mean --seeds?)",
        ),
        (
            ["evaluate", "--benchmark", "gsm8k", "--model", "m", "--protcol", "gated"],
            "binac evaluate: error: unrecognized arguments: --protcol gated (did you mean --protocol?)",
        ),
    ],
)
def test_a_mistyped_option_prints_its_subcommands_usage(binac, argv, needle):
    if needle is None:
        assert cli.build_parser().parse_args(argv).methods == "grpo"
        return
    rc, out, err = binac(*argv)
    assert rc == 2 and out == ""
    assert err.startswith(f"usage: binac {argv[0]} [-h]"), err  # the subcommand's usage, not `binac [-h] {train,...`
    assert err.strip().splitlines()[-1] == needle, err


def test_budget_below_one_iteration_of_a_method_is_refused_with_the_smallest_steps(binac):
    rc, out, err = binac(
        "compare", "--preset", "micro", "--methods", "grpo,fixed_critic,binac", "--seeds", "0", "--steps", "2"
    )
    assert rc == 2 and out == ""
    assert err.strip() == (
        "error: --steps 2 gives a budget of 32 actor training samples, less than one iteration "
        "of fixed_critic (48), binac (48); the smallest budget that fits every method is --steps "
        "3 (48 actor training samples)"
    ), err
    # Every method trained on its second turn needs 48; critic_only (no actor training) and grpo fit any budget.
    with pytest.raises(
        BinacError,
        match=r"^--steps 2 gives a budget of 32 actor training samples, less than one "
        r"iteration of fixed_critic \(48\), binac \(48\), binac_lam0 \(48\), "
        r"binac_after \(48\), self_correct \(48\), oracle_critic \(48\), binac_disc \(48\); the "
        r"smallest budget that fits every method is --steps 3 \(48 actor training "
        r"samples\)$",
    ):
        plan_compare("micro", list(METHODS), [0], 2, None)
    assert plan_compare("micro", ["grpo", "critic_only"], [0], 1, None)[1] == 16
    assert plan_compare("micro", ["grpo", "fixed_critic"], [0], 3, None)[1] == 48
    assert plan_compare("micro", list(METHODS), [0], 3, None)[1] == 48
    assert plan_compare("micro", list(METHODS), [0], 5, None)[1] == 80
    # A `train` flow given a budget directly (a deployment run) is refused the same way, naming the method.
    with pytest.raises(BinacError, match=r"^an actor-sample budget of 32 is less than one iteration of binac \(48 "):
        plan("micro", "binac", None, 0, None, 32)


def test_budget_refusal_writes_nothing(tmp_path):
    """The real command, as a user runs it: exit status 2, one line, and nothing in the workspace."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    env.update(BINAC_HOME=str(home), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "compare", "--preset", "micro", "--seeds", "0", "--steps", "1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: --steps 1 gives a budget of 16 actor training samples, less than one iteration of fixed_critic "
        "(48), binac (48); the smallest budget that fits every method is --steps 3 (48 actor training samples)"
    ]
    assert not (home / "mlflow.db").exists() and not (home / "runs").exists()


@pytest.mark.parametrize(
    "budget, expected",
    [  # critic_only runs grpo's iterations (budget // 16)
        (48, {"grpo": 3, "fixed_critic": 1, "binac": 1, "critic_only": 3}),
        (80, {"grpo": 5, "fixed_critic": 1, "binac": 1, "critic_only": 5}),
        (95, {"grpo": 5, "fixed_critic": 1, "binac": 1, "critic_only": 5}),
        (96, {"grpo": 6, "fixed_critic": 2, "binac": 2, "critic_only": 6}),
        (159, {"grpo": 9, "fixed_critic": 3, "binac": 3, "critic_only": 9}),
        (480, {"grpo": 30, "fixed_critic": 10, "binac": 10, "critic_only": 30}),
    ],
)
def test_iterations_are_the_whole_ones_within_the_budget(budget, expected):
    cfg = load_config("micro")
    for method, iterations in expected.items():
        spec = method_spec(method)
        assert spec.actor_train_samples_per_iteration(cfg) == MICRO_PER_ITERATION[method]
        assert spec.iterations_for_budget(cfg, budget) == iterations, (method, budget)
        assert plan("micro", method, None, 0, None, budget)[2] == iterations


def test_no_method_ever_exceeds_its_budget():
    cfg = load_config("micro")
    for method in METHODS:
        spec = method_spec(method)
        per = spec.actor_train_samples_per_iteration(cfg) or 16  # critic_only: grpo's 16 attempts an iteration
        for budget in range(per, 6 * per + 1):
            n = spec.iterations_for_budget(cfg, budget)
            assert n >= 1 and n * per <= budget < (n + 1) * per, (method, budget, n)
        with pytest.raises(BinacError, match=f"less than one iteration of {method} \\({per} actor training samples\\)"):
            spec.iterations_for_budget(cfg, per - 1)


def test_every_default_comparison_fits_its_budget():
    """`binac compare`, `binac demo` and every compare deployment of prefect.yaml, with their default parameters."""
    sub = _subparsers()
    c = sub["compare"].parse_args([])
    plan_compare(c.preset, c.methods.split(","), [0], c.steps, None)
    d = sub["demo"].parse_args([])
    assert d.preset == cli.DEMO_PRESET == "demo" and d.steps == cli.DEMO_STEPS
    for preset in (d.preset, "smoke"):  # `binac demo` (equal iterations), and `binac demo --preset smoke`
        plan_compare(preset, cli.DEMO_METHODS.split(","), [0], d.steps, None, "iterations")
    deployments = [
        dep
        for dep in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]
        if dep["entrypoint"] == "flows/compare.py:compare"
    ]
    assert {dep["name"] for dep in deployments} >= {"micro", "tiny", "nightly"}
    for dep in deployments:
        p = dep["parameters"]
        plan_compare(p["preset"], p["methods"], p["seeds"], p["steps"], p.get("overrides"))
    micro = next(dep for dep in deployments if dep["name"] == "micro")["parameters"]
    assert micro["steps"] == 5, "80 actor training samples: 5 grpo iterations, 1 of binac (48; the smallest is 3)"


# --- train.micro_batch_size, formerly train.minibatch_size (config.RENAMED) ---

DEPRECATION = (
    "warning: train.minibatch_size is deprecated: it is train.micro_batch_size (a gradient-accumulation "
    "micro-batch); read as that"
)


@pytest.fixture
def fresh_warnings(monkeypatch):
    """The deprecation line is printed once per process: each test starts as a fresh process would."""
    from binac_core.foundation import config

    monkeypatch.setattr(config, "_WARNED", set())


def _preset(tmp_path, name: str, train: dict) -> Path:
    raw = yaml.safe_load((REPO / "binac_core" / "presets" / "micro.yaml").read_text())
    raw["train"] = {k: v for k, v in raw.get("train", {}).items() if k != "micro_batch_size"} | train
    raw["name"] = "micro"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_micro_batch_field_says_it_is_gradient_accumulation():
    doc = TrainConfig.model_fields["micro_batch_size"].description
    text = " ".join(doc.split())
    for needle in (
        "forward/backward chunk",
        "gradients accumulate",
        "one optimizer step per pass",
        "changes memory, not the update's math",
        "gradient-accumulation micro-batch",
        "ppo_micro_batch_size_per_gpu",
        "micro_train_batch_size",
    ):
        assert needle in text, (needle, text)
    assert "minibatch_size" not in TrainConfig.model_fields  # the old name lives in RENAMED, not in the docstring
    assert RENAMED["train.minibatch_size"][0] == "train.micro_batch_size"


def test_the_old_name_in_a_preset_file_is_the_same_config_with_one_deprecation_line(tmp_path, capsys, fresh_warnings):
    new = load_config(str(_preset(tmp_path, "new", {"micro_batch_size": 3})))
    assert capsys.readouterr().err == ""
    old_path = _preset(tmp_path, "old", {"minibatch_size": 3})
    old = [load_config(str(old_path)) for _ in range(3)]
    assert capsys.readouterr().err.splitlines() == [DEPRECATION], "one line, however often the file is read"
    assert all(c == new and c.digest() == new.digest() for c in old) and new.train.micro_batch_size == 3
    assert "train.micro_batch_size" in new.flat() and "train.minibatch_size" not in new.flat()
    # the same value under both names is accepted
    assert load_config(str(_preset(tmp_path, "both", {"minibatch_size": 3, "micro_batch_size": 3}))) == new


def test_the_old_name_as_an_override_is_the_new_one(capsys, fresh_warnings):
    new = load_config("micro", {"train.micro_batch_size": 2})
    old = load_config("micro", {"train.minibatch_size": 2})
    assert old == new and old.digest() == new.digest() and old.train.micro_batch_size == 2
    assert load_config("micro", {"train.minibatch_size": 2}) == new
    assert capsys.readouterr().err.splitlines() == [DEPRECATION]
    # `binac --set` takes it too (its own check of the field names, flows/cli.py)
    assert load_config("micro", cli._overrides(["train.minibatch_size=2"])) == new


def test_an_old_name_override_replaces_the_preset_files_new_name(tmp_path, fresh_warnings):
    """An override wins over the file whichever name either gives: both spell one field."""
    path = _preset(tmp_path, "new", {"micro_batch_size": 3})
    assert load_config(str(path), {"train.minibatch_size": 2}).train.micro_batch_size == 2
    path = _preset(tmp_path, "old", {"minibatch_size": 3})
    assert load_config(str(path), {"train.micro_batch_size": 2}).train.micro_batch_size == 2


def test_both_names_with_different_values_are_one_line_naming_both(tmp_path, binac, fresh_warnings):
    path = _preset(tmp_path, "both", {"micro_batch_size": 4, "minibatch_size": 3})
    with pytest.raises(BinacError) as info:
        load_config(str(path))
    assert str(info.value) == (
        f"invalid config {path}: train.minibatch_size=3 and train.micro_batch_size=4 both "
        "given: train.minibatch_size is the old name of train.micro_batch_size; give "
        "train.micro_batch_size alone"
    )
    rc, out, err = binac(
        "compare", "--preset", "micro", "--set", "train.micro_batch_size=8", "--set", "train.minibatch_size=4"
    )
    assert (
        rc == 2
        and out == ""
        and err.splitlines()
        == [
            "error: overrides: train.minibatch_size=4 and train.micro_batch_size=8 both given: train.minibatch_size is "
            "the old name of train.micro_batch_size; give train.micro_batch_size alone"
        ]
    ), err


def test_a_study_file_may_give_the_old_name(tmp_path, capsys, fresh_warnings):
    from binac_core.studies.study import load_study

    raw = yaml.safe_load((REPO / "studies" / "micro-smoke.yaml").read_text())
    keys, configs = [], []
    for name in ("micro_batch_size", "minibatch_size"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            yaml.safe_dump(
                {**raw, "overrides": {f"train.{name}": 2}, "variants": {"grpo": {"a": {f"train.{name}": 3}}}}
            )
        )
        st = load_study(path)
        assert st.overrides == {"train.micro_batch_size": 2}
        assert st.variants == {"grpo": {"a": {"train.micro_batch_size": 3}}}
        keys.append(st.key())
        configs.append(st.config(2))
    assert keys[0] == keys[1] and configs[0] == configs[1] and configs[0].train.micro_batch_size == 2
    assert capsys.readouterr().err.splitlines() == [DEPRECATION]


def test_a_study_archive_that_is_not_a_folder_is_one_line(binac, tmp_path):
    path = tmp_path / "runs.tar"
    path.write_text("")
    rc, out, err = binac("study", str(REPO / "studies" / "sparse-feedback-v3.yaml"), "--archive", str(path))
    assert rc == 2 and out == "" and err.strip() == f"error: --archive {path}: not a folder", err
