"""Make the PodList responses of this folder (run it from anywhere; it rewrites the JSON files here).

What is real and what is written is said in SOURCES.md; in short:

- MANIFESTS holds three manifests of sglang's own repository, verbatim as read (URL and commit in SOURCES.md,
  each block's comment). Every container spec below is loaded from that text with yaml.safe_load: the
  YAML comments go, the values stay as written there.
- Everything else is WRITTEN by the kit's developers: the fields the API server adds to a pod it stores
  (defaults, the service-account volume), metadata (names, UIDs, labels set by controllers), every status
  (IPs, nodes, conditions, container statuses, digests, timestamps: all made up), and the changes marked
  CHANGED below. Their shape follows a real API response: the PodList logged by a client in
  rancher/docs (SOURCES.md) and a real `kubectl get pods -o json` output (gpdgpa/kuard, SOURCES.md).
- pods-empty.json is a real API server's answer, verbatim (SOURCES.md).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent

MANIFESTS = {
    # sgl-project/sglang docker/k8s-sglang-service.yaml @ 0b082f520802a6bb644b73ea5a3bccf61244836f (the Deployment)
    "deployment": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: meta-llama-31-8b-instruct-sglang
spec:
  replicas: 1
  strategy:
    type: Recreate
  selector:
    matchLabels:
      app: meta-llama-31-8b-instruct-sglang
  template:
    metadata:
      labels:
        app: meta-llama-31-8b-instruct-sglang
        model: meta-llama-31-8b-instruct
        engine: sglang
    spec:
      hostIPC: true
      restartPolicy: Always
      runtimeClassName: nvidia
      containers:
        - name: meta-llama-31-8b-instruct-sglang
          image: docker.io/lmsysorg/sglang:latest
          imagePullPolicy: Always  # IfNotPresent or Never
          ports:
            - containerPort: 30000
          command: ["python3", "-m", "sglang.launch_server"]
          args: ["--model-path", "meta-llama/Meta-Llama-3.1-8B-Instruct", "--host", "0.0.0.0", "--port", "30000"]
          env:
            - name: HF_TOKEN
              value: <secret>
          resources:
            limits:
              nvidia.com/gpu: 1
          volumeMounts:
            - name: hf-cache
              mountPath: /root/.cache/huggingface
              readOnly: true
            - name: localtime
              mountPath: /etc/localtime
              readOnly: true
          livenessProbe:
            httpGet:
              path: /health
              port: 30000
            initialDelaySeconds: 30
            periodSeconds: 10
      volumes:
        - name: hf-cache
          hostPath:
            path: /root/.cache/huggingface
            type: Directory
        - name: localtime
          hostPath:
            path: /etc/localtime
            type: File
""",
    # sgl-project/sglang docker/k8s-sglang-distributed-sts.yaml @ 622284e36e92c9b331ed8945e2e78cda6539e5fd
    # (the StatefulSet)
    "statefulset": """\
# Two Nodes Sglang example

apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: distributed-sglang
spec:
  replicas: 2   # number of nodes/pods to run distributed sglang
  selector:
    matchLabels:
      app: distributed-sglang
  serviceName: ""
  template:
    metadata:
      labels:
        app: distributed-sglang
    spec:
      containers:
      - name: sglang-container
        image: docker.io/lmsysorg/sglang:latest
        imagePullPolicy: Always # image may be replaced by official CI versioned image
        command:
        - /bin/bash
        - -c
        # please modify the sglang serving arguments below, as necessary.
        # NOTE: the --expert-parallel-size is for MoE model like DeepSeek-R1
        args:
        - |
          python3 -m sglang.launch_server \\
          --model /llm-folder \\
          --dist-init-addr sglang-master-pod:5000 \\
          --tensor-parallel-size 16 \\
          --nnodes 2 \\
          --node-rank $POD_INDEX \\
          --trust-remote-code \\
          --host 0.0.0.0 \\
          --port 8000 \\
          --enable-metrics \\
          --expert-parallel-size 16
        env:
        - name: POD_INDEX     # reflects the node-rank
          valueFrom:
            fieldRef:
              apiVersion: v1
              fieldPath: metadata.labels['apps.kubernetes.io/pod-index']
        - name: NCCL_DEBUG
          value: INFO
        resources:
          limits:
            nvidia.com/gpu: "8"
          requests:
        volumeMounts:
        - mountPath: /dev/shm
          name: dshm
        - mountPath: /llm-folder
          name: llm
        securityContext:
          privileged: true   # to leverage RDMA/InfiniBand device, co-work with HostNetwork=true
      hostNetwork: true
      volumes:
      - emptyDir:
          medium: Memory
          sizeLimit: 10Gi
        name: dshm
      - hostPath:
          path: /llm-folder # replace with PVC or hostPath with your model weights
          type: DirectoryOrCreate
        name: llm
""",
}

