"""Program images and replay results: golden files, round trips, atomic writes, every refusal."""

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from golden_files import GOLDEN_DIR, golden_path

from hw_config import load_config
from simulator import image as image_mod
from simulator.image import (
    ImageError,
    ProgramImage,
    ReplayResult,
    load_image,
    load_result,
    save_image,
    save_result,
)

GOLDEN_NAMES = sorted(p.name[:-4] for p in GOLDEN_DIR.glob("*.npz") if not p.name.endswith(".expect.npz"))
PYNQ = load_config("pynq")


def _golden(name: str) -> Path:
    return golden_path(name)


def _image() -> ProgramImage:
    insns = np.arange(48, dtype=np.uint8).reshape(3, 16)
    segs = [(0x1000, np.arange(64, dtype=np.uint8)), (0x3000, np.full(5, 7, dtype=np.uint8))]
    return ProgramImage(PYNQ, insns, 0x2000, segs)


def _arrays(**changes) -> dict:
    """The arrays of a valid image file, with some keys replaced (None deletes)."""
    arrays = {"config": np.array(PYNQ.to_json()), "insns": np.zeros((2, 16), dtype=np.uint8),
              "insn_addr": np.array(0x8000, dtype=np.uint64),
              "seg_addr": np.array([0x1000, 0x2000], dtype=np.uint64),
              "seg_0": np.zeros(16, dtype=np.uint8), "seg_1": np.ones(8, dtype=np.uint8)}
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    return arrays


def _refused(tmp_path, **changes) -> ImageError:
    path = tmp_path / "bad.npz"
    np.savez(path, **_arrays(**changes))
    with pytest.raises(ImageError) as info:
        load_image(path)
    assert str(path) in str(info.value)
    return info.value


@pytest.mark.parametrize("name", GOLDEN_NAMES or ["missing"])
def test_golden_images_and_results_load(name):
    img = load_image(_golden(f"{name}.npz"))
    assert img.config.model == "pynq_1x16_i8w8a32_15_15_18_17"
    assert img.config == PYNQ.replace(DESCRIPTION="")  # VTA keys only: pynq's platform values filled in
    assert img.insns.dtype == np.uint8 and img.insns.shape[1] == 16 and len(img.insns) >= 7
    assert img.insn_addr > 0 and img.segments
    raw = np.load(_golden(f"{name}.npz"))
    for i, (addr, data) in enumerate(img.segments):
        assert addr == int(raw["seg_addr"][i]) and np.array_equal(data, raw[f"seg_{i}"])
    result = load_result(_golden(f"{name}.expect.npz"))
    assert len(result.segments) == 1
    assert {"inp_load_nbytes", "out_store_nbytes", "gemm_counter", "alu_counter"} <= set(result.stats)


def test_golden_round_trip_through_our_writer(tmp_path):
    src = load_image(_golden("gemm_1.npz"))
    path = tmp_path / "copy.npz"
    save_image(path, src)
    back = load_image(path)
    assert back.config == src.config and back.insn_addr == src.insn_addr
    assert np.array_equal(back.insns, src.insns)
    assert [(a, d.tobytes()) for a, d in back.segments] == [(a, d.tobytes()) for a, d in src.segments]


def test_round_trip_keeps_exact_path_and_full_config(tmp_path):
    img = ProgramImage(load_config("ultra96", LOG_BATCH=1), np.zeros((1, 16), dtype=np.uint8), 0,
                       [(0x1000, b"\x01\x02")])
    for name in ("prog.img", "prog"):  # numpy alone would write 'prog.img.npz' / 'prog.npz'
        path = tmp_path / name
        save_image(str(path), img, compress=(name == "prog"))
        assert path.is_file() and not (tmp_path / f"{name}.npz").exists()
        back = load_image(path)
        assert back.config == img.config and back.insn_addr == 0
        assert back.segments[0][1].tolist() == [1, 2]
    with open(tmp_path / "prog", "rb") as f:  # file objects work too
        assert load_image(f).config == img.config
    assert load_image(io.BytesIO((tmp_path / "prog").read_bytes())).config == img.config
    assert sorted(os.listdir(tmp_path)) == ["prog", "prog.img"]  # no temp files left behind


