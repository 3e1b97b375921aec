"""`kneecap recommend --manifests DIR`: a recommended deployment as the Kubernetes objects that run it.

Pure: one candidate of recommend.json in, a list of Kubernetes objects (dicts) out; the command writes them as YAML.
Every object is the plain Kubernetes API of a named release (tests validate them against Kubernetes 1.33's OpenAPI
schema) or, for a replica that spans nodes, a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1,
github.com/kubernetes-sigs/lws), the controller vLLM's docs use for multi-node serving.

- One replica on one node: a Deployment of `replicas` pods, each asking for the replica's GPUs
  (`nvidia.com/gpu` or `amd.com/gpu`), running exactly the candidate's `vllm serve` command, with `/health`
  readiness, liveness and startup probes, the model volume (a PersistentVolumeClaim) at the model path, a cache
  volume, and shared memory for NCCL; and a Service on port 8000.
- One replica over several nodes (GPUs per replica > GPUs per node): a LeaderWorkerSet of `replicas` groups of
  `nodes` pods; the leader starts Ray's head and `vllm serve` over the group, the workers join it (vLLM's
  examples/online_serving/multi-node-serving.sh, as vLLM's LWS guide runs it); the Service selects the leaders.
- Disaggregated prefill/decode pools: one Deployment per pool, labelled `llm-d.ai/role: prefill|decode` as llm-d's
  inference scheduler selects pods by role (github.com/llm-d/llm-d-inference-scheduler), each running the
  candidate's command with its NIXL KV-transfer config; the router in front of them is deployed by llm-d, not here.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

PORT = 8000  # vllm serve's default --port
NVIDIA_RESOURCE, AMD_RESOURCE = "nvidia.com/gpu", "amd.com/gpu"
MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"  # in vLLM's images
RAY_PORT = 6379


@dataclass(frozen=True)
class ManifestOptions:
    """What the cluster decides, not the candidate: the image, where the model lives, the node size."""

    image: str
    model: str  # the path or hub id `vllm serve` loads (replaces the candidate's "<name checkpoint>" placeholder)
    model_pvc: str = "models"  # a PersistentVolumeClaim holding the weights, mounted at /models
    cache_pvc: str | None = None  # a PersistentVolumeClaim for the Hugging Face / compile caches (None: emptyDir)
    gpus_per_node: int = 8
    namespace: str | None = None


def gpu_resource(vendor_label: str) -> str:
    """The device plugin's resource name for a GPU (NVIDIA's or AMD's Kubernetes device plugin)."""
    return AMD_RESOURCE if "amd" in vendor_label.lower() else NVIDIA_RESOURCE


def object_name(model_name: str, candidate: dict, rank: int) -> str:
    """A DNS-1123 name for the candidate: 'llama-3-1-8b-h100-sxm-tp1-1'."""
    raw = f"{model_name.rsplit('/', 1)[-1]}-{candidate['gpu']}-tp{candidate['tp']}"
    if candidate.get("pp", 1) > 1:
        raw += f"-pp{candidate['pp']}"
    name = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    return f"{name[:50].rstrip('-')}-{rank}"


def serve_argv(candidate: dict, model: str) -> list[str]:
    """The candidate's `vllm serve` command as argv, the checkpoint placeholder replaced by `model`."""
    return shlex.split(re.sub(r"<[^<>]*checkpoint>", lambda _: shlex.quote(model), candidate["serve_cmd"], count=1))


def _probe(path: str, period_s: int, failures: int) -> dict:
    return {"httpGet": {"path": path, "port": PORT}, "periodSeconds": period_s, "failureThreshold": failures}


