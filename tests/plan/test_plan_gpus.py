"""The GPU catalog: required entries, sourced figures, alias lookup and did-you-mean errors."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from kneecap.errors import KneecapError
from kneecap.hardware import Gpu, get_gpu, list_gpus
from kneecap.units import GiB

REQUIRED = (
    "a100-40",
    "a100-80",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200",
    "b200",
    "gb200",
    "l40s",
    "l4",
    "rtx-4090",
    "rtx-5090",
    "rtx-pro-6000",
    "mi300x",
    "mi325x",
    "mi355x",
)


def test_every_required_gpu_is_in_the_catalog():
    names = [g.name for g in list_gpus()]
    assert set(REQUIRED) <= set(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", REQUIRED)
def test_each_gpu_names_sources_and_sane_figures(name):
    g = get_gpu(name)
    assert g.sources, f"{name} has no source"
    assert g.interconnect in ("nvlink", "xgmi", "pcie")
    assert 10e9 < g.datasheet_bytes < 400e9
    assert 0.1e12 < g.hbm_bandwidth_bytes_s < 20e12
    if g.device_bytes is not None:  # the driver's total is within 10% of the datasheet figure
        assert abs(g.device_bytes - g.datasheet_bytes) / g.datasheet_bytes < 0.10


@pytest.mark.parametrize(
    "name,field,expected",
    [
        ("mi300x", "datasheet_bytes", 192_000_000_000),
        ("mi300x", "device_bytes", 205_822_885_888),  # rocm-smi on the cloud VF
        ("h100-sxm", "device_bytes", 85_520_809_984),  # nvidia-smi 81559 MiB
        ("a100-80", "device_bytes", 85_899_345_920),  # 81920 MiB
        ("h200", "device_bytes", 150_754_820_096),  # 143771 MiB
        ("rtx-pro-6000", "device_bytes", 102_641_958_912),  # 97887 MiB
        ("h100-sxm", "bf16_flops", 989e12),
        ("b200", "fp4_flops", 9000e12),
        ("h100-sxm", "interconnect_bytes_s", 450e9),
        ("rtx-pro-6000", "interconnect", "pcie"),
    ],
)
def test_catalog_figures(name, field, expected):
    assert getattr(get_gpu(name), field) == expected


def test_h100_framework_total_is_what_pytorch_prints():
    assert f"{get_gpu('h100-sxm').framework_bytes / GiB:.2f}" == "79.19"


def test_mi300x_driver_sees_more_than_the_datasheet():
    g = get_gpu("mi300x")
    assert g.memory_bytes("device") > g.memory_bytes("datasheet")
    assert g.memory_bytes("framework") == g.device_bytes  # no framework figure: falls back to the device total


def test_unconfirmed_figures_say_so():
    raw = json.loads(resources.files("kneecap").joinpath("data", "gpus.json").read_text())
    notes = {e["name"]: " ".join(e["notes"]) for e in raw["gpus"]}
    for name in ("mi325x", "mi355x", "h100-nvl", "gb200"):
        assert "UNCONFIRMED" in notes[name]


@pytest.mark.parametrize(
    "alias,name",
    [
        ("H100", "h100-sxm"),
        ("NVIDIA H100 SXM", "h100-sxm"),
        ("h100_pcie", "h100-pcie"),
        ("MI300X", "mi300x"),
        ("rtx pro 6000", "rtx-pro-6000"),
        ("RTX4090", "rtx-4090"),
        ("a100", "a100-80"),
        ("AMD Instinct MI355X", "mi355x"),
    ],
)
def test_aliases(alias, name):
    assert get_gpu(alias).name == name


@pytest.mark.parametrize("typo,suggested", [("h10", "h100-sxm"), ("mi300z", "mi300x"), ("rtx-5080", "rtx-5090")])
def test_unknown_gpu_suggests_nearest(typo, suggested):
    with pytest.raises(KneecapError) as err:
        get_gpu(typo)
    assert "unknown GPU" in err.value.message
    assert "did you mean" in err.value.hint and suggested in err.value.hint.split("known GPUs")[0]


def _entry(**overrides) -> dict:
    entry = dict(
        name="x",
        label="NVIDIA X",
        datasheet_bytes=1,
        device_bytes=None,
        framework_bytes=None,
        hbm_bandwidth_bytes_s=1e12,
        bf16_flops=1e12,
        fp8_flops=None,
        fp4_flops=None,
        interconnect="pcie",
        interconnect_bytes_s=1e9,
    )
    return entry | overrides


@pytest.mark.parametrize(
    "bad,message",
    [
        ({"datasheet_bytes": 0}, "datasheet_bytes"),
        ({"interconnect": "carrier-pigeon"}, "interconnect"),
        ({"label": "X 80GB"}, "vendor"),
        ({"label": ""}, "vendor"),
    ],
)
def test_gpu_validation_rejects_bad_entries(bad, message):
    Gpu(**_entry())  # the good entry is accepted
    with pytest.raises(KneecapError, match=message):
        Gpu(**_entry(**bad))


def test_vendor_is_read_from_the_catalog_label():
    vendors = {gpu.name: (gpu.vendor, gpu.is_amd) for gpu in list_gpus()}
    assert vendors["mi300x"] == ("AMD", True) and vendors["mi355x"] == ("AMD", True)
    assert vendors["h100-sxm"] == ("NVIDIA", False) and vendors["rtx-4090"] == ("NVIDIA", False)
    assert {v for v, _ in vendors.values()} == {"NVIDIA", "AMD"}
    # every AMD part in the catalog is an xgmi one, and no NVIDIA part is
    assert all(gpu.is_amd == (gpu.interconnect == "xgmi") for gpu in list_gpus())


@pytest.mark.parametrize(
    "text,expected",
    [
        ("datasheet", "datasheet"),
        ("device", "device"),
        ("Framework", "framework"),
        ("192000000000", 192_000_000_000),
        ("192e9", 192_000_000_000),
        ("192GB", 192_000_000_000),
        ("180GiB", 180 * 2**30),
        ("205,822,885,888", 205_822_885_888),
    ],
)
def test_hbm_flag(text, expected):
    from kneecap.plan.build import parse_hbm

    assert parse_hbm(text) == expected


@pytest.mark.parametrize("text", ["lots", "-5", "0", "GB"])
def test_bad_hbm_flag(text):
    from kneecap.plan.build import parse_hbm

    with pytest.raises(KneecapError):
        parse_hbm(text)
