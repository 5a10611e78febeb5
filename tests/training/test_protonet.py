"""Prototypical networks on obfuscated images (metadp.training.algorithms.protonet) and ``metadp train protonet``."""

import json
import math

import pytest

torch = pytest.importorskip("torch")

from metadp.cli import main  # noqa: E402
from metadp.training.data import sources as data  # noqa: E402
from metadp.training.algorithms.protonet import (Denoiser, ProtoConfig, build_model, denoising_loss,  # noqa: E402
                                      evaluate_protonet, percentage_gain, privacy_report, prototypical_loss,
                                      split_by_alphabet, train_protonet)

# tiny and fast: 16 x 16 glyphs, 8 filters, a 3-layer denoiser of width 4
TINY = dict(hidden=8, denoiser_width=4, denoiser_depth=3, k_query=3)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # the models here are tiny: one thread is faster, and several thrash on a loaded machine (7x slower)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def glyphs():
    images = data.synthetic_glyphs(60, 10, size=16, seed=3).images  # [60, 10, 1, 16, 16]
    return images[:45], images[45:]


def test_prototypical_loss_equals_the_closed_form():
    # one episode, 2 classes, 2 shots, 1-d embeddings: prototypes (0 + 2) / 2 = 1 and (4 + 6) / 2 = 5
    support = torch.tensor([[[[0.0], [2.0]], [[4.0], [6.0]]]], dtype=torch.float64)  # [1, 2, 2, 1]
    query = torch.tensor([[[2.0], [5.0]]], dtype=torch.float64)  # [1, 2, 1]
    labels = torch.tensor([[0, 1]])
    loss, logits = prototypical_loss(support, query, labels)
    # squared distances: query 2 -> (1, 9), query 5 -> (16, 0); logits are their negatives
    assert logits.tolist() == [[[-1.0, -9.0], [-16.0, 0.0]]]
    # -log softmax: log(1 + e^-8) for the first query, log(1 + e^-16) for the second, averaged
    assert float(loss) == pytest.approx((math.log1p(math.exp(-8)) + math.log1p(math.exp(-16))) / 2, rel=1e-12)


def test_denoiser_is_residual_and_a_perfect_residual_has_zero_loss(monkeypatch):
    torch.manual_seed(0)
    denoiser = Denoiser(1, width=4, depth=3)
    y = torch.rand(6, 1, 16, 16)
    assert torch.equal(denoiser(y), y)  # the last convolution starts at zero: identity at initialisation
    torch.nn.init.normal_(denoiser.body[-1].weight)  # now a non-trivial residual
    denoiser.requires_grad_(False)
    assert torch.allclose(denoiser(y), y - denoiser.residual(y))
    clean = torch.rand(6, 1, 16, 16)
    # Eq. 6's integrand: the residual against the true noise y - x
    want = ((denoiser.residual(y) - (y - clean)) ** 2).mean()
    assert float(denoising_loss(denoiser(y), clean)) == pytest.approx(float(want), rel=1e-5)
    monkeypatch.setattr(denoiser, "residual", lambda noisy: noisy - clean)  # predicts the noise exactly
    assert float(denoising_loss(denoiser(y), clean)) == 0.0


@pytest.mark.parametrize("denoiser", [False, True])
def test_both_paths_train_on_synthetic_glyphs(glyphs, denoiser):
    train, held = glyphs
    config = ProtoConfig(obfuscation="dp_pix", epsilon=3.0, cell=2, denoiser=denoiser, steps=40, seed=0, **TINY)
    untrained = evaluate_protonet(build_model(config, (1, 16, 16)), held, config, n_tasks=60, chunk=20)
    result = train_protonet(train, config)
    assert len(result.losses) == 40
    first, last = sum(result.losses[:5]) / 5, sum(result.losses[-10:]) / 10
    assert last < 0.8 * first, (first, last)  # seeds 0-5: ratio 0.50-0.65
    trained = evaluate_protonet(result.model, held, config, n_tasks=60, chunk=20).score
    # chance is 0.2; seed 0: 0.48 untrained, 0.69 (no denoiser) and 0.73 (denoiser) trained; seeds 0-5 all
    # reach 0.66-0.78 and gain 0.10-0.29 over their untrained model, and the last ten losses are 0.55-0.65
    # of the first five
    assert trained.mean > 0.55 and trained.mean > untrained.score.mean + 0.1, (trained, untrained.score)
    if denoiser:
        assert result.model.denoiser is not None
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in result.model.denoiser.parameters())


