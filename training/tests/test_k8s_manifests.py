"""deploy/k8s, checked offline.

1. Every resource validates against the Kubernetes OpenAPI schemas bundled by the
   `kubernetes-validate` package, strict (unknown fields rejected), for the oldest and newest
   Kubernetes versions we claim (1.29, 1.37).
2. What schemas cannot see: selectors match pod labels, probes hit /readyz and /healthz on the
   container port, the HPA/PDB/Service point at the Deployment, every $(VAR) in the args is defined,
   every flag is one `caper serve` accepts, PVCs exist, the Indexed Job's N agrees with SHARDS.
3. The CPU Deployment's args and ConfigMap, with the mount paths pointed at local directories,
   start the real server: /healthz and /readyz answer 200, /info shows the configured limits,
   CAPER_API_KEY (the Secret's env var) protects /info.
4. Where kubectl is installed, `kubectl kustomize` renders each variant and the rendered stream
   validates too. (`kubectl apply --dry-run=client` is not used: it needs a reachable API server.)
"""
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

try:
    import kubernetes_validate as kv  # the Kubernetes OpenAPI schemas, 1.25-1.37, offline
except ImportError as e:  # not a skip: CI must validate the manifests
    raise ImportError("kubernetes-validate is missing: bash training/setup.sh (training/requirements.txt)") from e

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
SERVE = K8S / "serve"
VERSIONS = ["1.29.0", "1.37.0"]


def load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def variant(name: str) -> list[dict]:
    """The resources `kubectl apply -k serve/<name>` creates: the kustomizations only list files."""
    def walk(d: Path) -> list[dict]:
        out = []
        for r in load(d / "kustomization.yaml")[0]["resources"]:
            p = (d / r).resolve()
            out += walk(p) if p.is_dir() else load(p)
        return out
    return walk(SERVE / name)


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def test_every_manifest_validates_against_the_kubernetes_schemas():
    files = manifest_files()
    kinds = set()
    for f in files:
        for doc in load(f):
            kinds.add(doc["kind"])
            for v in VERSIONS:
                kv.validate(doc, v, strict=True)  # raises ValidationError with the path of the bad field
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap",
            "PersistentVolumeClaim", "Job"} <= kinds


def test_the_validator_rejects_a_broken_manifest():
    dep = one(variant("cpu"), "Deployment")
    bad = json.loads(json.dumps(dep))
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = [8080]
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, VERSIONS[-1], strict=True)
    typo = json.loads(json.dumps(dep))
    typo["spec"]["replica"] = 2
    with pytest.raises(kv.ValidationError):
        kv.validate(typo, VERSIONS[-1], strict=True)


def serve_flags() -> set[str]:
    """Every `caper serve` flag: the options table (src/core/options.ts) that --help, the CAPER_*
    variables and /info are generated from, plus what serve.ts itself parses."""
    table = (REPO / "src" / "core" / "options.ts").read_text()
    usage = (REPO / "src" / "commands" / "serve.ts").read_text()
    return {"--" + f for f in re.findall(r"\{ flag: '([a-z][a-z-]+)'", table)} | set(re.findall(r"\[?(--[a-z][a-z-]+)", usage))


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_serve_variant_is_consistent(name):
    docs = variant(name)
    dep, svc, pdb, hpa, cm = (one(docs, k) for k in
                              ("Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ConfigMap"))
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    for sel in (dep["spec"]["selector"]["matchLabels"], svc["spec"]["selector"], pdb["spec"]["selector"]["matchLabels"]):
        assert sel.items() <= labels.items()
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": dep["metadata"]["name"]}
    assert hpa["spec"]["minReplicas"] >= 2 and pdb["spec"]["maxUnavailable"] == 1  # a drain never empties the service

    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8080}  # the image's entrypoint listens on 8080
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert svc["spec"]["ports"][0]["targetPort"] == "http"

    # configuration by environment: every $(VAR) is defined, every flag exists in `caper serve`
    env = set(cm["data"]) | {e["name"] for e in c.get("env", [])}
    assert c["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]
    args = c["args"]
    assert set(re.findall(r"\$\((\w+)\)", " ".join(args))) <= env
    flags = [a for a in args if a.startswith("--")]
    assert flags and set(flags) <= serve_flags(), set(flags) - serve_flags()
    api = next(e for e in c["env"] if e["name"] == "CAPER_API_KEY")
    assert api["valueFrom"]["secretKeyRef"]["optional"] is True

    # model and databases mounted read-only from claims this variant creates
    pvcs = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    vols = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]}
    assert set(vols.values()) <= pvcs
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert cm["data"]["CAPER_MODEL_DIR"].startswith(next(p for p, m in mounts.items() if vols[m["name"]] == "caper-models"))
    assert all(m.get("readOnly") for m in mounts.values())

    res = c["resources"]
    assert "cpu" in res["requests"] and "memory" in res["limits"]  # HPA utilization needs a CPU request
    if name == "gpu":
        assert res["limits"]["nvidia.com/gpu"] == 1 == res["requests"]["nvidia.com/gpu"]
        assert cm["data"]["CAPER_DEVICE"] == "cuda"
        assert any(t["key"] == "nvidia.com/gpu" for t in pod["spec"]["tolerations"])
    else:
        assert "nvidia.com/gpu" not in json.dumps(res)
        assert cm["data"]["CAPER_DEVICE"] == "cpu"
        assert int(cm["data"]["CAPER_THREADS"]) < int(res["requests"]["cpu"])  # a core left for HTTP, tokenizing, SQL


