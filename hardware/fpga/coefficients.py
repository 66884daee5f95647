"""The analytic resource model's coefficients, fitted to Yosys by bench/fpga_fit.py (do not edit by hand: re-run it).

Per family: per module class, LUT and FF as sums of coefficient x feature (hardware/fpga/model.py); DSPs per
int8 product and per ALU lane; LUTs per multiplier built without DSPs; one ALU lane on its own. META says what
they were fitted to and how close the model came on configs it was not fitted to.
"""

META = {
    "generator_sources": {
        "xcup": "970c6d4ded059e95",
        "xc7": "0b6a673fe913706a"
    },
    "yosys": "0.70.0.0.post1259",
    "fitted": {
        "xcup": "2026-11-25",
        "xc7": "2026-12-07"
    },
    "samples": {
        "xcup": {
            "train": [
                "b1k4-bus6",
                "b1k8-bus7",
                "b2k8-bus8",
                "pynq",
                "b2k16-bus7",
                "b4k4-bus5",
                "b4k8-bus9",
                "b1k32-bus7"
            ],
            "held_out": [
                "ultra96",
                "b2k8-bus7",
                "b1k4-bus8",
                "b4k4-bus7",
                "b1k32-bus8"
            ]
        },
        "xc7": {
            "train": [
                "pynq",
                "pynq-d9",
                "b1k4-bus6",
                "b1k4-bus6-d9",
                "b4k4-bus5",
                "b4k4-bus5-d9"
            ],
            "held_out": [
                "tiny",
                "tiny-d9"
            ]
        }
    },
    "accuracy": {
        "xcup": {
            "train": {
                "lut": 0.0078,
                "ff": 0.007,
                "dsp": 0.0,
                "bram_exact": True,
                "configs": 8
            },
            "held_out": {
                "lut": 0.0131,
                "ff": 0.0055,
                "dsp": 0.0,
                "bram_exact": True,
                "configs": 5
            }
        },
        "xc7": {
            "train": {
                "lut": 0.0037,
                "ff": 0.0044,
                "dsp": 0.0,
                "bram_exact": True,
                "configs": 6
            },
            "held_out": {
                "lut": 0.0128,
                "ff": 0.0049,
                "dsp": 0.0,
                "bram_exact": True,
                "configs": 2
            }
        }
    }
}

