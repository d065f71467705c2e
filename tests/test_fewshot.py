"""Few-shot linear evaluation: the closed-form solver, the shot draws, the
feature extraction and the whole evaluator on the scikit-learn digits.

The solver is compared with NumPy's least squares on the augmented system
[X; sqrt(l2) I] W = [Y; 0] (an independent route to the ridge solution) and
with a direct solve of the regularised normal equations, in both the
N >= D and the N < D regime.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from keras_vit import create_model, features_model
from keras_vit.data import pipeline as input_pipeline
from keras_vit.data import preprocessing
from keras_vit.data.sources import digits_split
from keras_vit.errors import UsageError
from keras_vit.evaluation import fewshot, fewshot_reports, linear_probe
from tests.strategies import two_cpu_mirrored


def lstsq_ridge(x, y, l2):
    d = x.shape[1]
    a = np.concatenate([x, np.sqrt(l2) * np.eye(d)])
    b = np.concatenate([y, np.zeros((d, y.shape[1]))])
    return np.linalg.lstsq(a, b, rcond=None)[0]


@pytest.mark.parametrize("n,d", [(40, 7), (7, 40), (12, 12)])
def test_ridge_matches_numpy_in_both_regimes(n, d):
    rng = np.random.default_rng(n * 100 + d)
    x = rng.normal(size=(n, d))
    y = rng.normal(size=(n, 3))
    for l2 in (0.5, 1024.0):
        w = linear_probe.ridge_weights(x, y, l2)
        assert w.shape == (d, 3)
        np.testing.assert_allclose(w, lstsq_ridge(x, y, l2), rtol=1e-8,
                                   atol=1e-10)
        normal = np.linalg.solve(x.T @ x + l2 * np.eye(d), x.T @ y)
        np.testing.assert_allclose(w, normal, rtol=1e-8, atol=1e-10)


def test_ridge_errors_name_the_problem():
    with pytest.raises(ValueError, match="same N"):
        linear_probe.ridge_weights(np.ones((3, 2)), np.ones((4, 1)), 1.0)
    with pytest.raises(ValueError, match="l2_reg must be positive"):
        linear_probe.ridge_weights(np.ones((3, 2)), np.ones((3, 1)), 0.0)


def reference_predict(train_x, train_y, test_x, k, l2=1024.0):
    """The evaluator's recipe, written out independently."""
    mu, sd = train_x.mean(0), train_x.std(0) + 1e-5
    aug = lambda x: np.hstack([(x - mu) / sd, np.full((len(x), 1), 100.0)])  # noqa: E731
    y = -np.ones((len(train_y), k))
    y[np.arange(len(train_y)), train_y] = 1.0
    return np.argmax(aug(test_x) @ lstsq_ridge(aug(train_x), y, l2), 1)


@pytest.mark.parametrize("n_per_class,dim", [(5, 30), (25, 8)])
def test_fit_predict_matches_reference(n_per_class, dim):
    rng = np.random.default_rng(dim)
    k = 4
    centers = rng.normal(size=(k, dim))
    train_y = np.repeat(np.arange(k), n_per_class)
    train_x = centers[train_y] + 1.5 * rng.normal(size=(len(train_y), dim))
    test_y = rng.integers(0, k, 200)
    test_x = centers[test_y] + 1.5 * rng.normal(size=(200, dim))
    got = linear_probe.fit_predict(train_x, train_y, test_x, k)
    np.testing.assert_array_equal(
        got, reference_predict(train_x, train_y, test_x, k)
    )
    assert 0.3 < np.mean(got == test_y) < 1.0  # a real, imperfect task


@pytest.mark.parametrize("shots,dim", [(1, 40), (3, 5), (25, 10)])
def test_separable_toy_problem_is_solved_exactly(shots, dim):
    """Tight, far-apart clusters (every feature informative): 100% in the
    N < D and the N >= D regime."""
    rng = np.random.default_rng(0)
    k = 5
    centers = 10.0 * rng.normal(size=(k, dim))
    train_y = np.repeat(np.arange(k), shots)
    train_x = centers[train_y] + 0.1 * rng.normal(size=(len(train_y), dim))
    test_y = rng.integers(0, k, 500)
    test_x = centers[test_y] + 0.1 * rng.normal(size=(500, dim))
    pred = linear_probe.fit_predict(train_x, train_y, test_x, k)
    assert np.mean(pred == test_y) == 1.0


