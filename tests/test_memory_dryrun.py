"""MindFormers' dry-run memory reports as measured stage peaks (ppb_core.memory.dryrun).

The samples are written by hand in the formats MindSpore prints
(`AscendDynamicMemAdapter::DevMemStatistics`, whole MB of 2**20 bytes) and MindFormers'
pipeline-balance tool reads (toolkit/pipeline_balance/readme.md and utils/config.py
`memory_parser`, mindformers 6be67890).
"""

from __future__ import annotations

import pytest
import yaml
from test_memory_runs import DENSE

from ppb_core.config.run import load_run_config
from ppb_core.errors import InputError
from ppb_core.memory.calibration import parse_measured_peaks
from ppb_core.memory.model import run_memory_fit

MB = 2**20

# `grep -rn 'peak memory usage' output_dryrun` over the logs utils/dryrun.sh writes
# (log/stage{S}_{RANK}/mindformer.log), each log ending with MindSpore's statistics
GREP = """\
output_dryrun/log/stage0_0/mindformer.log:5477:Used peak memory usage (without fragments): 48874M
output_dryrun/log/stage0_0/mindformer.log:5478:Actual peak memory usage (with fragments): 49102M
output_dryrun/log/stage1_8/mindformer.log:5481:Used peak memory usage (without fragments): 40211M
output_dryrun/log/stage1_8/mindformer.log:5482:Actual peak memory usage (with fragments): 40960M
output_dryrun/log/stage3_24/mindformer.log:5470:Actual peak memory usage (with fragments): 23531M
"""


def test_the_grep_lines_give_each_stage_its_peak_without_fragments():
    # stage 0: Used 48874 (not Actual 49102); stage 1: Used 40211; stage 2 not run; stage 3 printed only
    # the Actual line, so 23531 is used for it
    peaks = parse_measured_peaks(GREP, "peaks.txt", 4)
    assert [(p.stage, p.peak_bytes) for p in peaks] == [(0, 48874 * MB), (1, 40211 * MB), (3, 23531 * MB)]


def test_the_readme_folder_names_and_a_whole_log_read_too():
    # the readme's sample names folders stage_{S}_rank_{R}; the lines around the peaks are skipped
    text = (
        "stage_2_rank_2048/mindformer.log:5458:Device MOC memory size: 62432M\n"
        "stage_2_rank_2048/mindformer.log:5459:MindSpore Used memory size: 59392M\n"
        "stage_2_rank_2048/mindformer.log:5460:Used peak memory usage (without fragments): 27620M\n"
    )
    assert [(p.stage, p.peak_bytes) for p in parse_measured_peaks(text, "p", 4)] == [(2, 27620 * MB)]


def test_a_line_without_a_stage_folder_is_refused():
    text = "Used peak memory usage (without fragments): 48874M\n"
    with pytest.raises(InputError) as caught:
        parse_measured_peaks(text, "peaks.txt", 4)
    assert caught.value.field == "line 1" and "no stage in the log's path" in caught.value.problem


def test_two_different_peaks_of_one_stage_are_refused():
    text = GREP + "output_dryrun/log/stage1_9/mindformer.log:5481:Used peak memory usage (without fragments): 40300M\n"
    with pytest.raises(InputError) as caught:
        parse_measured_peaks(text, "peaks.txt", 4)
    assert caught.value.field == "line 6" and "stage 1 has two Used peaks" in caught.value.problem


# the pipeline-balance tool's init YAML (its readme's sample, MB): head = stage 0, tail = the last
SAPP = """\
pipeline_config:
  pipeline_num: 4
  num_layer: 32
  offset: 0
recompute_config:
  recompute: false
memory_usage:
  head_memory: 66502
  tail_memory: 25599
  body_memories:
    stage_id: [2, 1]
    memories: [35595, 52536]
"""


def test_the_pipeline_balance_memory_usage_block():
    peaks = parse_measured_peaks(SAPP, "init.yaml", 4)
    assert [(p.stage, p.peak_bytes) for p in peaks] == [
        (0, 66502 * MB),
        (1, 52536 * MB),
        (2, 35595 * MB),
        (3, 25599 * MB),
    ]


@pytest.mark.parametrize(
    ("block", "field", "words"),
    [
        (
            "memory_usage:\n  head_memory: 1\n  body_memories:\n    stage_id: [[1], [2]]\n    memories: [[1], [2]]\n",
            "memory_usage.body_memories",
            "several dry-run rounds",
        ),
        ("memory_usage:\n  head_memory: 1\n  peak: 2\n", "memory_usage.peak", "unknown field"),
        (
            "memory_usage:\n  body_memories:\n    stage_id: [1, 2]\n    memories: [5]\n",
            "memory_usage.body_memories",
            "two lists of one length",
        ),
        ("memory_usage:\n  head_memory: lots\n", "memory_usage.head_memory: peak_mb", "not a number"),
        (
            "memory_usage:\n  body_memories:\n    stage_id: [7]\n    memories: [5]\n",
            "memory_usage.body_memories.0: stage",
            "not a stage of this run",
        ),
    ],
)
def test_a_bad_memory_usage_block_names_the_field(block, field, words):
    with pytest.raises(InputError) as caught:
        parse_measured_peaks(block, "init.yaml", 4)
    assert caught.value.field == field and words in caught.value.problem, caught.value.line()


def test_a_dry_run_calibrates_a_run(tmp_path):
    # a two-stage run measured by a dry run's grep lines: the fit reads them as stage peaks in MB
    (tmp_path / "dry.txt").write_text(
        "out/log/stage0_0/mindformer.log:1:Used peak memory usage (without fragments): 100M\n"
        "out/log/stage1_4/mindformer.log:1:Used peak memory usage (without fragments): 101M\n"
    )
    raw = {
        "models": [{"name": "m", "spec": DENSE}],
        "parallel": {"pp": 2},
        "training": {"seq_length": 64, "micro_batches": 4},
        "device": {"name": "h100-80gb"},
        "memory": {"calibration": "dry.txt"},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    fit = run_memory_fit(load_run_config(tmp_path / "run.yaml"))
    assert fit.stages == (0, 1) and fit.measured_bytes == (100 * MB, 101 * MB)
