"""The analytic resource model's coefficients, fitted to Yosys by bench/fpga_fit.py (do not edit by hand: re-run it).

Per family: per module class, LUT and FF as sums of coefficient x feature (hardware/fpga/model.py); DSPs per
int8 product and per ALU lane; LUTs per multiplier built without DSPs; one ALU lane on its own. META says what
they were fitted to and how close the model came on configs it was not fitted to.
"""

META = {
    "generator_sources": "970c6d4ded059e95",
    "yosys": "0.70.0.0.post1259",
    "fitted": "2026-11-25",
    "samples": {
        "xc7": {
            "train": [
                "b1k4-bus6",
                "b1k8-bus7",
                "b2k8-bus8",
                "pynq",
                "b2k16-bus7",
                "b4k4-bus5",
                "b4k8-bus9",
                "b1k32-bus7",
                "b1k16-bus8-small",
                "b2k4-bus6",
                "b1k8-bus6-big"
            ],
            "held_out": [
                "b2k8-bus7",
                "b2k16-bus6",
                "b1k4-bus8",
                "b4k4-bus7",
                "ultra96",
                "b1k32-bus8"
            ]
        },
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
        }
    },
    "accuracy": {
        "xc7": {
            "train": {
                "lut": 0.0159,
                "ff": 0.0126,
                "dsp": 0.0,
                "bram_exact": True,
                "configs": 11
            },
            "held_out": {
                "lut": 0.0122,
                "ff": 0.005,
                "dsp": 0.0,
                "bram_exact": True,
                "configs": 6
            }
        },
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
        }
    }
}

COEFFICIENTS = {
    "xc7": {
        "classes": {
            "arbiter": {
                "lut": {
                    "1": 286.7167,
                    "bus_x_extra": 0.6905,
                    "clients": 9.1472
                },
                "ff": {
                    "1": 3.0
                }
            },
            "compute": {
                "lut": {
                    "1": 61.48,
                    "acc_mux": 0.9981
                },
                "ff": {
                    "1": 4.0,
                    "engines": 1.0
                }
            },
            "fetch": {
                "lut": {
                    "1": 202.375,
                    "log_prefetch": 0.5625
                },
                "ff": {
                    "1": 161.0,
                    "log_prefetch": 1.0
                }
            },
            "fifo": {
                "lut": {
                    "1": 2.5663,
                    "log_depth": 4.3006
                },
                "ff": {
                    "1": 1.0,
                    "log_depth": 3.0
                }
            },
            "lanes": {
                "lut": {
                    "log_depth": 4.9161
                },
                "ff": {
                    "1": 1.0,
                    "log_depth": 3.0
                }
            },
            "load2d": {
                "lut": {
                    "1": 217.5943,
                    "addr_bits": 0.8973,
                    "burst_bits": 11.6146,
                    "data": 1.0023,
                    "padded": 88.1367
                },
                "ff": {
                    "1": 255.7879,
                    "addr_bits": 0.5352,
                    "burst_bits": 0.9065
                }
            },
            "loop": {
                "lut": {
                    "1": 182.9813,
                    "lanes": 447.0698,
                    "mul_lanes": 62.5444
                },
                "ff": {
                    "1": 85.3709,
                    "acc_bits": 0.9983,
                    "idx_bits": 4.5122
                }
            },
            "reader": {
                "lut": {
                    "1": 16.9744,
                    "mux": 1.0155,
                    "narrow": 61.7724
                },
                "ff": {
                    "1": 10.2286,
                    "buffer": 1.0015,
                    "held": 0.9934,
                    "narrow": 51.8107
                }
            },
            "sequencer": {
                "lut": {
                    "1": 17.6364,
                    "engines": 7.3636
                },
                "ff": {
                    "1": 3.0,
                    "engines": 1.0
                }
            },
            "store2d": {
                "lut": {
                    "1": 147.203,
                    "addr_bits": 2.8556,
                    "burst_bits": 6.1083
                },
                "ff": {
                    "1": 160.5072,
                    "addr_bits": 2.212,
                    "burst_bits": 2.091,
                    "log_outstanding": 1.8524
                }
            },
            "tags": {
                "lut": {
                    "log_depth": 3.0432
                },
                "ff": {
                    "1": 1.0,
                    "log_depth": 3.0
                }
            },
            "token": {
                "lut": {
                    "count_bits": 1.8253
                },
                "ff": {
                    "count_bits": 1.0
                }
            },
            "top": {
                "lut": {
                    "1": 325.7667,
                    "bypass": 0.9846
                },
                "ff": {
                    "1": 382.0
                }
            },
            "writer": {
                "lut": {
                    "1": 1.465,
                    "mux": 1.0252
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
            }
        }
    },
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
    }
}