def test_inflight_hpa_variant_targets_the_same_deployment():
    (hpa,) = load(SERVE / "hpa-inflight.yaml")
    base = one(variant("cpu"), "HorizontalPodAutoscaler")
    assert hpa["metadata"]["name"] == base["metadata"]["name"]
    assert hpa["spec"]["scaleTargetRef"] == base["spec"]["scaleTargetRef"]
    (m,) = hpa["spec"]["metrics"]
    assert m["type"] == "Pods" and m["pods"]["metric"]["name"] == "caper_inflight_requests"
    # the metric is derived from a histogram the server exports
    assert any("caper_http_request_duration_seconds" in p.read_text() for p in (REPO / "src").rglob("*.ts"))


def test_annotate_jobs_shard_and_merge_consistently():
    (job,) = load(K8S / "annotate-job.yaml")
    (merge,) = load(K8S / "annotate-merge-job.yaml")
    pvcs = {d["metadata"]["name"] for d in load(K8S / "annotate-volumes.yaml")}
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    (c,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert spec["completions"] == spec["parallelism"] == int(env["SHARDS"])
    cmd = " ".join(c["command"] + c["args"])
    assert '--shard "$JOB_COMPLETION_INDEX/$SHARDS"' in cmd
    assert '--out "/parts/part-$JOB_COMPLETION_INDEX.jsonl"' in cmd
    assert '--timeout-ms "$TIMEOUT_MS"' in cmd and int(env["TIMEOUT_MS"]) >= 10_000
    (mc,) = merge["spec"]["template"]["spec"]["containers"]
    assert "annotate --merge /parts/part-*.jsonl --out /parts/tuples.jsonl" in " ".join(mc["args"])
    for j in (job, merge):
        for v in j["spec"]["template"]["spec"]["volumes"]:
            assert v["persistentVolumeClaim"]["claimName"] in pvcs
        assert j["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_cpu_deployment_args_start_the_real_server(tmp_path):
    node, cli = shutil.which("node"), REPO / "dist" / "src" / "cli.js"
    if not node or not cli.exists():
        pytest.skip("node or dist/src/cli.js missing (npm test builds it first)")
    docs = variant("cpu")
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = dict(one(docs, "ConfigMap")["data"])
    # the volumes, pointed at local directories: models/tiny for /models/default, a db for /data/db
    models = tmp_path / "models"
    models.mkdir()
    (models / "default").symlink_to(REPO / "models" / "tiny")
    env["CAPER_MODEL_DIR"] = env["CAPER_MODEL_DIR"].replace("/models", str(models), 1)
    db = tmp_path / "db" / "shop"
    db.mkdir(parents=True)
    con = sqlite3.connect(db / "shop.sqlite")
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a).replace("/data/db", str(tmp_path / "db")) for a in c["args"]]
    port = free_port()
    # the image's ENTRYPOINT, then the Deployment's args (which override its --model/--device)
    entry = ["serve", "--host", "127.0.0.1", "--port", str(port), "--model", "models/default", "--device", "auto"]
    proc = subprocess.Popen([node, str(cli), *entry, *args, "--quiet"], cwd=REPO,
                            env={**os.environ, "CAPER_API_KEY": "k8s-test-key-0123456789abcdef"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        status = 0
        while time.time() < deadline and status != 200:
            try:
                status, _ = get(base + "/readyz")
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
        assert status == 200
        assert get(base + "/healthz")[0] == 200
        assert get(base + "/info")[0] == 401  # the Secret's key is enforced
        code, info = get(base + "/info", {"Authorization": "Bearer k8s-test-key-0123456789abcdef"})
        assert code == 200
        lim = info["limits"]
        assert lim["max_batch_tokens"] == int(env["CAPER_MAX_BATCH_TOKENS"])
        assert lim["max_queue_tokens"] == int(env["CAPER_MAX_QUEUE_TOKENS"])
        assert lim["max_wait_ms"] == int(env["CAPER_MAX_WAIT_MS"])
        assert info["model"]["provider"] == "cpu" and info["databases"] == ["shop"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_kubectl_kustomize_renders_a_valid_stream(name):
    r = subprocess.run(["kubectl", "kustomize", str(SERVE / name)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert sorted(d["kind"] for d in docs) == sorted(d["kind"] for d in variant(name))
    for d in docs:
        kv.validate(d, VERSIONS[-1], strict=True)
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["image"] == f"caper-verifier:{name}"
