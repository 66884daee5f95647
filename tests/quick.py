"""The quick subset: ``python3 -m pytest -m quick`` runs a few minutes' worth of the suite that still touches
every layer, for a contributor's edit-test loop. CI always runs everything.

A test is quick when its module is listed whole in ``QUICK_MODULES`` or its name (the part after ``::``)
starts with a prefix listed for its module in ``QUICK_TESTS``. Both are grouped by the layer they exercise;
``tests/test_repo.py`` checks that every layer has some and that every listed name still selects a test.
"""

from __future__ import annotations

QUICK_MODULES: dict[str, tuple[str, ...]] = {
    "hw_config": ("test_hw_config.py", "test_isa_rules.py", "test_layout_oracle.py"),
    "simulator": ("test_golden.py", "test_semantics.py", "test_image.py", "test_conformance.py",
                  "test_latency_model.py", "test_program_check.py", "test_alu_ops.py"),
    "vta": ("test_isa.py", "test_runtime.py", "test_ops_smoke.py", "test_template_contract.py",
            "test_calibrate.py", "test_cli.py", "test_cli_refusals.py", "test_trace_and_demo.py",
            "test_clip_bounds.py", "test_rpc_server.py"),
    "graph_pack": ("test_graph_ir.py", "test_graph_pipeline.py", "test_onnx_frontend.py", "test_jit.py",
                   "test_digits_model.py", "test_hostile_inputs.py"),
    "tuning": ("test_records.py",),
    "repository": ("test_repo.py", "test_extras.py"),
}

QUICK_TESTS: dict[str, dict[str, tuple[str, ...]]] = {
    "simulator": {"test_kernel_paths.py": ("test_gemm_kernel_follows", "test_gemm_runs_follow"),
                  "test_c_sanitizers.py": ("test_vta_sim_compiles_as_pedantic_c99",),
                  "test_threads.py": ("test_random_gemms_identical",),
                  "test_replay.py": ("test_replayed_program_with_many_streams",)},
    "vta": {"test_templates.py": ("test_alu_epilogue_ops",),
            "test_capabilities.py": ("test_presets_name", "test_what_the_hardware_lacks", "test_strict_simulation"),
            "test_sim_board.py": ("test_registers_behave_as_vta_hls_blocks",),
            "test_pynq_device.py": ("test_missing_or_mismatched_bitstreams",)},
    "graph_pack": {"test_zoo.py": ("test_calibration_", "test_names_and_aliases", "test_bad_arguments"),
                   "test_networks.py": ("test_vta_run_cli_rejects_unknown_model",)},
    "tuning": {"test_tuners.py": ("test_bad_log_lines_are_skipped", "test_load_history"),
               "test_tuning_flow.py": ("test_timing_only_measures_the_same_cycles",)},
}


def is_quick(module: str, name: str) -> bool:
    """Whether the test ``name`` (without its module) of ``module`` (a file name) is in the quick subset."""
    if any(module in modules for modules in QUICK_MODULES.values()):
        return True
    return any(name.startswith(QUICK_TESTS[layer].get(module, ())) for layer in QUICK_TESTS)