# sgl-project/sglang docs/references/multi_node_deployment/lws_pd/lws-examples/p.yaml
# @ 343e7165529ba0b11ffd671c05596bcdfb214e05 and d.yaml @ 96fd6bf0cbbf0f41b825f74890fadadb0ff14712: the
# leaderTemplate's container of each, verbatim (YAML comments inside the lists dropped, as yaml.safe_load does).
LWS_LEADERS = {
    "prefill": """\
- command:
  - python3
  - -m
  - sglang.launch_server
  - --port
  - "30000"
  - --host
  - "0.0.0.0"
  - --model-path
  - /work/models
  - --disaggregation-ib-device
  # should modify according your rdma env
  - mlx5_bond_0,mlx5_bond_1,mlx5_bond_2,mlx5_bond_3
  - --chunked-prefill-size
  - "524288"
  - --max-prefill-tokens
  - "32768"
  - --page-size
  - "64"
  - --ep-dispatch-algorithm
  - dynamic
  - --eplb-algorithm
  - deepseek
  - --enable-dp-lm-head
  - --enable-dp-attention
  - --dp-size
  - "16"
  - --disable-radix-cache
  - --moe-a2a-backend
  - deepep
  - --disaggregation-mode
  - prefill
  - --mem-fraction-static
  - "0.7"
  - --context-length
  - "32768"
  - --tp
  - "16"
  - --dist-init-addr
  - $(LWS_LEADER_ADDRESS):20102
  - --nnodes
  - $(LWS_GROUP_SIZE)
  - --node-rank
  - $(LWS_WORKER_INDEX)
  - --trust-remote-code
  - --ep-num-redundant-experts
  - "32"
  - --moe-dense-tp-size
  - "1"
  - --max-running-requests
  - "1024"
  env:
  - name: NVSHMEM_HCA_PE_MAPPING
    # should modify according your rdma env
    value: "mlx5_bond_0:1:2,mlx5_bond_1:1:2,mlx5_bond_2:1:2,mlx5_bond_3:1:2"
  - name: NVSHMEM_IB_GID_INDEX
    value: "3"
  - name: NVSHMEM_ENABLE_NIC_PE_MAPPING
    value: "1"
  - name: SGLANG_SET_CPU_AFFINITY
    value: "true"
  - name: SGLANG_ENABLE_JIT_DEEPGEMM
    value: "1"
  - name: NCCL_IB_QPS_PER_CONNECTION
    value: "8"
  - name: NCCL_IB_SPLIT_DATA_ON_QPS
    value: "1"
  - name: NCCL_NET_PLUGIN
    value: none
  - name: NCCL_IB_TC
    value: "136"
  - name: NCCL_MIN_NCHANNELS
    value: "4"
  - name: MC_TE_METRIC
    value: "false"
  - name: NCCL_IB_SL
    value: "5"
  - name: NCCL_IB_HCA
    value: ^=mlx5_0,mlx5_5,mlx5_6
  - name: LWS_WORKER_INDEX
    valueFrom:
      fieldRef:
        fieldPath: metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']
  image: lmsysorg/sglang:latest
  name: sglang-leader
  ports:
  - containerPort: 30000
    protocol: TCP
  readinessProbe:
    periodSeconds: 30
    tcpSocket:
      port: 30000
  resources:
    limits:
      nvidia.com/gpu: "8"
  securityContext:
    capabilities:
      add:
      - IPC_LOCK
    privileged: true
  volumeMounts:
  - mountPath: /dev/shm
    name: dshm
  - mountPath: /work/models
    name: model
  - mountPath: /dev/infiniband
    name: ib
  - mountPath: /sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe_triton/configs
    name: cf
  - mountPath: /root/.cache
    name: sgl-cache
""",
    "decode": """\
- command:
  - python3
  - -m
  - sglang.launch_server
  - --port
  - "30000"
  - --host
  - "0.0.0.0"
  - --model-path
  - /work/models
  - --chunked-prefill-size
  - "262144"
  - --page-size
  - "64"
  - --enable-dp-attention
  - --enable-dp-lm-head
  - --dp-size
  - "16"
  - --moe-a2a-backend
  - deepep
  - --disaggregation-mode
  - decode
  - --mem-fraction-static
  - "0.849"
  - --context-length
  - "32768"
  - --disaggregation-ib-device
  - "mlx5_bond_0,mlx5_bond_1,mlx5_bond_2,mlx5_bond_3"
  - --cuda-graph-max-bs
  - "64"
  - --max-running-requests
  - "2048"
  - --tp-size
  - "16" # Size of Tensor Parallelism
  - --dist-init-addr
  - $(LWS_LEADER_ADDRESS):20102
  - --nnodes
  - $(LWS_GROUP_SIZE)
  - --node-rank
  - $(LWS_WORKER_INDEX)
  - --trust-remote-code
  - --ep-num-redundant-experts
  - "32"
  - --moe-dense-tp-size
  - "1"
  env:
  - name: CUDA_LAUNCH_BLOCKING
    value: "0"
  - name: NVSHMEM_IB_GID_INDEX
    value: "3"
  - name: NVSHMEM_ENABLE_NIC_PE_MAPPING
    value: "1"
  - name: NVSHMEM_HCA_PE_MAPPING
    value: "mlx5_bond_0:1:2,mlx5_bond_1:1:2,mlx5_bond_2:1:2,mlx5_bond_3:1:2"
  - name:  NCCL_IB_QPS_PER_CONNECTION
    value: "8"
  - name: NCCL_IB_SPLIT_DATA_ON_QPS
    value: "1"
  - name: NCCL_NET_PLUGIN
    value: "none"
  - name: NCCL_IB_TC
    value: "136"
  - name: NCCL_MIN_NCHANNELS
    value: "4"
  - name: NCCL_IB_SL
    value: "5"
  - name: MC_TE_METRIC
    value: "true"
  - name: SGLANG_MOONCAKE_TRANS_THREAD
    value: "16"
  - name: SGLANG_ENABLE_JIT_DEEPGEMM
    value: "1"
  - name: NCCL_IB_HCA
    value: ^=mlx5_0,mlx5_5,mlx5_6
  - name: LWS_WORKER_INDEX
    valueFrom:
      fieldRef:
        fieldPath: metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']
  image: lmsysorg/sglang:latest
  name: sglang-leader
  ports:
  - containerPort: 30000
    protocol: TCP
  readinessProbe:
    periodSeconds: 30
    tcpSocket:
      port: 30000
  resources:
    limits:
      nvidia.com/gpu: "8"
  securityContext:
    capabilities:
      add:
      - IPC_LOCK
    privileged: true
  volumeMounts:
  - mountPath: /root/.cache
    name: sgl-cache
  - mountPath: /dev/shm
    name: dshm
  - mountPath: /work/models
    name: model
  - mountPath: /dev/infiniband
    name: ib
  - mountPath: /sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe_triton/configs
    name: cf
""",
}