def test_result_round_trip(tmp_path):
    result = ReplayResult([(0x1000, np.arange(10, dtype=np.uint8))], {"cycles": 123, "busy": {"load": 4}})
    path = tmp_path / "out.result"
    save_result(path, result)
    back = load_result(path)
    assert back.stats == result.stats and back.segments[0][0] == 0x1000
    assert np.array_equal(back.segments[0][1], result.segments[0][1])
    assert sorted(np.load(path).files) == ["seg_0", "seg_addr", "stats"]


def test_failed_save_leaves_no_file(tmp_path, monkeypatch):
    path = tmp_path / "prog.npz"

    def explode(f, **arrays):
        f.write(b"PK\x03\x04 half an archive")
        raise OSError("disk full")

    monkeypatch.setattr(image_mod.np, "savez_compressed", explode)
    with pytest.raises(OSError, match="disk full"):
        save_image(path, _image())
    assert os.listdir(tmp_path) == []
    # An existing file is left untouched by a failed save.
    path.write_bytes(b"old")
    with pytest.raises(OSError):
        save_image(path, _image())
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["prog.npz"]
    with pytest.raises(ImageError, match="stats"):
        save_result(tmp_path / "r.npz", ReplayResult([], {"x": object()}))
    assert os.listdir(tmp_path) == ["prog.npz"]


def test_save_into_missing_directory_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        save_image(tmp_path / "nope" / "prog.npz", _image())


def test_not_an_npz(tmp_path):
    path = tmp_path / "x.npz"
    path.write_text("hello")
    with pytest.raises(ImageError, match="not an .npz"):
        load_image(path)
    np.save(tmp_path / "plain.npy", np.zeros(3))
    with pytest.raises(ImageError, match="not an .npz"):
        load_image(tmp_path / "plain.npy")
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    with pytest.raises(ImageError, match="corrupt"):
        load_image(path)


@pytest.mark.parametrize("key", ["config", "insns", "insn_addr", "seg_addr"])
def test_missing_key(tmp_path, key):
    err = _refused(tmp_path, **{key: None})
    assert err.key == key and f"missing key '{key}'" in str(err)


def test_extra_key(tmp_path):
    err = _refused(tmp_path, notes=np.array("hi"))
    assert err.key == "notes" and "unknown key" in str(err) and "seg_<i>" in str(err)
    assert _refused(tmp_path, seg_01=np.zeros(3, dtype=np.uint8)).key == "seg_01"


@pytest.mark.parametrize("changes, key, expected", [
    ({"insns": np.zeros((2, 16), dtype=np.int32)}, "insns", "(N, 16)"),
    ({"insns": np.zeros(32, dtype=np.uint8)}, "insns", "(N, 16)"),
    ({"insns": np.zeros((2, 8), dtype=np.uint8)}, "insns", "(2, 8)"),
    ({"insn_addr": np.array([0], dtype=np.uint64)}, "insn_addr", "0-d uint64"),
    ({"insn_addr": np.array(0, dtype=np.int64)}, "insn_addr", "0-d uint64"),
    ({"seg_addr": np.array([0x1000, 0x2000], dtype=np.int64)}, "seg_addr", "uint64"),
    ({"seg_1": np.ones(8, dtype=np.int8)}, "seg_1", "1-D uint8"),
    ({"seg_1": np.ones((2, 4), dtype=np.uint8)}, "seg_1", "1-D uint8"),
    ({"config": np.array(["a", "b"])}, "config", "0-d str"),
    ({"config": np.array(5)}, "config", "0-d str"),
])
def test_wrong_dtype_or_shape(tmp_path, changes, key, expected):
    err = _refused(tmp_path, **changes)
    assert err.key == key and expected in str(err)


