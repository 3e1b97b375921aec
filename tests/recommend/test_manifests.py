"""`kneecap recommend --manifests DIR`: Kubernetes objects that validate against Kubernetes 1.33's OpenAPI schema
(kubernetes-validate's copy of the release's schemas, strict: no unknown field), carry the candidate's GPUs,
replicas and exact serve flags; a replica wider than a node becomes a LeaderWorkerSet whose pod templates
validate the same way and against LeaderWorkerSet's own released CRD schema; prefill/decode pools become one Deployment per pool labelled for llm-d's scheduler."""

from __future__ import annotations

import functools
import json
import shlex
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kneecap.metrics.slo import parse_slo
from kneecap.recommend.manifests import ManifestOptions, candidate_manifests
from kneecap.recommend.prices import load_prices
from kneecap.recommend.search import recommend
from kneecap.recommend.space import RecommendRequest
from clitools import run_cli

K8S_RELEASE = "1.33.0"
# LeaderWorkerSet v1's schema: the openAPIV3Schema of its CRD as released (github.com/kubernetes-sigs/lws, tag v0.10.0,
# commit 2161f38, config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml, gzipped; Apache-2.0). The pod
# templates inside are also validated as core PodTemplateSpecs against the Kubernetes schema above.
LWS_CRD = Path(__file__).parent / "data" / "lws-v0.10.0-leaderworkersets.yaml.gz"


def _strict(schema: object) -> object:
    """A CRD's structural schema as kubectl's strict field validation reads it: an object that lists its properties
    and does not keep unknown fields takes no other field."""
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.lru_cache(maxsize=1)
def _lws_validator():
    import gzip

    import jsonschema

    crd = yaml.safe_load(gzip.open(LWS_CRD))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft4Validator(_strict(v1["schema"]["openAPIV3Schema"]))


def validate(obj: dict) -> None:
    if obj["kind"] != "LeaderWorkerSet":
        kubernetes_validate.validate(obj, K8S_RELEASE, strict=True)
        return
    assert obj["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _lws_validator().iter_errors(obj)]
    assert not errors, errors
    tmpl = obj["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": tmpl[role]},
            K8S_RELEASE,
            strict=True,
        )


