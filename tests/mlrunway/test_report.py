"""The sweep report: the plot is a real picture of the curves, the page ranks and explains the trials."""

from __future__ import annotations

import html
import io
import json

import numpy as np
import pytest
from PIL import Image

from mlrunway.backend.naming import RunNames
from mlrunway.backend.types import JobStatus, TrialInfo
from mlrunway.report import LEGEND_MAX, SweepReport, legend_names, plot_curves, render_html, save
from mlrunway.specs.sweep import Objective

SWEEP = "digits-0123abcd-sweep"


def report(**overrides):
    trials = [
        TrialInfo(name=f"{SWEEP}_trial_0", params={"learning_rate": 0.02, "momentum": 0.8},
                  status=JobStatus.COMPLETED, history=(0.5, 0.7, 0.8, 0.85)),
        TrialInfo(name=f"{SWEEP}_trial_1", params={"learning_rate": 0.001, "momentum": 0.5},
                  status=JobStatus.CANCELED, history=(0.1, 0.12),
                  early_termination={"interval": 2, "value": 0.12, "threshold": 0.6,
                                     "reason": "0.12 is below 0.6 = best 0.7 / (1 + 0.15)"}),
        TrialInfo(name=f"{SWEEP}_trial_2", params={"learning_rate": 0.1, "momentum": 0.9},
                  status=JobStatus.FAILED, error="CUDA out of memory\ntraceback"),
    ]
    fields = {"sweep": SWEEP, "sweep_status": "Completed", "objective": Objective(primary_metric="best_val_acc"),
              "trials": trials, "best_trial": f"{SWEEP}_trial_0",
              "model": {"name": "digits-0123abcd", "version": 1,
                        "properties": {"source_job": f"{SWEEP}_trial_0", "params": {"learning_rate": 0.02}}},
              "onnx": {"name": "digits-0123abcd-onnx", "version": 1,
                       "properties": {"opset": 18, "parity": {"max_abs_diff": 4.8e-6, "top1_agreement": 1.0,
                                                              "samples": 256, "inputs": "validation images"}}},
              "endpoint": {"name": "digits-0123abcd", "provisioning_state": "Succeeded", "traffic": {"blue": 100},
                           "scoring_uri": "http://127.0.0.1:5001/score"}}
    return SweepReport(**{**fields, **overrides})


def test_the_plot_is_a_picture_of_every_trial_with_a_curve():
    png = Image.open(io.BytesIO(plot_curves(report())))
    assert png.format == "PNG" and png.size[0] > 400 and png.size[1] > 250
    image = png.convert("RGB")
    pixels = np.asarray(image).reshape(-1, 3)
    colors = {tuple(p) for p in pixels[::7]}
    assert len(colors) > 20, "a blank or single-colour image is not a plot"
    blank = Image.open(io.BytesIO(plot_curves(report(trials=[])))).convert("RGB")
    assert np.abs(np.asarray(blank, dtype=int)[:200].mean() - np.asarray(image, dtype=int)[:200].mean()) > 0.1


def test_a_large_sweeps_legend_names_its_best_trials_and_the_chosen_one():
    assert legend_names(report()) == {f"{SWEEP}_trial_0", f"{SWEEP}_trial_1"}  # the failed one drew no curve
    many = [TrialInfo(name=f"{SWEEP}_trial_{i}", params={}, status=JobStatus.COMPLETED, history=(0.0, (i * 37 % 200) / 200))
            for i in range(200)]
    chosen = f"{SWEEP}_trial_3"  # as a sweep records it: not necessarily the best by the score
    named = legend_names(report(trials=many, best_trial=chosen))
    best = sorted(range(200), key=lambda i: -(i * 37 % 200))[:LEGEND_MAX]  # the 12 highest curves
    assert named == {f"{SWEEP}_trial_{i}" for i in best} | {chosen}
    assert len(named) == LEGEND_MAX + 1
    assert Image.open(io.BytesIO(plot_curves(report(trials=many, best_trial=chosen)))).format == "PNG"


def test_the_page_ranks_trials_marks_the_chosen_and_says_why_each_stopped():
    page = render_html(report(), b"\x89PNG")
    rows = page.split("<h2>Leaderboard</h2>")[1].split("</table>")[0].split("<tr")[2:]
    assert [f"trial_{i}" in row for i, row in zip((0, 1, 2), rows, strict=True)] == [True] * 3
    assert 'class="chosen"' in rows[0] and "0.8500" in rows[0]
    assert "below 0.6" in rows[1] and "Canceled" in rows[1] and "CUDA out of memory" in rows[2]
    assert "traceback" not in page  # one line of an error, not its whole log
    assert "3 trials, 1 stopped early, 6 epochs run" in page
    assert "digits-0123abcd:1" in page and "top-1 agreement 100.00%" in page and "blue 100%" in page
    assert 'src="data:image/png;base64,iVBORw' in page


