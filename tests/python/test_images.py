"""actorch's image path against torchvision 0.14 on PIL 9.4 (Debian's), on files written here:
decoding (JPEG in every layout PIL writes, PNG in every mode), ImageFolder's listing, each
transform with its random draws fixed, the fused decode against the unfused one, bad files,
a torchvision transform on actorch's ImageFolder, and the loader's starvation figure."""
import io
import os
import time

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.functional as TF
from PIL import Image

import actorch
import actorch.transforms as A
import actorch.transforms.functional as AF
from loader_cases import processes

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def photo(rng, w, h):
    """A smooth colour field with noise: what a photo is to a codec and a filter."""
    base = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    img = Image.fromarray(base, "RGB").resize((w, h), Image.BICUBIC)
    a = np.asarray(img, dtype=np.int16) + rng.normal(0, 8, (h, w, 3)).astype(np.int16)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def pixels(img):
    return np.asarray(img.convert("RGB") if img.mode not in ("RGB", "L") else img)


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(7)


@pytest.fixture(scope="module")
def tree(tmp_path_factory, rng):
    """root/<class>/...: JPEGs of several layouts, PNGs of several modes, a nested folder, an
    upper-case extension, a file that is no image by its name, and a class folder reached by a
    link."""
    root = tmp_path_factory.mktemp("tree")
    (root / "cat" / "inner").mkdir(parents=True)
    (root / "dog").mkdir()
    (root / "zebra_files").mkdir()
    photo(rng, 64, 48).save(root / "cat" / "b.jpg", quality=90)
    photo(rng, 50, 70).save(root / "cat" / "a.JPEG", quality=75, subsampling=0)
    photo(rng, 33, 17).save(root / "cat" / "inner" / "c.jpg", quality=95, progressive=True)
    photo(rng, 40, 40).convert("L").save(root / "dog" / "gray.jpg", quality=90)
    photo(rng, 40, 30).convert("CMYK").save(root / "dog" / "cmyk.jpg", quality=90)
    photo(rng, 31, 29).save(root / "dog" / "rgb.png")
    photo(rng, 31, 29).convert("RGBA").save(root / "dog" / "rgba.png")
    photo(rng, 31, 29).convert("P").save(root / "dog" / "palette.png")
    photo(rng, 31, 29).convert("L").save(root / "dog" / "l.png")
    photo(rng, 20, 20).save(root / "dog" / "interlaced.png", interlace=1)
    (root / "dog" / "notes.txt").write_text("not an image")
    photo(rng, 30, 30).save(root / "zebra_files" / "z.png")
    os.symlink(root / "zebra_files", root / "linked")
    return root


def test_image_folder_lists_as_torchvision(tree):
    mine = actorch.data.ImageFolder(str(tree))
    theirs = torchvision.datasets.ImageFolder(str(tree))
    assert mine.classes == theirs.classes
    assert mine.class_to_idx == theirs.class_to_idx
    assert mine.samples == theirs.samples
    assert mine.targets == theirs.targets
    assert len(mine) == len(theirs)
    # A sample's label is a Python int, as torchvision's, so that `label == 0` holds.
    for i in range(len(theirs)):
        label = mine[i][1]
        assert type(label) is int and label == theirs[i][1], (i, label)


def test_decoding_equals_pil_convert_rgb(tree):
    """Every file, decoded, is what torchvision's loader (PIL's convert("RGB")) gives."""
    ds = actorch.data.ImageFolder(str(tree))
    for i, (path, label) in enumerate(ds.samples):
        image, y = ds[i]
        expected = np.asarray(Image.open(path).convert("RGB"))
        got = np.from_dlpack(image)
        assert got.shape == expected.shape, path
        assert np.array_equal(got, expected), (path, np.abs(got.astype(int) - expected).max())
        assert int(y) == label


def test_image_folder_errors_name_the_problem(tmp_path):
    with pytest.raises(actorch.Error, match="Couldn't find any class folder"):
        actorch.data.ImageFolder(str(tmp_path))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.txt").write_text("x")
    with pytest.raises(actorch.Error, match="Found no valid file for the classes a"):
        actorch.data.ImageFolder(str(tmp_path))
    with pytest.raises(actorch.Error, match="is not a folder"):
        actorch.data.ImageFolder(str(tmp_path / "missing"))