def test_the_leader_worker_set_schema_refuses_what_the_release_does_not_know():
    good = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "x"},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": []}}}},
    }
    assert not list(_lws_validator().iter_errors(good))
    typo = json.loads(json.dumps(good))
    typo["spec"]["leaderWorkerTemplate"]["sizes"] = 2
    assert list(_lws_validator().iter_errors(typo))
    wrong = json.loads(json.dumps(good))
    wrong["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    assert list(_lws_validator().iter_errors(wrong))


def _containers(obj: dict) -> list[dict]:
    if obj["kind"] == "LeaderWorkerSet":
        t = obj["spec"]["leaderWorkerTemplate"]
        return t["leaderTemplate"]["spec"]["containers"] + t["workerTemplate"]["spec"]["containers"]
    return obj["spec"]["template"]["spec"]["containers"]


def _flags(serve_cmd: str) -> list[str]:
    return shlex.split(serve_cmd.replace("<", "'<").replace(" checkpoint>", " checkpoint>'"))[3:]


def _recommend(tmp_path: Path, *args: str) -> tuple[dict, list[dict]]:
    out = tmp_path / "m"
    r = run_cli("recommend", *args, "--manifests", str(out), "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    files = sorted(out.glob("*.yaml"))
    assert files
    objects = [o for f in files for o in yaml.safe_load_all(f.read_text())]
    for o in objects:
        validate(o)
    return doc, objects


def test_one_node_replicas_as_a_deployment_and_service(tmp_path):
    doc, objects = _recommend(
        tmp_path,
        "--model",
        "llama-3.1-8b",
        "--rate",
        "40",
        "--isl",
        "1000",
        "--osl",
        "200",
        "--slo",
        "ttft_p99_ms=1500,tpot_p99_ms=30",
        "--gpus",
        "h100-sxm",
        "--max-gpus",
        "8",
    )
    best = doc["best"]
    dep = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-1"))  # the best
    svc = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == dep["metadata"]["name"])
    assert dep["spec"]["replicas"] == best["replicas"]
    (c,) = _containers(dep)
    assert c["resources"]["limits"] == {"nvidia.com/gpu": str(best["gpus_per_replica"])}
    assert c["command"] == ["vllm", "serve"] and c["args"][0] == "/models/llama-3.1-8b"
    assert c["args"][1:] == _flags(best["serve_cmd"])
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_amd_gpus_ask_for_amd_devices_and_a_hub_id_is_loaded_as_given(tmp_path):
    doc, objects = _recommend(
        tmp_path,
        "--model",
        "llama-3.1-8b",
        "--rate",
        "2",
        "--isl",
        "500",
        "--osl",
        "100",
        "--slo",
        "ttft_p99_ms=2000,tpot_p99_ms=50",
        "--gpus",
        "mi300x",
        "--manifest-model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--manifest-image",
        "my/img:1",
    )
    (c,) = _containers(next(o for o in objects if o["kind"] == "Deployment"))
    assert set(c["resources"]["limits"]) == {"amd.com/gpu"} and c["image"] == "my/img:1"
    assert c["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"


def test_a_replica_wider_than_a_node_is_a_leader_worker_set(tmp_path):
    doc, objects = _recommend(
        tmp_path,
        "--model",
        "llama-3.1-70b",
        "--rate",
        "2",
        "--isl",
        "500",
        "--osl",
        "100",
        "--slo",
        "ttft_p99_ms=2000,tpot_p99_ms=50",
        "--gpus",
        "h100-sxm",
        "--weight-dtypes",
        "bf16",
        "--manifest-gpus-per-node",
        "1",
    )
    best = doc["best"]
    assert best["gpus_per_replica"] >= 2
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == best["replicas"] and tmpl["size"] == best["gpus_per_replica"]
    leader, worker = _containers(lws)
    assert leader["resources"]["limits"] == {"nvidia.com/gpu": "1"} == worker["resources"]["limits"]
    serve = leader["args"][0].split(" && ", 1)[1]
    assert shlex.split(serve)[3:] == _flags(best["serve_cmd"]) and "LWS_LEADER_ADDRESS" in worker["args"][0]
    svc = next(o for o in objects if o["kind"] == "Service")
    assert svc["spec"]["selector"]["role"] == "leader"


def test_prefill_and_decode_pools_are_deployments_labelled_by_role():
    req = RecommendRequest(
        model="llama-3.1-8b",
        kind="rate",
        load=24.0,
        isl=1000,
        osl=200,
        slo=parse_slo("ttft_p99_ms=1500,tpot_p99_ms=12"),
        gpus=("h100-sxm",),
        weight_dtypes=("bf16",),
        kv_dtypes=("bf16",),
        tp_choices=(1,),
        pp_choices=(1,),
        max_num_seqs_choices=(256,),
        max_num_batched_tokens_choices=(8192,),
    )
    doc = recommend(req, load_prices(), workers=1)
    cand = next(c for c in doc["candidates"] if c["disaggregated"] is not None)
    objects = candidate_manifests(
        doc["model"], cand, 1, ManifestOptions(image="vllm/vllm-openai:v0.11.0", model="/models/x"), "NVIDIA H100"
    )
    for o in objects:
        validate(o)
    pools = {o["metadata"]["labels"]["llm-d.ai/role"]: o for o in objects if o["kind"] == "Deployment"}
    assert set(pools) == {"prefill", "decode"}
    for pool, dep in pools.items():
        assert dep["spec"]["replicas"] == cand["disaggregated"][f"{pool}_replicas"]
        (c,) = _containers(dep)
        assert c["args"][1:] == _flags(cand["serve_cmd"]) and "--kv-transfer-config" in c["args"]


@pytest.mark.parametrize("bad", ["0", "-2"])
def test_bad_gpus_per_node_is_one_line(tmp_path, bad):
    r = run_cli(
        "recommend",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "2",
        "--isl",
        "500",
        "--osl",
        "100",
        "--slo",
        "ttft_p99_ms=2000",
        "--gpus",
        "h100-sxm",
        "--manifests",
        str(tmp_path / "m"),
        "--manifest-gpus-per-node",
        bad,
    )
    assert r.code == 2 and "--manifest-gpus-per-node must be >= 1" in r.stderr


def test_the_docs_worked_example_runs(tmp_path):
    """docs/kubernetes.md's recommend command as printed (--manifests pointed at a temporary folder) writes the file
    its kubectl line applies."""
    import re

    doc_text = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    block = re.search(r"```bash\n(.*?)\n```", doc_text, re.S).group(1).replace("\\\n", " ")
    recommend_line, kubectl_line = block.splitlines()
    args = shlex.split(recommend_line)[1:]
    args[args.index("--manifests") + 1] = str(tmp_path / "deploy")
    r = run_cli(*args)
    assert r.code == 0, r.stderr
    (applied,) = (tmp_path / "deploy").glob(Path(shlex.split(kubectl_line)[-1]).name)  # the shell's glob
    for o in yaml.safe_load_all(applied.read_text()):
        validate(o)
