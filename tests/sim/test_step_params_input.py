"""Step-time constants as users hand them in (--step-params, serve --calibration, calibrate --start): every bad
value or file is one KneecapError naming it, never a TypeError or OverflowError from deep inside the simulator."""

from __future__ import annotations

import json

import pytest

from kneecap.errors import KneecapError
from kneecap.sim.step_params import parse_step_params
from kneecap.sim.steptime import StepTimeParams


@pytest.mark.parametrize("value", ["high", None, [1], {"x": 1}, True])
def test_a_calibration_file_value_that_is_not_a_number_is_named(tmp_path, value):
    path = tmp_path / "calib.json"
    path.write_text(json.dumps({"step_time": {"mfu": value}}))
    with pytest.raises(KneecapError, match="step-time mfu must be a finite number"):
        parse_step_params(str(path))


@pytest.mark.parametrize(
    "spec,name",
    [
        ("overhead_s=nan", "overhead_s"),
        ("kernel_gap_s=inf", "kernel_gap_s"),
        ("activation_bytes=inf", "activation_bytes"),
        ("mfu=none", "mfu"),
    ],
)
def test_pairs_that_are_not_finite_numbers_are_named(spec, name):
    with pytest.raises(KneecapError, match=f"step-time {name} must be a finite number"):
        parse_step_params(spec)


def test_activation_bytes_must_be_whole():
    with pytest.raises(KneecapError, match="whole number of bytes"):
        parse_step_params("activation_bytes=2.5")
    assert parse_step_params("activation_bytes=1").activation_bytes == 1


def test_hop_latency_may_still_be_none():
    assert parse_step_params("hop_latency_s=none").hop_latency_s is None
    assert StepTimeParams.from_dict(StepTimeParams().to_dict()) == StepTimeParams()


def test_a_folder_or_binary_file_is_named(tmp_path):
    with pytest.raises(KneecapError, match="is a folder"):
        parse_step_params(str(tmp_path))
    binary = tmp_path / "calib.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(KneecapError, match="not UTF-8"):
        parse_step_params(str(binary))


def test_errors_name_the_flag_the_user_gave():
    with pytest.raises(KneecapError) as exc:
        parse_step_params("mfu0.4", "--calibration")
    assert exc.value.one_line().startswith("error: --calibration item 'mfu0.4' is not key=value")
    assert "--step-params" not in exc.value.one_line()
