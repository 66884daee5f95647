"""Hardware configs: presets, VTA's derived values, overrides and every refusal (pure tests)."""

import json

import pytest

from hw_config import PLATFORM_KEYS, VTA_KEYS, ConfigError, HwConfig, config_from_dict, load_config, presets


def test_every_preset_loads():
    names = presets()
    assert {"pynq", "sim", "ultra96", "zcu104", "de10nano"} <= set(names)
    for name in names:
        cfg = load_config(name)
        assert isinstance(cfg, HwConfig)
        assert cfg.model == f"{cfg.TARGET}_{cfg.bitstream}"
        assert all(f.used_bits <= f.total_bits for f in cfg.insn_formats.values())


def test_default_is_pynq():
    assert load_config() == load_config("pynq")


def test_pynq_derived_values_match_vta():
    """The numbers of vta-notes 1.2 (VTA's Environment and hw_spec_const.h for the default config)."""
    c = load_config("pynq")
    assert (c.INP_WIDTH, c.WGT_WIDTH, c.ACC_WIDTH, c.OUT_WIDTH) == (8, 8, 32, 8)
    assert (c.BATCH, c.BLOCK_IN, c.BLOCK_OUT) == (1, 16, 16)
    assert (c.UOP_BUFF_SIZE, c.INP_BUFF_SIZE, c.WGT_BUFF_SIZE, c.ACC_BUFF_SIZE, c.OUT_BUFF_SIZE) == (
        32768, 32768, 262144, 131072, 32768)
    assert c.LOG_OUT_BUFF_SIZE == 15
    assert (c.INP_ELEM_BITS, c.WGT_ELEM_BITS, c.ACC_ELEM_BITS, c.OUT_ELEM_BITS) == (128, 2048, 512, 128)
    assert (c.INP_ELEM_BYTES, c.WGT_ELEM_BYTES, c.ACC_ELEM_BYTES, c.OUT_ELEM_BYTES) == (16, 256, 64, 16)
    depths = (c.UOP_BUFF_DEPTH, c.INP_BUFF_DEPTH, c.WGT_BUFF_DEPTH, c.ACC_BUFF_DEPTH)
    assert depths == (8192, 2048, 1024, 2048)
    assert (c.LOG_UOP_BUFF_DEPTH, c.LOG_INP_BUFF_DEPTH, c.LOG_WGT_BUFF_DEPTH, c.LOG_ACC_BUFF_DEPTH) == (
        13, 11, 10, 11)
    assert (c.inp_dtype, c.wgt_dtype, c.acc_dtype, c.out_dtype) == ("int8", "int8", "int32", "int8")
    assert c.bitstream == c.BITSTREAM == "1x16_i8w8a32_15_15_18_17"
    assert c.model == c.MODEL == "pynq_1x16_i8w8a32_15_15_18_17"
    assert c.BUS_WIDTH == 64
    ratios = (c.INP_MAT_AXI_RATIO, c.WGT_MAT_AXI_RATIO, c.ACC_MAT_AXI_RATIO, c.OUT_MAT_AXI_RATIO)
    assert ratios == (2, 32, 8, 2)
    assert c.elem_bytes("UOP") == 4 and c.elem_bytes("ACC_8BIT") == 16 and c.elem_bytes(3) == 64
    assert c.derived()["bitstream"] == "1x16_i8w8a32_15_15_18_17"


