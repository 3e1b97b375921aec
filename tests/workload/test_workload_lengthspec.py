"""kneecap.workload.lengthspec: CLI length specs -> LengthDist, with one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from kneecap.errors import KneecapError
from kneecap.workload import LengthDist
from kneecap.workload.lengthspec import parse_length_spec


@pytest.mark.parametrize(
    "spec,want",
    [
        ("1000", LengthDist(kind="fixed", value=1000)),
        ("fixed:64", LengthDist(kind="fixed", value=64)),
        ("uniform:100:2000", LengthDist(kind="uniform", low=100, high=2000)),
        ("uniform:low=100,high=2000", LengthDist(kind="uniform", low=100, high=2000)),
        ("normal:1000:200", LengthDist(kind="normal", mean=1000.0, std=200.0)),
        ("lognormal:mean=1000,std=300", LengthDist(kind="lognormal", mean=1000.0, std=300.0)),
        ("lognormal:mean=1000,std=300,max=4096", LengthDist(kind="lognormal", mean=1000.0, std=300.0, max_value=4096)),
        ("normal:mean=500,std=50,min=100", LengthDist(kind="normal", mean=500.0, std=50.0, min_value=100)),
        ("empirical:120,340,800", LengthDist(kind="empirical", values=(120, 340, 800))),
        (" Uniform:1:5 ", LengthDist(kind="uniform", low=1, high=5)),
    ],
)
def test_specs_parse(spec, want):
    assert parse_length_spec(spec) == want


def test_parsed_lognormal_samples_have_the_asked_mean():
    d = parse_length_spec("lognormal:mean=1000,std=300")
    assert d.sample(np.random.default_rng(0), 20000).mean() == pytest.approx(1000, rel=0.02)


@pytest.mark.parametrize(
    "spec,fragment",
    [
        ("", "empty"),
        ("abc", "must be a number"),
        ("zipf:1:2", "unknown distribution"),
        ("uniform:100", "takes 2 values"),
        ("uniform:200:100", "low <= high"),
        ("normal:mean=5,sd=1", "unknown parameter"),
        ("fixed:1.5", "whole number"),
        ("0", ">= 1"),
        ("lognormal:mean=0,std=1", "mean > 0"),
        ("empirical:1.5,2", "whole number"),
        ("uniform:a:b", "must be a number"),
        ("normal:mean=5", "needs 'std'"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, fragment):
    with pytest.raises(KneecapError) as err:
        parse_length_spec(spec)
    line = err.value.one_line()
    assert fragment in line and "\n" not in line