def _container(
    opts: ManifestOptions, resource: str, gpus: int, command: list[str], args: list[str], serving: bool
) -> dict:
    mounts = [
        {"name": "models", "mountPath": "/models"},
        {"name": "cache", "mountPath": "/root/.cache"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    c = {
        "name": "vllm" if serving else "ray-worker",
        "image": opts.image,
        "command": command,
        "args": args,
        "resources": {"limits": {resource: str(gpus)}, "requests": {resource: str(gpus)}},
        "volumeMounts": mounts,
    }
    if serving:
        c["ports"] = [{"name": "http", "containerPort": PORT}]
        # loading weights and compiling can take many minutes: the startup probe allows 30 min before liveness counts
        c["startupProbe"] = _probe("/health", 10, 180)
        c["readinessProbe"] = _probe("/health", 5, 3)
        c["livenessProbe"] = _probe("/health", 10, 6)
    return c


def _pod_spec(opts: ManifestOptions, containers: list[dict]) -> dict:
    cache = {"persistentVolumeClaim": {"claimName": opts.cache_pvc}} if opts.cache_pvc else {"emptyDir": {}}
    return {
        "containers": containers,
        "volumes": [
            {"name": "models", "persistentVolumeClaim": {"claimName": opts.model_pvc}},
            {"name": "cache", **cache},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ],
    }


def _meta(name: str, opts: ManifestOptions, labels: dict, annotations: dict | None = None) -> dict:
    meta = {"name": name, "labels": labels}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    if annotations:
        meta["annotations"] = annotations
    return meta


def _annotations(candidate: dict) -> dict:
    """What kneecap predicted, so whoever reads the object knows where it came from (values are strings)."""
    pred = candidate.get("predicted") or {}
    out = {
        "kneecap.io/serve-command": candidate["serve_cmd"],
        "kneecap.io/cost-per-hour-usd": f"{candidate['cost_per_hour']:.2f}",
    }
    for key in ("ttft_p99_ms", "tpot_p99_ms"):
        if pred.get(key) is not None:
            out[f"kneecap.io/predicted-{key.replace('_', '-')}"] = f"{pred[key]:.4g}"
    return out


def _service(name: str, opts: ManifestOptions, selector: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, opts, dict(selector)),
        "spec": {"selector": selector, "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]},
    }


def _deployment(
    name: str, opts: ManifestOptions, labels: dict, replicas: int, container: dict, annotations: dict
) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, opts, labels, annotations),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": _pod_spec(opts, [container])},
        },
    }


def _leader_worker_set(
    name: str, opts: ManifestOptions, labels: dict, candidate: dict, resource: str, argv: list[str]
) -> dict:
    gpus = int(candidate["gpus_per_replica"])
    nodes = -(-gpus // opts.gpus_per_node)
    per_node = gpus // nodes
    serve = " ".join(shlex.quote(a) for a in argv)
    leader = _container(
        opts,
        resource,
        per_node,
        ["/bin/sh", "-c"],
        [f"bash {MULTI_NODE_SCRIPT} leader --ray_cluster_size=$(LWS_GROUP_SIZE) && {serve}"],
        True,
    )
    worker = _container(
        opts,
        resource,
        per_node,
        ["/bin/sh", "-c"],
        [f"bash {MULTI_NODE_SCRIPT} worker --ray_address=$(LWS_LEADER_ADDRESS)"],
        False,
    )
    role = lambda r: {**labels, "role": r}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(name, opts, labels, _annotations(candidate)),
        "spec": {
            "replicas": int(candidate["replicas"]),
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": role("leader")}, "spec": _pod_spec(opts, [leader])},
                "workerTemplate": {"metadata": {"labels": role("worker")}, "spec": _pod_spec(opts, [worker])},
            },
        },
    }


def candidate_manifests(
    model_name: str, candidate: dict, rank: int, opts: ManifestOptions, vendor_label: str
) -> list[dict]:
    """The Kubernetes objects that run one recommend.json candidate (see the module docstring); `rank` 1 is the
    best. Each object is a tree of its own (no dict shared between two places, so YAML needs no anchors)."""
    return json.loads(json.dumps(_objects(model_name, candidate, rank, opts, vendor_label)))


def _objects(model_name: str, candidate: dict, rank: int, opts: ManifestOptions, vendor_label: str) -> list[dict]:
    name = object_name(model_name, candidate, rank)
    resource = gpu_resource(vendor_label)
    argv = serve_argv(candidate, opts.model)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "kneecap-recommend"}
    gpus = int(candidate["gpus_per_replica"])
    dis = candidate.get("disaggregated")
    if dis:
        out = []
        for pool in ("prefill", "decode"):
            pool_labels = {**labels, "llm-d.ai/role": pool}
            container = _container(opts, resource, gpus, argv[:2], argv[2:], True)
            out.append(
                _deployment(
                    f"{name}-{pool}",
                    opts,
                    pool_labels,
                    int(dis[f"{pool}_replicas"]),
                    container,
                    _annotations(candidate),
                )
            )
        out.append(_service(name, opts, {**labels, "llm-d.ai/role": "decode"}))
        return out
    if gpus > opts.gpus_per_node:
        return [
            _leader_worker_set(name, opts, labels, candidate, resource, argv),
            _service(name, opts, {**labels, "role": "leader"}),
        ]
    container = _container(opts, resource, gpus, argv[:2], argv[2:], True)
    return [
        _deployment(name, opts, labels, int(candidate["replicas"]), container, _annotations(candidate)),
        _service(name, opts, labels),
    ]
