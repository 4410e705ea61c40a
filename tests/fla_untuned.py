"""FLA without its autotuning, for device runs short of time: Triton's autotuner keeps each kernel's first
configuration, so FLA compiles one per kernel instead of tuning at every new shape (minutes). FLA's results are
its kernels' results in any configuration; its times are then not comparable. Applied before FLA is imported, by
benchmarks/probe/cp_probe.py and, with KDAGEN_FLA_FIRST_CONFIG=1, by tests/gpu/test_fla_layers_gpu.py."""
from __future__ import annotations


def first_config_only() -> None:
    from triton.runtime import autotuner
    init = autotuner.Autotuner.__init__

    def first(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.configs = self.configs[:1]
    autotuner.Autotuner.__init__ = first