def test_load_by_path_and_overrides(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(load_config("pynq").to_json())
    assert load_config(str(path)) == load_config("pynq")
    assert load_config(path) == load_config("pynq")
    big = load_config(path, LOG_BLOCK=5)
    assert big.BLOCK_IN == 32 and big.bitstream == "1x32_i8w8a32_15_15_18_17"
    assert load_config("pynq", LOG_BATCH=1).BATCH == 2
    assert load_config(load_config("pynq"), LOG_BATCH=1) == load_config("pynq").replace(LOG_BATCH=1)
    cfg = load_config("pynq")
    assert config_from_dict(json.loads(cfg.to_json())) == cfg


def test_vta_keys_only_get_platform_defaults_of_target():
    vta_only = load_config("ultra96").vta_dict()
    assert set(vta_only) == set(VTA_KEYS)
    cfg = load_config(vta_only)
    ultra96 = load_config("ultra96")
    for key in PLATFORM_KEYS:
        assert getattr(cfg, key) == getattr(ultra96, key)
    assert cfg.LOG_BUS_WIDTH == 7 and cfg.CLOCK_MHZ == 333
    # tsim has no preset of its own: it borrows sim's platform.
    tsim = load_config({**vta_only, "TARGET": "tsim"})
    assert tsim.LOG_BUS_WIDTH == load_config("sim").LOG_BUS_WIDTH


def _refused(*args, **overrides) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(*args, **overrides)
    return info.value


@pytest.mark.parametrize("key, value, allowed", [
    ("LOG_BLOCK", "4", "integer"),
    ("LOG_BLOCK", 4.0, "integer"),
    ("LOG_BLOCK", True, "integer"),
    ("LOG_BATCH", 9, "[0, 4]"),
    ("LOG_BLOCK", 0, "[1, 6]"),
    ("DMA_BURST_BEATS", 0, "[1, 4096]"),
    ("LOG_INP_WIDTH", 4, "int8"),
    ("LOG_WGT_WIDTH", 2, "int8"),
    ("LOG_ACC_WIDTH", 4, "int32"),
    ("TARGET", "vck190", "pynq"),
    ("TARGET", 3, "pynq"),
    ("HW_VER", "2", "0.0.2"),
    ("HW_VER", 2, "0.0.2"),
    ("CLOCK_MHZ", 0, "[1, 5000]"),
    ("CLOCK_MHZ", "fast", "[1, 5000]"),
    ("DESCRIPTION", 5, "string"),
])
def test_refused_values_name_key_value_and_allowed(key, value, allowed):
    err = _refused("pynq", **{key: value})
    assert err.key == key
    assert key in str(err) and repr(value) in str(err) and allowed in str(err)


def test_unknown_key():
    err = _refused("pynq", LOG_BLOK=4)
    assert err.key == "LOG_BLOK"
    assert "LOG_BLOK" in str(err) and "LOG_BLOCK" in str(err)  # names the key and lists the allowed ones


def test_missing_vta_key():
    data = load_config("pynq").vta_dict()
    del data["LOG_BATCH"]
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert info.value.key == "LOG_BATCH" and "LOG_BATCH" in str(info.value)


def test_bad_target_in_dict_of_any_type():
    data = load_config("pynq").vta_dict()
    for bad in ("fpga", ["pynq"], None):
        with pytest.raises(ConfigError) as info:
            config_from_dict({**data, "TARGET": bad})
        assert info.value.key == "TARGET" and repr(bad) in str(info.value)


@pytest.mark.parametrize(("key", "tile_log"), [("LOG_WGT_BUFF_SIZE", 8), ("LOG_ACC_BUFF_SIZE", 6),
                                             ("LOG_INP_BUFF_SIZE", 4), ("LOG_UOP_BUFF_SIZE", 2)])
def test_buffer_of_one_tile_is_refused_and_of_two_works(key, tile_log):
    """pynq's tiles: weight 16x16 int8 = 2^8 bytes, accumulator 16 int32 = 2^6, input 16 int8 = 2^4, uop 2^2.
    A one-tile buffer would give its SRAM index fields 0 bits; two tiles is the smallest that encodes."""
    for log in (tile_log, tile_log - 1) if key == "LOG_WGT_BUFF_SIZE" else (tile_log,):
        err = _refused("pynq", **{key: log})
        assert err.key == key and f"{key}={log}" in str(err) and f"{key} >= {tile_log + 1}" in str(err)
    smallest = {"LOG_WGT_BUFF_SIZE": 9, "LOG_ACC_BUFF_SIZE": 7, "LOG_INP_BUFF_SIZE": 5, "LOG_UOP_BUFF_SIZE": 3}
    cfg = load_config("pynq", **smallest)
    assert (cfg.WGT_BUFF_DEPTH, cfg.ACC_BUFF_DEPTH, cfg.INP_BUFF_DEPTH, cfg.UOP_BUFF_DEPTH) == (2, 2, 2, 2)
    assert all(f.width > 0 for fmt in cfg.insn_formats.values() for f in fmt.fields)


def test_smallest_buffers_run_a_gemm_bit_exactly():
    from vta.cli import main
    sets = ["--set", "LOG_WGT_BUFF_SIZE=9", "--set", "LOG_ACC_BUFF_SIZE=7", "--set", "LOG_INP_BUFF_SIZE=5",
            "--set", "LOG_UOP_BUFF_SIZE=3"]
    assert main(["demo", *sets]) == 0   # the demo checks its output against numpy and fails otherwise


@pytest.mark.parametrize(("text", "message"), [("[" * 100_000 + "]" * 100_000, "nested too deeply"),
                                               ('{"LOG_BLOCK": ' + "9" * 5000 + "}", "not valid JSON"),
                                               ("{" + " " * (2 << 20) + "}", "a config file is at most")])
def test_hostile_config_files_name_the_file(tmp_path, text, message):
    path = tmp_path / "hostile.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(str(path))
    assert str(path) in str(info.value)


def test_depth_over_16_bits():
    err = _refused("pynq", LOG_INP_BUFF_SIZE=21)  # 2^17 input entries
    assert err.key == "LOG_INP_BUFF_SIZE"
    assert "21" in str(err) and "16 bits" in str(err) and "LOG_INP_BUFF_SIZE <= 20" in str(err)


@pytest.mark.parametrize("key, value", [
    ("LOG_UOP_BUFF_SIZE", 16),  # uop_bgn/uop_end push iter_in out of the first word
    ("LOG_ACC_BUFF_SIZE", 18),  # ALU factors no longer fit the second word
    ("LOG_INP_BUFF_SIZE", 16),  # GEMM factors no longer fit the second word
    ("LOG_WGT_BUFF_SIZE", 19),
])
def test_fields_not_fitting_the_instruction(key, value):
    err = _refused("pynq", **{key: value})
    assert err.key == key
    assert "128-bit" in str(err) and str(value) in str(err)


def test_uop_over_32_bits():
    # Keeps GEMM and ALU within 128 bits, but dst(11) + src(11) + wgt(11) needs 33 bits.
    err = _refused("pynq", LOG_INP_BUFF_SIZE=14, LOG_WGT_BUFF_SIZE=19)
    assert err.key == "LOG_WGT_BUFF_SIZE"
    assert "32-bit micro-op" in str(err) and "19" in str(err)


def test_bad_json_file(tmp_path):
    for content in ("{not json", "[1, 2]", "\udcff"):
        path = tmp_path / "bad.json"
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
        err = _refused(str(path))
        assert str(path) in str(err)
    assert "JSON" in str(_refused(str(tmp_path / "bad.json")))


def test_unknown_preset_or_path():
    err = _refused("pynq2")
    assert "pynq2" in str(err) and "pynq" in str(err)


def test_config_is_immutable():
    cfg = load_config("pynq")
    with pytest.raises(AttributeError):
        cfg.LOG_BLOCK = 5  # type: ignore[misc]


@pytest.mark.parametrize(("preset", "fetch", "compute", "mem"), [
    ("pynq", 0x43C00000, 0x43C02000, 512), ("ultra96", 0xA0000000, 0xA0002000, 2048),
    ("zcu104", 0xA0000000, 0xA0002000, 2048), ("de10nano", 0xFF220000, 0xFF222000, 1024)])
def test_board_address_maps_follow_vta_pkg_config(preset, fetch, compute, mem):
    """VTA's pkg_config.py: fetch/load/compute/store register blocks 0x1000 apart from the platform's base."""
    cfg = load_config(preset)
    assert (cfg.mmio_address("fetch"), cfg.mmio_address("compute"), cfg.BOARD_MEM_MB) == (fetch, compute, mem)
    assert cfg.mmio_address("store") - cfg.mmio_address("fetch") == 3 * 0x1000


def test_board_keys_do_not_change_the_fingerprint_and_accept_hex_strings():
    cfg = load_config("pynq")
    moved = load_config("pynq", MMIO_BASE="0xA0000000", COHERENT=False, BOARD_MEM_MB=1024)
    assert moved.MMIO_BASE == 0xA0000000 and moved.fingerprint == cfg.fingerprint   # same programs, same timing
    assert load_config(moved.to_dict()) == moved   # round trip
    only_vta = {k: v for k, v in cfg.to_dict().items() if k in VTA_KEYS}
    assert load_config({**only_vta, "TARGET": "ultra96"}).MMIO_BASE == 0xA0000000   # from the target's preset
    for key, value, allowed in (("MMIO_BASE", "0xZZ", "hex string"), ("MMIO_BASE", 0x43C00010, "page-aligned"),
                                ("COHERENT", "yes", "true or false"), ("BOARD_MEM_MB", 0, "MiB of board DRAM")):
        err = _refused("pynq", **{key: value})
        assert err.key == key and allowed in str(err)


@pytest.mark.parametrize("name, overrides, expected", [
    # VTA's names (TARGET and the bitstream's fields) for the presets' own designs, unchanged
    ("pynq", {}, "pynq_1x16_i8w8a32_15_15_18_17"),
    ("ultra96", {}, "ultra96_1x16_i8w8a32_15_15_18_17"),
    ("sim", {}, "sim_1x16_i8w8a32_15_15_18_17"),
    # a bitstream field that differs is in VTA's name already; the timing fields follow, against the TARGET's preset
    ("pynq", {"LOG_WGT_BUFF_SIZE": 17}, "pynq_1x16_i8w8a32_15_15_17_17"),
    ("pynq", {"LOG_WGT_BUFF_SIZE": 17, "LOG_BUS_WIDTH": 7}, "pynq_1x16_i8w8a32_15_15_17_17_bus128"),
    ("pynq", {"LOG_BUS_WIDTH": 5, "CLOCK_MHZ": 150}, "pynq_1x16_i8w8a32_15_15_18_17_bus32_150MHz"),
    ("pynq", {"INSN_QUEUE_DEPTH": 256, "TOKEN_QUEUE_DEPTH": 4}, "pynq_1x16_i8w8a32_15_15_18_17_iq256_tq4"),
    ("pynq", {"DRAM_LATENCY": 64, "DMA_BURST_BEATS": 8, "DMA_BURST_GAP": 0},
     "pynq_1x16_i8w8a32_15_15_18_17_dram64_burst8_gap0"),
    ("pynq", {"GEMM_II": 2, "ALU_II": 1, "COMPUTE_LATENCY": 8}, "pynq_1x16_i8w8a32_15_15_18_17_gemmii2_aluii1_clat8"),
    ("batch4", {}, "pynq_4x16_i8w8a32_15_17_18_19_bus128"),
    ("ultra96", {"LOG_BUS_WIDTH": 6}, "ultra96_1x16_i8w8a32_15_15_18_17_bus64"),
    # the board model: the preset's design without the preset's, and a calibration of its own
    ("pynq", dict.fromkeys(("LAUNCH_US", "HOST_INSN_NS", "HOST_UOP_NS", "CACHE_NS_PER_BYTE", "DMA_ROW_CYCLES",
                            "COMPUTE_LOOP_CYCLES"), 0.0) | {"DMA_EFFICIENCY": 1.0},
     "pynq_1x16_i8w8a32_15_15_18_17_noboard"),
])
def test_a_configs_name_carries_every_timing_field_that_differs_from_its_targets_preset(name, overrides, expected):
    cfg = load_config(name, **overrides)
    assert cfg.name == expected
    assert cfg.model == f"{cfg.TARGET}_{cfg.bitstream}"   # VTA's model and bitstream strings are not renamed


def test_two_designs_never_share_a_name():
    """Every single change of a DSE axis and the board model's: a different fingerprint is a different name."""
    base = load_config("pynq")
    variants = [base, base.replace(LAUNCH_US=50.0), base.replace(LAUNCH_US=60.0)]
    for key, values in {"LOG_BATCH": [1], "LOG_BLOCK": [5], "LOG_UOP_BUFF_SIZE": [13], "LOG_INP_BUFF_SIZE": [14],
                        "LOG_WGT_BUFF_SIZE": [17], "LOG_ACC_BUFF_SIZE": [16], "LOG_BUS_WIDTH": [5, 7],
                        "CLOCK_MHZ": [150, 200], "INSN_QUEUE_DEPTH": [256], "TOKEN_QUEUE_DEPTH": [4]}.items():
        variants += [load_config("pynq", **{key: v}) for v in values]
    by_name: dict[str, str] = {}
    for cfg in variants:
        assert by_name.setdefault(cfg.name, cfg.fingerprint) == cfg.fingerprint, cfg.name
    assert len(by_name) == len(variants)
    own = base.replace(LAUNCH_US=50.0)   # a calibration of its own: a short hash of its board model's keys
    assert own.name.startswith("pynq_1x16_i8w8a32_15_15_18_17_board-") and len(own.name.split("-")[-1]) == 6