COEFFICIENTS = {
    "xcup": {
        "classes": {
            "arbiter": {
                "lut": {
                    "1": 136.4877,
                    "bus_x_extra": 0.6107,
                    "clients": 35.3354
                },
                "ff": {
                    "1": 3.0
                }
            },
            "compute": {
                "lut": {
                    "1": 60.672,
                    "acc_mux": 0.9993
                },
                "ff": {
                    "1": 4.0,
                    "engines": 1.0
                }
            },
            "fetch": {
                "lut": {
                    "1": 202.7826,
                    "log_prefetch": 0.5217
                },
                "ff": {
                    "1": 161.0,
                    "log_prefetch": 1.0
                }
            },
            "fifo": {
                "lut": {
                    "1": 2.5759,
                    "log_depth": 4.2981
                },
                "ff": {
                    "1": 1.0,
                    "log_depth": 3.0
                }
            },
            "lanes": {
                "lut": {
                    "log_depth": 4.9985
                },
                "ff": {
                    "1": 1.0,
                    "log_depth": 3.0
                }
            },
            "load2d": {
                "lut": {
                    "1": 305.1478,
                    "burst_bits": 1.1073,
                    "data": 1.0025,
                    "padded": 85.1536
                },
                "ff": {
                    "1": 266.7778
                }
            },
            "loop": {
                "lut": {
                    "1": 86.0773,
                    "lanes": 531.1079,
                    "macs": 29.2802,
                    "mul_lanes": 63.3587
                },
                "ff": {
                    "1": 80.1099,
                    "acc_bits": 0.9953,
                    "idx_bits": 4.7083
                }
            },
            "reader": {
                "lut": {
                    "1": 17.1429,
                    "mux": 1.0172,
                    "narrow": 63.6446
                },
                "ff": {
                    "1": 10.383,
                    "buffer": 1.0015,
                    "held": 0.9938,
                    "narrow": 51.617
                }
            },
            "sequencer": {
                "lut": {
                    "1": 17.625,
                    "engines": 7.375
                },
                "ff": {
                    "1": 3.0,
                    "engines": 1.0
                }
            },
            "store2d": {
                "lut": {
                    "1": 199.1184,
                    "addr_bits": 1.7105,
                    "burst_bits": 0.2763
                },
                "ff": {
                    "1": 172.7048,
                    "addr_bits": 1.6438,
                    "burst_bits": 0.598,
                    "log_outstanding": 2.3028
                }
            },
            "tags": {
                "lut": {
                    "log_depth": 3.0587
                },
                "ff": {
                    "1": 1.0,
                    "log_depth": 3.0
                }
            },
            "token": {
                "lut": {
                    "count_bits": 1.7615
                },
                "ff": {
                    "count_bits": 1.0
                }
            },
            "top": {
                "lut": {
                    "1": 330.8497,
                    "bypass": 0.9912
                },
                "ff": {
                    "1": 382.0
                }
            },
            "writer": {
                "lut": {
                    "1": 1.76,
                    "mux": 1.0225
                },
                "ff": {
                    "1": 0.0,
                    "beats_log": 1.0
                }
            }
        },
        "dsp": {
            "per_mac": 1,
            "per_alu_lane": 3
        },
        "alu_lane": {
            "mul": {
                "lut": 532,
                "ff": 0,
                "dsp": 3
            },
            "no_mul": {
                "lut": 460,
                "ff": 0,
                "dsp": 0
            }
        },
        "fallback": {
            "lut_per_mac": 168.4,
            "lut_per_alu_lane": 1066.4,
            "samples": {
                "b1k4-bus6": {
                    "products": 16,
                    "lanes": 4,
                    "extra_lut": 6960
                },
                "b2k8-bus8": {
                    "products": 128,
                    "lanes": 16,
                    "extra_lut": 38618
                }
            }
        }
    },
    "xc7": {
        "design": 2,
        "classes": {
            "arbiter": {
                "lut": {
                    "1": 589.8333,
                    "bus_x_extra": 0.1406
                },
                "ff": {
                    "1": 3.0
                }
            },
            "axi_lite": {
                "lut": {
                    "1": 150.0
                },
                "ff": {
                    "1": 40.0
                }
            },
            "axi_master": {
                "lut": {
                    "1": 26.0
                },
                "ff": {
                    "1": 23.0
                }
            },
            "compute": {
                "lut": {
                    "1": 57.6667,
                    "acc_mux": 1.0026
                },
                "ff": {
                    "1": 4.0,
                    "engines": 1.0
                }
            },
            "counters": {
                "lut": {
                    "1": 1388.9615,
                    "uop_bits": 62.3462
                },
                "ff": {
                    "1": 1017.3462,
                    "uop_bits": 13.8846
                }
            },
            "fetch": {
                "lut": {
                    "1": 204.3333
                },
                "ff": {
                    "1": 161.0,
                    "log_prefetch": 1.0
                }
            },
            "fifo": {
                "lut": {
                    "1": 3.6867,
                    "log_depth": 4.1537
                },
                "ff": {
                    "1": 1.0,
                    "log_depth": 3.0
                }
            },
            "lanes": {
                "lut": {
                    "log_depth": 4.6667
                },
                "ff": {
                    "log_depth": 3.1667
                }
            },
            "load2d": {
                "lut": {
                    "burst_bits": 46.5516,
                    "data": 0.9905,
                    "padded": 51.262
                },
                "ff": {
                    "burst_bits": 37.1224
                }
            },
            "loop": {
                "lut": {
                    "1": 261.1667,
                    "fwd_bits": 0.6179,
                    "lanes": 586.9896,
                    "mul_lanes": 7.8952,
                    "tree_regs": 5.769
                },
                "ff": {
                    "1": 62.9343,
                    "acc_bits": 3.0124,
                    "idx_bits": 5.7348,
                    "pipe_bits": 0.5146
                }
            },
            "reader": {
                "lut": {
                    "1": 49.3846,
                    "mux": 1.9567
                },
                "ff": {
                    "1": 14.2095,
                    "buffer": 1.0043,
                    "held": 1.8092
                }
            },
            "sequencer": {
                "lut": {
                    "1": 17.3333,
                    "engines": 7.6667
                },
                "ff": {
                    "1": 3.0,
                    "engines": 1.0
                }
            },
            "skid": {
                "lut": {
                    "1": 2.9345,
                    "width": 1.0053
                },
                "ff": {
                    "width": 2.0094
                }
            },
            "store2d": {
                "lut": {
                    "addr_bits": 2.2857,
                    "burst_bits": 26.6259
                },
                "ff": {
                    "addr_bits": 1.0,
                    "burst_bits": 21.5714,
                    "log_outstanding": 6.0
                }
            },
            "token": {
                "lut": {
                    "1": 3.0,
                    "count_bits": 1.0
                },
                "ff": {
                    "count_bits": 1.0
                }
            },
            "top": {
                "lut": {
                    "1": 579.6667
                },
                "ff": {
                    "1": 320.0
                }
            },
            "write_arbiter": {
                "lut": {
                    "1": 3.0
                },
                "ff": {
                    "1": 4.0
                }
            },
            "writer": {
                "lut": {
                    "1": 23.5,
                    "mux": 1.0469
                },
                "ff": {
                    "1": 4.0,
                    "beats_log": 1.0
                }
            }
        },
        "dsp": {
            "per_mac": 1,
            "per_alu_lane": 3
        },
        "alu_lane": {
            "mul": {
                "lut": 430,
                "ff": 0,
                "dsp": 3
            },
            "no_mul": {
                "lut": 460,
                "ff": 0,
                "dsp": 0
            }
        },
        "fallback": {
            "lut_per_mac": 201.3,
            "lut_per_alu_lane": 1121.0,
            "samples": {
                "b1k4-bus6": {
                    "products": 16,
                    "lanes": 4,
                    "extra_lut": 7704
                },
                "b2k8-bus8": {
                    "products": 128,
                    "lanes": 16,
                    "extra_lut": 43696
                }
            },
            "fitted": "2026-11-25"
        },
        "packing": {
            "lut_per_pair": {
                "4": 70.5,
                "9": 16.62
            },
            "ff_per_pair": {
                "4": 0.0,
                "9": 1.0
            },
            "samples": {
                "tiny": {
                    "depth": 4,
                    "pairs": 8,
                    "lut_per_pair": 70.5,
                    "ff_per_pair": 0.0,
                    "dsp": [
                        8,
                        16
                    ]
                },
                "tiny-d9": {
                    "depth": 9,
                    "pairs": 8,
                    "lut_per_pair": 17.75,
                    "ff_per_pair": 17.0,
                    "dsp": [
                        8,
                        16
                    ]
                },
                "pynq-d9": {
                    "depth": 9,
                    "pairs": 128,
                    "lut_per_pair": 16.55,
                    "ff_per_pair": 0.0,
                    "dsp": [
                        128,
                        256
                    ]
                }
            }
        }
    }
}