def test_what_does_not_exist_yet_is_said_and_names_are_escaped():
    page = render_html(report(sweep="<b>x</b>", model=None, onnx=None, endpoint=None), b"")
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert "not registered yet" in page and "not exported yet" in page and "deleted by cleanup" in page


def test_save_writes_the_page_the_plot_and_the_data(tmp_path):
    page = save(report(), tmp_path / "r")
    assert page.name == "report.html" and (tmp_path / "r" / "curves.png").stat().st_size > 1000
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["trials"][1]["early_termination"]["interval"] == 2 and data["objective"]["goal"] == "maximize"


def test_a_sweep_name_gives_back_its_runs_names():
    names = RunNames.of("train_sweep_deploy", "manual__2026-11-22", "digits")
    assert RunNames.of_sweep(names.sweep) == names
    with pytest.raises(ValueError, match="sweep: 'digits-train' is not a pipeline run's sweep"):
        RunNames.of_sweep("digits-train")


def test_a_stable_endpoints_decision_on_the_runs_model_is_in_the_report():
    from mlrunway.report import _production

    onnx = {"name": "m-onnx", "version": 3, "properties": {}, "tags": {
        "mlrunway.decision": "rolled_back", "mlrunway.endpoint": "digits-prod",
        "mlrunway.reason": "error rate 30.0% (30 of 100) against the champion's 0.0% (0 of 250)",
        "mlrunway.evidence": json.dumps({"gate": {"metric": "accuracy", "champion": 0.9, "challenger": 0.95},
                                         "windows": [{"phase": "10%", "ok": False, "reason": "error rate 30.0%"}]})}}
    production = _production(onnx, problems := {})
    assert problems == {} and production["decision"] == "rolled_back" and production["gate"]["challenger"] == 0.95
    page = render_html(report(production=production), b"")
    decision = page.split('<p id="decision">')[1].split("</p>")[0]
    assert "<b>rolled_back</b> on digits-prod" in decision and "30 of 100" in decision
    assert "<td>10%</td><td>OUT OF BOUNDS</td>" in page
    assert _production({"tags": {}}, {}) is None and "<h2>Production</h2>" not in render_html(report(), b"")


OLD_PARITY = {"max_abs_diff": 3.8e-06, "top1_agreement": 1.0, "samples": 256, "inputs": "validation images",
              "atol": 1e-4, "min_top1_agreement": 1.0, "passed": True}  # as recorded before issue 32: no rtol


def test_the_onnx_figures_read_as_recorded_before_and_after_the_relative_tolerance():
    def onnx_line(parity):
        onnx = {"name": "d-onnx", "version": 1, "properties": {"opset": 18, "parity": parity}}
        return render_html(report(onnx=onnx), b"").split('href="model/d-onnx/1">d-onnx:1</a></b>')[1].split("</p>")[0]

    assert onnx_line(OLD_PARITY) == (", opset 18: max |onnx - torch| 3.8e-06 on 256 validation images, "
                                     "top-1 agreement 100.00%")
    new = {**OLD_PARITY, "atol": 1e-5, "rtol": 1e-4, "tolerance_used": 0.0412}
    assert onnx_line(new) == (", opset 18: max |onnx - torch| 3.8e-06 (4.12% of the tolerance 1e-05 + 0.0001·|torch|) "
                              "on 256 validation images, top-1 agreement 100.00%")
    regressor = {**new, "top1_agreement": None, "max_abs_diff": 0.00195, "tolerance_used": 0.0074}
    assert "max |onnx - torch| 0.00195 (0.74% of the tolerance" in onnx_line(regressor)
    assert "not a classifier" in onnx_line(regressor)
    # Since issue 83: each output by name, and the output top-1 was measured on.
    per_output = {**new, "top1_output": "logits", "outputs": [
        {"name": "logits", "max_abs_diff": 3.8e-06, "tolerance_used": 0.0412},
        {"name": "<b>weekly_sales</b>", "max_abs_diff": 0.0012, "tolerance_used": 0.011}]}
    assert onnx_line(per_output) == (
        ", opset 18: max |onnx - torch| 3.8e-06 (4.12% of the tolerance 1e-05 + 0.0001·|torch|) on 256 validation "
        "images, top-1 agreement on logits 100.00%; per output: logits: 4% of the tolerance, max |onnx - torch| "
        "3.8e-06; &lt;b&gt;weekly_sales&lt;/b&gt;: 1% of the tolerance, max |onnx - torch| 0.0012")


