"""The model card's content from the registry and the deploy task's description; its history across decisions."""

from __future__ import annotations

import json

from mlrunway.backend.fake import FakeBackend
from mlrunway.deploy import card
from mlrunway.ledger.reports import CARDS


def registered(tmp_path) -> FakeBackend:
    """A trial's model and its ONNX export, as pick_best and export_onnx register them."""
    backend = FakeBackend(tmp_path / "fake")
    (tmp_path / "model.pt2").write_text("a program")
    backend.models.register("demand", tmp_path / "model.pt2", properties={
        "source_job": "demand-1a2b3c4d-sweep_trial_3", "sweep": "demand-1a2b3c4d-sweep",
        "params": {"lr": 0.00312345, "hidden_units": 32}, "val_rmse": 0.91})
    backend.models.register("demand-onnx", tmp_path / "model.pt2", properties={
        "source_model": "demand:1", "opset": 18, "parity": {"max_abs_diff": 6e-7, "tolerance_used": 0.02,
                                                            "atol": 1e-5, "rtol": 1e-4, "samples": 64,
                                                            "inputs": "inputs from sample_inputs.npy", "passed": True}})
    return backend


def test_the_card_gathers_data_training_parity_and_lineage(tmp_path):
    backend = registered(tmp_path)
    described = {"job": {"command": "python fit.py --lr ${{inputs.lr}}", "environment": "azureml:torch:3",
                         "inputs": {"history": {"type": "uri_file", "path": "/data/h.csv"}, "lr": 0.01}},
                 "sweep": {"sampling_algorithm": {"type": "random", "rule": "sobol"}, "limits": {}}}
    made = card.collect(backend, "demand-onnx:1", description=described, intended_use="Store demand, weekly.",
                        data_interval=("2026-11-16T00:00:00+00:00", "2026-11-23T00:00:00+00:00"))
    assert made.data == [("input history", "uri_file /data/h.csv"), ("input lr", "0.01"),
                         ("data interval", "2026-11-16T00:00:00+00:00 to 2026-11-23T00:00:00+00:00")]
    training = dict(made.training)
    assert training["command"] == "python fit.py --lr ${{inputs.lr}}" and training["environment"] == "azureml:torch:3"
    assert training["hyperparameters"] == "lr=0.003123, hidden_units=32"
    assert training["sweep sampling_algorithm"] == '{"type": "random", "rule": "sobol"}'
    assert "sweep limits" not in training  # empty: nothing to say
    assert dict(made.parity)["tolerance_used"] == "0.02" and dict(made.parity)["opset"] == "18"
    assert dict(made.lineage) == {"served version": "demand-onnx:1", "source version": "demand:1",
                                  "trial job": "demand-1a2b3c4d-sweep_trial_3", "sweep": "demand-1a2b3c4d-sweep"}
    assert made.evaluation == []  # no gate ran: a per-run endpoint
    markdown = card.render_markdown(made)
    assert markdown.startswith("# Model card: demand-onnx:1\n\n## Intended use\n\nStore demand, weekly.\n")
    assert "| command | python fit.py --lr ${{inputs.lr}} |" in markdown
    assert card.ModelCard.from_dict(json.loads(json.dumps(made.to_dict()))) == made


def test_each_decision_rebuilds_the_card_with_its_history_and_points_the_version_to_it(tmp_path):
    backend = registered(tmp_path)
    reports = tmp_path / "reports"
    page = card.record(backend, "demand-onnx:1", reports, event={"decision": "deployed", "endpoint": "demand-1a2b"},
                       description={"job": {"command": "python fit.py"}}, intended_use="Weekly.")
    backend.models.update_tags("demand-onnx", 1, {"mlrunway.decision": "promoted", "mlrunway.endpoint": "prod",
                                                  "mlrunway.evidence": json.dumps({"gate": {"samples": 400},
                                                                                   "windows": [{"phase": "10%",
                                                                                                "ok": True,
                                                                                                "reason": "p99 ok"}]})})
    again = card.record(backend, "demand-onnx:1", reports, event={"decision": "promoted", "endpoint": "prod"})
    assert again == page == reports / CARDS / "demand-onnx" / "1" / card.HTML_FILE
    kept = card.load(page.parent)
    assert [e["decision"] for e in kept.history] == ["deployed", "promoted"]
    assert kept.intended_use == "Weekly." and dict(kept.training)["command"] == "python fit.py"  # kept from before
    assert ("gate samples", "400") in kept.evaluation and ("window 10%", "within bounds: p99 ok") in kept.evaluation
    assert dict(kept.lineage)["endpoint"] == "prod"
    assert backend.models.get("demand-onnx", 1).tags[card.CARD_TAG] == str(page)
    assert card.card_page(reports, "demand-onnx", 1) == page and card.card_page(reports, "demand-onnx", 2) is None


def test_unreadable_evidence_is_shown_as_such_not_dropped():
    assert card._evaluation({"mlrunway.evidence": "{cut"}) == [("evidence", "unreadable: {cut")]


def test_a_version_exported_with_several_outputs_shows_each_outputs_figures_and_one_before_them_one_figure(tmp_path):
    backend = registered(tmp_path)
    (tmp_path / "two.onnx").write_text("an export")
    backend.models.register("demand-onnx", tmp_path / "two.onnx", properties={
        "source_model": "demand:1", "opset": 18, "parity": {
            "max_abs_diff": 0.0012, "tolerance_used": 0.2, "atol": 1e-5, "rtol": 1e-4, "samples": 64,
            "inputs": "inputs from inputs.npz", "passed": True, "top1_output": "logits",
            "outputs": [{"name": "logits", "max_abs_diff": 6e-7, "tolerance_used": 0.02},
                        {"name": "weekly_sales", "max_abs_diff": 0.0012, "tolerance_used": 0.2}]}})
    rows = dict(card.collect(backend, "demand-onnx:2").parity)
    assert rows["output logits"] == "2% of the tolerance, max |onnx - torch| 6e-07"
    assert rows["output weekly_sales"] == "20% of the tolerance, max |onnx - torch| 0.0012"
    assert not [k for k in dict(card.collect(backend, "demand-onnx:1").parity) if k.startswith("output")]
    assert "| output weekly_sales | 20% of the tolerance, max \\|onnx - torch\\| 0.0012 |" in card.render_markdown(
        card.collect(backend, "demand-onnx:2"))