# ---- WRITTEN from here on: what the API server and the controllers add, and every status.

TOLERATIONS = [  # the two every pod gets from the DefaultTolerationSeconds admission plugin
    {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
    {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
]


def _sa_volume(suffix: str) -> dict:
    """The projected service-account volume the API server adds (as in the kuard `kubectl get pods -o json`)."""
    return {"name": f"kube-api-access-{suffix}", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
        {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    "path": "namespace"}]}}]}}


def _container(spec: dict, sa: str) -> dict:
    """A manifest's container as the API server stores it: defaults filled in, quantities as strings,
    requests defaulted from limits, the service-account mount added."""
    c = copy.deepcopy(spec)
    c.setdefault("imagePullPolicy", "IfNotPresent" if not c["image"].endswith(":latest") else "Always")
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    for p in c.get("ports", []):
        p.setdefault("protocol", "TCP")
    limits = {k: str(v) for k, v in ((c.get("resources") or {}).get("limits") or {}).items()}
    c["resources"] = {"limits": limits, "requests": dict(limits)}
    for probe in ("livenessProbe", "readinessProbe"):
        if probe in c:
            c[probe] = {"failureThreshold": 3, "successThreshold": 1, "timeoutSeconds": 1, **c[probe]}
            if "httpGet" in c[probe]:
                c[probe]["httpGet"].setdefault("scheme", "HTTP")
    c["volumeMounts"] = c.get("volumeMounts", []) + [
        {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": f"kube-api-access-{sa}",
         "readOnly": True}]
    return c


