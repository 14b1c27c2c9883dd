"""``appopt bench ...`` and ``appopt models ...`` through typer's CliRunner (sub-apps, as the lead wires them in)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from cli import bench_cmds, models_cmds
from perfmodels.results_db import append_rows, read_results
from tests.rows import measured_row

runner = CliRunner()


def app() -> typer.Typer:
    main = typer.Typer()

    @main.callback()
    def _root() -> None:
        """appopt"""

    bench_cmds.register(main)
    models_cmds.register(main)
    return main


def test_bench_run_prints_a_table_and_appends_rows(tmp_path):
    db = tmp_path / "db.csv"
    result = runner.invoke(
        app(),
        [
            "bench",
            "run",
            "--suite",
            "mlp",
            "--backend",
            "onnxruntime",
            "--scenario",
            "SingleStream",
            "--scenario",
            "Offline",
            "--min-queries",
            "3",
            "--min-duration",
            "0",
            "--db",
            str(db),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "mlp" in result.output and "p90_latency_ms=" in result.output and "samples_per_s=" in result.output
    assert "2 measured, 0 skipped, 0 failed" in result.output
    assert len(read_results(db)) == 2


def test_bench_run_user_errors_are_one_line(tmp_path):
    for args, message in (
        (["--suite", "resnet51"], "error: --suite: unknown suite or model 'resnet51'"),
        (["--backend", "tflite"], "error: --backend: unknown value 'tflite'"),
        (["--scenario", "Marathon"], "error: --scenario: unknown value 'Marathon'"),
        (["--precision", "fp8"], "error: --precision: unknown value 'fp8'"),
    ):
        result = runner.invoke(app(), ["bench", "run", *args])
        assert result.exit_code == 1
        assert message in result.output
        assert "Traceback" not in result.output


def test_bench_merge_and_schema(tmp_path):
    a, b, out = tmp_path / "shards" / "a.csv", tmp_path / "shards" / "b.csv", tmp_path / "all.csv"
    append_rows(a, [measured_row()])
    append_rows(b, [measured_row(), measured_row()])
    result = runner.invoke(app(), ["bench", "merge", str(tmp_path / "shards"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "merged 2 shard(s): 3 rows" in result.output
    missing = runner.invoke(app(), ["bench", "merge", str(tmp_path / "nope.csv"), "-o", str(out)])
    assert missing.exit_code == 1 and "no such shard" in missing.output
    schema = runner.invoke(app(), ["bench", "schema"])
    assert "| row_id |" in schema.output


def test_bench_merge_into_a_gzip_database(tmp_path):
    """What merging new rows into the shipped ``default.csv.gz`` does: CSV and gzip shards in, gzip CSV out."""
    import gzip

    from perfmodels.results_db import HEADER_LINE, read_results

    shards, out = tmp_path / "shards", tmp_path / "default.csv.gz"
    append_rows(out, [measured_row()])
    append_rows(shards / "new.csv", [measured_row()])
    append_rows(shards / "more.csv.gz", [measured_row(), measured_row()])
    result = runner.invoke(app(), ["bench", "merge", str(shards), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "merged 2 shard(s): 4 rows" in result.output
    assert gzip.decompress(out.read_bytes()).decode().startswith(HEADER_LINE) and len(read_results(out)) == 4


def test_bench_campaign_renders_and_rejects_other_schedulers(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("name: c\nmodels: [mlp]\nbackends: [onnxruntime]\nthreads: [1, 2]\n")
    result = runner.invoke(app(), ["bench", "campaign", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "2 array tasks" in result.output
    assert (tmp_path / "out" / "c.slurm.sh").is_file()
    pbs = runner.invoke(app(), ["bench", "campaign", str(spec), "--scheduler", "pbs"])
    assert pbs.exit_code == 1 and "--scheduler" in pbs.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: c\nbackends: [nope]\n")
    result = runner.invoke(app(), ["bench", "campaign", str(bad)])
    assert result.exit_code == 1 and "error: backends" in result.output


def test_bench_run_slice_writes_its_shard(tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text(
        "name: c\nmodels: [mlp]\nbackends: [onnxruntime]\nthreads: [1, 2]\n"
        "settings: {min_duration_s: 0.0, min_queries: 2}\n"
    )
    shard = tmp_path / "shards" / "s1.csv"
    result = runner.invoke(app(), ["bench", "run-slice", str(spec), "--slice", "1", "--shard", str(shard)])
    assert result.exit_code == 0, result.output
    frame = read_results(shard)
    assert frame["threads"].tolist() == [2]  # slice 1 of 2 is the 2-thread job
    out = runner.invoke(app(), ["bench", "run-slice", str(spec), "--slice", "2", "--shard", str(shard)])
    assert out.exit_code == 1 and "--slice" in out.output


def test_models_fit_evaluate_save_show_on_the_shipped_database(tmp_path):
    """``models fit``, ``models show`` and one ``models evaluate`` with every output (a plot, per-family figures,
    ``--save``): one leave-one-architecture-out of the shipped data, which takes minutes, serves all of them."""
    import shutil

    from perfmodels.fitted import read_evaluation, read_evaluation_summary
    from perfmodels.results_db import DEFAULT_DB

    fit = runner.invoke(app(), ["models", "fit", "-o", str(tmp_path / "w.json")])
    assert fit.exit_code == 0, fit.output
    assert "appopt-runtime" in fit.output and (tmp_path / "w.json").is_file()
    db = tmp_path / "db.csv.gz"
    shutil.copy(DEFAULT_DB, db)
    plot = tmp_path / "pvm.png"
    evaluate = runner.invoke(app(), ["models", "evaluate", "--db", str(db), "--plot", str(plot), "--per-family",
                                     "--save"])  # fmt: skip
    assert evaluate.exit_code == 0, evaluate.output
    assert "RMSPE" in evaluate.output and "Spearman" in evaluate.output and "top-1 regret" in evaluate.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --save stores the figures plans show, with the training steps' held-out bands
    assert "db.csv.evaluation.json" in evaluate.output and read_evaluation_summary(db) is not None
    stored = read_evaluation(db)
    assert stored is not None and stored.training is not None and stored.training.by_route
    assert set(stored.training.transfer) == {"roofline", "calibration"}
    show = runner.invoke(app(), ["models", "show"])
    assert show.exit_code == 0 and "this machine:" in show.output


@pytest.mark.parametrize(
    "flags", [["--threads", "1"], ["--mode", "training"], ["--by", "host"], ["--whole-weight", "0.2"]]
)
def test_models_evaluate_refuses_to_save_figures_plans_do_not_use_before_it_evaluates(flags, monkeypatch):
    """--save stores what plans show: anything but the default evaluation of one database is refused, in one line,
    before any refit (the evaluation is made to fail loudly were it reached)."""
    import perfmodels.evaluate
    import perfmodels.training_fit

    def reached(*_args, **_kwargs):
        raise AssertionError("evaluated before the flags were checked")

    monkeypatch.setattr(perfmodels.evaluate, "leave_one_architecture_out", reached)
    monkeypatch.setattr(perfmodels.evaluate, "leave_one_host_out", reached)
    monkeypatch.setattr(perfmodels.training_fit, "leave_one_family_out", reached)
    refused = runner.invoke(app(), ["models", "evaluate", *flags, "--save"])
    assert refused.exit_code == 1 and "error: --save:" in refused.output, refused.output


def test_models_commands_report_a_bad_database_in_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("not,a,results,file\n")
    result = runner.invoke(app(), ["models", "evaluate", "--db", str(bad)])
    assert result.exit_code == 1
    assert "error: --db:" in result.output and "Traceback" not in result.output


def test_models_evaluate_scores_another_weight_of_the_whole_model_fit(tmp_path):
    """``--whole-weight 0``: the kernel-unit sum alone, the figures the report lists for it (on the routes with
    kernel-unit sweeps: the compilers measured as whole models only have no unit sum to weigh)."""
    import csv
    import gzip

    from perfmodels.results_db import DEFAULT_DB

    swept = tmp_path / "swept.csv"
    with gzip.open(DEFAULT_DB, "rt", encoding="utf-8", newline="") as src, open(swept, "w", encoding="utf-8") as out:
        header = src.readline()
        column = header.rstrip("\n").split(",").index("compiler")
        out.write(header)
        for line in src:
            if next(csv.reader([line]))[column] in ("none", "openvino", ""):
                out.write(line)
    result = runner.invoke(app(), ["models", "evaluate", "--whole-weight", "0", "--db", str(swept)])
    assert result.exit_code == 0, result.output
    line = next(text for text in result.output.splitlines() if text.startswith("fitted model"))
    units = next(text for text in result.output.splitlines() if text.strip().startswith("kernel units"))
    assert line.split("RMSPE")[1].split()[0] == units.split("RMSPE")[1].split()[0]
    bad = runner.invoke(app(), ["models", "evaluate", "--whole-weight", "2"])
    assert bad.exit_code != 0 and "--whole-weight" in bad.output and "Traceback" not in bad.output


def test_bench_refresh_features_updates_suite_rows(tmp_path):
    db = tmp_path / "db.csv"
    append_rows(
        db,
        [
            measured_row(value=0.3, flops_per_sample=1.0, flops_by_class={"gemm": 1.0})
        ],
    )
    result = runner.invoke(app(), ["bench", "refresh-features", "--db", str(db)])
    assert result.exit_code == 0 and "updated the features of 1 row(s)" in result.output
    assert "gemv" in read_results(db)["flops_by_class"].iloc[0]


def test_bench_units_new_measures_only_what_the_database_lacks(tmp_path):
    from benchmarks.unit_sweep import run_unit_sweep, sample_units

    db = tmp_path / "units.csv"
    noops = sample_units(per_kind=2, kinds=("noop",))
    list(run_unit_sweep(noops, str(db), backends=("appopt-runtime",), threads=(1,), int8=False))
    args = ["bench", "units", "--per-kind", "2", "--kind", "noop", "--backend", "appopt-runtime", "--db", str(db)]
    again = runner.invoke(app(), [*args, "--new"])
    assert again.exit_code == 0, again.output
    assert f"0 unit(s) not yet in {db}" in again.output and "measured 0 unit(s)" in again.output
    assert len(read_results(db)) == len(noops)
    no_db = runner.invoke(app(), ["bench", "units", "--kind", "noop", "--new"])
    assert no_db.exit_code == 1 and "--new: needs --db" in no_db.output


def test_bench_units_per_kind_of_a_later_rounds_kind_says_so_instead_of_measuring_nothing(tmp_path):
    db = tmp_path / "units.csv"
    args = ["bench", "units", "--per-kind", "2", "--kind", "recurrent", "--kind", "noop", "--db", str(db)]
    result = runner.invoke(app(), args)
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = [text for text in result.output.splitlines() if text.startswith("error:")]
    assert line.startswith("error: --kind recurrent: --per-kind samples the sweep's first round only")
    assert not db.exists()
