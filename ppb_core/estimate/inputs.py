"""A run config and every file it names, read and validated before any work.

`ppb_core.config.run.load_run_config` validates the run config and the model files it names; the
measured files it names (a census per model, the time calibration, the measured stage peaks) are
read by the packages that use them, above the config. `load_run` reads them all at once, so a bad
census or calibration is one InputError naming that file before any stage runs, not an error
after the work that needed it.
"""

from __future__ import annotations

from pathlib import Path

from ppb_core.census.record import read_census
from ppb_core.config.run import RunConfig, load_run_config
from ppb_core.memory.calibration import read_measured_peaks
from ppb_core.timing.calibration import read_calibration


def check_named_files(run: RunConfig) -> None:
    """Read every measured file *run* names (each raises InputError naming itself when bad)."""
    base = Path(run.base_dir)
    for sub in run.models:
        if sub.census is not None:  # (a vision tower's census is refused when the run config is read)
            read_census(base / sub.census)
    if run.timing.calibration is not None:
        read_calibration(base / run.timing.calibration)
    if run.memory.calibration is not None:
        read_measured_peaks(base / run.memory.calibration, run.parallel.pp)


def load_run(path: str | Path) -> RunConfig:
    """The validated run config at *path*, every file it names read and validated too."""
    run = load_run_config(path)
    check_named_files(run)
    return run
