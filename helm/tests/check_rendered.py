#!/usr/bin/env python3
"""Checks manifests rendered from helm/parley (scripts/check-chart.sh runs this).

    check_rendered.py FILE.yaml...            validate + assert, print a summary per file
    check_rendered.py --to-json < FILE.yaml   print the documents as one JSON array
    check_rendered.py --checksums FILE.yaml   print each Deployment's checksum annotations

For every file:
- custom resources (ScaledObject, ServiceMonitor, PodMonitor) are validated against the
  strict JSON schemas in helm/tests/schemas/ (unknown fields rejected); any other custom
  resource is an error (Kubernetes' own kinds are kubernetes-validate's job);
- assertions a reviewer would check by hand (the settings keys, stream and consumer names
  are read from the services' sources, so the checks follow them): no `replicas` on a Deployment an autoscaler
  owns; trigger metadata values are strings and name the stream/consumers the services
  create; min <= max (KEDA's CEL rule, which a JSON schema cannot express); the grace
  period exceeds the worker's drain_secs; PDB, Service, NetworkPolicy and monitor selectors
  select the pods they are meant to (and not the `helm test` pod); no container can run as
  root, escalate, write its root filesystem or keep a capability; probes use the named
  metrics port; the services' TOML settings parse and use only keys the services take; no
  API key lands in a ConfigMap and the coordinator gets none;
- the web page (`serve`, optional): `parley serve` listening on all addresses of its port,
  in front of NATS (`PARLEY_SERVE_NATS_URL`, never on its command line), its bearer token from the Secret (never a literal), no
  API key, no Redis; probes on /healthz of its `http` port; its Service targets that port;
  its NetworkPolicy lets in only that port and lets out only DNS and NATS, plus the
  webhook egress rule when webhooks are on; API keys and webhook endpoints come from
  Secret volumes (files the server reads), never from a literal value or a ConfigMap.

Exit status 1 with every problem listed when any check fails.
"""

import json
import os
import re
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11: the same parser, installed by scripts/check-chart.sh
    import tomli as tomllib

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda.sh-v1alpha1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring.coreos.com-v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-monitoring.coreos.com-v1.json",
}
REPO = os.path.dirname(os.path.dirname(HERE))