def test_obfuscation_is_applied_to_support_and_query(glyphs):
    train, held = glyphs
    config = ProtoConfig(steps=3, episodes_per_step=2, **TINY)
    calls = []

    def invert(images, generator):
        calls.append(tuple(images.shape))
        return 1.0 - images

    result = train_protonet(train, config, obfuscate=invert)
    # every step obfuscates whole episodes: [episodes, n_way, k_shot + k_query, C, H, W]
    assert calls == [(2, 5, 5 + 3, 1, 16, 16)] * 3
    calls.clear()
    stub = evaluate_protonet(result.model, held, config, n_tasks=30, chunk=30, obfuscate=invert)
    assert calls == [(5, 5 + 3, 1, 16, 16)] * 30  # one call per task, support and query together
    # the model sees exactly the obfuscated images, support and query: the same as inverting the pool
    plain = evaluate_protonet(result.model, 1.0 - held, config, n_tasks=30)
    assert torch.equal(stub.per_task, plain.per_task)


def test_evaluation_is_paired_and_independent_of_batching(glyphs):
    _, held = glyphs
    config = ProtoConfig(obfuscation="dp_pix", epsilon=1.0, cell=2, **TINY)
    model = build_model(config, (1, 16, 16))
    one, many = (evaluate_protonet(model, held, config, n_tasks=12, seed=5, chunk=c) for c in (1, 5))
    assert torch.equal(one.per_task, many.per_task)
    assert one.score.n_tasks == 12 and one.score.metric == "accuracy"
    sd = float(one.per_task.std())
    assert one.score.half_width == pytest.approx(1.96 * sd / math.sqrt(12))


def test_percentage_gain_is_the_papers_ratio():
    a = torch.tensor([1.0, 0.5, 0.75, 1.0])
    b = torch.tensor([0.5, 0.5, 0.5, 1.0])
    gain, half = percentage_gain(a, b)
    assert gain == pytest.approx(100 * (0.8125 - 0.625) / 0.625)  # 30%
    r = 0.8125 / 0.625
    assert half == pytest.approx(1.96 * 100 * float((a - r * b).std()) / (2 * 0.625))
    with pytest.raises(ValueError, match="paired"):
        percentage_gain(a, b[:3])


def test_privacy_report_dp_pix_composes_and_blur_pixelize_have_none():
    report = privacy_report(ProtoConfig(obfuscation="dp_pix", epsilon=3.0, cell=4), 7, 2)
    assert report["per_image_epsilon"] == 3.0 and report["m"] == 1 and report["formal"]
    # the one report schema (issue 29): unit image, DP-Pix's m-pixel relation, the headline one released image
    assert report["relation"] == "m_pixels" and report["unit"] == "image" and report["bound"] == "upper"
    assert report["adversary"] == "the server that receives the obfuscated images"
    composed = report["composed_epsilon"]
    assert report["epsilon"] == composed["one_test_image"]["epsilon_at_delta"] <= 3.0 + 1e-9  # pure 3-DP, at 1e-5
    assert report["epsilon"] > 2.9 and "fan2018image" in report["citations"]
    assert [o["epsilon"] for o in report["other_units"]] == [composed["training_image_max"]["epsilon_at_delta"],
                                                             composed["evaluation_image_max"]["epsilon_at_delta"]]
    assert composed["one_test_image"]["epsilon_pure"] == 3.0
    assert composed["training_image_max"]["epsilon_pure"] == 21.0  # 7 releases, basic composition
    assert 3.0 * 6 < composed["training_image_max"]["epsilon_at_delta"] <= 21.0 + 1e-9  # PLD at 1e-5: just below
    for config in (ProtoConfig(obfuscation="gaussian_blur", radius=1), ProtoConfig(obfuscation="pixelize", cell=4)):
        report = privacy_report(config, 7, 2)
        assert report["guarantee"].startswith("none") and not report["formal"]
        assert report["per_image_epsilon"] is None and report["composed_epsilon"] is None
        assert report["bound"] == "none" and report["epsilon"] is None and report["warnings"][0].startswith("none")