def _pod(name: str, namespace: str, uid: str, labels: dict, owner: tuple[str, str, str], container: dict,
         spec_extra: dict, volumes: list, sa: str, status: dict, annotations: dict | None = None) -> dict:
    kind, owner_name, owner_api = owner
    meta = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(int(uid.replace("-", "")[:6], 16)),
            "creationTimestamp": "2025-11-04T09:12:40Z", "labels": labels,
            "ownerReferences": [{"apiVersion": owner_api, "kind": kind, "name": owner_name,
                                 "uid": f"{uid[:8]}-0000-4000-8000-{uid[-12:]}", "controller": True,
                                 "blockOwnerDeletion": True}]}
    if annotations:
        meta["annotations"] = annotations
    if kind == "ReplicaSet":
        meta["generateName"] = owner_name + "-"
    spec = {"volumes": volumes + [_sa_volume(sa)], "containers": [container], "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
            "serviceAccount": "default", "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": TOLERATIONS, "priority": 0, "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority", **spec_extra}
    return {"metadata": meta, "spec": spec, "status": status}


def _running(container: str, node_ip: str, pod_ip: str, image: str, digest: str, cid: str, restarts: int = 0,
             ready: bool = True) -> dict:
    flag = "True" if ready else "False"
    repo = image.rsplit(":", 1)[0]
    return {
        "phase": "Running",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": "2025-11-04T09:14:02Z"},
            {"type": "Initialized", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": "2025-11-04T09:12:40Z"},
            {"type": "Ready", "status": flag, "lastProbeTime": None, "lastTransitionTime": "2025-11-04T09:19:31Z"},
            {"type": "ContainersReady", "status": flag, "lastProbeTime": None,
             "lastTransitionTime": "2025-11-04T09:19:31Z"},
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": "2025-11-04T09:12:40Z"}],
        "hostIP": node_ip, "hostIPs": [{"ip": node_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": "2025-11-04T09:12:40Z",
        "containerStatuses": [{
            "name": container, "state": {"running": {"startedAt": "2025-11-04T09:14:05Z"}},
            "lastState": ({"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2025-11-04T09:13:10Z",
                                          "finishedAt": "2025-11-04T09:13:58Z",
                                          "containerID": f"containerd://{cid[::-1]}"}} if restarts else {}),
            "ready": ready, "restartCount": restarts, "image": image,
            "imageID": f"{repo}@sha256:{digest}", "containerID": f"containerd://{cid}", "started": True}],
        "qosClass": "BestEffort",
    }


def deployment() -> dict:
    """Three pods of the Deployment, replicas written as 3, caught in a rollout: pods 1 and 2 run the
    manifest's template, pod 3 a newer one (CHANGED, written: see SOURCES.md)."""
    manifest = yaml.safe_load(MANIFESTS["deployment"])
    template = manifest["spec"]["template"]
    base = template["spec"]["containers"][0]
    newer = copy.deepcopy(base)
    # CHANGED (written): the newer template adds two flags, takes HF_TOKEN from a Secret instead of a literal
    # and the rest of its environment from a ConfigMap.
    newer["args"] = base["args"] + ["--mem-fraction-static", "0.85", "--api-key", "sk-fleet-test-3f9a1c77e2b04d5e"]
    newer["env"] = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]
    newer["envFrom"] = [{"configMapRef": {"name": "sglang-env"}}]
    spec_extra = {k: v for k, v in template["spec"].items() if k not in ("containers", "volumes")}
    volumes = template["spec"]["volumes"]
    image = base["image"]
    rows = [("7d9f8c6b5d", "x2kq7", base, "gpu-node-a", "10.0.1.11", "10.244.1.23", 0),
            ("7d9f8c6b5d", "p8vhz", base, "gpu-node-b", "10.0.1.12", "10.244.2.17", 2),
            ("5c4b9d7f68", "mz4tn", newer, "gpu-node-c", "10.0.1.13", "10.244.3.9", 0)]
    items = []
    for i, (rs, suffix, container, node, node_ip, pod_ip, restarts) in enumerate(rows):
        name = f"meta-llama-31-8b-instruct-sglang-{rs}-{suffix}"
        labels = {**template["metadata"]["labels"], "pod-template-hash": rs}
        uid = f"3b1f0c2e-6a4d-4f7b-9c1e-0d2a5b8e7f{i:02d}"
        items.append(_pod(name, "llm", uid, labels, ("ReplicaSet", f"meta-llama-31-8b-instruct-sglang-{rs}", "apps/v1"),
                          _container(container, suffix[:5]), {**spec_extra, "nodeName": node}, volumes, suffix[:5],
                          _running(container["name"], node_ip, pod_ip, image,
                                   "9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c2b4d6f8e0a1c3e5b7d9f1a3c5e7b9d0f", f"4e{i}" * 21,
                                   restarts)))
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "918273"}, "items": items}