def test_a_failed_sweeps_report_says_why_it_failed(tmp_path):
    from mlrunway.backend.fake import FakeBackend
    from mlrunway.report import collect
    from mlrunway.specs import SweepSpec, vocabulary
    from tests.tutorial import OBJECTIVE, SPACE, tutorial_job

    fake, names = FakeBackend(tmp_path), RunNames.of_sweep(SWEEP)
    fake.jobs.script(SWEEP, JobStatus.RUNNING, JobStatus.FAILED, error="every trial failed: <train.py> exit 1")
    fake.jobs.submit_sweep(SWEEP, SweepSpec(trial=vocabulary.command_job(tutorial_job("/data")),
                                            search_space=vocabulary.search_space(SPACE),
                                            objective=vocabulary.objective(OBJECTIVE)))
    fake.jobs.get(SWEEP), fake.jobs.get(SWEEP)  # walks to Failed
    collected = collect(fake, names)
    assert collected.sweep_status == "Failed" and collected.error == "every trial failed: <train.py> exit 1"
    page = render_html(collected, b"")
    assert '<p class="error" id="sweep-error">The sweep failed: every trial failed: &lt;train.py&gt; exit 1</p>' in page


def test_a_running_sweeps_page_refreshes_itself_and_draws_a_trial_of_one_epoch():
    running = report(sweep_status="Running", best_trial=None, model=None, onnx=None, endpoint=None)
    page = render_html(running, b"")
    assert '<meta http-equiv="refresh" content="5">' in page and 'id="live"' in page
    assert 'http-equiv="refresh"' not in render_html(report(), b"")  # an ended sweep's page stays as it is



def test_a_trial_of_one_epoch_is_drawn_as_a_point(monkeypatch):
    from matplotlib.axes import Axes

    drawn, plot = [], Axes.plot

    def recorded(self, *args, **kwargs):
        values = args[1] if len(args) > 1 else None
        drawn.append((list(values) if isinstance(values, tuple | list) else values, kwargs.get("marker")))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", recorded)
    one = TrialInfo(name=f"{SWEEP}_trial_3", params={}, status=JobStatus.RUNNING, history=(0.4,))
    plot_curves(report(trials=[*report().trials, one]))
    assert ([0.4], "o") in drawn and ([0.5, 0.7, 0.8, 0.85], None) in drawn  # a line alone draws nothing for one


def test_a_saved_reports_endpoint_is_said_as_of_when_it_was_built():
    page = render_html(report(created=1_790_000_000.0), b"")
    assert "digits-0123abcd</b> Succeeded, traffic blue 100%" in page
    assert "(as of 2026-09-21 14:13:20 UTC, when this report was built" in page


def ended_sweep(tmp_path, **onnx_record):
    """A fake backend whose run's sweep has ended, and its names; ``onnx_record`` (``tags``, ``properties``), when
    given, registered as the run's ONNX version."""
    from mlrunway.backend.fake import FakeBackend
    from mlrunway.specs import SweepSpec, vocabulary
    from tests.tutorial import OBJECTIVE, SPACE, tutorial_job

    fake, names = FakeBackend(tmp_path), RunNames.of_sweep(SWEEP)
    fake.jobs.script(SWEEP, JobStatus.RUNNING, JobStatus.COMPLETED)
    fake.jobs.submit_sweep(SWEEP, SweepSpec(trial=vocabulary.command_job(tutorial_job("/data")),
                                            search_space=vocabulary.search_space(SPACE),
                                            objective=vocabulary.objective(OBJECTIVE)))
    fake.jobs.get(SWEEP), fake.jobs.get(SWEEP)  # walks to Completed
    if onnx_record:
        (tmp_path / "onnx").mkdir()
        (tmp_path / "onnx" / "model.onnx").write_bytes(b"onnx")
        fake.models.register(f"{names.model}-onnx", tmp_path / "onnx", **onnx_record)
    return fake, names


def sections(page):
    """The page's sections by heading: what each says, up to the next."""
    parts = page.split("<h2>")
    return {part.split("</h2>")[0]: part.split("</h2>", 1)[1] for part in parts[1:]}


@pytest.mark.parametrize("tag", ["<script>alert(1)</script>", "a" * 40], ids=["hostile", "40 characters"])
def test_an_endpoint_tag_that_is_no_endpoint_name_is_named_in_its_section_and_the_report_stands(tmp_path, tag):
    """Before: the tag was looked up as an endpoint: the whole report a 404, save_run_report raised SpecError."""
    from mlrunway.report import collect, save_run_report

    fake, names = ended_sweep(tmp_path, tags={"mlrunway.decision": "deployed", "mlrunway.endpoint": tag},
                              properties={"parity": OLD_PARITY})
    collected = collect(fake, names)
    assert collected.endpoint is None and set(collected.problems) == {"endpoint"}
    assert f"tag mlrunway.endpoint of digits-0123abcd-onnx:1: {tag!r} is not a valid endpoint name" in \
        collected.problems["endpoint"]
    page = sections(render_html(collected, b""))
    assert (f'id="endpoint-problem">Not shown: tag mlrunway.endpoint of digits-0123abcd-onnx:1: {tag!r} is not a '
            "valid endpoint name") in html.unescape(page["Endpoint"])
    assert "<script>" not in page["Endpoint"] + page["Production"]  # escaped where it is shown
    assert "top-1 agreement 100.00%" in page["ONNX export"] and "<b>deployed</b>" in page["Production"]
    saved = save_run_report(fake, names, tmp_path / "reports")
    assert saved is not None and "endpoint-problem" in saved.read_text()