def _source(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


def _settings_keys():
    """The keys of the services' TOML settings file: the fields of the services' settings
    structs (`CommonSettings`, `CoordinatorSettings`, `WorkerSettings`) in
    crates/cluster/src/settings/services.rs, less the flattened ones."""
    src = _source("crates/cluster/src/settings/services.rs")
    keys = set()
    for name in ("CommonSettings", "CoordinatorSettings", "WorkerSettings"):
        body = re.search(r"pub struct " + name + r" \{(.*?)\n\}", src, re.S)
        if not body:
            sys.exit(f"cannot read {name}'s fields from crates/cluster/src/settings/services.rs")
        text = re.sub(r"#\[serde\(flatten\)\]\s*pub \w+:[^\n]*", "", body.group(1))
        keys |= set(re.findall(r"^\s*pub (\w+):", text, re.M))
    if not keys:
        sys.exit("no settings keys found in crates/cluster/src/settings/services.rs")
    return keys


def _jetstream_names():
    """The tasks stream (crates/protocol/src/subjects.rs) and the consumer of each worker
    kind (crates/cluster/src/streams.rs) the services create."""
    stream = re.search(r'TASKS_STREAM: &str = "([^"]+)"', _source("crates/protocol/src/subjects.rs"))
    streams_rs = _source("crates/cluster/src/streams.rs")
    agent = re.search(r'WorkerKind::Agent => "([^"]+)"', streams_rs)
    judge = re.search(r'WorkerKind::Judge => "([^"]+)"', streams_rs)
    if not (stream and agent and judge):
        sys.exit("cannot read the stream / consumer names from the services' sources")
    return stream.group(1), {"agent-worker": agent.group(1), "judge-worker": judge.group(1)}


SETTINGS_KEYS = _settings_keys()
STREAM, CONSUMERS = _jetstream_names()
COMPONENTS = ["coordinator", "agent-worker", "judge-worker"]
# The web page, rendered only with serve.enabled.
SERVE = "serve"
API_KEY_VARS = {"OPENAI_API_KEY", "OPENROUTER_API_KEY", "OPENAI_COMPATIBLE_API_KEY"}
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def load(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def selects(selector, labels):
    """A LabelSelector (matchLabels + matchExpressions) against a label map."""
    labels = labels or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and labels.get(key) in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class Check:
    def __init__(self, path):
        self.path = os.path.basename(path)
        self.docs = load(path)
        self.problems = []

    def fail(self, msg):
        self.problems.append(msg)

    def of(self, kind):
        return [d for d in self.docs if d.get("kind") == kind]

    def name(self, d):
        return d["metadata"]["name"]

    def component(self, d):
        return (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component")

    # ------------------------------------------------------------------ checks ---
    def custom_resources(self):
        for d in self.docs:
            api, kind = d.get("apiVersion", ""), d.get("kind", "")
            key = (api, kind)
            builtin = "." not in api.split("/")[0] or api.split("/")[0].endswith(".k8s.io")
            if key in SCHEMAS:
                with open(os.path.join(HERE, "schemas", SCHEMAS[key]), encoding="utf-8") as f:
                    schema = json.load(f)
                v = jsonschema.Draft202012Validator(schema)
                for e in sorted(v.iter_errors(d), key=lambda e: list(e.absolute_path)):
                    where = "/".join(str(p) for p in e.absolute_path) or "(root)"
                    self.fail(f"{kind}/{self.name(d)}: {where}: {e.message}")
            elif not builtin:
                self.fail(f"{kind} {api} has no schema here: add one to helm/tests/schemas")

    def workloads(self):
        deployments = {self.name(d): d for d in self.of("Deployment")}
        scaled = {d["spec"]["scaleTargetRef"]["name"] for d in self.of("ScaledObject")}
        hpa = {d["spec"]["scaleTargetRef"]["name"] for d in self.of("HorizontalPodAutoscaler")}
        for target in scaled | hpa:
            if target not in deployments:
                self.fail(f"an autoscaler targets Deployment {target}, which is not rendered")
        for target in scaled & hpa:
            self.fail(f"Deployment {target} has both a ScaledObject and an HPA")
        comps = sorted(self.component(d) for d in deployments.values())
        if comps not in (sorted(COMPONENTS), sorted(COMPONENTS + [SERVE])):
            self.fail(f"expected one Deployment per component {COMPONENTS} (and {SERVE}), got {comps}")
        for name, d in deployments.items():
            owned = name in scaled or name in hpa
            if owned and "replicas" in d["spec"]:
                self.fail(f"Deployment {name}: replicas is set although an autoscaler owns it")
            if not owned and "replicas" not in d["spec"]:
                self.fail(f"Deployment {name}: no replicas and no autoscaler")
            pod_labels = d["spec"]["template"]["metadata"]["labels"]
            if not selects(d["spec"]["selector"], pod_labels):
                self.fail(f"Deployment {name}: selector does not match its pod template")
            ann = d["spec"]["template"]["metadata"].get("annotations") or {}
            if not HEX64.match(str(ann.get("checksum/config", ""))):
                self.fail(f"Deployment {name}: no checksum/config annotation")

    def triggers(self):
        for so in self.of("ScaledObject"):
            name, comp = self.name(so), self.component(so)
            spec = so["spec"]
            lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
            # (non-integers are the schema's finding, reported by custom_resources)
            if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
                self.fail(f"ScaledObject {name}: minReplicaCount {lo} > maxReplicaCount {hi}")
            trig = spec["triggers"]
            if len(trig) != 1 or trig[0]["type"] != "nats-jetstream":
                self.fail(f"ScaledObject {name}: expected one nats-jetstream trigger")
                continue
            md = trig[0]["metadata"]
            not_strings = [k for k, v in md.items() if not isinstance(v, str)]
            for k in not_strings:
                self.fail(f"ScaledObject {name}: trigger metadata {k} is {type(md[k]).__name__}, not a string")
            if not_strings:
                continue
            need = {"natsServerMonitoringEndpoint", "account", "stream", "consumer",
                    "lagThreshold", "activationLagThreshold"}
            if need - md.keys():
                self.fail(f"ScaledObject {name}: trigger lacks {sorted(need - md.keys())}")
                continue
            if md["stream"] != STREAM:
                self.fail(f"ScaledObject {name}: stream {md['stream']!r}, the services create {STREAM}")
            if md["consumer"] != CONSUMERS.get(comp):
                self.fail(f"ScaledObject {name} ({comp}): consumer {md['consumer']!r}, expected {CONSUMERS.get(comp)!r}")
            if not re.fullmatch(r"[^/:\s]+:\d+", md["natsServerMonitoringEndpoint"]):
                self.fail(f"ScaledObject {name}: natsServerMonitoringEndpoint must be host:port")
            if not md["lagThreshold"].isdigit() or int(md["lagThreshold"]) < 1:
                self.fail(f"ScaledObject {name}: lagThreshold {md['lagThreshold']!r} is not a positive integer")
            if not md["activationLagThreshold"].isdigit():
                self.fail(f"ScaledObject {name}: activationLagThreshold is not an integer")
            if md.get("useHttps", "false") not in ("true", "false"):
                self.fail(f"ScaledObject {name}: useHttps must be \"true\" or \"false\"")

    def settings(self):
        cms = self.of("ConfigMap")
        if len(cms) != 1:
            self.fail(f"expected one ConfigMap, found {len(cms)}")
            return {}
        data = cms[0].get("data") or {}
        parsed = {}
        for comp in COMPONENTS:
            text = data.get(f"{comp}.toml")
            if text is None:
                self.fail(f"ConfigMap lacks {comp}.toml")
                continue
            try:
                s = tomllib.loads(text)
            except tomllib.TOMLDecodeError as e:
                self.fail(f"{comp}.toml does not parse: {e}")
                continue
            unknown = set(s) - SETTINGS_KEYS
            if unknown:
                self.fail(f"{comp}.toml has keys the services refuse: {sorted(unknown)}")
            parsed[comp] = s
        try:
            json.loads(data.get("debate-config.json", ""))
        except ValueError as e:
            self.fail(f"debate-config.json does not parse: {e}")
        return parsed

    def pods(self, settings):
        """Every pod template (Deployments) and bare pod (the helm test hook)."""
        pods = [(f"Deployment/{self.name(d)}", self.component(d), d["spec"]["template"])
                for d in self.of("Deployment")]
        pods += [(f"Pod/{self.name(p)}", self.component(p), p) for p in self.of("Pod")]
        for where, comp, pod in pods:
            spec = pod["spec"]
            psc = spec.get("securityContext") or {}
            if spec.get("automountServiceAccountToken") is not False:
                self.fail(f"{where}: the service-account token is mounted")
            for c in spec.get("initContainers", []) + spec["containers"]:
                csc = c.get("securityContext") or {}
                eff = lambda k: csc.get(k, psc.get(k))  # noqa: E731
                if eff("runAsNonRoot") is not True:
                    self.fail(f"{where}/{c['name']}: runAsNonRoot is not true")
                if eff("runAsUser") in (None, 0):
                    self.fail(f"{where}/{c['name']}: runAsUser is {eff('runAsUser')} (must be a non-zero uid)")
                if csc.get("allowPrivilegeEscalation") is not False:
                    self.fail(f"{where}/{c['name']}: allowPrivilegeEscalation is not false")
                if csc.get("privileged"):
                    self.fail(f"{where}/{c['name']}: privileged")
                if csc.get("readOnlyRootFilesystem") is not True:
                    self.fail(f"{where}/{c['name']}: the root filesystem is writable")
                if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
                    self.fail(f"{where}/{c['name']}: capabilities are not dropped (drop: [ALL])")
                if (csc.get("capabilities") or {}).get("add"):
                    self.fail(f"{where}/{c['name']}: adds capabilities")
                seccomp = (eff("seccompProfile") or {}).get("type")
                if seccomp != "RuntimeDefault":
                    self.fail(f"{where}/{c['name']}: seccompProfile is {seccomp}, not RuntimeDefault")
            if not where.startswith("Deployment/"):
                continue
            c = spec["containers"][0]
            if comp == SERVE:
                self.serve_pod(where, c, spec)
                continue
            ports = {p.get("name"): p for p in c.get("ports", [])}
            if "metrics" not in ports:
                self.fail(f"{where}: no container port named metrics")
            for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                                ("readinessProbe", "/readyz")):
                got = (c.get(probe) or {}).get("httpGet") or {}
                if got.get("path") != path or got.get("port") != "metrics":
                    self.fail(f"{where}: {probe} is {got}, expected GET {path} on port metrics")
            env = {e["name"]: e for e in c.get("env", [])}
            if comp == "coordinator" and API_KEY_VARS & env.keys():
                self.fail(f"{where}: the coordinator gets API keys {sorted(API_KEY_VARS & env.keys())}")
            for var in API_KEY_VARS & env.keys():
                if "value" in env[var]:
                    self.fail(f"{where}: {var} is a literal value, not a secretKeyRef")
            want = f"/etc/parley/{comp}.toml"
            if (env.get("PARLEY_SETTINGS") or {}).get("value") != want:
                self.fail(f"{where}: PARLEY_SETTINGS is not {want}")
            mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
            if "/etc/parley" not in mounts or "/tmp" not in mounts:
                self.fail(f"{where}: expected the config at /etc/parley and an emptyDir at /tmp")
            if comp in settings:
                drain = settings[comp].get("drain_secs", 20)
                grace = spec.get("terminationGracePeriodSeconds", 30)
                if grace <= drain:
                    self.fail(f"{where}: terminationGracePeriodSeconds {grace} <= drain_secs {drain}")

    def serve_pod(self, where, c, pod):
        """The web page: `parley serve` on 0.0.0.0:<http port> in front of NATS, its token
        from the Secret, /healthz probes (no token needed there), nothing else."""
        ports = {p.get("name"): p for p in c.get("ports", [])}
        if list(ports) != ["http"]:
            self.fail(f"{where}: expected one container port named http, got {list(ports)}")
            return
        args = c.get("args") or []
        listen = f"0.0.0.0:{ports['http']['containerPort']}"
        if args[:1] != ["serve"]:
            self.fail(f"{where}: args {args} are not `serve ...`")
        if "--nats-url" in args:
            self.fail(f"{where}: the NATS URL is on the command line (a password there shows in ps): {args}")
        if "--listen" not in args or args[args.index("--listen") + 1:][:1] != [listen]:
            self.fail(f"{where}: does not listen on {listen}: {args}")
        if "--no-auth" in args or "--auth-token" in args:
            self.fail(f"{where}: the token must come from PARLEY_SERVE_TOKEN (Secret), not the args")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            got = (c.get(probe) or {}).get("httpGet") or {}
            if got.get("path") != "/healthz" or got.get("port") != "http":
                self.fail(f"{where}: {probe} is {got}, expected GET /healthz on port http")
        env = {e["name"]: e for e in c.get("env", [])}
        ref = ((env.get("PARLEY_SERVE_TOKEN") or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
        if ref.get("key") != "serve-token" or ref.get("optional"):
            self.fail(f"{where}: PARLEY_SERVE_TOKEN is not the Secret's serve-token key: {env.get('PARLEY_SERVE_TOKEN')}")
        if not (env.get("PARLEY_SERVE_NATS_URL") or {}).get("value"):
            self.fail(f"{where}: no PARLEY_SERVE_NATS_URL: the page would not front the cluster")
        for var in sorted((API_KEY_VARS | {"PARLEY_REDIS_URL"}) & env.keys()):
            self.fail(f"{where}: the page gets {var}")
        # API keys and webhook endpoints: a path into a read-only Secret volume.
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        for var, volume in (("PARLEY_SERVE_API_KEYS", "api-keys"), ("PARLEY_SERVE_WEBHOOKS", "webhooks")):
            if var not in env:
                continue
            path = env[var].get("value") or ""
            mount = mounts.get(os.path.dirname(path))
            if not mount or mount.get("name") != volume or not mount.get("readOnly") or mount.get("subPath"):
                self.fail(f"{where}: {var}={path!r} is not in the read-only directory mount of volume {volume}")
                continue
            secret = (volumes.get(volume) or {}).get("secret") or {}
            items = [i.get("path") for i in secret.get("items") or []]
            if not secret.get("secretName") or items != [os.path.basename(path)]:
                self.fail(f"{where}: volume {volume} is not a Secret holding {os.path.basename(path)}: {volumes.get(volume)}")

    def selectors(self):
        pods = {self.component(d): d["spec"]["template"]["metadata"]["labels"]
                for d in self.of("Deployment")}
        test_pods = [p["metadata"].get("labels") or {} for p in self.of("Pod")]
        services = {self.component(s): s for s in self.of("Service")}

        def exactly(kind, name, selector, comp):
            hits = [c for c, labels in pods.items() if selects(selector, labels)]
            if hits != [comp]:
                self.fail(f"{kind}/{name}: selects {hits}, expected [{comp}]")
            if any(selects(selector, t) for t in test_pods):
                self.fail(f"{kind}/{name}: selects the helm test pod")

        for pdb in self.of("PodDisruptionBudget"):
            exactly("PodDisruptionBudget", self.name(pdb), pdb["spec"]["selector"], self.component(pdb))
        for svc in services.values():
            exactly("Service", self.name(svc), {"matchLabels": svc["spec"]["selector"]}, self.component(svc))
            port = "http" if self.component(svc) == SERVE else "metrics"
            if [p.get("targetPort") for p in svc["spec"]["ports"]] != [port]:
                self.fail(f"Service/{self.name(svc)}: expected one port targeting {port}")
        for np in self.of("NetworkPolicy"):
            exactly("NetworkPolicy", self.name(np), np["spec"]["podSelector"], self.component(np))
            if self.component(np) == SERVE:
                self.serve_network_policy(np)
            if self.component(np) != "coordinator":
                continue
            # `helm test` reaches the coordinator's /readyz through its ingress rule.
            for rule in np["spec"].get("ingress") or []:
                peers = rule.get("from")
                if peers is None:
                    continue
                if not any("podSelector" in p and "namespaceSelector" not in p
                           and selects(p["podSelector"], t) for p in peers for t in test_pods):
                    self.fail(f"NetworkPolicy/{self.name(np)}: the helm test pod cannot reach the metrics port")
        for sm in self.of("ServiceMonitor"):
            hits = sorted(c for c, s in services.items()
                          if selects(sm["spec"]["selector"], s["metadata"]["labels"]))
            if hits != sorted(COMPONENTS):
                self.fail(f"ServiceMonitor/{self.name(sm)}: selects Services {hits}, expected all three")
            if [e.get("port") for e in sm["spec"]["endpoints"]] != ["metrics"]:
                self.fail(f"ServiceMonitor/{self.name(sm)}: expected the metrics port")
        for pm in self.of("PodMonitor"):
            hits = sorted(c for c, labels in pods.items() if selects(pm["spec"]["selector"], labels))
            if hits != sorted(COMPONENTS):
                self.fail(f"PodMonitor/{self.name(pm)}: selects pods of {hits}, expected all three")
            if any(selects(pm["spec"]["selector"], t) for t in test_pods):
                self.fail(f"PodMonitor/{self.name(pm)}: selects the helm test pod")

    def serve_network_policy(self, np):
        """The page: in on its http port only; out to DNS (53) and the NATS ports only."""
        where = f"NetworkPolicy/{self.name(np)}"
        spec = np["spec"]
        if sorted(spec.get("policyTypes") or []) != ["Egress", "Ingress"]:
            self.fail(f"{where}: policyTypes must be Ingress and Egress")
        in_ports = [p.get("port") for r in spec.get("ingress") or [] for p in r.get("ports") or []]
        if in_ports != ["http"]:
            self.fail(f"{where}: ingress ports {in_ports}, expected [http]")
        # Its egress is the coordinator's first two rules (DNS, NATS), nothing more: no
        # Redis, no OTLP collector, no providers; with webhooks, one more rule for their
        # deliveries.
        coord = [n for n in self.of("NetworkPolicy") if self.component(n) == "coordinator"]
        egress = spec.get("egress") or []
        webhooks = any(
            e.get("name") == "PARLEY_SERVE_WEBHOOKS"
            for d in self.of("Deployment") if self.component(d) == SERVE
            for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])
        )
        if webhooks:
            if len(egress) != 3 or not egress[2].get("to") or not egress[2].get("ports"):
                self.fail(f"{where}: with webhooks, expected a third egress rule with peers and ports: {egress}")
            egress = egress[:2]
        if len(coord) != 1:
            self.fail(f"{where}: no coordinator NetworkPolicy to compare with")
        elif egress != (coord[0]["spec"].get("egress") or [])[:2]:
            self.fail(f"{where}: egress {egress} is not exactly DNS and NATS (the coordinator's first two rules)")
        out = {p.get("port") for r in egress for p in r.get("ports") or []}
        if 53 not in out or any("ports" not in r for r in egress):
            self.fail(f"{where}: egress ports {sorted(out, key=str)}: DNS missing or a rule without ports")

    def secrets(self):
        cms = json.dumps([d.get("data") for d in self.of("ConfigMap")])
        for s in self.of("Secret"):
            for k, v in (s.get("data") or {}).items():
                if v and v in cms:
                    self.fail(f"Secret key {k} also appears in a ConfigMap")
        for marker in ("sk-test-", "hunter2"):
            if marker in cms:
                self.fail(f"a secret-looking value ({marker}...) is in a ConfigMap")

    def nats_identities(self):
        """Each component connects to NATS with its own credential: its own Secret key
        (`nats-<component>`, as a password in its own user's URL or a mounted .creds file),
        never another component's; no two components share a user or a key."""
        users, keys = {}, {}
        for d in self.of("Deployment"):
            comp = self.component(d)
            pod = d["spec"]["template"]["spec"]
            env = {e["name"]: e for e in pod["containers"][0].get("env", [])}
            own = f"nats-{comp}"
            refs = [e["valueFrom"]["secretKeyRef"]["key"] for e in env.values()
                    if "secretKeyRef" in (e.get("valueFrom") or {})
                    and e["valueFrom"]["secretKeyRef"]["key"].startswith("nats-")]
            for v in pod.get("volumes", []):
                for item in (v.get("secret") or {}).get("items", []):
                    if item["key"].startswith("nats-"):
                        refs.append(item["key"])
            if any(r != own for r in refs):
                self.fail(f"Deployment/{self.name(d)}: reads another component's NATS credential: {refs}")
            # The web page reads its URL from PARLEY_SERVE_NATS_URL (serve's own flag's variable).
            url_var = "PARLEY_SERVE_NATS_URL" if comp == SERVE else "PARLEY_NATS_URL"
            url = (env.get(url_var) or {}).get("value", "")
            if "NATS_PASSWORD" in env:
                m = re.match(r"^(?:[a-z]+://)?([^:@/]+):\$\(NATS_PASSWORD\)@", url)
                if not m:
                    self.fail(f"Deployment/{self.name(d)}: {url_var} does not carry its own user: {url}")
                else:
                    users[comp] = m.group(1)
            if refs:
                keys[comp] = refs[0]
            elif "PARLEY_NATS_URL" in env or "PARLEY_NATS_CREDS" in env:
                self.fail(f"Deployment/{self.name(d)}: NATS credentials not from its own Secret key")
        for what, seen in (("user", users), ("credential", keys)):
            if len(set(seen.values())) != len(seen):
                self.fail(f"components share a NATS {what}: {seen}")
        return keys

    def run(self):
        self.custom_resources()
        self.nats_identities()
        self.workloads()
        self.triggers()
        settings = self.settings()
        self.pods(settings)
        self.selectors()
        self.secrets()
        return self.problems

    def summary(self):
        rows = []
        for d in self.docs:
            extra = ""
            if d["kind"] == "Deployment":
                spec = d["spec"]
                extra = f" replicas={spec.get('replicas', '-')} grace={spec['template']['spec'].get('terminationGracePeriodSeconds', 30)}s image={spec['template']['spec']['containers'][0]['image']}"
            elif d["kind"] == "ScaledObject":
                md = d["spec"]["triggers"][0]["metadata"]
                extra = (f" {d['spec'].get('minReplicaCount')}..{d['spec'].get('maxReplicaCount')}"
                         f" account={md.get('account')} stream={md.get('stream')} consumer={md.get('consumer')}"
                         f" lagThreshold={md.get('lagThreshold')}")
            elif d["kind"] == "HorizontalPodAutoscaler":
                extra = f" {d['spec']['minReplicas']}..{d['spec']['maxReplicas']} cpu"
            rows.append(f"    {d['kind']}/{d['metadata']['name']}{extra}")
        return "\n".join(rows)


def main(argv):
    if argv[1:2] == ["--to-json"]:
        json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)
        return 0
    if argv[1:2] == ["--checksums"]:
        for d in load(argv[2]):
            if d.get("kind") == "Deployment":
                ann = d["spec"]["template"]["metadata"].get("annotations") or {}
                print(d["metadata"]["name"], ann.get("checksum/config"), ann.get("checksum/secret", "-"))
        return 0
    failed = False
    for path in argv[1:]:
        c = Check(path)
        problems = c.run()
        status = "FAIL" if problems else "ok"
        print(f"  {c.path}: {len(c.docs)} resources, {status}")
        print(c.summary())
        for p in problems:
            print(f"    PROBLEM: {p}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