@pytest.fixture(scope="module")
def bad_tree(tmp_path_factory, rng):
    root = tmp_path_factory.mktemp("bad")
    (root / "c").mkdir()
    for i in range(6):
        photo(rng, 40, 30).save(root / "c" / f"{i}.jpg", quality=90)
    data = (root / "c" / "1.jpg").read_bytes()
    (root / "c" / "1.jpg").write_bytes(data[: len(data) // 2])  # truncated
    (root / "c" / "3.jpg").write_bytes(b"\x00" * 100)  # not an image
    buf = io.BytesIO()
    photo(rng, 40, 30).save(buf, format="PNG")
    png = buf.getvalue()
    (root / "c" / "4.jpg").write_bytes(png[:60] + bytes(40) + png[100:])  # corrupt PNG data
    return root


def test_bad_files_are_errors_naming_the_file(bad_tree):
    ds = actorch.data.ImageFolder(str(bad_tree))
    for name in ("1.jpg", "3.jpg", "4.jpg"):
        i = [os.path.basename(p) for p, _ in ds.samples].index(name)
        with pytest.raises(actorch.Error, match=name):
            ds[i]
    loader = actorch.DataLoader(ds, batch_size=2, num_workers=2)
    with pytest.raises(actorch.Error, match="1.jpg"):
        list(loader)


@pytest.mark.parametrize("context", [None, pytest.param("fork", marks=processes)])
def test_bad_files_are_skipped_and_counted_when_asked(bad_tree, context):
    # In worker processes ("fork", or any Python transform) the list stayed empty: each child
    # logged into its own copy (Note [Bad files across processes]).
    ds = actorch.data.ImageFolder(str(bad_tree), transform=A.Compose([A.Resize([8, 8]),
                                                                       A.ToTensor()]),
                                  skip_bad_files=True)
    batches = list(actorch.DataLoader(ds, batch_size=3, num_workers=2,
                                      multiprocessing_context=context))
    assert sum(len(y) for _, y in batches) == 6  # every index still gives a sample
    assert sorted(os.path.basename(p) for p in ds.bad_files) == ["1.jpg", "3.jpg", "4.jpg"]


@pytest.fixture(scope="module")
def images(rng):
    return [photo(rng, w, h) for w, h in [(64, 48), (37, 91), (224, 224), (500, 333), (9, 5)]]


MODES = ["nearest", "bilinear", "bicubic", "box", "hamming", "lanczos"]
TV_MODES = {m: getattr(T.InterpolationMode, m.upper()) for m in MODES}


def diff(a, b):
    d = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return d.mean(), d.max()


def test_exact_operations_equal_torchvision(images):
    for img in images:
        w, h = img.size
        for box in [(0, 0, h, w), (1, 2, h // 2 + 1, w // 3 + 1), (-3, -2, h + 5, w + 4)]:
            assert np.array_equal(pixels(AF.crop(img, *box)), pixels(TF.crop(img, *box)))
        for size in [(4, 4), (h, w), (h + 3, w + 2), 7]:
            assert np.array_equal(pixels(AF.center_crop(img, size)),
                                  pixels(TF.center_crop(img, size)))
        assert np.array_equal(pixels(AF.hflip(img)), pixels(TF.hflip(img)))
        assert np.array_equal(pixels(AF.vflip(img)), pixels(TF.vflip(img)))
        assert np.array_equal(pixels(AF.pad(img, [3, 1], fill=9)),
                              pixels(TF.pad(img, [3, 1], fill=9)))
        tv = TF.to_tensor(img)
        mine = torch.from_dlpack(AF.to_tensor(img))
        assert torch.equal(mine, tv)
        assert torch.equal(torch.from_dlpack(A.Normalize(MEAN, STD)(tv)),
                           TF.normalize(tv, MEAN, STD))


def test_resampling_equals_pil_for_every_filter(images):
    """PIL's fixed-point resampling, reproduced: docs/python.md quotes these differences."""
    for img in images:
        w, h = img.size
        for mode in MODES:
            for size in [[24, 24], [h * 2 + 1, w + 3], [max(1, h // 3), max(1, w // 5)], 17]:
                mine = AF.resize(img, size, mode)
                theirs = TF.resize(img, size, TV_MODES[mode])
                assert diff(mine, theirs) == (0, 0), (img.size, mode, size)
            box = (1, 2, max(1, h - 3), max(1, w - 2))
            assert diff(AF.resized_crop(img, *box, [31, 29], mode),
                        TF.resized_crop(img, *box, [31, 29], TV_MODES[mode])) == (0, 0)


def test_colour_operations_equal_torchvision(images):
    for img in images:
        for f in [0.0, 0.4, 1.0, 1.7]:
            assert np.array_equal(pixels(AF.adjust_brightness(img, f)),
                                  pixels(TF.adjust_brightness(img, f)))
            assert np.array_equal(pixels(AF.adjust_contrast(img, f)),
                                  pixels(TF.adjust_contrast(img, f)))
            assert np.array_equal(pixels(AF.adjust_saturation(img, f)),
                                  pixels(TF.adjust_saturation(img, f)))
        for f in [-0.5, -0.21, 0.0, 0.1, 0.5]:
            assert np.array_equal(pixels(AF.adjust_hue(img, f)), pixels(TF.adjust_hue(img, f)))
        for n in (1, 3):
            assert np.array_equal(pixels(AF.rgb_to_grayscale(img, n)),
                                  pixels(TF.rgb_to_grayscale(img, n)))


def test_random_transforms_apply_their_draws_as_torchvision(images):
    """With the draws fixed (the same seed before drawing the parameters and before the
    transform), each random transform equals torchvision's functional form of those draws."""
    img = images[3]
    w, h = img.size
    for seed in range(20):
        for scale, ratio in [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 0.6), (2.0, 3.0)),
                             ((0.9, 1.0), (0.1, 0.2))]:
            actorch.manual_seed(seed)
            top, left, ch, cw = AF.random_resized_crop_params(h, w, scale, ratio)
            assert 0 <= top and top + ch <= h and 0 <= left and left + cw <= w
            actorch.manual_seed(seed)
            mine = A.RandomResizedCrop(64, scale=scale, ratio=ratio)(img)
            theirs = TF.resized_crop(img, top, left, ch, cw, [64, 64])
            assert np.array_equal(pixels(mine), pixels(theirs))


def test_random_resized_crop_draws_as_torchvisions_get_params():
    """The same distribution of crops as torchvision's (drawn from torch's generator): areas
    uniform in scale, ratios log-uniform, up to 10 tries, then the central fallback."""
    canvas = Image.new("RGB", (1000, 600))
    for scale, ratio in [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 1.0), (3.0, 4.0))]:
        actorch.manual_seed(3)
        torch.manual_seed(3)
        mine = np.array([AF.random_resized_crop_params(600, 1000, scale, ratio)
                         for _ in range(4000)], dtype=np.float64)
        theirs = np.array([T.RandomResizedCrop.get_params(canvas, list(scale), list(ratio))
                           for _ in range(4000)], dtype=np.float64)
        for x in (mine, theirs):
            assert (x[:, 0] >= 0).all() and (x[:, 0] + x[:, 2] <= 600).all()
            assert (x[:, 1] >= 0).all() and (x[:, 1] + x[:, 3] <= 1000).all()
        area = lambda x: x[:, 2] * x[:, 3] / 6e5  # noqa: E731
        log_ratio = lambda x: np.log(x[:, 3] / x[:, 2])  # noqa: E731
        assert area(mine).mean() == pytest.approx(area(theirs).mean(), abs=0.015)
        assert area(mine).std() == pytest.approx(area(theirs).std(), abs=0.015)
        assert log_ratio(mine).mean() == pytest.approx(log_ratio(theirs).mean(), abs=0.02)
        assert (mine[:, 2] == 600).mean() == pytest.approx((theirs[:, 2] == 600).mean(), abs=0.02)


def test_flips_and_jitter_draw_as_often_as_asked(images):
    img = images[0]
    flipped = pixels(TF.hflip(img))
    actorch.manual_seed(0)
    hits = sum(np.array_equal(pixels(A.RandomHorizontalFlip(0.3)(img)), flipped)
               for _ in range(2000))
    assert hits / 2000 == pytest.approx(0.3, abs=0.04)
    jitter = A.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
    outs = {pixels(jitter(img)).tobytes() for _ in range(20)}
    assert len(outs) == 20
    with pytest.raises(actorch.Error, match="hue"):
        A.ColorJitter(hue=0.7)


def test_tensor_results_as_torchvision_pipeline(images):
    """A whole deterministic pipeline: Resize, CenterCrop, ToTensor, Normalize."""
    for img in images:
        mine = A.Compose([A.Resize(40), A.CenterCrop(32), A.ToTensor(),
                          A.Normalize(MEAN, STD)])(img)
        theirs = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(),
                            T.Normalize(MEAN, STD)])(img)
        assert torch.equal(torch.from_dlpack(mine), theirs)


@pytest.fixture(scope="module")
def jpeg_tree(tmp_path_factory, rng):
    root = tmp_path_factory.mktemp("jpegs")
    for c in range(2):
        (root / f"c{c}").mkdir()
        for i in range(12):
            size = tuple(int(v) for v in rng.integers(300, 501, 2))
            photo(rng, *size).save(root / f"c{c}" / f"{i}.jpg", quality=90)
    return root


@pytest.mark.parametrize("size,mean_bound,max_bound", [(224, 0.5, 30), (64, 1.5, 30)])
def test_fused_decode_is_within_tolerance_of_the_unfused(jpeg_tree, size, mean_bound, max_bound):
    """Note [Fused image path]: the same draws, the crop decoded at a reduced DCT scale where it
    stays at least as large as the output (at 224 from 300-500 px images mostly full scale, at
    64 mostly 1/2 to 1/8). docs/python.md quotes the measured differences, in 8-bit levels."""
    tf = A.Compose([A.RandomResizedCrop(size), A.RandomHorizontalFlip(), A.ToTensor(),
                    A.Normalize(MEAN, STD)])
    fused = actorch.data.ImageFolder(str(jpeg_tree), transform=tf)
    plain = actorch.data.ImageFolder(str(jpeg_tree), transform=tf, fuse=False)
    a = torch.cat([x for x, _ in actorch.DataLoader(fused, batch_size=8, seed=5, num_workers=2)])
    b = torch.cat([x for x, _ in actorch.DataLoader(plain, batch_size=8, seed=5, num_workers=2)])
    std = torch.tensor(STD).view(1, 3, 1, 1)
    d = (a - b).abs() * std * 255  # back to 8-bit levels
    print(f"fused vs unfused at {size}: mean {d.mean():.3f} max {d.max():.1f} levels, "
          f"{(d > 0.5).float().mean() * 100:.1f}% of values differ")
    assert d.mean() < mean_bound
    assert d.max() < max_bound
    assert d.mean() > 0 or size == 224  # the scaled decode did run


@processes
def test_a_torchvision_transform_runs_on_actorchs_image_folder(tree):
    tf = T.Compose([T.Resize(20), T.CenterCrop(16), T.ToTensor()])
    mine = actorch.data.ImageFolder(str(tree), transform=tf, target_transform=lambda y: y + 10)
    theirs = torchvision.datasets.ImageFolder(str(tree), transform=tf,
                                              target_transform=lambda y: y + 10)
    a = list(actorch.DataLoader(mine, batch_size=4, num_workers=2))
    b = list(torch.utils.data.DataLoader(theirs, batch_size=4))
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb)
        assert torch.equal(ya, yb)


@processes
def test_loader_keeps_the_starvation_figure():
    """A consumer with a 10 ms step over a loader that makes a batch every 20 ms waits half of
    each step; with a 40 ms step it never waits."""
    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 24

        def __getitem__(self, i):
            time.sleep(0.02)
            return i

    for step, lo, hi in [(0.01, 0.3, 0.7), (0.04, 0.0, 0.15)]:
        loader = actorch.DataLoader(Slow(), batch_size=1, num_workers=1)
        for _ in loader:
            time.sleep(step)
        t = loader.timing()
        assert t.batches == 24
        assert lo <= t.starvation <= hi, t