def test_draw_shots_per_class_without_replacement():
    labels = np.repeat(np.arange(4), [10, 6, 3, 8])
    idx = linear_probe.draw_shots(labels, 5, seed=0, num_classes=4)
    counts = np.bincount(labels[idx], minlength=4)
    np.testing.assert_array_equal(counts, [5, 5, 3, 5])  # class 2 has 3
    assert len(set(idx.tolist())) == len(idx)
    again = linear_probe.draw_shots(labels, 5, seed=0, num_classes=4)
    np.testing.assert_array_equal(idx, again)
    other = linear_probe.draw_shots(labels, 5, seed=1, num_classes=4)
    assert set(idx.tolist()) != set(other.tolist())



def big_vision_draw(labels, shots, seed, num_classes):
    """big_vision's fewshot_lsr draw, written out: one generator per seed,
    a permutation of each class's indices in turn, their first shots."""
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(np.where(labels == c)[0])
              for c in range(num_classes)]
    return np.concatenate([o[:shots] for o in orders])


def test_each_seed_draws_the_examples_big_vision_draws():
    labels = np.random.default_rng(7).integers(0, 10, 500)
    for seed in (0, 1, 4):
        for shots in (1, 5, 10, 25):
            np.testing.assert_array_equal(
                linear_probe.draw_shots(labels, shots, seed, 10),
                big_vision_draw(labels, shots, seed, 10))
        one = set(linear_probe.draw_shots(labels, 1, seed, 10).tolist())
        five = set(linear_probe.draw_shots(labels, 5, seed, 10).tolist())
        assert one < five  # a seed's 1-shot examples are among its 5-shot


def test_the_scores_of_each_seed_use_big_vision_draw():
    rng = np.random.default_rng(3)
    train_y = rng.integers(0, 4, 200)
    train_x = rng.normal(size=(200, 6)) + train_y[:, None]
    test_y = rng.integers(0, 4, 50)
    test_x = rng.normal(size=(50, 6)) + test_y[:, None]
    got = linear_probe.evaluate_features((train_x, train_y),
                                         (test_x, test_y), 4, (2, 5), (0, 3))
    for shots in (2, 5):
        want = []
        for seed in (0, 3):
            idx = big_vision_draw(train_y, shots, seed, 4)
            pred = reference_predict(train_x[idx], train_y[idx], test_x, 4)
            want.append(np.mean(pred == test_y))
        np.testing.assert_allclose(got[str(shots)]["per_seed"], want)