@pytest.mark.parametrize(("parity", "said"), [
    ({k: v for k, v in OLD_PARITY.items() if k != "inputs"}, "its parity property lacks 'inputs'"),
    ({k: v for k, v in OLD_PARITY.items() if k != "samples"}, "its parity property lacks 'samples'"),
    ({"max_abs_diff": None}, "its parity property lacks 'samples' and 'inputs'"),
    ({**OLD_PARITY, "max_abs_diff": "<b>x</b>"}, "its parity property holds '<b>x</b>' as 'max_abs_diff', not a number"),
    ({**OLD_PARITY, "tolerance_used": 0.5, "atol": None}, "its parity property holds None as 'atol'"),
    ("<b>x</b>", "its parity property holds '<b>x</b>', not an object"),
], ids=["no inputs", "no samples", "no figures", "a word for a number", "no tolerance", "not an object"])
def test_a_parity_property_that_is_not_the_export_jobs_is_named_in_its_section(tmp_path, parity, said):
    """Before: a KeyError from the page: the live report a 500, save_run_report raised it."""
    from mlrunway.report import collect, save_run_report

    fake, names = ended_sweep(tmp_path, properties={"opset": 18, "parity": parity})
    page = sections(render_html(collect(fake, names), b""))
    assert said in html.unescape(page["ONNX export"]) and "digits-0123abcd-onnx:1" in page["ONNX export"]
    assert "<b>x</b>" not in page["ONNX export"] and "Leaderboard" in page  # escaped where it is shown
    assert save_run_report(fake, names, tmp_path / "reports") is not None


@pytest.mark.parametrize("evidence", ["[1, 2]", "not json", '{"windows": ["<b>x</b>"]}', '{"gate": 3}'],
                         ids=["a list", "not JSON", "a window not an object", "a gate not an object"])
def test_evidence_that_is_not_the_deploys_is_named_in_the_production_section(tmp_path, evidence):
    from mlrunway.report import collect

    fake, names = ended_sweep(tmp_path, tags={"mlrunway.decision": "rolled_back", "mlrunway.endpoint": "digits-prod",
                                              "mlrunway.evidence": evidence})
    collected = collect(fake, names)
    assert collected.production["windows"] == [] and set(collected.problems) == {"production"}
    page = sections(render_html(collected, b""))
    assert "tag mlrunway.evidence of digits-0123abcd-onnx:1" in page["Production"]
    assert "<b>x</b>" not in page["Production"] and "<b>rolled_back</b> on digits-prod" in page["Production"]


def test_a_damaged_version_is_said_damaged_in_its_section_naming_its_file(tmp_path):
    """Before: a version whose record could not be read showed as the run's model with no figures."""
    import dataclasses

    from mlrunway.report import collect

    fake, names = ended_sweep(tmp_path, properties={"parity": OLD_PARITY})
    error = "damaged record /ws/models/digits-0123abcd-onnx/1/model.json: holds <b>[]</b>, not an object; restore it"
    fake.models.versions[f"{names.model}-onnx"] = [dataclasses.replace(
        fake.models.versions[f"{names.model}-onnx"][0], properties={}, damaged=True, error=error)]
    page = sections(render_html(collect(fake, names), b""))
    assert ('id="onnx-damaged"><b><a class="version" href="model/digits-0123abcd-onnx/1">digits-0123abcd-onnx:1</a>'
            "</b>: its record is damaged: damaged record /ws/models/digits-0123abcd-onnx/1/model.json: holds "
            "&lt;b&gt;[]&lt;/b&gt;") in page["ONNX export"]


def test_a_section_the_backend_refuses_is_named_there_and_the_report_stands(tmp_path, monkeypatch):
    from mlrunway.errors import EndpointError
    from mlrunway.report import collect

    fake, names = ended_sweep(tmp_path)

    def refused(*names):
        raise EndpointError("the service answered 503 <b>busy</b>")

    monkeypatch.setattr(fake.endpoints, "first_existing", refused)
    collected = collect(fake, names)
    assert collected.problems == {"endpoint": "the service answered 503 <b>busy</b>"}
    page = sections(render_html(collected, b""))
    assert "Not shown: the service answered 503 &lt;b&gt;busy&lt;/b&gt;" in page["Endpoint"]
    assert "no endpoint" not in page["Endpoint"] and "not exported yet" in page["ONNX export"]
