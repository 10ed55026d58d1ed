"""The command lines of the five daemons: every flag, and why it is there.

What the research notes asked for, checked against v1.36.3 (docs/control-plane.md records what
was right and what was not): loopback only, every port free-picked, certificates from
``_pki``, no leader election, etcd without fsync.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainjobs.testing._pki import Pki

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Layout:
    """Where one control plane lives: its workdir, admin kubeconfig, certificates, ports."""

    workdir: Path
    kubeconfig: Path
    pki: Pki
    ports: Mapping[str, int]


def etcd_args(lay: Layout) -> list[str]:
    client = f"http://127.0.0.1:{lay.ports['etcd-client']}"
    peer = f"http://127.0.0.1:{lay.ports['etcd-peer']}"
    return [
        "--name=trainjobs",
        f"--data-dir={lay.workdir / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=trainjobs={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",  # throwaway data: no fsync latency
        "--log-level=warn",
    ]


def apiserver_args(lay: Layout) -> list[str]:
    p = lay.pki
    return [
        f"--etcd-servers=http://127.0.0.1:{lay.ports['etcd-client']}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports['kube-apiserver']}",
        "--advertise-address=127.0.0.1",
        # Without it the apiserver keeps reconciling the `kubernetes` Endpoints to 127.0.0.1.
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={p.serving_cert}",
        f"--tls-private-key-file={p.serving_key}",
        f"--client-ca-file={p.ca_cert}",
        # Never /var/run/kubernetes, even for files it would generate.
        f"--cert-dir={lay.workdir / 'pki' / 'apiserver-generated'}",
        "--authorization-mode=RBAC",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={p.sa_pub}",
        f"--service-account-signing-key-file={p.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--allow-privileged=true",
        # As envtest: pods are not rejected before the `default` ServiceAccount exists and get
        # no token volume (nothing would mount it without a kubelet).
        "--disable-admission-plugins=ServiceAccount",
        "--profiling=false",
    ]


def controller_manager_args(lay: Layout) -> list[str]:
    p = lay.pki
    return [
        f"--kubeconfig={lay.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports['kube-controller-manager']}",
        f"--cert-dir={lay.workdir / 'pki' / 'controller-manager-generated'}",
        "--controllers=*",
        "--use-service-account-credentials=false",
        f"--service-account-private-key-file={p.sa_key}",
        f"--root-ca-file={p.ca_cert}",
        # Lets the CSR signing controllers start instead of logging that they cannot.
        f"--cluster-signing-cert-file={p.ca_cert}",
        f"--cluster-signing-key-file={p.ca_key}",
        "--profiling=false",
    ]


def scheduler_args(lay: Layout) -> list[str]:
    # --kubeconfig and --leader-elect are deprecated flags of kube-scheduler: use its config.
    config = lay.workdir / "kube-scheduler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(lay.kubeconfig)},
                "leaderElection": {"leaderElect": False},
                "enableProfiling": False,
            }
        )
    )
    return [
        f"--config={config}",
        "--bind-address=127.0.0.1",
        f"--secure-port={lay.ports['kube-scheduler']}",
        f"--cert-dir={lay.workdir / 'pki' / 'scheduler-generated'}",
    ]


def kwok_args(lay: Layout, stages: Path) -> list[str]:
    # No --server-address / --node-port: KWOK then opens no port at all.
    return [
        f"--kubeconfig={lay.kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=true",
        "--node-ip=127.0.0.1",
        f"--cidr={POD_CIDR}",
        # Not the default when --config holds only Stages: without it KWOK keeps no node
        # Lease, the node lifecycle controller marks every node NotReady (and taints it)
        # after its 50 s grace period, and node-initialize flips it back - every ~50 s.
        # With it KWOK renews a Lease every 10 s, as a kubelet does.
        "--node-lease-duration-seconds=40",
    ]
