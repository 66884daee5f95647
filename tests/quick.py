"""The quick subset: ``python3 -m pytest -m quick`` runs under a minute's worth of the suite (README.md says how
long it took on what) that still touches every layer, for a contributor's edit-test loop. CI always runs everything.

A test is quick when its module is listed whole in ``QUICK_MODULES`` and its name (the part after ``::``) starts
with none of the prefixes ``QUICK_EXCEPT`` leaves out of that module, or when its name starts with a prefix listed
for its module in ``QUICK_TESTS``. They are grouped by the layer they exercise; ``tests/test_repo.py`` checks that
every layer has some and that every listed name still selects a test. What is left out costs seconds per test (a
subprocess per case, a whole network, another preset of the same check) and runs in the full suite.
"""

from __future__ import annotations

import re

QUICK_MODULES: dict[str, tuple[str, ...]] = {
    "hw_config": ("test_hw_config.py", "test_isa_rules.py", "test_layout_oracle.py"),
    "simulator": ("test_golden.py", "test_semantics.py", "test_image.py", "test_conformance.py",
                  "test_latency_model.py", "test_program_check.py", "test_alu_ops.py"),
    "vta": ("test_isa.py", "test_runtime.py", "test_ops_smoke.py", "test_template_contract.py",
            "test_calibrate.py", "test_cli.py", "test_cli_refusals.py", "test_trace_and_demo.py",
            "test_clip_bounds.py", "test_rpc_server.py"),
    "host": ("test_host_loop_ir.py",),
    "graph_pack": ("test_graph_ir.py", "test_graph_pipeline.py", "test_onnx_frontend.py", "test_jit.py",
                   "test_digits_model.py", "test_hostile_inputs.py"),
    "tuning": ("test_records.py",),
    "repository": ("test_repo.py", "test_families_table.py"),
}

# module listed whole above -> prefixes of its tests left out of the quick subset
QUICK_EXCEPT: dict[str, tuple[str, ...]] = {
    # hypothesis compiles a kernel per example
    "test_host_loop_ir.py": ("test_conv2d_random_shapes_and_schedules_match_the_reference",),
    # a vta subprocess per case: one usage error, one misspelling and one region error stay quick
    "test_cli_refusals.py": (
        "test_a_region_op_that_matches_nothing_names_the_flag_and_the_closest_names[argv1",
        "test_a_region_op_that_matches_nothing_names_the_flag_and_the_closest_names[argv2",
        "test_a_region_op_that_matches_nothing_names_the_flag_and_the_closest_names[argv3",
        "test_a_region_op_that_matches_nothing_names_the_flag_and_the_closest_names[argv4",
        "test_a_misspelt_preset_or_model_gets_a_suggestion[argv1", "test_a_misspelt_preset_or_model_gets_a_suggestion[argv2",
        "test_a_misspelt_preset_or_model_gets_a_suggestion[argv3", "test_a_misspelt_preset_or_model_gets_a_suggestion[argv4",
        "test_a_usage_error_is_one_usage_line_then_the_error_last", "test_a_warning_is_one_line_once",
        "test_tuning_scripts_", "test_a_tuning_scripts_usage_error", "test_config_show_json_loads_back",
        "test_vta_version_is_the_installed_packages"),
    # a whole network twice, and vta subprocesses; the kernels' bit-identity stays quick
    "test_jit.py": ("test_a_network_with_avx2_host_kernels_gives_the_same_bits", "test_a_bad_host_isa_is_refused"),
    # the same checks on the other presets
    "test_template_contract.py": ("test_the_conv_default_config_is_its_definitions[batch4]",
                                  "test_the_conv_default_config_is_its_definitions[block32]",
                                  "test_the_conv_default_config_is_its_definitions[ultra96]"),
    "test_isa.py": tuple(f"test_random_round_trip[{p}]" for p in ("batch4", "block32", "de10nano", "sim", "ultra96",
                                                                  "zcu104")),
    # scipy imported for one comparison; fits and RPC boards of seconds each (the CLI's fit and the preset stay)
    "test_calibrate.py": ("test_spearman_handles_ties", "test_fit_recovers_known_parameters",
                          "test_fit_keeps_the_keys", "test_records_of_simulated_boards_through_rpc"),
    # random streams (the golden programs' and the templates' stay)
    "test_latency_model.py": ("test_retimer_reproduces_the_solo_bus_schedule_on_random_streams",),
    # mutated logs and ONNX files (mutated images and configs stay)
    "test_hostile_inputs.py": ("test_mutated_inputs_end_in_success_or_a_project_error[log]",
                               "test_mutated_inputs_end_in_success_or_a_project_error[onnx]"),
}

QUICK_TESTS: dict[str, dict[str, tuple[str, ...]]] = {
    "hardware": {"test_fpga_estimate.py": ("test_parts_table", "test_an_unknown_part", "test_estimate_refuses",
                                           "test_block_ram_packing", "test_a_two_entry_memory",
                                           "test_a_part_with_exactly_the_dsp",
                                           "test_the_model_is_within_tolerance_of_yosys")},
    "simulator": {"test_kernel_paths.py": ("test_gemm_kernel_follows", "test_gemm_runs_follow",
                                           "test_amx_is_chosen_where_the_cpu_has_it"),
                  "test_threads.py": ("test_random_gemms_identical",),
                  "test_replay.py": ("test_replayed_program_with_many_streams",)},
    "vta": {"test_templates.py": ("test_alu_epilogue_ops",),
            "test_capabilities.py": ("test_presets_name", "test_what_the_hardware_lacks", "test_strict_simulation"),
            "test_pynq_device.py": ("test_missing_or_mismatched_bitstreams",)},
    "graph_pack": {"test_zoo.py": ("test_calibration_", "test_names_and_aliases", "test_bad_arguments"),
                   "test_networks.py": ("test_vta_run_cli_rejects_unknown_model",),
                   "test_onnx_families.py": ("test_family_runs_on_the_host_as_onnxruntime",
                                             "test_a_planted_unsupported_op", "test_a_dynamic_input"),
                   "test_regions.py": ("test_per_channel_scales_improve", "test_explain_names_a_capability",
                                       "test_python_api_twice")},
    "tuning": {"test_tuners.py": ("test_bad_log_lines_are_skipped", "test_load_history"),
               "test_tuning_flow.py": ("test_timing_only_measures_the_same_cycles",)},
}


def has_quick_tests(module: str) -> bool:
    """Whether ``module`` (a file name) holds any test of the quick subset (``-m quick`` collects no other)."""
    return any(module in modules for modules in QUICK_MODULES.values()) or any(module in per
                                                                               for per in QUICK_TESTS.values())


def only_quick(markexpr: str) -> bool:
    """Whether ``-m markexpr`` selects only quick tests: ``quick``, or ``quick and ...``."""
    return re.fullmatch(r"\s*quick(\s+and\s+.*)?", markexpr or "", re.DOTALL) is not None


def is_quick(module: str, name: str) -> bool:
    """Whether the test ``name`` (without its module) of ``module`` (a file name) is in the quick subset."""
    if any(module in modules for modules in QUICK_MODULES.values()):
        return not name.startswith(QUICK_EXCEPT.get(module, ()))
    return any(name.startswith(QUICK_TESTS[layer].get(module, ())) for layer in QUICK_TESTS)