def test_a_shot_count_above_a_class_pool_is_said_once_and_recorded(caplog):
    """30-shot where a class has 26 examples: one warning per shot count
    (not one per class and seed), the figure recorded with the fewest
    shots a class had, and the table cell saying so."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), [40, 26, 35])
    train = (rng.normal(size=(len(labels), 4)) + labels[:, None], labels)
    test = (np.arange(3)[:, None] + np.zeros((3, 4)), np.arange(3))
    caplog.set_level("WARNING", logger="absl")
    out = linear_probe.evaluate_features(train, test, 3, shots=(5, 30),
                                    seeds=(0, 1, 2))
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        "1 of 3 classes have fewer than 30 training examples (fewest: 26): "
        "each uses all it has, so the 30-shot figure is of fewer shots "
        "(recorded as fewest_shots)."]
    assert out["30"]["fewest_shots"] == 26 and "fewest_shots" not in out["5"]
    table = fewshot_reports.fewshot_markdown({"toy": out}, "m")
    (row,) = [line for line in table.splitlines() if line.startswith("| toy")]
    assert row.endswith(" (a class: 26 shots) |")
    assert "(a class" not in row.split("|")[2]  # the 5-shot cell


def test_shot_counts_and_seeds_out_of_range_are_refused_from_python():
    """The library's doors check what the command checks: a shot count of
    0 or less trained on no example, or on all but some, under its name;
    a fraction was recorded as its whole part; no seed gave a NaN mean."""
    labels = np.repeat(np.arange(3), 2)
    features = (np.eye(3)[labels], labels)
    for shots, seeds, says in [
            ((0,), (0,), r"shots=0: each value must be >= 1"),
            ((-1,), (0,), r"shots=-1: each value must be >= 1"),
            ((2.5,), (0,), r"shots=2.5: 2.5 is not a whole number"),
            ((float("inf"),), (0,), r"shots=inf: inf is not a finite"),
            ((float("nan"),), (0,), r"shots=nan: nan is not a finite"),
            ((np.int64(2), 2), (0,), r"shots=2,2: 2 given twice"),
            ((2,), (), r"seeds=\(\) must list one value or more"),
            ((2,), (-1,), r"seeds=-1: each value must be >= 0")]:
        with pytest.raises(UsageError, match=says):
            linear_probe.evaluate_features(features, features, 3, shots,
                                           seeds)
    for fields, says in [
            ({"shots": (0, -1)}, r"config.evals.fewshot.shots=0,-1: each "
             "value must be >= 1"),
            ({"seeds": ()}, r"config.evals.fewshot.seeds=\(\) must list "
             "one value or more"),
            ({"l2_reg": 0}, r"config.evals.fewshot.l2_reg=0.0 must be > 0")]:
        with pytest.raises(UsageError, match=says):
            fewshot.run(None, fields, [])
    for two in (2.0, np.float32(2), np.int64(2)):  # whole: its count
        got = linear_probe.evaluate_features(features, features, 3, (two,),
                                             (0,))
        assert got["2"]["mean"] == 1.0
    with pytest.raises(UsageError, match="A probe of 1 class measures "
                       "nothing: give data of two classes or more."):
        linear_probe.evaluate_features(features, features, 1, (1,), (0,))


def test_a_class_without_training_examples_is_said(caplog):
    """A class of the test split with no example in the pool: the probe
    never predicts it, said once, and its test images count wrong."""
    labels = np.array([0, 0, 1, 1])
    train = (np.eye(3)[labels], labels)
    test = (np.eye(3), np.arange(3))
    caplog.set_level("WARNING", logger="absl")
    got = linear_probe.evaluate_features(train, test, 3, (1,), (0,))
    assert got["1"]["mean"] == pytest.approx(2 / 3)
    assert [r.getMessage() for r in caplog.records][0] == (
        "1 of 3 classes have no training example: the probe never predicts "
        "them, and the accuracies count their test images wrong.")


def tiny_digits_model():
    return create_model(
        None, num_classes=10, image_size=32, patch_size=8, hidden_size=32,
        num_layers=1, num_heads=2, mlp_dim=64, representation_size=24,
        head_zero_init=False,
    )


def digits_features(model, split, size=32, resize=36):
    """Reference features: each digit preprocessed by hand, one predict."""
    x, y = digits_split(split)
    images = np.stack([
        preprocessing.preprocess_eval(tf.constant(i[..., None]), size,
                                      resize).numpy()
        for i in x
    ])
    feats = features_model(model).predict(images, batch_size=256, verbose=0)
    return feats, y


def test_evaluator_on_digits_matches_direct_computation():
    model = tiny_digits_model()
    data = fewshot.FewShotData("digits", "digits", "train", "test")
    results, not_run = fewshot.run(
        model, dict(shots=(1, 5), seeds=(0, 1), batch_size=100), [data],
        image_size=32, resize_size=36,
    )
    assert not_run == {}
    train_x, train_y = digits_features(model, "train")
    test_x, test_y = digits_features(model, "test")
    for shots in (1, 5):
        accs = []
        for seed in (0, 1):
            idx = linear_probe.draw_shots(train_y, shots, seed, 10)
            assert len(idx) == 10 * shots
            pred = reference_predict(train_x[idx], train_y[idx], test_x, 10)
            accs.append(np.mean(pred == test_y))
        got = results["digits"][str(shots)]
        np.testing.assert_allclose(got["per_seed"], accs)
        assert got["mean"] == pytest.approx(np.mean(accs))
    # The random tiny network still separates digits better than chance.
    assert results["digits"]["5"]["mean"] > 0.2


def test_features_are_the_same_under_two_replicas():
    model = tiny_digits_model()
    inp = fewshot.FewShotData("d", "digits", "train", "test").input(36)
    run = input_pipeline.RunInput(image_size=32)
    one = fewshot.extract_features(features_model(model), inp, run, "test",
                                   64)
    strategy = two_cpu_mirrored()
    with strategy.scope():
        mirrored = tiny_digits_model()
    mirrored.set_weights(model.get_weights())
    two = fewshot.extract_features(
        features_model(mirrored), inp, run, "test", 64, strategy
    )
    ref_x, ref_y = digits_features(model, "test")
    assert one[0].shape == (360, 24) and two[0].shape == (360, 24)
    np.testing.assert_allclose(one[0], ref_x, atol=1e-5)
    np.testing.assert_array_equal(one[1], ref_y)
    # Replicas may interleave batches: compare as sets of (label, row).
    order = lambda f, y: np.lexsort(np.c_[f, y].T)  # noqa: E731
    a, b = order(*one), order(*two)
    np.testing.assert_allclose(one[0][a], two[0][b], atol=1e-5)
    np.testing.assert_array_equal(one[1][a], two[1][b])


def test_missing_data_is_reported_and_others_run(tmp_path):
    model = tiny_digits_model()
    sets = [
        fewshot.FewShotData("imagenet", "imagenet2012", "train[:65000]",
                            "validation", str(tmp_path)),
        fewshot.FewShotData("digits", "digits", "train", "test"),
    ]
    turns = []

    def in_turn(prepare, name):  # a multi-worker run's chief first
        turns.append(name)
        return prepare()

    results, not_run = fewshot.run(
        model, dict(shots=(1,), seeds=(0,), batch_size=120), sets,
        image_size=32, resize_size=None, download=False, in_turn=in_turn,
    )
    assert turns == ["imagenet", "digits"]
    assert list(results) == ["digits"]
    assert "imagenet" in not_run and "tfds build imagenet2012" in not_run[
        "imagenet"
    ]
    with pytest.raises(ValueError, match="Unknown few-shot data set"):
        fewshot.run(model, {}, [fewshot.FewShotData("x", "no_such_set", "a",
                                                    "b")])


def test_an_image_folder_with_a_bad_file_follows_skip_bad_images(tmp_path):
    """A few-shot data set that is an image folder reads
    config.input.skip_bad_images, which keras-vit-evaluate --mode=fewshot
    names as the fix: without it a bad file stops the probe in one line
    naming it and the fix; with it the file is left out."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name in ("cat", "dog"):
            folder = tmp_path / split / name
            folder.mkdir(parents=True)
            for i in range(3):
                tf.io.write_file(str(folder / f"{i}.png"), tf.io.encode_png(
                    rng.integers(0, 256, (20, 20, 3), np.uint8)))
    (tmp_path / "train" / "cat" / "bad.png").write_bytes(b"not a png")
    model = tiny_digits_model()
    opts = dict(shots=(1,), seeds=(0,), batch_size=4)

    def probe(skip):
        data = fewshot.FewShotData("mine", "folder", "train", "test",
                                   str(tmp_path), skip_bad_images=skip)
        assert data.input(None).skip_bad_images is skip
        return fewshot.run(model, opts, [data], image_size=32,
                           resize_size=None)

    with pytest.raises(UsageError, match=r"Cannot decode 1 image file\(s\) "
                       r"of image folder .*bad.png.*config.input."
                       r"skip_bad_images=True"):
        probe(False)
    results, not_run = probe(True)
    assert not_run == {} and "1" in results["mine"]