def lws_leaders() -> dict:
    """The leader pod of each LeaderWorkerSet (prefill and decode), as the LWS controller and its pod
    webhook make them (labels, the size annotation, LWS_LEADER_ADDRESS/LWS_GROUP_SIZE/LWS_WORKER_INDEX first
    in env, per kubernetes-sigs/lws pkg/utils/pod/pod_utils.go AddLWSVariables)."""
    items = []
    for i, (role, node, node_ip) in enumerate([("prefill", "h20-node-07", "10.0.3.21"),
                                              ("decode", "h20-node-11", "10.0.3.25")]):
        container = yaml.safe_load(LWS_LEADERS[role])[0]
        lws = f"deepseekr10528-{role}-main"
        name = f"{lws}-0"
        injected = [{"name": "LWS_LEADER_ADDRESS", "value": f"{lws}-0.{lws}.pd"},
                    {"name": "LWS_GROUP_SIZE", "value": "2"}, {"name": "LWS_WORKER_INDEX", "value": "0"}]
        container["env"] = injected + [e for e in container["env"] if e["name"] not in {x["name"] for x in injected}]
        labels = {"role": "leader", "leaderworkerset.sigs.k8s.io/name": lws,
                  "leaderworkerset.sigs.k8s.io/group-index": "0", "leaderworkerset.sigs.k8s.io/worker-index": "0",
                  "leaderworkerset.sigs.k8s.io/group-key": f"{i}7c1e0d4b9a2f6e8c3d5b7a9f1e2c4d6b8a0f3e5c",
                  "apps.kubernetes.io/pod-index": "0", "controller-revision-hash": f"{lws}-6f8d9b7c4",
                  "statefulset.kubernetes.io/pod-name": name}
        sa = f"q{i}w7z"
        spec_extra = {"nodeName": node, "hostIPC": True, "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
                      "hostname": name, "subdomain": lws, "nodeSelector": {"pd": "yes"}}
        volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                   {"name": "model", "hostPath": {"path": "/data1/maas_hosted_models/models/DeepSeek-R1-0528/"
                                                          "deepseek_r1_0528", "type": ""}},
                   {"name": "ib", "hostPath": {"path": "/dev/infiniband", "type": ""}},
                   {"name": "cf", "hostPath": {"path": "/data1/maas_hosted_models/models/fused_moe_triton/configs",
                                               "type": ""}},
                   {"name": "sgl-cache", "hostPath": {"path": "/data1/sgl_cache" + ("1" if role == "decode" else ""),
                                                      "type": "DirectoryOrCreate"}}]
        status = _running("sglang-leader", node_ip, node_ip, "docker.io/lmsysorg/sglang:latest",
                          "1a3c5e7b9d0f2b4d6f8e0a1c3e5b7d9f9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c", f"7b{i}" * 21,
                          restarts=1 if role == "decode" else 0, ready=role == "prefill")
        status["qosClass"] = "BestEffort"
        items.append(_pod(name, "pd", f"5d2e8a1f-0b3c-4e6d-8f7a-9c1b2d3e4f{i:02d}", labels,
                          ("StatefulSet", lws, "apps/v1"), _container(container, sa), spec_extra, volumes, sa,
                          status, annotations={"leaderworkerset.sigs.k8s.io/size": "2"}))
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1204455"}, "items": items}


