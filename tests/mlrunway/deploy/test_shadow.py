"""The mirror window's comparison: when two answers agree (the rollout's rule), what a window of pairs reports, and
how ``max_disagreement`` judges it (fail closed on too few compared requests)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlrunway.backend.fake import FakeBackend
from mlrunway.backend.types import DeploymentSettings, MirroredAnswer
from mlrunway.deploy import rollout
from mlrunway.deploy.rollout import RolloutPolicy, Verdict
from mlrunway.deploy.shadow import ShadowRule, agree, compare
from mlrunway.errors import SpecError


def pair(champion: Any, challenger: Any, statuses: tuple[int, int] = (200, 200), ms: tuple[float, float] = (5, 7),
         at: float = 0.0) -> MirroredAnswer:
    text = [a if isinstance(a, str) or a is None else json.dumps(a) for a in (champion, challenger)]
    return MirroredAnswer(at=at, deployment="green", champion="blue", champion_status=statuses[0],
                          shadow_status=statuses[1], champion_ms=ms[0], shadow_ms=ms[1], champion_answer=text[0],
                          shadow_answer=text[1])


def predictions(*labels: str, probability: float = 0.9) -> dict:
    return {"predictions": [{"label": label, "probability": probability, "probabilities": [probability, 0.1]}
                            for label in labels]}


LABELS = ShadowRule(keys=("label",))


@pytest.mark.parametrize(("champion", "challenger", "rule", "agreed"), [
    (predictions("3", "7"), predictions("3", "7", probability=0.6), LABELS, True),  # only the labels count
    (predictions("3", "7"), predictions("3", "1"), LABELS, False),
    (predictions("3", "7"), predictions("3"), LABELS, False),  # one answer fewer
    (predictions("3"), predictions("3", probability=0.6), ShadowRule(), False),  # the whole answer, equal
    (predictions("3"), predictions("3"), ShadowRule(), True),
    ({"y": [1.0, 250.0]}, {"y": [1.004, 251.0]}, ShadowRule(tolerance=0.005), True),  # absolute below 1, relative above
    ({"y": [1.0, 250.0]}, {"y": [1.0, 252.0]}, ShadowRule(tolerance=0.005), False),
    ({"y": [0.0]}, {"y": [0.006]}, ShadowRule(tolerance=0.005), False),
    ({"y": 1}, {"y": 1.0}, ShadowRule(), True),  # numbers by value, whatever their JSON spelling
    ({"y": 1}, {"y": "1"}, ShadowRule(), False),
    ({"y": 1}, {"y": 1, "z": 2}, ShadowRule(), False),
    ({"a": 1}, {"b": 1}, ShadowRule(keys=("label",)), False),  # neither has the key: the rule cannot say they agree
    ("cat", "cat", ShadowRule(), True),  # text answers compared as text
    ("not json {", "not json {", ShadowRule(), True),
    ("not json {", "other", ShadowRule(), False),
])
def test_two_answers_agree_by_the_rule(champion, challenger, rule, agreed):
    assert agree(pair(champion, challenger), rule) is agreed


def test_answers_kept_as_digests_agree_only_when_equal():
    big = MirroredAnswer(at=0, deployment="green", champion="blue", champion_status=200, shadow_status=200,
                         champion_ms=1, shadow_ms=1, champion_answer=None, shadow_answer=None,
                         champion_digest="ab" * 32, shadow_digest="ab" * 32)
    assert agree(big, ShadowRule(keys=("label",), tolerance=0.1))
    assert not agree(MirroredAnswer(**{**vars(big), "shadow_digest": "cd" * 32}), ShadowRule())


def test_a_window_counts_what_the_champion_answered_and_a_failing_challenger_disagrees():
    pairs = [pair(predictions("1"), predictions("1"), ms=(4, 6)) for _ in range(6)]
    pairs += [pair(predictions("1"), predictions("2"), ms=(4, 30)) for _ in range(4)]
    pairs += [pair(predictions("1"), '{"error": "boom"}', statuses=(200, 500))]
    pairs += [pair('{"error": "bad input"}', '{"error": "bad input"}', statuses=(400, 400))]  # the client's own
    report = compare(pairs, LABELS)
    assert (report.mirrored, report.compared, report.agreed, report.challenger_failed) == (12, 11, 6, 1)
    assert report.disagreement == pytest.approx(5 / 11)
    assert report.champion_p50_ms == 4 and report.challenger_p50_ms == 6 and report.challenger_p99_ms == 30
    assert len(report.examples) == 3 and '"2"' in report.examples[0]["challenger"]  # the first disagreements
    assert "agreed with the champion on 6 of 11" in report.summary()
    assert report.to_dict()["disagreement"] == round(5 / 11, 6)


def verdict() -> Verdict:
    return Verdict(True, "error rate 0.0% of 30 requests", {"requests": 30}, {"requests": 60})


MIRROR = {"mirror_percent": 20, "mirror_window_s": 5, "min_requests": 10}


@pytest.mark.parametrize(("agreeing", "disagreeing", "ok", "short", "held"), [
    (19, 1, True, False, False),  # 5% <= 10%
    (17, 3, False, False, True),  # 15% > 10%: held
    (8, 1, False, True, False),  # 9 compared < min_requests 10: no evidence is never a pass
])
def test_max_disagreement_judges_the_mirror_window(agreeing, disagreeing, ok, short, held):
    policy = RolloutPolicy.parse({**MIRROR, "shadow_keys": ["label"], "max_disagreement": 0.1})
    pairs = [pair(predictions("1"), predictions("1"))] * agreeing + [pair(predictions("1"), predictions("2"))] * disagreeing
    judged = rollout.judge_shadow(compare(pairs, policy.shadow_rule), policy, verdict())
    assert (judged.ok, judged.short, judged.held) == (ok, short, held)
    if held:
        assert judged.reason.startswith("shadow: the challenger disagreed with the champion on 3 of 20")


def test_without_a_bound_agreement_is_recorded_and_never_judged():
    policy = RolloutPolicy.parse(MIRROR)
    judged = rollout.judge_shadow(compare([pair("a", "b")] * 5, policy.shadow_rule), policy, verdict())
    assert judged.ok and "agreed with the champion on 0 of 5" in judged.reason


@pytest.mark.parametrize(("field", "value"), [
    ("rollout.shadow_keys", {**MIRROR, "shadow_keys": "label"}),
    ("rollout.shadow_keys", {**MIRROR, "shadow_keys": [""]}),
    ("rollout.max_disagreement", {**MIRROR, "max_disagreement": 1.5}),
    ("rollout.max_disagreement", {"max_disagreement": 0.1}),  # no mirror window to judge
    ("rollout.shadow_tolerance", {**MIRROR, "shadow_tolerance": -1}),
])
def test_bad_shadow_settings_name_the_field(field, value):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        RolloutPolicy.parse(value)


def test_a_backend_that_keeps_no_mirrored_answers_refuses_a_bound_before_deploying(tmp_path):
    from mlrunway.deploy.base import DeployRequest
    from mlrunway.deploy.champion_challenger import ChampionChallenger

    backend = FakeBackend(tmp_path)  # as Azure ML: mirrored answers are discarded
    strategy = ChampionChallenger()
    request = DeployRequest(endpoint="prod", settings=DeploymentSettings(model="digits:1", code_dir=str(tmp_path)),
                            strategy_settings=strategy.settings(backend, {"rollout": {**MIRROR,
                                                                                      "max_disagreement": 0.05}}))
    with pytest.raises(SpecError, match=r"rollout\.max_disagreement.*keeps no mirrored answers"):
        strategy.start(backend, request)
    assert backend.endpoints.endpoints == {} and backend.endpoints.traffic_log == []  # nothing deployed or moved
