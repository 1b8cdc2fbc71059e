"""bench/demo_time.py's logic on made-up output (the clone, the install and the demo themselves run only when the
benchmark is run: `python bench/demo_time.py`; this is no timed test)."""

import subprocess

import pytest

from bench.demo_time import KEY, overlay_worktree, phases, row, section, verdict, write_section

# What `make demo` prints on a fresh clone, with seconds since it started (the install's pip lines are quiet).
FRESH = [
    (0.0, "test -x .venv/bin/python || python3 -m venv .venv"),
    (3.0, ".venv/bin/pip install -q -U pip"),
    (8.0, ".venv/bin/pip install -q --no-compile -e ."),
    (95.0, "touch .venv/.installed-runtime"),
    (95.1, ".venv/bin/binac demo"),
    (120.0, "pretrain: 16000 examples, vocab 193, 0.12M parameters"),
    (130.0, "pretrain step 100/1000 loss 2.1 (10s, ETA 90s)"),
    (170.5, "pretrain: saved /tmp/x/.binac/models/base-0123 in 55.2s (final loss 0.4)"),
    (230.0, "compare: 3/3 runs done (binac seed 0: held-out acc_single 0.300)"),
    (231.0, "Trajectory store: /tmp/x/.binac/trajectories.duckdb  (view `trajectories`)"),
]


def test_phases_are_cut_at_the_demo_command_and_the_saved_base():
    p = phases(FRESH, 232.0)
    assert p.install == pytest.approx(95.1)
    assert p.pretraining == pytest.approx(170.5 - 95.1)
    assert p.comparison == pytest.approx(232.0 - 170.5)
    assert p.pretrain_inner == pytest.approx(55.2) and p.total == 232.0 and not p.notes
    assert p.install + p.pretraining + p.comparison == pytest.approx(p.total)


def test_a_cached_base_or_an_unfinished_install_is_said_not_guessed():
    cached = [ln for ln in FRESH if not ln[1].startswith("pretrain")]
    p = phases(cached, 232.0)
    assert p.pretraining == 0.0 and p.comparison == pytest.approx(232.0 - 95.1)
    assert p.notes == ["no pretraining: the base model was cached, or shipped in the package (the `demo` preset)"]
    broken = phases(FRESH[:3], 20.0)
    assert broken.install is None and broken.pretraining is None and broken.comparison is None
    assert "install did not finish" in broken.notes[0]
    # make with the full install already there prints only the demo command (path as make writes it)
    assert phases([(0.0, ".venv/bin/binac demo"), (50.0, "done")], 51.0).install == 0.0
    # a line that merely mentions the demo is no marker
    assert phases([(1.0, "# make demo in <= 5 min"), (2.0, "binac demonstration")], 3.0).install is None


def test_the_verdict_follows_the_two_goals():
    p = phases(FRESH, 232.0)
    assert "within the 300 s goal" in verdict(p, 60.0)
    assert "over the 300 s goal" in verdict(phases(FRESH, 320.0), 60.0)
    # a slow network: the download alone over 2 min, and everything after it held to 3 min
    assert "after it 82 s, within the 180 s goal" in verdict(phases(FRESH, 232.0), 150.0)
    assert "over the 180 s goal" in verdict(phases(FRESH, 400.0), 150.0)
    assert "within the 300 s goal" in verdict(p, None)


META = {
    "date": "2026-12-03 10:00",
    "commit": "abc1234",
    "machine": "2 CPUs (x), Python 3.11.7",
    "cpus": 2,
    "load_start": (0.1, 0.2, 0.3),
    "load_end": (2.5, 0.9, 0.5),
    "overlay": False,
    "pip_source": "",
}


def test_the_row_has_every_phase_and_the_load_average():
    r = row(META, phases(FRESH, 232.0), 61.0)
    cells = [c.strip() for c in r.strip("|").split("|")]
    assert len(cells) == 10
    assert cells[3] == "0.10 / 0.20 / 0.30 → 2.50 / 0.90 / 0.50"
    assert cells[4] == "61 s (1.0 min)" and cells[5] == "95 s (1.6 min)"
    assert cells[6].startswith("75 s (1.3 min); 55 s of it") and cells[7] == "62 s (1.0 min)"
    assert cells[8] == "**232 s (3.9 min)**"
    body = section(META, phases(FRESH, 232.0), None)
    assert "not measured" in body and "busy" not in body
    busy = section({**META, "load_start": (2.5, 2.0, 1.0)}, phases(FRESH, 232.0), None)
    assert "The machine was busy (1-min load average 2.50 at the start" in busy
    assert "BINAC_TORCH_THREADS=1" in section({**META, "threads": 1}, phases(FRESH, 232.0), None)


def test_its_section_is_replaced_and_the_rest_of_the_file_kept(tmp_path):
    out = tmp_path / "results.md"
    head = "# binac benchmarks\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n"
    other = "<!-- bench:store -->\n## store\ntext\n<!-- /bench:store -->\n"
    out.write_text(head + other)
    write_section(out, KEY, "first body")
    text = out.read_text()
    assert text.startswith(head + other) and text.endswith(f"<!-- bench:{KEY} -->\nfirst body\n<!-- /bench:{KEY} -->\n")
    write_section(out, KEY, "second body")
    text = out.read_text()
    assert "first body" not in text and text.count(f"<!-- bench:{KEY} -->") == 1
    assert text.startswith(head + other) and "second body" in text
    # in the middle of the file, it stays where it is
    out.write_text(head + f"<!-- bench:{KEY} -->\nold\n<!-- /bench:{KEY} -->\n" + other)
    write_section(out, KEY, "new")
    assert out.read_text() == head + f"<!-- bench:{KEY} -->\nnew\n<!-- /bench:{KEY} -->\n" + other


def test_overlay_copies_uncommitted_changes_onto_a_clone(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()

    def git(*args, cwd=src):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    git("init", "-q")
    (src / ".gitignore").write_text("ignored.txt\n")
    (src / "kept.txt").write_text("v1")
    (src / "gone.txt").write_text("x")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "c")
    git("clone", "-q", str(src), str(dest), cwd=tmp_path)
    (src / "kept.txt").write_text("v2")
    (src / "gone.txt").unlink()
    (src / "sub").mkdir()
    (src / "sub" / "new.txt").write_text("n")
    (src / "ignored.txt").write_text("i")
    touched = overlay_worktree(src, dest)
    assert sorted(touched) == ["gone.txt", "kept.txt", "sub/new.txt"]
    assert (dest / "kept.txt").read_text() == "v2" and (dest / "sub" / "new.txt").read_text() == "n"
    assert not (dest / "gone.txt").exists() and not (dest / "ignored.txt").exists()