def statefulset_with_pending() -> dict:
    """The StatefulSet's two pods: -0 running on a node (hostNetwork: its IP is the node's), -1 Pending,
    not scheduled for want of GPUs (written)."""
    manifest = yaml.safe_load(MANIFESTS["statefulset"])
    template = manifest["spec"]["template"]
    container = template["spec"]["containers"][0]
    volumes = template["spec"]["volumes"]
    spec_extra = {"hostNetwork": True, "dnsPolicy": "ClusterFirst", "hostname": "", "subdomain": ""}
    items = []
    for i in range(2):
        name = f"distributed-sglang-{i}"
        labels = {**template["metadata"]["labels"], "apps.kubernetes.io/pod-index": str(i),
                  "controller-revision-hash": "distributed-sglang-84b6d9c7f5",
                  "statefulset.kubernetes.io/pod-name": name}
        sa = f"s{i}k2m"
        extra = {**spec_extra, "hostname": name}
        if i == 0:
            extra["nodeName"] = "a100-node-03"
            status = _running("sglang-container", "10.0.4.11", "10.0.4.11", "docker.io/lmsysorg/sglang:latest",
                              "0f2b4d6f8e0a1c3e5b7d9f1a3c5e7b9d1a3c5e7b9d0f2b4d6f8e0a1c3e5b7d9f", "9c0" * 21)
        else:
            status = {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "lastProbeTime": None,
                "lastTransitionTime": "2025-11-04T09:12:41Z", "reason": "Unschedulable",
                "message": "0/4 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, "
                           "3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 1 No preemption "
                           "victims found for incoming pod, 3 Preemption is not helpful for scheduling."}],
                "qosClass": "BestEffort"}
        items.append(_pod(name, "multi", f"8e4c2a6f-1d3b-4a5c-9e7f-2b4d6f8a0c{i:02d}", labels,
                          ("StatefulSet", "distributed-sglang", "apps/v1"), _container(container, sa), extra,
                          volumes, sa, status))
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "771023"}, "items": items}


# Real, verbatim: a minikube API server's answer to GET /api/v1/namespaces/default/pods?limit=500
# (salrashid123/kubernetes_pkcs11_client README.md @ cf56c094574eed89b976e0d7c5db53347299e4b6).
EMPTY = '{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"2244"},"items":[]}\n'


def main() -> None:
    for name, made in (("pods-deployment.json", deployment()), ("pods-lws-pd.json", lws_leaders()),
                       ("pods-sts-pending.json", statefulset_with_pending())):
        (HERE / name).write_text(json.dumps(made, indent=1) + "\n")
    (HERE / "pods-empty.json").write_text(EMPTY)


if __name__ == "__main__":
    main()