@pytest.mark.parametrize("kwargs, match", [
    (dict(obfuscation="dp_pix", cell=2), "needs epsilon"),
    (dict(obfuscation="gaussian_blur", radius=1, epsilon=3.0), "epsilon does not apply"),
    (dict(obfuscation="pixelize"), "needs cell"),
    (dict(obfuscation="mosaic"), "obfuscation must be"),
    (dict(denoise_weight=0.5), "denoiser"),
    (dict(norm="layer"), "norm"),
])
def test_config_rejects_conflicting_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ProtoConfig(**kwargs)


def test_held_out_alphabets_are_disjoint():
    names = ["Greek/character01", "Sanskrit/character01", "Tagalog/character02/rot90", "Latin/character03"]
    assert split_by_alphabet(names) == ([0, 3], [1, 2])
    with pytest.raises(ValueError):
        split_by_alphabet(names[:1])


def test_cli_dp_pix_with_denoiser_end_to_end(tmp_path, capsys):
    out = tmp_path / "proto"
    assert main(["train", "protonet", "--data", "glyphs", "--obfuscation", "dp-pix", "--epsilon", "3", "--cell", "4",
                 "--m", "1", "--denoiser", "--steps", "3", "--eval-tasks", "10", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "3-DP for 1-pixel neighbours" in printed
    assert "one released test image: epsilon <= 3" in printed
    for name in ("evaluation.json", "privacy_report.json", "metrics.jsonl", "model.pt"):
        assert (out / name).is_file(), name
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["tasks"] == 10 and evaluation["ways"] == 5 and evaluation["shots"] == 5 and evaluation["denoiser"]
    assert 0.0 <= evaluation["mean"] <= 1.0 and len(evaluation["per_task"]) == 10
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["per_image_epsilon"] == 3.0 and report["releases_per_image"]["user_test_image"] == 1
    assert report["composed_epsilon"]["training_image_max"]["releases"] == report["releases_per_image"]["training_max"]
    assert (out / "metrics.jsonl").read_text().count("\n") == 3


@pytest.mark.parametrize("flags", [["--obfuscation", "blur", "--radius", "1"],
                                   ["--obfuscation", "pixelize", "--cell", "4"]])
def test_cli_blur_and_pixelize_report_no_guarantee(tmp_path, capsys, flags):
    out = tmp_path / "proto"
    assert main(["train", "protonet", "--data", "glyphs", *flags, "--steps", "1", "--eval-tasks", "4",
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "guarantee: none" in captured.out
    assert "WARNING" in captured.err and "NO formal privacy guarantee" in captured.err
    report = json.loads((out / "privacy_report.json").read_text())
    assert report["guarantee"].startswith("none") and report["per_image_epsilon"] is None


@pytest.mark.parametrize("argv, match", [
    (["train", "protonet", "--obfuscation", "dp-pix", "--epsilon", "3", "--cell", "2"], "glyphs"),  # sinusoid default
    (["train", "protonet", "--data", "glyphs", "--obfuscation", "blur", "--radius", "1", "--epsilon", "3"], "epsilon"),
    (["train", "maml", "--data", "glyphs", "--obfuscation", "blur"], "protonet only"),
    (["train", "maml", "--data", "glyphs", "--denoiser"], "protonet only"),
])
def test_cli_rejects_bad_protonet_input(tmp_path, capsys, argv, match):
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    assert match in capsys.readouterr().err