def test_imagenet_names_its_manual_files_in_the_manual_dir(tmp_path):
    """ImageNet cannot be downloaded: its two archives (the few-shot pool
    is in the training one, the test split the validation one, as TFDS's
    builder says) are looked for in the data set's manual_dir
    (`config.input.manual_dir`), and a missing one is named there."""
    import tensorflow_datasets as tfds

    files, _ = fewshot.MANUAL_DATA["imagenet2012"]
    instructions = tfds.builder("imagenet2012").MANUAL_DOWNLOAD_INSTRUCTIONS
    assert all(name in instructions for name in files)
    manual = tmp_path / "mine"
    data = fewshot.FewShotData("imagenet", "imagenet2012", "train[:65000]",
                               "validation", str(tmp_path / "data"),
                               str(manual))
    manual.mkdir()
    (manual / files[1]).write_bytes(b"")
    results, not_run = fewshot.run(tiny_digits_model(), {}, [data],
                                   image_size=32)
    assert results == {}
    assert f"into {manual}/ (missing: ILSVRC2012_img_train.tar)" in (
        not_run["imagenet"])
    assert data.input(256).manual_dir == str(manual)


def test_each_finished_data_set_is_reported_before_the_next(tmp_path,
                                                           monkeypatch):
    """`on_result` runs after each data set (keras-vit-evaluate writes
    fewshot.json and .md there): a run stopped in the second data set
    keeps the first one's results."""
    from keras_vit.evaluation import fewshot_reports

    model = create_model(None, num_classes=10, image_size=16, patch_size=8,
                         hidden_size=16, num_layers=1, num_heads=2,
                         mlp_dim=16, representation_size=8)
    data = [fewshot.FewShotData(name, "digits", "train[:200]", "test")
            for name in ("first", "second")]
    calls = []
    evaluate = linear_probe.evaluate_features

    def stopped_in_the_second(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(fewshot, "evaluate_features", stopped_in_the_second)

    def write(results, not_run):
        calls.append(sorted(results))
        fewshot_reports.write_fewshot_reports(str(tmp_path), "tiny",
                                              results, not_run)

    with pytest.raises(KeyboardInterrupt):
        fewshot.run(model, {"shots": (1,), "seeds": (0,), "batch_size": 64},
                    data, image_size=16, resize_size=None, on_result=write)
    assert calls == [["first"]]
    with open(tmp_path / fewshot_reports.FEWSHOT_JSON) as f:
        saved = json.load(f)
    assert list(saved["results"]) == ["first"] and saved["model"] == "tiny"
    assert "| first |" in (tmp_path / fewshot_reports.FEWSHOT_MD).read_text()


def test_the_default_data_sets_are_big_vision_s():
    """`--config=fewshot` probes big_vision's few-shot data sets
    (configs/common_fewshot.py), each with its pool of shots and its test
    split; ImageNet's pool is the first 65,000 training images, which hold
    at least 30 of each class (its comment), so the shots are big_vision's.
    TFDS's cars196 is named without big_vision's version pin (2.1.0)."""
    from keras_vit.configs import fewshot as fewshot_config

    big_vision = {
        "caltech": ("caltech101", "train", "test"),
        "cars": ("cars196", "train", "test"),
        "cifar100": ("cifar100", "train", "test"),
        "dtd": ("dtd", "train", "test"),
        "imagenet": ("imagenet2012", "train[:65000]", "validation"),
        "pets": ("oxford_iiit_pet", "train", "test"),
        "uc_merced": ("uc_merced", "train[:1000]", "train[1000:]"),
    }
    config = fewshot_config.get_config()
    got = {name: (d.dataset, d.train_split, d.test_split)
           for name, d in config.evals.fewshot.datasets.items()}
    assert got == big_vision
    assert config.input.pp.eval_resize_size == 256
    assert not config.input.pp.eval_keep_aspect
    assert (list(config.evals.fewshot.shots), config.evals.fewshot.l2_reg,
            len(config.evals.fewshot.seeds)) == ([1, 5, 10, 25], 1024.0, 3)