def test_segment_count_mismatch(tmp_path):
    err = _refused(tmp_path, seg_1=None)
    assert err.key == "seg_1" and "2 segment(s)" in str(err) and "missing seg_1" in str(err)
    err = _refused(tmp_path, seg_2=np.zeros(4, dtype=np.uint8))
    assert err.key == "seg_2" and "unexpected seg_2" in str(err)


def test_overlapping_and_empty_segments(tmp_path):
    err = _refused(tmp_path, seg_addr=np.array([0x1000, 0x1008], dtype=np.uint64))
    assert "overlaps" in str(err) and "seg_0" in str(err) and "seg_1" in str(err)
    err = _refused(tmp_path, insn_addr=np.array(0x2004, dtype=np.uint64))
    assert "overlaps" in str(err) and "insn_addr" in str(err)
    err = _refused(tmp_path, seg_0=np.zeros(0, dtype=np.uint8))
    assert err.key == "seg_0" and "empty" in str(err)
    err = _refused(tmp_path, seg_addr=np.array([1 << 50, 0x2000], dtype=np.uint64))
    assert "2^48" in str(err)


def test_bad_config(tmp_path):
    err = _refused(tmp_path, config=np.array("{nope"))
    assert err.key == "config" and "not valid JSON" in str(err)
    err = _refused(tmp_path, config=np.array("[1]"))
    assert err.key == "config" and "JSON object" in str(err)
    bad = {**PYNQ.vta_dict(), "LOG_BLOCK": 9}
    err = _refused(tmp_path, config=np.array(json.dumps(bad)))
    assert err.key == "config" and "LOG_BLOCK=9" in str(err) and "[1, 6]" in str(err)
    assert err.__cause__.key == "LOG_BLOCK"


def test_pickled_arrays_are_refused(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, **_arrays(insns=np.array([{"a": 1}], dtype=object)))
    with pytest.raises(ImageError) as info:
        load_image(path)
    assert info.value.key == "insns" and "cannot be read" in str(info.value)


def test_non_npy_member(tmp_path):
    path = tmp_path / "odd.npz"
    np.savez(path, **_arrays())
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("readme.txt", "hi")
    with pytest.raises(ImageError, match="readme.txt"):
        load_image(path)


def test_bad_results(tmp_path):
    path = tmp_path / "r.npz"
    np.savez(path, seg_addr=np.zeros(0, dtype=np.uint64), stats=np.array("[]"))
    with pytest.raises(ImageError, match="stats must be a JSON object"):
        load_result(path)
    np.savez(path, seg_addr=np.zeros(0, dtype=np.uint64))
    with pytest.raises(ImageError, match="missing key 'stats'"):
        load_result(path)
    np.savez(path, seg_addr=np.zeros(0, dtype=np.uint64), stats=np.array("{}"),
             insns=np.zeros((1, 16), np.uint8))
    with pytest.raises(ImageError, match="unknown key"):
        load_result(path)


def test_constructor_checks():
    with pytest.raises(ImageError, match=r"\(N, 16\)"):
        ProgramImage(PYNQ, np.zeros((3, 15), dtype=np.uint8))
    with pytest.raises(ImageError, match="HwConfig"):
        ProgramImage(PYNQ.to_dict(), np.zeros((1, 16), dtype=np.uint8))  # type: ignore[arg-type]
    with pytest.raises(ImageError, match="insn_addr"):
        ProgramImage(PYNQ, np.zeros((1, 16), dtype=np.uint8), -16)
    with pytest.raises(ImageError, match="overlaps"):
        ProgramImage(PYNQ, np.zeros((1, 16), dtype=np.uint8), 0, [(0, b"ab"), (1, b"c")])
    img = ProgramImage(PYNQ, bytes(32))
    assert img.insns.shape == (2, 16) and img.segments == []
